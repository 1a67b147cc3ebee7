"""The evaluations' record files: JSON, compressed by the name's suffix.

docs/results keeps its records gzipped (`.json.gz`; a large one as
`.json.xz`), so every reader opens a name by its suffix and new records land
gzipped: a writer given a plain `.json` name writes `NAME.json.gz` instead.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
from typing import IO, Any


def _open(path: str) -> IO[str]:
    """`path` for reading text, decompressed by its suffix."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt")
    if path.endswith(".xz"):
        return lzma.open(path, "rt")
    return open(path)


def gz_name(path: str) -> str:
    """Where a record meant for `path` lands: `path` itself if compressed."""
    return path if path.endswith((".gz", ".xz")) else path + ".gz"


def read_json(path: str) -> Any:
    with _open(path) as f:
        return json.load(f)


def write_json(path: str, data: Any) -> str:
    """Write `data` to gz_name(path) whole (a temporary file, then renamed,
    so a run stopped mid-write leaves the last record); the name written."""
    path = gz_name(path)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    # No name or time in the header: the same records give the same bytes.
    with open(tmp, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as z:
        z.write(json.dumps(data, indent=1).encode())
    os.replace(tmp, path)
    return path


def load(path: str) -> list[dict[str, Any]]:
    """The records of `path` (.json, .json.gz or .json.xz); none if missing."""
    try:
        data = read_json(path)
    except FileNotFoundError:
        if path == gz_name(path) or not os.path.exists(gz_name(path)):
            return []
        data = read_json(gz_name(path))  # where save() put it
    return data.get("records", []) if isinstance(data, dict) else []


def save(path: str, records: list[dict[str, Any]]) -> None:
    """Records to `path`, gzipped (write_json)."""
    write_json(path, {"records": records})
