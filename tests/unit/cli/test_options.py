"""The shared command-line value parsers, and what every command does with a
bad value: one line naming it, exit 2."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.cli import main
from tamebpf.common.errors import UsageError
from tamebpf.common.values import IPERF3_PORT, parse_host_port
from tamebpf.options import dump_json_objects, parse_fraction, parse_rate_mbps


@pytest.mark.parametrize(("text", "want"), [
    ("host", ("host", IPERF3_PORT)), ("host:5301", ("host", 5301)),
    ("10.0.0.1:7", ("10.0.0.1", 7)), ("[2001:db8::1]:5202", ("2001:db8::1", 5202)),
    ("[2001:db8::1]", ("2001:db8::1", IPERF3_PORT)), ("2001:db8::1", ("2001:db8::1", IPERF3_PORT)),
])
def test_host_port_forms(text: str, want: tuple[str, int]) -> None:
    assert parse_host_port(text, "--auto", default_port=IPERF3_PORT) == want


@pytest.mark.parametrize("bad", ["host:0", "host:x", ":5201", "host:70000", "host:",
                                 "[2001:db8::1", "[2001:db8::1]x", "[2001:db8::1]:"])
def test_host_port_refuses_and_names_the_option(bad: str) -> None:
    with pytest.raises(UsageError, match="--auto"):
        parse_host_port(bad, "--auto", default_port=IPERF3_PORT)


def test_listen_form_allows_any_host_and_port_zero() -> None:
    assert parse_host_port(":0", "--listen", empty_host="0.0.0.0", port_zero=True) == \
        ("0.0.0.0", 0)
    with pytest.raises(UsageError, match="no port"):
        parse_host_port("127.0.0.1", "--listen", empty_host="0.0.0.0", port_zero=True)


@pytest.mark.parametrize(("text", "want"), [
    ("100", 100.0), ("9.4G", 9400.0), ("500k", 0.5), ("1.5Gbit/s", 1500.0), ("10gbps", 1e4)])
def test_rates_take_units(text: str, want: float) -> None:
    assert parse_rate_mbps(text, "--capacity") == pytest.approx(want)


@pytest.mark.parametrize("bad", ["", "x", "0", "-5", "G", "inf", "nan", "10MB"])
def test_rates_refuse_nonsense(bad: str) -> None:
    with pytest.raises(UsageError, match="--capacity"):
        parse_rate_mbps(bad, "--capacity")


@pytest.mark.parametrize(("text", "want"), [("5%", 0.05), ("0.05", 0.05), ("100%", 1.0)])
def test_fractions(text: str, want: float) -> None:
    assert parse_fraction(text, "--max-impact") == pytest.approx(want)


@pytest.mark.parametrize("bad", ["5", "-1%", "x", "nan"])
def test_fractions_refuse(bad: str) -> None:
    with pytest.raises(UsageError, match="--max-impact"):
        parse_fraction(bad, "--max-impact")


def test_probe_rate_takes_the_same_units_as_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--probe", "1:0.94G", "--probe", "10:9.4G", "--json"]) == 0
    probes = json.loads(capsys.readouterr().out)["probes"]
    assert [p["throughput_mbps"] for p in probes] == [pytest.approx(940.0), pytest.approx(9400.0)]


@pytest.mark.parametrize("argv", [
    ["predict", "--probe", "1:50", "--probe", "10:200", "--bogus"],
    ["cap", "list", "--bogus"],
    ["advise", "198.18.3.2", "--max-impact", "5%", "--bogus"],
])
def test_unknown_option_gets_the_commands_own_usage(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    command = " ".join(argv[:2] if argv[0] == "cap" else argv[:1])
    assert exc.value.code == 2, err
    assert f"usage: tamebpf {command} " in err and "--bogus" in err, err


@pytest.mark.parametrize(("argv", "names"), [
    (["advise", "[2001:db8::1]:99999", "--max-impact", "5%"], "99999"),
    (["advise", "host", "--max-impact", "5"], "'5'"),
    (["advise", "host", "--max-impact", "5%", "--capacity", "fast"], "'fast'"),
    (["predict", "--probe", "1:50", "--probe", "10:fast"], "'10:fast'"),
    (["cap", "set", "--cgroup", "/x", "--dest", "10.0.0.0/8", "--auto", "[2001:db8::1]:0",
      "--max-impact", "5%"], "--auto"),
])
def test_bad_values_are_one_line_and_exit_2(
        argv: list[str], names: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err


def test_json_layout_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--probe", "1:50", "--probe", "10:200", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('{\n "') and out.endswith("}\n"), out[:40]


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from tamebpf.present.plot import check_path

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(UsageError, match=r"tamebpf\[plot\]"):
        check_path("advice.png")


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**64, max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    # NULs, the separator the writer splits on, and brackets around them.
    st.text(alphabet=st.sampled_from(["a", "\0", "]", "[", '"', "\\", "%", "s", "é", "\n"]),
            max_size=8),
)


@given(st.integers(min_value=1, max_value=5).flatmap(
    lambda width: st.tuples(
        st.lists(st.text(max_size=4), min_size=width, max_size=width, unique=True),
        st.lists(st.tuples(*[_SCALARS] * width), max_size=12))),
    st.integers(min_value=1, max_value=5))
def test_json_objects_are_what_json_writes_for_each(
        case: tuple[list[str], list[tuple[object, ...]]], chunk: int) -> None:
    """flows --json's writer gives json.dumps's text for every object, one a
    line, whatever the values hold and wherever the chunks end."""
    keys, rows = case
    out = io.StringIO()
    dump_json_objects(keys, rows, out, chunk=chunk)
    want = [json.dumps(dict(zip(keys, row, strict=True))) for row in rows]
    text = out.getvalue()
    assert text == "[" + ",".join("\n" + line for line in want) + "\n]\n"
    assert json.loads(text) == [dict(zip(keys, row, strict=True)) for row in rows]
