"""Fail-safe boot (issue 30): an `auto` entry that cannot probe uses its
fallback, else keeps the value in force, else fails the file naming it;
`cap apply --check` changes nothing; --json on every cap verb; and
generated caps files never give a traceback, nor change the kernel when
refused. Real kernel; the advisor is replaced by one that fails, as it
does at boot when the peer is unreachable."""

from __future__ import annotations

import json
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tamebpf.common.errors import TamebpfError
from tests.integration.test_cap_cli import assert_refused, state, tamebpf

pytestmark = pytest.mark.root


@pytest.fixture
def unreachable_advisor(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An advisor whose peer cannot be reached (no probe traffic sent)."""
    asked: list[str] = []

    def advise_target(host: str, max_impact: float, port: int = 5201,
                      congestion: str = "system",
                      on_progress: object = None) -> tuple[int, float]:
        asked.append(host)
        raise TamebpfError(f"cannot connect to {host}:{port}: Network is unreachable")

    import tamebpf.advise.advisor
    monkeypatch.setattr(tamebpf.advise.advisor, "advise_target", advise_target)
    return asked


def caps_file(tmp: object, body: str) -> str:
    path = os.path.join(str(tmp), "caps.toml")
    with open(path, "w") as f:
        f.write(body)
    return path


def listed() -> list[tuple[str, int, str, int]]:
    res = tamebpf("cap", "list", "--json", "--window", "0")
    assert res.returncode == 0, res.stderr
    return sorted((c["dest"], c["max_streams"], c["mode"], c["rate_bytes_per_s"])
                  for c in json.loads(res.stdout))


def auto_entry(cg: str, dest: str, extra: str = "", mode: str = "refuse") -> str:
    return (f'[[cap]]\ncgroup = "{cg}"\ndest = "{dest}"\nmode = "{mode}"\n'
            f'auto = "192.0.2.9"\nmax_impact = "5%"\n{extra}\n')


def test_auto_without_a_probe_falls_back_keeps_or_fails(
        pins: str, cg: str, tmp_path: object, unreachable_advisor: list[str]) -> None:
    # 1. a fallback: used, in each mode
    path = caps_file(tmp_path, auto_entry(cg, "198.18.0.0/15", "fallback = 3")
                     + auto_entry(cg, "203.0.113.0/24", 'fallback = "80M"', "pace"))
    res = tamebpf("cap", "apply", path)
    assert res.returncode == 0, res.stderr
    assert "fallback" in res.stdout, res.stdout
    assert listed() == [("198.18.0.0/15", 3, "refuse", 0),
                        ("203.0.113.0/24", 2**32 - 1, "pace", 10_000_000)]
    # 2. no fallback, a cap in force: kept as it is
    path = caps_file(tmp_path, auto_entry(cg, "198.18.0.0/15")
                     + auto_entry(cg, "203.0.113.0/24", "", "pace"))
    res = tamebpf("cap", "apply", "--prune", path)
    assert res.returncode == 0, res.stderr
    assert "kept" in res.stdout, res.stdout
    assert listed() == [("198.18.0.0/15", 3, "refuse", 0),
                        ("203.0.113.0/24", 2**32 - 1, "pace", 10_000_000)]
    # 3. neither: the file fails whole, naming the entry
    before = state(pins, cg)
    path = caps_file(tmp_path, auto_entry(cg, "198.18.0.0/15")
                     + f'[[cap]]\ncgroup = "{cg}"\ndest = "192.0.2.0/24"\nmax_streams = 2\n'
                     + auto_entry(cg, "198.51.100.0/24"))
    assert_refused(tamebpf("cap", "apply", path), 1, "cap #3 (198.51.100.0/24")
    assert state(pins, cg) == before, "a failed file changed the caps"
    assert unreachable_advisor, "the advisor was asked"


def test_check_validates_without_changing_anything(
        pins: str, cg: str, tmp_path: object, unreachable_advisor: list[str]) -> None:
    good = caps_file(tmp_path, f'[[cap]]\ncgroup = "{cg}"\ndest = "198.18.0.0/15"\n'
                     "max_streams = 4\n" + auto_entry(cg, "203.0.113.0/24"))
    res = tamebpf("cap", "apply", "--check", good)
    assert res.returncode == 0, res.stderr
    assert "nothing changed" in res.stdout, res.stdout
    assert not os.path.exists(pins), "--check created pins"
    assert not unreachable_advisor, "--check probed"
    res = tamebpf("cap", "apply", "--check", "--json", good)
    assert json.loads(res.stdout) == {"file": good, "ok": True, "caps": 2}, res.stdout
    assert tamebpf("cap", "apply", good.replace("caps.toml", "none.toml"),
                   "--check").returncode == 2
    bad = caps_file(tmp_path, f'[[cap]]\ncgroup = "{cg}-gone"\ndest = "10.0.0.0/8"\n'
                    "max_streams = 4\n")
    assert_refused(tamebpf("cap", "apply", "--check", bad), 2, "no such cgroup")
    many = caps_file(tmp_path, "".join(
        f'[[cap]]\ncgroup = "{cg}"\ndest = "198.18.0.{i}/32"\nmax_streams = 1\n'
        for i in range(17)))
    assert_refused(tamebpf("cap", "apply", "--check", many), 2, "would have 17 caps")
    assert not os.path.exists(pins)


def test_json_on_every_verb(pins: str, cg: str, tmp_path: object) -> None:
    res = tamebpf("cap", "set", "--cgroup", cg, "--dest", "198.18.0.0/15",
                  "--max-streams", "4", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert (got["dest"], got["max_streams"], got["mode"]) == ("198.18.0.0/15", 4, "refuse")
    path = caps_file(tmp_path, f'[[cap]]\ncgroup = "{cg}"\ndest = "198.18.0.0/15"\n'
                     "max_streams = 6\n")
    res = tamebpf("cap", "apply", "--json", path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert [c["max_streams"] for c in got["removed"]] == [4], got
    assert [c["max_streams"] for c in got["set"]] == [6], got
    assert got["kept"] == [], got
    res = tamebpf("cap", "rm", "--cgroup", cg, "--dest", "198.18.0.0/15", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["max_streams"] == 6
    assert not os.path.exists(pins)


TOML_VALUE = st.one_of(
    st.sampled_from(['"198.18.0.0/15"', '"198.18.0.1/15"', '"10.0.0.0/8:1-9"', '"fe80::1%eth0"',
                     '"[fd00::/64]:70000"', "3", "0", "-1", "2.5", '"²"', '"1e300T"', '"500M"',
                     "inf", "true", '"pace"', '"refuse"', '"5%"', '""', '"."', '"/"', "[]"]),
    st.text(alphabet=string.printable, max_size=12).map(json.dumps),
)
KEY = st.sampled_from(["dest", "max_streams", "mode", "rate", "auto", "max_impact",
                       "fallback", "all_processes", "cgroup", "port"])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.dictionaries(KEY, TOML_VALUE, max_size=5), min_size=1, max_size=3))
def test_generated_caps_files(pins: str, cg: str, tmp_path: object,
                              unreachable_advisor: list[str],
                              entries: list[dict[str, str]]) -> None:
    """Generated caps files against one cap in force: no traceback, ever;
    a refused file leaves the kernel exactly as it was."""
    base = f'[[cap]]\ncgroup = "{cg}"\ndest = "192.0.2.1/32"\nmax_streams = 2\n'
    path = caps_file(tmp_path, base)
    assert tamebpf("cap", "apply", "--prune", path).returncode == 0
    before = state(pins, cg)
    body = "".join("[[cap]]\n" + (f'cgroup = "{cg}"\n' if "cgroup" not in e else "")
                   + "".join(f"{k} = {v}\n" for k, v in e.items()) for e in entries)
    path = caps_file(tmp_path, body)
    res = tamebpf("cap", "apply", path)
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode in (0, 1, 2), (res.returncode, res.stderr)
    if res.returncode:
        assert len(lines) == 1 and lines[0].startswith("tamebpf: "), lines
        assert state(pins, cg) == before, f"refused file changed the caps:\n{body}"
