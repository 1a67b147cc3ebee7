"""The advisor, in one home: how many streams a path takes (`tamebpf advise`,
`cap --auto`).

- `advisor.py`: the sequence (probe, probe, estimate; a third probe where
  the first two leave a BBR answer open), and path memory's part in it
  (`memory.py`);
- `probes.py`: the probes as stages of one iperf3 test, sampled in the
  kernel while they run, each ended by its stop rule (estimate/settled.py).

What the probes measured becomes the advice in tamebpf/estimate/ (pure:
no I/O, no kernel), below this package. Nothing is imported here, so that
importing one module does not load the kernel layer the probes need.
"""
