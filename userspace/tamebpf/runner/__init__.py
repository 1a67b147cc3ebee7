"""`tamebpf run -- CMD`: a transfer run the way tamebpf advises (docs/run.md).

- child.py: CMD started in the run's cgroup (and namespace), its exit
  status as a shell gives it;
- session.py: the run's pace cap, following the destination, and what the
  transfer teaches path memory;
- summary.py: the one line (or JSON object) said at the end. Pure.
"""
