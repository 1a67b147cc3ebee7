"""`tamebpf export`'s parts, in one home: the Prometheus collector that
reads the kernel at scrape time (collector.py), the JSON-lines records
(jsonl.py), the metrics server (server.py) with its TLS and basic auth
(webconfig.py), and the ACK windows that teach path memory a capacity
(acksampling.py). commands/export.py wires them together.

Nothing is imported here: prometheus_client is needed by export alone.
"""
