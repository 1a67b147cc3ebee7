"""What every layer of tamebpf uses and that depends on nothing of it: the
errors a user sees (errors.py), the log (logs.py), conversions of units
(units.py), parsers of what a user types (values.py), shared wording
(words.py), the defaults --help shows (defaults.py), the plain records read
from the kernel (records.py), how long-running commands end on a signal
(lifecycle.py), and files written at a path the user names (outfile.py).

Nothing here imports from the rest of tamebpf, and nothing is imported
here, so that `tamebpf --help` loads only what it uses.
"""
