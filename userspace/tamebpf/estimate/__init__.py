"""Estimators the advisor runs on what the probes measured: steady windows,
capacity arithmetic and the advice itself. Pure: no I/O, no kernel."""
