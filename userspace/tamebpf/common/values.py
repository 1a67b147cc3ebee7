"""One typed parser per kind of value a user types (on the command line or
in a caps file): ports, host:port, counts, rates, fractions, durations,
node names.

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

import contextlib
import ipaddress
import math
import re
import urllib.parse

from tamebpf.common.errors import UsageError
from tamebpf.common.units import bytes_per_s, mbps

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


SHOWN_MAX = 80  # a value quoted in an error line is cut to this many characters
# A host name as the resolver takes it (RFC 1123; '_' as DNS allows it): at
# most 253 characters, labels of 1-63 letters, digits, '-' or '_', none
# starting or ending with '-'.
HOST_MAX, LABEL_MAX = 253, 63
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?", re.ASCII)
# A node's name in a site's Prometheus (the label node): what a host name or
# an inventory's short name holds, and nothing a query would have to escape.
NODE_MAX = 64
_NODE = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)


def shown(text: object) -> str:
    """The value as the user gave it, quoted, so invisible characters show;
    a long one cut, so that an error stays one short line."""
    if not isinstance(text, str):
        return str(text)
    if len(text) <= SHOWN_MAX:
        return repr(text)
    return f"{text[:SHOWN_MAX - 20]!r}... ({len(text)} characters)"


def decimal(text: str, option: str, what: str, hint: str) -> float:
    """A finite decimal number in ASCII (1, 2.5, 1e3); anything else is
    refused naming OPTION."""
    raw = text.strip() if isinstance(text, str) else ""
    if not _DECIMAL.fullmatch(raw):
        raise UsageError(f"bad {option} {shown(text)}: expected {what}", hint)
    value = float(raw)
    if not math.isfinite(value):
        raise UsageError(f"bad {option} {shown(text)}: too large", hint)
    return value


def parse_count(text: object, option: str, low: int = 0, high: int = U32_MAX) -> int:
    """A whole number LOW..HIGH: ASCII digits (or a TOML integer)."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise UsageError(f"bad {option} {shown(text)}: expected a whole number",
                         f"give a number from {low} to {high}")
    if isinstance(text, str):
        if not _COUNT.fullmatch(text.strip()):
            if text.strip().startswith("-") and _COUNT.fullmatch(text.strip()[1:]):
                raise UsageError(f"bad {option} {shown(text)}: must be at least {low}",
                                 f"give a number from {low} to {high}")
            raise UsageError(f"bad {option} {shown(text)}: expected a whole number",
                             f"give ASCII digits, a number from {low} to {high}")
        value = int(text.strip())
    else:
        value = text
    if value < low:
        raise UsageError(f"bad {option} {shown(text)}: must be at least {low}",
                         f"give a number from {low} to {high}")
    if value > high:
        raise UsageError(f"bad {option} {shown(text)}: must be at most {high}",
                         f"give a number from {low} to {high}")
    return value


def parse_port(text: str, option: str, whole: str | None = None, *, zero: bool = False) -> int:
    """A TCP port, 1..65535 (0 too with ZERO: 'any free port'). WHOLE is the
    full value the port came from, for the message."""
    low = 0 if zero else 1
    if not (isinstance(text, str) and _COUNT.fullmatch(text)) or not low <= int(text) <= 65535:
        value = shown(whole if whole is not None else text)
        raise UsageError(f"bad {option} {value}: port must be {low}..65535 "
                         f"(got {shown(text)})", "give ASCII digits, e.g. 5201")
    return int(text)


def parse_port_range(text: str, option: str, whole: str | None = None) -> tuple[int, int]:
    """'5201' or '50000-51000' (both ends included) -> (low, high)."""
    low_text, dash, high_text = text.partition("-")
    low = parse_port(low_text, option, whole)
    if not dash:
        return low, low
    high = parse_port(high_text, option, whole)
    if high < low:
        raise UsageError(f"bad {option} {shown(whole or text)}: port range {text!r} runs "
                         "backwards", f"write it low-high, {high}-{low}")
    return low, high


def parse_fraction(text: str, option: str) -> float:
    """'5%' or '0.05' -> 0.05; anything outside [0, 1] is refused, so that a
    bare '5' is not silently read as 500%."""
    raw = text.strip() if isinstance(text, str) else ""
    percent = raw.endswith("%")
    body = raw[:-1] if percent else raw
    if not _DECIMAL.fullmatch(body):
        raise UsageError(f"bad {option} {shown(text)}: expected a percentage like 5% or 0.05")
    value = float(body) / (100.0 if percent else 1.0)
    if not 0.0 <= value <= 1.0:  # also false for a number too large to hold
        raise UsageError(f"bad {option} {shown(text)}: must be between 0% and 100% (or 0 and 1)")
    return value


def parse_rate_mbps(text: str, option: str) -> float:
    """A rate in Mbit/s: a bare number, or one with k, M, G or T (bit/s), with
    or without 'bit/s', 'bps' or 'bit' after it: 100, 9.4G, 500k, 1.5Gbit/s.
    At most MAX_RATE_MBPS (what a u64 of bytes/s holds)."""
    if not isinstance(text, str):
        raise UsageError(f"bad {option} {shown(text)}: not a rate", RATE_HINT)
    body = text.strip().lower().removesuffix("bit/s").removesuffix("bps").removesuffix("bit")
    unit = body[-1:] if body[-1:] in RATE_UNITS else ""
    number = body[:len(body) - len(unit)]
    if not _DECIMAL.fullmatch(number):
        raise UsageError(f"bad {option} {shown(text)}: not a rate", RATE_HINT)
    value = float(number) * RATE_UNITS[unit]
    if not value > 0:
        raise UsageError(f"bad {option} {shown(text)}: not a rate above 0", RATE_HINT)
    if not value <= MAX_RATE_MBPS:  # also inf
        raise UsageError(f"bad {option} {shown(text)}: too large",
                         f"give at most {MAX_RATE_MBPS / 1e6:g}T")
    return value


def rate_bytes_per_s(text: str, option: str) -> int:
    """A rate as the kernel takes it: whole bytes/s, 1..2^64-1."""
    value = math.floor(bytes_per_s(parse_rate_mbps(text, option)))
    if value < 1:
        raise UsageError(f"bad {option} {shown(text)}: too small", "give at least 8 bit/s")
    return min(value, U64_MAX)


def parse_duration(text: str, option: str, low: float, high: float) -> float:
    """Seconds from LOW to HIGH: a finite ASCII decimal."""
    hint = f"give seconds from {low:g} to {high:g}"
    value = decimal(text, option, "seconds", hint)
    if not low <= value <= high:
        raise UsageError(f"bad {option} {shown(text)}: out of range", hint)
    return value


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(text: str, option: str, forms: str, whole: str | None = None) -> Network:
    """An address or CIDR prefix with no host bits set: 10.0.0.1/8 is
    refused (naming 10.0.0.0/8) rather than silently widened."""
    value = shown(whole if whole is not None else text)
    if not text.isascii():
        raise UsageError(f"bad {option} {value}: not an IP address or CIDR",
                         f"give one of {forms}")
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        hint = f"give one of {forms}"
        with contextlib.suppress(ValueError):
            hint = f"did you mean {ipaddress.ip_network(text.strip(), strict=False)}?"
        raise UsageError(f"bad {option} {value}: {exc}", hint) from None


def parse_host(text: str, option: str, whole: str | None = None) -> str:
    """A host as the resolver takes it: an IP address, or a name of ASCII
    labels (an international name in its xn-- form too). Checked before
    any lookup: the resolver's own errors for a bad name are tracebacks
    (Python's idna codec) or a wait for a name server."""
    value = shown(whole if whole is not None else text)
    try:
        ipaddress.ip_address(text.partition("%")[0])
        return text
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise UsageError(f"bad {option} {value}: not a host name",
                             "give an address, or a name in ASCII (xn-- form)") from None
    if len(name) > HOST_MAX:
        raise UsageError(f"bad {option} {value}: a host name has at most {HOST_MAX} "
                         f"characters", "give an address or a shorter name")
    for label in name.split("."):
        if not label:
            raise UsageError(f"bad {option} {value}: empty label in the host name",
                             "write it without '..' or a leading '.'")
        if len(label) > LABEL_MAX:
            raise UsageError(f"bad {option} {value}: label {shown(label)} is {len(label)} "
                             f"characters (at most {LABEL_MAX})", "give the right name")
        if not _LABEL.fullmatch(label):
            raise UsageError(f"bad {option} {value}: label {shown(label)} holds a character a "
                             "host name cannot",
                             "use letters, digits, '-' and '_', or give an address")
    return text


def is_node_name(text: object) -> bool:
    """1-NODE_MAX letters, digits, '.', '_' or '-'."""
    return isinstance(text, str) and len(text) <= NODE_MAX and bool(_NODE.fullmatch(text))


def parse_node(text: str, option: str, hint: str = "") -> str:
    """A node's name: 1-NODE_MAX letters, digits, '.', '_' or '-'."""
    hint = hint or f"give 1-{NODE_MAX} letters, digits, '.', '_' or '-', e.g. dtn1"
    if not isinstance(text, str) or not _NODE.fullmatch(text):
        raise UsageError(f"bad {option} {shown(text)}: not a node name", hint)
    if len(text) > NODE_MAX:
        raise UsageError(f"bad {option} {shown(text)}: a node name has at most {NODE_MAX} "
                         "characters", hint)
    return text


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
            raise UsageError(f"bad {option} {shown(text)}: expected [IPV6]:PORT")
        port_text = rest[1:] if rest else ""
        if rest == ":":
            raise UsageError(f"bad {option} {shown(text)}: no port after ':'")
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        if not port_text:
            raise UsageError(f"bad {option} {shown(text)}: no port after ':'")
    if not host:
        if empty_host is None:
            raise UsageError(f"bad {option} {shown(text)}: no host", "give HOST or HOST:PORT")
        host = empty_host
    parse_host(host, option, text)
    if not port_text:
        if default_port is None:
            raise UsageError(f"bad {option} {shown(text)}: no port", "give HOST:PORT")
        return host, default_port
    return host, parse_port(port_text, option, text, zero=port_zero)


PROMETHEUS_HINT = "give Prometheus's base URL, e.g. http://prometheus.example:9090"


def parse_url(url: str, option: str, hint: str = PROMETHEUS_HINT) -> str:
    """An http or https base URL with a host that could be one (the
    Prometheus of --paths-from and --site)."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        # urlsplit would drop a tab or a line break without a word
        raise UsageError(f"bad {option} {shown(url)}: holds a space or a control "
                         "character", hint)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as err:  # a port out of range, a bad [IPv6]
        raise UsageError(f"bad {option} {shown(url)}: {err}", hint) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"bad {option} {shown(url)}: not an http or https URL", hint)
    parse_host(parts.hostname, option, url)
    if port == 0:
        raise UsageError(f"bad {option} {shown(url)}: port 0", hint)
    return url
