"""Flows -> groups: the pure core of `tamebpf watch` and `tamebpf export`.

An `Aggregator` (aggregate.py) is fed one snapshot of flows at a time
(`FlowReader.snapshot()`, or synthetic `Flow` objects in tests) and returns
one `Group` (group.py) per (owner, destination), where the owner is the
process name (comm) or the cgroup.  No I/O and no clock: the caller passes
each reading and its time (tamebpf/refresh.py does, for watch and export).

Per refresh, each group gets
- interval measures (from the counter deltas since the previous snapshot):
  streams (established flows that sent data, not counting those that sent a
  trifle next to the group's busiest flow), goodput (bytes acknowledged),
  loss rate (retransmitted / data segments sent), mean smoothed RTT;
- cumulative counters that never go backwards (counters.py, members.py):
  the final counters of closed flows are folded into the group when they
  arrive (each exactly once), live flows add their current counters, and a
  flow that disappears without a closed record (the kernel's map was full)
  or changes group (its owner became known) leaves its last counters behind;
- the passive fit of docs/model.md (passive_fit.py): goodput observed at two
  or more distinct stream counts, fitted as if they were probes (no probe
  traffic is sent), with its advice, the loss x RTT^2 estimator beside it
  (section 3), and a mark when the group runs more streams than the advice
  or a cap (caps.py).

Nothing is re-exported here: import from the module that does the job.
"""
