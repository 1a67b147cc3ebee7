"""Sub-commands of the tamebpf CLI; see tamebpf.cli.COMMANDS."""
