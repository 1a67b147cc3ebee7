"""Kernel access: loading BPF programs through libtamebpf and reading them.

Everything that needs root or a BPF-capable kernel lives under this package;
the model and presentation layers never import it.
"""
