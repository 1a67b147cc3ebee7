"""Log lines on stderr, as text for people or JSON for log collectors.

Commands that run as services (`export`, `watch --json`) report what goes
wrong while they keep running (a failed kernel read, a cap table that could
not be read) through the "tamebpf" logger; `--log-format json` makes each
record one JSON object a collector can parse.
"""

from __future__ import annotations

import json
import logging
import sys
import time

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
log = logging.getLogger("tamebpf")

# Attributes every LogRecord has; anything else came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


class JsonFormatter(logging.Formatter):
    """One object per record: time, level, message, and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": round(record.created, 3), "level": record.levelname.lower(),
               "logger": record.name, "msg": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        return f"tamebpf: {stamp} {record.levelname.lower()}: {record.getMessage()}"


def setup(fmt: str = "text", level: str = "info") -> None:
    """Route the "tamebpf" logger to stderr in `fmt` at `level` (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
