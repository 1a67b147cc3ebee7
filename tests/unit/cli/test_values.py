"""Every value a user types (issue 30): one parser per kind, ASCII digits,
finite rates that fit the kernel's field, one line and exit 2 for anything
else. Each case here was a traceback or a wrong value before."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess

import pytest

from tamebpf.cap.load import parse_capfile
from tamebpf.cap.spec import check_cgroup_text, parse_dest
from tamebpf.cli import main
from tamebpf.commands.cap import read_capfile, spec_from_args
from tamebpf.common.errors import UsageError
from tamebpf.common.values import (
    MAX_RATE_MBPS,
    U64_MAX,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_port,
    parse_port_range,
    parse_rate_mbps,
    rate_bytes_per_s,
)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_usage(argv: list[str], says: str) -> None:
    code, _, err = run(*argv)
    lines = err.strip().splitlines()
    assert code == 2, f"{argv}: exit {code}, {err!r}"
    assert len(lines) == 1 and lines[0].startswith("tamebpf: "), f"{argv}: {lines}"
    assert says in lines[0], f"{argv}: expected {says!r} in {lines[0]!r}"


@pytest.mark.parametrize("rate", ["1.6e14", "147573952589676.4", "1e300T", "1e400", "inf",
                                  "nan", "-5", "0"])
def test_pace_rates_never_wrap(rate: str) -> None:
    """1.6e14 Mbit/s was 'paced at 1.2426e+13 Mbit/s' (wrapped), 147573952589676.4
    reached the kernel as 0, 1e300T was an OverflowError."""
    with pytest.raises(UsageError) as err:
        rate_bytes_per_s(rate, "--rate")
    assert "--rate" in str(err.value) and repr(rate) in str(err.value), str(err.value)


def test_the_largest_rate_fits_the_kernel_field() -> None:
    assert rate_bytes_per_s(f"{MAX_RATE_MBPS}", "--rate") <= U64_MAX
    assert rate_bytes_per_s("147573T", "--rate") == 147573 * 10**12 // 8
    assert rate_bytes_per_s("8k", "--rate") == 1000


@pytest.mark.parametrize("argv", [
    ["cap", "set", "--cgroup", "x", "--dest", "10.0.0.0/8", "--mode", "pace", "--rate", r]
    for r in ("1.6e14", "147573952589676.4", "1e300T")])
def test_cap_set_refuses_rates_that_wrap(argv: list[str]) -> None:
    assert_usage(argv, "--rate")


@pytest.mark.parametrize("text", ["²", "١٢", "5²", "1_000", " ", "", "0x10", "+5", "-1"])
def test_counts_and_ports_are_ascii_digits(text: str) -> None:
    for parse in (lambda t: parse_count(t, "--n"), lambda t: parse_port(t, "--port")):
        with pytest.raises(UsageError):
            parse(text)


@pytest.mark.parametrize(("argv", "says"), [
    (["advise", "127.0.0.1:²", "--max-impact", "5%"], "port must be"),
    (["export", "--listen", "127.0.0.1:²"], "--listen"),
    (["cap", "set", "--cgroup", "x", "--dest", "127.0.0.1:²", "--max-streams", "2"],
     "--dest"),
    (["advise", "127.0.0.1", "--max-impact", "5%", "--probes", "²,10"], "--probes"),
    (["predict", "--probe", "²:50", "--probe", "10:200"], "--probe"),
    (["export", "--interval", "inf"], "--interval"),
    (["export", "--interval", "nan"], "--interval"),
    (["export", "--max-groups", "١٢"], "--max-groups"),
    (["watch", "--interval", "inf", "--once"], "--interval"),
    (["watch", "--iterations", "²"], "--iterations"),
    (["cap", "list", "--window", "inf"], "--window"),
    (["advise", "127.0.0.1", "--max-impact", "5%", "--duration", "inf"], "--duration"),
    (["advise", "127.0.0.1", "--max-impact", "5%", "--netns", "bogus"], "--netns 'bogus'"),
    (["advise", "127.0.0.1", "--max-impact", "5%", "--netns", "/etc/passwd"],
     "not a namespace"),
    (["flows", "--netns", "/etc/passwd"], "/etc/passwd is not a namespace"),
    (["cap", "set", "--cgroup", "x", "--dest", "fe80::1%eth0", "--max-streams", "2"],
     "zone '%eth0'"),
    (["cap", "set", "--cgroup", "", "--dest", "10.0.0.0/8", "--max-streams", "2"], "empty"),
    (["cap", "set", "--cgroup", ".", "--dest", "10.0.0.0/8", "--max-streams", "2"],
     "cgroup v2 root"),
    (["cap", "set", "--cgroup", "/", "--dest", "10.0.0.0/8", "--max-streams", "2"],
     "--all-processes"),
    (["cap", "set", "--cgroup", "x", "--dest", "10.0.0.0/8", "--max-streams", "²"],
     "--max-streams"),
    (["run", "--rate", "-5M", "--", "true"], "bad --rate '-5M': not a rate above 0"),
    (["advise", "127.0.0.1", "--max-impact", "-5%"], "bad --max-impact '-5%'"),
    (["paths", "forget", "--dest", "10.0.0.1/8"], "did you mean 10.0.0.0/8?"),
    (["advise", "a" * 64 + ".example", "--max-impact", "5%"], "is 64 characters"),
    (["advise", "a..b", "--max-impact", "5%"], "empty label"),
])
def test_bad_values_get_one_line_and_exit_2(argv: list[str], says: str) -> None:
    """Each was a traceback (Unicode digits, inf), a silent change (the zone,
    the root cgroup) or exit 1 (advise --netns) before."""
    assert_usage(argv, says)


def test_flows_netns_of_another_kind_is_named() -> None:
    assert_usage(["flows", "--netns", "/proc/self/ns/uts"], "not a network namespace")


def test_a_zone_is_refused_with_the_address_to_give() -> None:
    with pytest.raises(UsageError) as err:
        parse_dest("fe80::1%eth0")
    assert "fe80::1" in str(err.value.hint), err.value.hint
    with pytest.raises(UsageError):
        parse_dest("[fe80::1%eth0]:22")


def test_port_ranges() -> None:
    d = parse_dest("198.51.100.0/24:50000-51000")
    assert (d.port, d.port_end, str(d)) == (50000, 51000, "198.51.100.0/24:50000-51000")
    assert d.covers_port(50500) and not d.covers_port(2811)
    assert str(parse_dest("[fd00::/64]:5000-5001")) == "[fd00::/64]:5000-5001"
    assert parse_dest("10.0.0.1:80-80") == parse_dest("10.0.0.1:80")
    assert parse_port_range("7-9", "--dest") == (7, 9)
    for bad in ("51000-50000", "0-5", "5-70000", "5-", "-5", "5--6", "²-5"):
        with pytest.raises(UsageError):
            parse_port_range(bad, "--dest")


@pytest.mark.parametrize(("text", "all_processes"), [
    ("", False), (" ", False), (".", False), ("./", False), ("//", False), ("/", False),
    ("x", True), ("/a", True)])
def test_cgroup_text_refused(text: str, all_processes: bool) -> None:
    with pytest.raises(UsageError):
        check_cgroup_text(text, "--cgroup", all_processes)


def test_cgroup_root_confirmed() -> None:
    assert check_cgroup_text("/", "--cgroup", True) == "/"
    assert check_cgroup_text("transfer.slice", "--cgroup") == "transfer.slice"


def test_a_caps_file_that_is_not_utf8_is_a_usage_error(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "caps.toml")
    with open(path, "wb") as f:
        f.write(b'[[cap]]\ncgroup = "a\xff"\n')
    with pytest.raises(UsageError) as err:
        read_capfile(path)
    assert "not UTF-8" in str(err.value) and path in str(err.value), str(err.value)
    assert_usage(["cap", "apply", path], "not UTF-8")


@pytest.mark.parametrize(("text", "says"), [
    ("[[cap]]\ncgroup=''\ndest='10.0.0.0/8'\nmax_streams=2\n", "required"),
    ("[[cap]]\ncgroup='.'\ndest='10.0.0.0/8'\nmax_streams=2\n", "cgroup v2 root"),
    ("[[cap]]\ncgroup='/'\ndest='10.0.0.0/8'\nmax_streams=2\n", "all_processes"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate='1e300T'\n", "too large"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate=1.6e14\n", "too large"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nrate=inf\n", "rate"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams='²'\n", "max_streams"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=2.0\n", "max_streams"),
    ("[[cap]]\ncgroup='a'\ndest='fe80::1%eth0'\nmax_streams=2\n", "zone"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h:²'\nmax_impact='5%'\n", "port"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\nmax_impact='500%'\n", "max_impact"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\nmax_impact='5%'\nfallback=0\n",
     "fallback"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmode='pace'\nauto='h'\nmax_impact='5%'\n"
     "fallback='fast'\n", "fallback"),
    ("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nmax_streams=2\nfallback=3\n",
     "fallback goes with auto"),
])
def test_capfile_fields_use_the_same_parsers(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_capfile(text, "caps.toml")
    assert says in str(err.value), f"expected {says!r} in {str(err.value)!r}"
    assert str(err.value).startswith("caps.toml: cap #1"), str(err.value)


def test_capfile_fallback_and_root() -> None:
    specs = parse_capfile("[[cap]]\ncgroup='a'\ndest='10.0.0.0/8'\nauto='h'\n"
                          "max_impact='5%'\nfallback=4\n"
                          "[[cap]]\ncgroup='/'\nall_processes=true\ndest='192.0.2.0/24'\n"
                          "mode='pace'\nauto='h'\nmax_impact='5%'\nfallback='500M'\n")
    assert [(s.fallback, s.all_processes) for s in specs] == [("4", False), ("500M", True)]


def test_values_in_range() -> None:
    assert parse_fraction("5%", "--x") == 0.05
    assert parse_fraction(" 0.5 ", "--x") == 0.5
    assert parse_duration("0", "--w", 0, 60) == 0
    assert parse_rate_mbps("1.5Gbit/s", "--r") == 1500
    for bad in ("1e999%", "nan", "inf", "5", "٥%"):
        with pytest.raises(UsageError):
            parse_fraction(bad, "--x")


def test_spec_from_args_refuses_unicode_and_root() -> None:
    import argparse
    ns = argparse.Namespace(mode="refuse", rate=None, max_streams="2", auto=None,
                            max_impact=None, cgroup="", dest="10.0.0.0/8",
                            congestion="system", all_processes=False)
    with pytest.raises(UsageError, match="empty"):
        spec_from_args(ns)


def test_root_without_capabilities_is_named() -> None:
    """setpriv --bounding-set=-all: root with no capabilities used to get a
    bare 'Operation not permitted'. (No BPF is loaded: the check comes first.)"""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
        pytest.skip("needs root and setpriv")
    import sys
    res = subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m",
         "tamebpf", "cap", "list"], capture_output=True, text=True, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, (res.returncode, lines)
    assert "CAP_SYS_ADMIN" in lines[0] and "CAP_BPF" in lines[0], lines[0]
