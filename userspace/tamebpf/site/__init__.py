"""A site of several nodes sharing one impact budget per path, through the
Prometheus that scrapes every node's `tamebpf export` (docs/deploy.md, "A
site of several nodes").

- prefix.py: the path a site shares: a destination prefix and a direction;
- nodepaths.py: what this node runs on each path, from its groups (pure);
- split.py: the budget's shares among the nodes with demand (pure);
- query.py: what the other nodes run, read and checked from Prometheus;
- share.py: a node's pace target from its share, step by step.
"""
