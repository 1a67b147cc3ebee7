"""One typed parser per kind of value a user types (on the command line or
in a caps file): ports, host:port, counts, rates, fractions, durations.

Pure (no I/O). Every parser takes the text and the name of the option (or
caps-file key) it came from, and raises UsageError naming both and saying
what to give instead: a bad value is one line on stderr and exit 2, never a
traceback.

Why regular expressions rather than int()/float() alone: Python's int() and
float() accept far more than a user means. Unicode digits pass str.isdigit()
('²') and some then fail in int() (a traceback), others ('٣') are taken as
3; '1_000', 'inf', 'nan' and ' 5 ' are numbers to float(). Our numbers are
ASCII decimal, and every value must be finite and fit the field it goes to.
"""

from __future__ import annotations

import math
import re

from tamebpf.errors import UsageError
from tamebpf.units import bytes_per_s, mbps

_COUNT = re.compile(r"[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
# Rates go to the kernel as u64 bytes/s (tb_cap_count.rate_bytes_per_s): the
# largest rate any field can hold, in Mbit/s. Anything above would wrap.
MAX_RATE_MBPS = math.floor(mbps(U64_MAX))
RATE_UNITS = {"": 1.0, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}  # -> Mbit/s
RATE_HINT = "give Mbit/s (100) or a number with a unit (100M, 9.4G)"
IPERF3_PORT = 5201  # where advise and cap --auto find the iperf3 server by default


def _show(text: object) -> str:
    """The value as the user gave it, quoted, so invisible characters show."""
    return repr(text) if isinstance(text, str) else str(text)


def decimal(text: str, option: str, what: str, hint: str) -> float:
    """A finite decimal number in ASCII (1, 2.5, 1e3); anything else is
    refused naming OPTION."""
    raw = text.strip() if isinstance(text, str) else ""
    if not _DECIMAL.fullmatch(raw):
        raise UsageError(f"bad {option} {_show(text)}: expected {what}", hint)
    value = float(raw)
    if not math.isfinite(value):
        raise UsageError(f"bad {option} {_show(text)}: too large", hint)
    return value


def parse_count(text: object, option: str, low: int = 0, high: int = U32_MAX) -> int:
    """A whole number LOW..HIGH: ASCII digits (or a TOML integer)."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise UsageError(f"bad {option} {_show(text)}: expected a whole number",
                         f"give a number from {low} to {high}")
    if isinstance(text, str):
        if not _COUNT.fullmatch(text.strip()):
            if text.strip().startswith("-") and _COUNT.fullmatch(text.strip()[1:]):
                raise UsageError(f"bad {option} {_show(text)}: must be at least {low}",
                                 f"give a number from {low} to {high}")
            raise UsageError(f"bad {option} {_show(text)}: expected a whole number",
                             f"give ASCII digits, a number from {low} to {high}")
        value = int(text.strip())
    else:
        value = text
    if value < low:
        raise UsageError(f"bad {option} {_show(text)}: must be at least {low}",
                         f"give a number from {low} to {high}")
    if value > high:
        raise UsageError(f"bad {option} {_show(text)}: must be at most {high}",
                         f"give a number from {low} to {high}")
    return value


def parse_port(text: str, option: str, whole: str | None = None, *, zero: bool = False) -> int:
    """A TCP port, 1..65535 (0 too with ZERO: 'any free port'). WHOLE is the
    full value the port came from, for the message."""
    low = 0 if zero else 1
    if not (isinstance(text, str) and _COUNT.fullmatch(text)) or not low <= int(text) <= 65535:
        shown = _show(whole if whole is not None else text)
        raise UsageError(f"bad {option} {shown}: port must be {low}..65535 "
                         f"(got {_show(text)})", "give ASCII digits, e.g. 5201")
    return int(text)


def parse_port_range(text: str, option: str, whole: str | None = None) -> tuple[int, int]:
    """'5201' or '50000-51000' (both ends included) -> (low, high)."""
    low_text, dash, high_text = text.partition("-")
    low = parse_port(low_text, option, whole)
    if not dash:
        return low, low
    high = parse_port(high_text, option, whole)
    if high < low:
        raise UsageError(f"bad {option} {_show(whole or text)}: port range {text!r} runs "
                         "backwards", f"write it low-high, {high}-{low}")
    return low, high


def parse_fraction(text: str, option: str) -> float:
    """'5%' or '0.05' -> 0.05; anything outside [0, 1] is refused, so that a
    bare '5' is not silently read as 500%."""
    raw = text.strip() if isinstance(text, str) else ""
    percent = raw.endswith("%")
    body = raw[:-1] if percent else raw
    if not _DECIMAL.fullmatch(body):
        raise UsageError(f"bad {option} {_show(text)}: expected a percentage like 5% or 0.05")
    value = float(body) / (100.0 if percent else 1.0)
    if not 0.0 <= value <= 1.0:  # also false for a number too large to hold
        raise UsageError(f"bad {option} {_show(text)}: must be between 0% and 100% (or 0 and 1)")
    return value


def parse_rate_mbps(text: str, option: str) -> float:
    """A rate in Mbit/s: a bare number, or one with k, M, G or T (bit/s), with
    or without 'bit/s', 'bps' or 'bit' after it: 100, 9.4G, 500k, 1.5Gbit/s.
    At most MAX_RATE_MBPS (what a u64 of bytes/s holds)."""
    if not isinstance(text, str):
        raise UsageError(f"bad {option} {_show(text)}: not a rate", RATE_HINT)
    body = text.strip().lower().removesuffix("bit/s").removesuffix("bps").removesuffix("bit")
    unit = body[-1:] if body[-1:] in RATE_UNITS else ""
    number = body[:len(body) - len(unit)]
    if not _DECIMAL.fullmatch(number):
        raise UsageError(f"bad {option} {_show(text)}: not a rate", RATE_HINT)
    value = float(number) * RATE_UNITS[unit]
    if not value > 0:
        raise UsageError(f"bad {option} {_show(text)}: not a rate above 0", RATE_HINT)
    if not value <= MAX_RATE_MBPS:  # also inf
        raise UsageError(f"bad {option} {_show(text)}: too large",
                         f"give at most {MAX_RATE_MBPS / 1e6:g}T")
    return value


def rate_bytes_per_s(text: str, option: str) -> int:
    """A rate as the kernel takes it: whole bytes/s, 1..2^64-1."""
    value = math.floor(bytes_per_s(parse_rate_mbps(text, option)))
    if value < 1:
        raise UsageError(f"bad {option} {_show(text)}: too small", "give at least 8 bit/s")
    return min(value, U64_MAX)


def parse_duration(text: str, option: str, low: float, high: float) -> float:
    """Seconds from LOW to HIGH: a finite ASCII decimal."""
    hint = f"give seconds from {low:g} to {high:g}"
    value = decimal(text, option, "seconds", hint)
    if not low <= value <= high:
        raise UsageError(f"bad {option} {_show(text)}: out of range", hint)
    return value


def parse_host_port(text: str, option: str, default_port: int | None = None, *,
                    empty_host: str | None = None, port_zero: bool = False) -> tuple[str, int]:
    """'host', 'host:port', '[v6]:port', '[v6]' or a bare IPv6 address.

    default_port: used when none is given (None: a port is required).
    empty_host: what ':port' means (None: a host is required).
    port_zero: whether 0 ("any free port") is allowed.
    """
    raw = text.strip()
    host, port_text = raw, ""
    if raw.startswith("["):
        host, close, rest = raw[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise UsageError(f"bad {option} {text!r}: expected [IPV6]:PORT")
        port_text = rest[1:] if rest else ""
        if rest == ":":
            raise UsageError(f"bad {option} {text!r}: no port after ':'")
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        if not port_text:
            raise UsageError(f"bad {option} {text!r}: no port after ':'")
    if not host:
        if empty_host is None:
            raise UsageError(f"bad {option} {text!r}: no host", "give HOST or HOST:PORT")
        host = empty_host
    if not port_text:
        if default_port is None:
            raise UsageError(f"bad {option} {text!r}: no port", "give HOST:PORT")
        return host, default_port
    return host, parse_port(port_text, option, text, zero=port_zero)
