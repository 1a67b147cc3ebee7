"""tamebpf: how many parallel TCP streams to use, measured from the kernel."""

__version__ = "0.1.0"
