"""`tamebpf cap`, in one home: a caps file or flags made caps in the kernel.

- `spec.py`: a cap as data (destination, limit, mode) and the caps file's
  checks; `load.py`: a caps file read into specs (pure); `readfile.py`: the
  file read whole, only while it holds still (not half an edit);
- `plan.py`: specs made one plan of changes (the advisor for `auto`);
- `table.py`: the kernel's cap table (pinned maps, the cap program);
- `view.py`: the table read as the core's cap limits (watch, export);
- `show.py`: caps as lines, tables and JSON;
- `book.py`: the follow book, which caps follow their path;
- `scout.py`: a paced transfer's reading made a target (pure);
- `follow.py`: the agent that moves following caps' targets.

Nothing is imported here, so that the pure parts can be imported without
the kernel.
"""
