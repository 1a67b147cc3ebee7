"""Caps as data: destinations, the caps file, the kernel rule encoding, the
table, and --auto's use of the advisor. No kernel needed."""

from __future__ import annotations

import ipaddress
import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.advise import advisor
from tamebpf.cap import plan
from tamebpf.cap.load import parse_capfile
from tamebpf.cap.spec import Dest, check_max_streams, parse_dest
from tamebpf.cap.table import dest_of, rule_for
from tamebpf.commands import cap as cap_cmd
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.estimate.record import AdviceRefusal
from tamebpf.present.advice import refusal_text
from tests.unit.groups.test_groups_fakes import cap_record


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

[[cap]]
cgroup = "backup.slice"
dest = "203.0.113.0/24"
mode = "pace"
rate = "2G"

[[cap]]
cgroup = "backup.slice"
dest = "203.0.114.0/24"
mode = "pace"
auto = "dtn3"
max_impact = 0.2
"""


def test_capfile_parses() -> None:
    specs = parse_capfile(GOOD)
    assert [(s.cgroup, str(s.dest), s.max_streams, s.auto, s.max_impact, s.mode, s.rate)
            for s in specs] == [
        ("transfer.slice", "198.18.0.0/15", 8, None, None, "refuse", None),
        ("/transfer.slice", "[fd00:7462::/48]:2811", None, "dtn2.example.org", "5%", "refuse",
         None),
        ("backup.slice", "203.0.113.0/24", None, None, None, "pace", "2G"),
        ("backup.slice", "203.0.114.0/24", None, "dtn3", "0.2", "pace", None),
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
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='slow'\nrate='1G'\n", "not one of"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\n", "either rate or auto"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1G'\nauto='h'\n", "either"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='fast'\n", "not a rate"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1G'\nmax_streams=4\n",
     "max_streams goes with"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=4\nrate='1G'\n", "rate goes with"),
    ("[[cap]\n", "not valid TOML"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=4\ndirection='receive'\n",
     "direction goes with mode"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1G'\ndirection='up'\n",
     "direction 'up' is not one of"),
])
def test_capfile_refuses_with_the_entry_named(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_capfile(text, "caps.toml")
    assert says in str(err.value), f"expected {says!r} in {str(err.value)!r}"
    assert str(err.value).startswith("caps.toml"), str(err.value)


def test_table_text() -> None:
    text = cap_cmd.render_table([
        cap_record(),
        cap_record(id=2, cgroup="/gone", cgroup_exists=False, dest="[fd00::/64]:2811",
             family="ipv6", port=2811, max_streams=1, streams=0, refused=0),
    ])
    assert text == (
        "CGROUP                       DEST                     MODE             LIMIT  STREAMS"
        "  REFUSED    MBIT/S\n"
        "/transfer.slice              198.18.0.0/15            refuse               8        3"
        "       12         -\n"
        "/gone (removed)              [fd00::/64]:2811         refuse               1        0"
        "        0         -\n"
    ), text
    assert cap_cmd.render_table([]).endswith("(no caps)\n")


def test_table_shows_pace_target_and_live_rate() -> None:
    text = cap_cmd.render_table([cap_record(mode="pace", rate_bytes_per_s=12_500_000,
                                      max_streams=2**32 - 1, direction="both")], {1: 97.04})
    row = text.splitlines()[1].split()
    assert row[2:] == ["pace", "100", "Mbit/s", "3", "12", "97.0"], text
    for direction, cell in (("send", "pace-send"), ("receive", "pace-recv")):
        text = cap_cmd.render_table([cap_record(mode="pace", rate_bytes_per_s=12_500_000,
                                                max_streams=2**32 - 1, direction=direction)])
        assert text.splitlines()[1].split()[2] == cell, text


def fake_advisor(monkeypatch: pytest.MonkeyPatch, n: int, mbit: float) -> list[tuple[object, ...]]:
    calls: list[tuple[object, ...]] = []

    def advise_target(host: str, max_impact: float, port: int = 5201,
                      congestion: str = "system",
                      on_progress: object = None) -> tuple[int, float]:
        calls.append((host, max_impact, port) if congestion == "system"
                     else (host, max_impact, port, congestion))
        return n, mbit

    monkeypatch.setattr(advisor, "advise_target", advise_target)
    pretend_names_resolve(monkeypatch)
    return calls


def pretend_names_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The advisor is faked, so its host's name ('dtn2') need not resolve."""
    monkeypatch.setattr(plan, "resolve", lambda *a, **k: [])


def test_auto_uses_the_advisors_target(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_advisor(monkeypatch, 6, 41.5)
    assert cap_cmd.auto_target("dtn2", "5%") == (6, 41.5)
    assert cap_cmd.auto_target("dtn2:2811", "0.1") == (6, 41.5)
    assert calls == [("dtn2", 0.05, 5201), ("dtn2", 0.1, 2811)], calls
    fake_advisor(monkeypatch, 0, 1.0)
    with pytest.raises(UsageError):
        cap_cmd.auto_target("dtn2", "5%")


def test_a_refused_advice_reaches_cap_auto_as_data_and_is_worded_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = AdviceRefusal("bbr_share_failed", {"error": "no curve"})
    monkeypatch.setattr(advisor, "advise_target", lambda *a, **k: refusal)
    pretend_names_resolve(monkeypatch)
    with pytest.raises(TamebpfError) as err:
        cap_cmd.auto_target("dtn2", "5%")
    assert str(err.value) == f"the advisor gave no advice for dtn2:5201: {refusal_text(refusal)}"


def test_auto_probes_with_the_congestion_control_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_advisor(monkeypatch, 4, 30.0)
    spec = parse_capfile("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\n"
                         "max_impact='20%'\ncongestion='cubic'\n")[0]
    assert spec.congestion == "cubic"
    cap_cmd.resolve_spec(spec)
    assert calls == [("h", 0.2, 5201, "cubic")], calls
    with pytest.raises(UsageError, match="congestion 'vegas'"):
        parse_capfile("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\n"
                      "max_impact='20%'\ncongestion='vegas'\n")


def test_auto_pace_cap_takes_the_advised_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_advisor(monkeypatch, 3, 80.0)
    spec = parse_capfile("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\n"
                         "auto='h'\nmax_impact='20%'\n")[0]
    how = cap_cmd.resolve_spec(spec)
    assert (how.pace_bytes_per_s, how.advised) == (10_000_000, (3, 80.0)), how
    refuse = parse_capfile("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\n"
                           "max_impact='20%'\n")[0]
    how = cap_cmd.resolve_spec(refuse)
    assert (how.max_streams, how.pace_bytes_per_s) == (3, None), how


def test_a_pace_cap_paces_both_directions_unless_told() -> None:
    both, down = parse_capfile(
        "[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1G'\n"
        "[[cap]]\ncgroup='b'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1G'\n"
        "direction='receive'\n")
    assert (both.direction, down.direction) == ("both", "receive")
