"""Caps as data: destinations, the caps file, the kernel rule encoding, the
table, and --auto's use of the advisor. No kernel needed."""

from __future__ import annotations

import ipaddress
import socket
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.capfile import Dest, check_max_streams, parse_capfile, parse_dest
from tamebpf.commands import cap as cap_cmd
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.kernel.cap import Cap, dest_of, rule_for


@pytest.mark.parametrize(("text", "network", "port"), [
    ("198.18.0.0/15", "198.18.0.0/15", None),
    ("198.18.0.2:5201", "198.18.0.2/32", 5201),
    ("198.18.0.0/15:80", "198.18.0.0/15", 80),
    ("fd00:7462::/48", "fd00:7462::/48", None),
    ("[fd00:7462::/48]:2811", "fd00:7462::/48", 2811),
    ("[fd00::1]:443", "fd00::1/128", 443),
    ("fd00::1", "fd00::1/128", None),
])
def test_parse_dest_accepts(text: str, network: str, port: int | None) -> None:
    d = parse_dest(text)
    assert (str(d.network), d.port) == (network, port), f"{text}: got {d}"


@pytest.mark.parametrize(("text", "says"), [
    ("198.18.0.1/15", "did you mean 198.18.0.0/15"),
    ("198.18.0.0/33", "bad --dest"),
    ("example.org", "bad --dest"),
    ("198.18.0.0/15:0", "port must be 1..65535"),
    ("198.18.0.0/15:70000", "port must be 1..65535"),
    ("[fd00::/64]:x", "port must be 1..65535"),
    ("[fd00::/64", "expected [IPv6-CIDR]:PORT"),
    ("", "bad --dest"),
])
def test_parse_dest_refuses(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_dest(text)
    assert says in str(err.value), f"{text!r}: expected {says!r} in {str(err.value)!r}"


@pytest.mark.parametrize("value", [0, -1, "0", "x", "1.5", 2**32, True])
def test_max_streams_refuses(value: object) -> None:
    with pytest.raises(UsageError):
        check_max_streams(value)


def test_max_streams_accepts() -> None:
    assert check_max_streams("7") == 7
    assert check_max_streams(1) == 1


v4_nets = st.builds(lambda a, p: ipaddress.IPv4Network((a, p), strict=False),
                    st.integers(0, 2**32 - 1), st.integers(0, 32))
v6_nets = st.builds(lambda a, p: ipaddress.IPv6Network((a, p), strict=False),
                    st.integers(0, 2**128 - 1), st.integers(0, 128))
dests = st.builds(Dest, st.one_of(v4_nets, v6_nets), st.one_of(st.none(), st.integers(1, 65535)))


@given(dests)
def test_dest_text_round_trips(d: Dest) -> None:
    assert parse_dest(str(d)) == d, f"{d} -> {str(d)!r} -> {parse_dest(str(d))}"


@given(dests)
def test_rule_encoding_round_trips(d: Dest) -> None:
    rule = rule_for(d)
    assert dest_of(rule) == d, f"{d}: rule decodes to {dest_of(rule)}"


def test_rule_is_in_network_byte_order() -> None:
    rule = rule_for(parse_dest("198.18.0.0/15:5201"))
    # The kernel compares against sockaddr_in.sin_addr as a native u32.
    raw = socket.inet_aton("198.18.0.0")
    assert rule.addr[0] == int.from_bytes(raw, sys.byteorder), hex(rule.addr[0])
    assert rule.mask[0] == int.from_bytes(socket.inet_aton("255.254.0.0"), sys.byteorder)
    assert (rule.family, rule.port, rule.prefix_len) == (socket.AF_INET, 5201, 15)


GOOD = """
[[cap]]
cgroup = "transfer.slice"
dest = "198.18.0.0/15"
max_streams = 8

[[cap]]
cgroup = "/transfer.slice"
dest = "[fd00:7462::/48]:2811"
auto = "dtn2.example.org"
max_impact = "5%"
"""


def test_capfile_parses() -> None:
    specs = parse_capfile(GOOD)
    assert [(s.cgroup, str(s.dest), s.max_streams, s.auto, s.max_impact) for s in specs] == [
        ("transfer.slice", "198.18.0.0/15", 8, None, None),
        ("/transfer.slice", "[fd00:7462::/48]:2811", None, "dtn2.example.org", "5%"),
    ]


@pytest.mark.parametrize(("text", "says"), [
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\n", "either max_streams or auto"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=2\nauto='h'\n", "either"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.1/8'\nmax_streams=2\n", "did you mean 10.0.0.0/8"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=0\n", "at least 1"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=2\ncolour='red'\n", "unknown key"),
    ("[[cap]]\ndest='10.0.0.0/8'\nmax_streams=2\n", "'cgroup' (a string) is required"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\n", "auto needs"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=2\n"
     "[[cap]]\ncgroup='/a'\ndest='10.0.0.0/8'\nmax_streams=3\n", "repeats cap #1"),
    ("caps = 1\n", "unknown top-level"),
    ("[[cap]\n", "not valid TOML"),
])
def test_capfile_refuses_with_the_entry_named(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_capfile(text, "caps.toml")
    assert says in str(err.value), f"expected {says!r} in {str(err.value)!r}"
    assert str(err.value).startswith("caps.toml"), str(err.value)


def _cap(**kw: object) -> Cap:
    base: dict[str, object] = dict(
        id=1, cgroup="/transfer.slice", cgroup_id=77, cgroup_exists=True,
        dest="198.18.0.0/15", family="ipv4", port=None, max_streams=8, streams=3,
        refused=12, charged=15, seeded=0, released=12)
    base.update(kw)
    return Cap(**base)  # type: ignore[arg-type]


def test_table_text() -> None:
    text = cap_cmd.render_table([
        _cap(),
        _cap(id=2, cgroup="/gone", cgroup_exists=False, dest="[fd00::/64]:2811",
             family="ipv6", port=2811, max_streams=1, streams=0, refused=0),
    ])
    assert text == (
        "CGROUP                       DEST                        MAX  STREAMS  REFUSED\n"
        "/transfer.slice              198.18.0.0/15                 8        3       12\n"
        "/gone (removed)              [fd00::/64]:2811              1        0        0\n"
    ), text
    assert cap_cmd.render_table([]).endswith("(no caps)\n")


def test_auto_without_the_advisor_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tamebpf.advise", None)  # import fails
    with pytest.raises(TamebpfError) as err:
        cap_cmd.auto_num_flows("dtn2", "5%")
    assert str(err.value) == cap_cmd.NO_ADVISOR, str(err.value)


def test_auto_uses_the_advisors_num_flows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def advise_num_flows(host: str, max_impact: float, port: int = 5201) -> int:
        calls.append((host, max_impact, port))
        return 6

    fake = types.ModuleType("tamebpf.advise")
    fake.advise_num_flows = advise_num_flows  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tamebpf.advise", fake)
    assert cap_cmd.auto_num_flows("dtn2", "5%") == 6
    assert cap_cmd.auto_num_flows("dtn2:2811", "0.1") == 6
    assert calls == [("dtn2", 0.05, 5201), ("dtn2", 0.1, 2811)], calls
    fake.advise_num_flows = lambda *a: 0  # type: ignore[attr-defined]
    with pytest.raises(UsageError):
        cap_cmd.auto_num_flows("dtn2", "5%")
