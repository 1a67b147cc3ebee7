"""Each command's arguments and --help, one module a command, named as its
module in tamebpf.commands.

A module here defines `register(subparsers)`: it adds the command's parser
and sets `run`, the name of the function in tamebpf.commands.<command> that
runs it (e.g. "run_list"). tamebpf.cli imports that command module only
when the command runs, so these import only what the help text needs:
argparse, tamebpf.options' parser helpers, tamebpf.common.defaults and a few small
pure names (the iperf3 port, the --format tools). Building every parser, as
--help and a mistyped option do, loads none of the commands' code
(docs/performance.md, "Startup"; tests/unit/cli/test_startup_imports.py).
"""
