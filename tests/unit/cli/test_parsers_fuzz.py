"""Property tests (issue 30): random strings and numbers into every parser
of user input. Each either returns a value in its range or raises
UsageError (one line, exit 2); never any other exception. 2,000 examples
per parser."""

from __future__ import annotations

import math
import string
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tamebpf.cap.load import parse_capfile
from tamebpf.cap.spec import check_cgroup_text, parse_dest
from tamebpf.commands import advise, export, predict
from tamebpf.common.errors import UsageError
from tamebpf.common.values import (
    MAX_RATE_MBPS,
    U64_MAX,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_host_port,
    parse_port,
    parse_port_range,
    parse_rate_mbps,
    rate_bytes_per_s,
)

EXAMPLES = settings(max_examples=2000, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Text that looks like what a user types, with the characters that broke
# parsers before: Unicode digits, signs, dots, exponents, units, brackets.
NUMBERISH = st.text(alphabet=string.digits + "²³¹٣١٢۵߃+-.eEkKmMgGtT%_:/[]% \t", max_size=24)
TEXT = st.one_of(st.text(max_size=40), NUMBERISH,
                 st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.integers(min_value=-(2**70), max_value=2**70).map(str))


def never_crashes(parse: Callable[[str], object], text: str) -> object | None:
    try:
        return parse(text)
    except UsageError as err:
        assert err.message and "\n" not in str(err), repr(str(err))
        return None


@EXAMPLES
@given(TEXT)
def test_count(text: str) -> None:
    n = never_crashes(lambda t: parse_count(t, "--n", 1, 100), text)
    assert n is None or (isinstance(n, int) and 1 <= n <= 100)


@EXAMPLES
@given(TEXT)
def test_port(text: str) -> None:
    p = never_crashes(lambda t: parse_port(t, "--port"), text)
    assert p is None or (isinstance(p, int) and 1 <= p <= 65535)


@EXAMPLES
@given(TEXT)
def test_port_range(text: str) -> None:
    r = never_crashes(lambda t: parse_port_range(t, "--dest"), text)
    assert r is None or (isinstance(r, tuple) and 1 <= r[0] <= r[1] <= 65535)


@EXAMPLES
@given(TEXT)
def test_fraction(text: str) -> None:
    f = never_crashes(lambda t: parse_fraction(t, "--max-impact"), text)
    assert f is None or (isinstance(f, float) and 0.0 <= f <= 1.0)


@EXAMPLES
@given(TEXT)
def test_rate(text: str) -> None:
    r = never_crashes(lambda t: parse_rate_mbps(t, "--rate"), text)
    assert r is None or (isinstance(r, float) and 0 < r <= MAX_RATE_MBPS)


@EXAMPLES
@given(st.one_of(TEXT, st.floats(min_value=0, allow_nan=False).map(lambda v: f"{v}T")))
def test_rate_bytes_fit_u64(text: str) -> None:
    b = never_crashes(lambda t: rate_bytes_per_s(t, "--rate"), text)
    assert b is None or (isinstance(b, int) and 1 <= b <= U64_MAX)


@EXAMPLES
@given(TEXT)
def test_duration(text: str) -> None:
    d = never_crashes(lambda t: parse_duration(t, "--interval", 0.01, 86400), text)
    assert d is None or (isinstance(d, float) and math.isfinite(d) and 0.01 <= d <= 86400)


DESTISH = st.text(alphabet=string.hexdigits + ".:/[]%-²٣ abcdefxyz", max_size=48)


@EXAMPLES
@given(st.one_of(TEXT, DESTISH))
def test_dest(text: str) -> None:
    d = never_crashes(parse_dest, text)
    if d is not None:
        assert parse_dest(str(d)) == d  # what we accept, we print back the same


@EXAMPLES
@given(st.one_of(TEXT, DESTISH))
def test_host_port(text: str) -> None:
    hp = never_crashes(lambda t: parse_host_port(t, "--auto", default_port=5201), text)
    assert hp is None or (isinstance(hp, tuple) and 1 <= hp[1] <= 65535)


@EXAMPLES
@given(st.one_of(TEXT, st.text(alphabet="/. a", max_size=6)), st.booleans())
def test_cgroup(text: str, all_processes: bool) -> None:
    c = never_crashes(lambda t: check_cgroup_text(t, "--cgroup", all_processes), text)
    assert c is None or c.strip("/.") or (c == "/" and all_processes)


@pytest.mark.parametrize("parse", [advise.parse_probes, advise.parse_durations,
                                   advise.parse_capacity, advise.parse_dest,
                                   predict.parse_probe, export.parse_listen],
                         ids=lambda f: f"{f.__module__.rsplit('.', 1)[-1]}.{f.__name__}")
def test_command_parsers(parse: Callable[[str], object]) -> None:
    @EXAMPLES
    @given(st.one_of(TEXT, DESTISH, st.builds(lambda a, b: f"{a},{b}", NUMBERISH, NUMBERISH),
                     st.builds(lambda a, b: f"{a}:{b}", NUMBERISH, NUMBERISH)))
    def check(text: str) -> None:
        never_crashes(parse, text)

    check()


TOML_VALUES = st.one_of(
    st.text(max_size=20).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"')
                             .replace("\n", "\\n") + '"'),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats().map(lambda f: "nan" if math.isnan(f) else repr(f).replace("inf", "inf")),
    st.sampled_from(["true", "false", "[]", "{}", '"5%"', '"500M"', '"1e300T"', '"²"',
                     '"fe80::1%eth0"', '"/"', '"."', '""', '"10.0.0.0/8:1-2"']),
)
KEYS = st.sampled_from(["cgroup", "dest", "max_streams", "auto", "max_impact", "mode", "rate",
                        "congestion", "fallback", "all_processes", "colour"])


@EXAMPLES
@given(st.lists(st.dictionaries(KEYS, TOML_VALUES, max_size=6), max_size=3),
       st.binary(max_size=8))
def test_capfile(entries: list[dict[str, str]], junk: bytes) -> None:
    text = "".join("[[cap]]\n" + "".join(f"{k} = {v}\n" for k, v in e.items())
                   for e in entries)
    text += junk.decode("latin-1")
    specs = never_crashes(lambda t: parse_capfile(t, "caps.toml"), text)
    assert specs is None or isinstance(specs, list)
