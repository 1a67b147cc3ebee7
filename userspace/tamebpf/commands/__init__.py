"""What each sub-command of the tamebpf CLI does, one module a command.

Its arguments are tamebpf.parsers' module of the same name; tamebpf.cli
imports a module here only when its command runs.
"""
