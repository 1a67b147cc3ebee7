"""The advisor, in one home: how many streams a path takes (`tamebpf advise`,
`cap --auto`).

- `advisor.py`: the sequence (probe, probe, estimate; a third probe where
  the first two leave a BBR answer open), and path memory's part in it
  (`memory.py`);
- `probes.py`: the probes as stages of one iperf3 test, sampled in the
  kernel while they run, each ended by its stop rule (`settled.py`);
- `estimate/`: the probes' measurements made into the model's inputs and
  the advice (pure: no I/O, no kernel);
- `record.py`: the records they pass: the target, each probe's result and
  the advice.

Nothing is imported here, so that the pure parts can be imported without
the kernel layer the probes need.
"""
