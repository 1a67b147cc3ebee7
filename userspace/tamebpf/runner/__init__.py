"""`tamebpf run -- CMD`: a transfer run the way tamebpf advises (docs/run.md).

- session.py: the run loop: the run's pace cap, its readings, following
  and learning, the tidy;
- pathchoice.py: which path the cap follows and the target it starts from;
- bytecount.py: what CMD's connections moved, by destination;
- acks.py: the capacity from the first seconds' ACKs;
- child.py and signals.py: CMD started as a shell starts a job, and the
  signals and terminal it shares with run;
- stores.py: the run's own follow book, a read-only path memory;
- report.py and summary.py: the one line (or JSON object) said at the end.
"""
