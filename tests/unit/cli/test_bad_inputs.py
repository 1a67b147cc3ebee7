"""Bad input to every command that takes a host, an address, a number or a
file: exit 2, no traceback, and one short line that names it. Several
hundred cases, run in-process (nothing here reaches the kernel: every
value is refused before anything is loaded or sent)."""

from __future__ import annotations

import contextlib
import io
import signal
from pathlib import Path

import pytest

from tamebpf.cli import main

LONG_LABEL = "a" * 64
BAD_HOSTS = [
    f"{LONG_LABEL}.example", "a..b", ".example", "a.b..", "x" * 254, "b" * 100_000,
    "ex ample.com", "host_with/slash", "back\\slash.example", "tab\there", "new\nline",
    "nul\0byte", "semi;colon", "quote'd", 'dq"uote', "emoji😀.example", "-lead.example",
    "trail-.example", "a.-b", "a.b-", "*.example", "a$b", "a@b", "%zone", "(paren)",
    "under..score_", "\u200bzero-width", "ünï..code", "日本..jp", "nonexistent.invalid",
]
BAD_RATES = ["-5", "-5M", "-1G", "0", "0k", "abc", "5X", "inf", "nan", "1e400", "1.6e14",
             "--", "5 M", "5MM", "M", "-inf", "1_000", "²"]
BAD_FRACTIONS = ["-5%", "-0.1", "101%", "1.5", "5", "abc", "%", "nan", "inf", "5%%", "²%",
                 "-inf"]
BAD_DURATIONS = ["-1", "0", "abc", "inf", "nan", "1e9", "1_0", "²", "-inf"]
BAD_COUNTS = ["-1", "0", "abc", "1.5", "²", "1e3", "99999999999", "+3", "0x10"]
BAD_CIDRS = ["10.0.0.1/8", "10.0.0.0/33", "300.0.0.0/8", "abc", "10.0.0.0/-1",
             "fe80::1/129", "1.2.3.4/24", "::1/127", "10.0.0.0/8/8", "10.0.0.0\0/8", ""]
BAD_PORTS = ["0", "65536", "-1", "abc", "²", "1.5", "99999", " "]
BAD_NODES = ["", " ", "a b", "dtn1 ", "n" * 65, "dtn/1", "dtn:9477", 'dt"n', "dtn\n", "nul\0",
             "dtn1,node=x", "dtn{1}", "émile", "\u200bdtn", "dtn😀", "x" * 100_000]


def host_cases() -> list[list[str]]:
    cases = []
    for host in BAD_HOSTS:
        cases += [
            ["advise", host, "--max-impact", "5%"],
            ["advise", f"{host}:5201", "--max-impact", "5%"],
            ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from", f"http://{host}:9090"],
            ["cap", "set", "--cgroup", "x", "--dest", "10.0.0.0/8", "--auto", host,
             "--max-impact", "5%"],
            ["export", "--listen", f"{host}:9477"],
            ["run", "--site", f"http://{host}:9090", "--", "true"],
            ["site", "--site", f"http://{host}:9090"],
        ]
    return cases


def value_cases() -> list[list[str]]:
    cases = []
    for r in BAD_RATES:
        cases += [["run", "--rate", r, "--", "true"],
                  ["cap", "set", "--cgroup", "x", "--dest", "10.0.0.0/8", "--mode", "pace",
                   "--rate", r],
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--capacity", r]]
    for f in BAD_FRACTIONS:
        cases += [["advise", "127.0.0.1", "--max-impact", f],
                  ["run", "--max-impact", f, "--", "true"],
                  ["watch", "--once", "--max-impact", f],
                  ["predict", "--probe", "1:50", "--probe", "10:200", "--max-impact", f]]
    for d in BAD_DURATIONS:
        cases += [["watch", "--once", "--interval", d],
                  ["export", "--interval", d],
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--max-probe-time", d],
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from-timeout", d]]
    for n in BAD_COUNTS:
        cases += [["advise", "127.0.0.1", "--max-impact", "5%", "--max-streams", n],
                  ["cap", "set", "--cgroup", "x", "--dest", "10.0.0.0/8", "--max-streams", n],
                  ["export", "--max-connections", n]]
    for c in BAD_CIDRS:
        cases += [["cap", "set", "--cgroup", "x", "--dest", c, "--max-streams", "2"],
                  ["paths", "forget", "--dest", c]]
    for p in BAD_PORTS:
        cases += [["advise", f"127.0.0.1:{p}", "--max-impact", "5%"],
                  *([["export", "--listen", f"127.0.0.1:{p}"]] if p != "0" else []),
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from",
                   f"http://127.0.0.1:{p}"]]
    for n in BAD_NODES:
        cases += [["export", "--node", n]]
    cases += [["paths", "forget", "--dest", "10.0.0.1/8", "--state-dir", "/etc/passwd"],
              ["watch", "--once", "--state-dir", "/etc/passwd"],
              ["watch", "--once", "--state-dir", ""],
              ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from", "ftp://x"],
              ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from", "http://"],
              ["advise", "127.0.0.1", "--max-impact", "5%", "--paths-from", "http://[::1"]]
    for node in ["", "a b", "x" * 65, "semi;colon", "new\nline", "ünï", "a/b", 'q"']:
        cases += [["run", "--site", "http://127.0.0.1:9090", "--node", node, "--", "true"],
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--node", node],
                  ["site", "--site", "http://127.0.0.1:9090", "--node", node]]
    for url in ["ftp://x", "http://", "http://[::1", "http://a b", "http://127.0.0.1:0"]:
        cases += [["run", "--site", url, "--", "true"], ["site", "--site", url],
                  ["advise", "127.0.0.1", "--max-impact", "5%", "--site", url]]
    for d in BAD_DURATIONS:
        cases.append(["site", "--site", "http://127.0.0.1:9090", "--timeout", d])
    return cases


def file_cases(tmp: Path) -> list[list[str]]:
    link = tmp / "planted.json"
    link.symlink_to(tmp / "victim")
    return [["run", f"--json={tmp / 'no-such-dir' / 'x.json'}", "--", "true"],
            ["run", f"--json={tmp}/", "--", "true"],
            ["run", f"--json={link}", "--", "true"],
            ["export", "--listen", "off", "--jsonl", str(link)],
            ["export", "--listen", "off", "--jsonl", str(tmp / "no-such-dir" / "x")],
            ["advise", "127.0.0.1", "--max-impact", "5%", "--plot", str(tmp / "x.jpg")]]


def test_there_are_many_cases(tmp_path: Path) -> None:
    assert len(host_cases()) + len(value_cases()) + len(file_cases(tmp_path)) >= 350


class NotRefused(Exception):
    pass


def _too_long(signum: int, frame: object) -> None:
    raise NotRefused("still running after 10 s: the case was taken as good input")


def run(argv: list[str]) -> tuple[int, str]:
    """main(argv), cut short (its clean-up running) should a case not be
    refused and start to serve or probe."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(10)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


@pytest.fixture
def private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Path memory and pins of the test's own: should a case not be refused,
    it finds nothing of the host's to change."""
    monkeypatch.setenv("TAMEBPF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TAMEBPF_PIN_DIR", str(tmp_path / "pins"))
    return tmp_path


def check(argv: list[str]) -> None:
    code, err = run(argv)
    last = err.rstrip("\n").rsplit("\n", 1)[-1]
    assert "Traceback" not in err, f"{argv!r}: a traceback: {err[-600:]}"
    assert code == 2, f"{argv!r}: exit {code}: {err[-300:]}"
    assert last.startswith("tamebpf"), f"{argv!r}: last line {last[:200]!r}"
    assert len(last) <= 400, f"{argv!r}: a {len(last)}-character line"


@pytest.mark.parametrize("argv", host_cases(), ids=lambda a: " ".join(a)[:60])
def test_bad_hosts(private: Path, argv: list[str]) -> None:
    check(argv)


@pytest.mark.parametrize("argv", value_cases(), ids=lambda a: " ".join(a)[:60])
def test_bad_values(private: Path, argv: list[str]) -> None:
    check(argv)


def test_bad_files(private: Path) -> None:
    for argv in file_cases(private):
        check(argv)
    assert not (private / "victim").exists(), "a file made through the planted link"
