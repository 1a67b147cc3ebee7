"""`tamebpf predict` end to end: main() in process, and the installed command."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tamebpf.cli import main

ROOT = Path(__file__).resolve().parents[3]
# The paper's worked example (docs/model.md section 4) is Eq 7, the partial model.
WORKED = ["predict", "--probe", "1:50", "--probe", "10:200", "--max-impact", "10%",
          "--model", "partial"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_worked_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *WORKED, "--json")
    assert code == 0, f"expected exit 0, got {code}: {err}"
    data = json.loads(out)
    adv = data["advice"]
    assert adv["num_flows"] == 2, f"expected 2 flows, got {adv}"
    assert round(adv["max_nondisruptive_thru_mbps"], 2) == 92.88, f"got {adv}"
    assert round(adv["cross_traffic_impact"], 4) == 0.0712, f"got {adv}"
    assert math.isclose(data["params"]["a"], 2.121212e-05, rel_tol=5e-5), data["params"]
    curve = {c["streams"]: c for c in data["curve"]}
    for n, bw, imp in [(2, 92.884, 0.0712), (5, 165.831, 0.3367), (30, 215.002, 0.8567)]:
        assert math.isclose(curve[n]["throughput_mbps"], bw, rel_tol=5e-5), curve[n]
        assert round(curve[n]["impact"], 4) == imp, f"impact expected {imp}, got {curve[n]}"
    assert len(data["curve"]) == 32, f"expected 32 points, got {len(data['curve'])}"


def test_percentages_and_fractions_agree(capsys: pytest.CaptureFixture[str]) -> None:
    _, pct, _ = run(capsys, *WORKED, "--gain-threshold", "2%", "--json")
    _, frac, _ = run(
        capsys,
        "predict",
        "--probe",
        "1:50",
        "--probe",
        "10:200",
        "--max-impact",
        "0.1",
        "--gain-threshold",
        "0.02",
        "--model",
        "partial",
        "--json",
    )
    assert pct == frac, "5% and 0.05 style arguments gave different output"


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *WORKED, "--max-streams", "4")
    assert code == 0, f"expected exit 0, got {code}"
    assert "      2       92.88    7.12%  <- advice" in out, f"advice row missing:\n{out}"
    assert "advice: 2 streams, 92.88 Mbit/s" in out, f"advice line missing:\n{out}"


def test_full_and_linear_models(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "predict",
        "--probe",
        "1:50",
        "--probe",
        "5:165.83",
        "--probe",
        "10:200",
        "--model",
        "full",
        "--json",
    )
    assert code == 0 and json.loads(out)["model"] == "full-order-2", out[:200]
    code, out, _ = run(capsys, *WORKED, "--model", "linear", "--json")
    assert code == 0 and json.loads(out)["model"] == "linear", out[:200]


def test_degenerate_probes_warn_not_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "predict", "--probe", "1:50", "--probe", "10:40", "--json")
    data = json.loads(out)
    assert code == 0 and data["warnings"], f"expected a warning, got {data['warnings']}"
    assert data["advice"]["num_flows"] == 1, f"expected 1 flow, got {data['advice']}"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--probe", "1:50"], "different stream counts"),
        (["--probe", "1:50", "--probe", "1:80"], "different stream counts"),
        (["--probe", "1:50", "--probe", "10:abc"], "'10:abc'"),
        (["--probe", "1:50", "--probe", "10"], "'10'"),
        (["--probe", "0:50", "--probe", "10:200"], "'0:50'"),
        (["--probe", "1:-5", "--probe", "10:200"], "'1:-5'"),
        (["--probe", "1:inf", "--probe", "10:200"], "'1:inf'"),
        (["--probe", "1:50", "--probe", "10:200", "--max-impact", "5"], "'5'"),
        (["--probe", "1:50", "--probe", "10:200", "--max-impact=-1%"], "'-1%'"),
        (["--probe", "1:50", "--probe", "10:200", "--gain-threshold", "x"], "'x'"),
        (["--probe", "1:50", "--probe", "10:200", "--max-streams", "0"], "'0'"),
        (["--probe", "1:50", "--probe", "10:200", "--max-streams", "3.5"], "'3.5'"),
        (["--probe", "1:50", "--probe", "10:200", "--model", "full"], "3 different"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], names: str
) -> None:
    code, out, err = run(capsys, "predict", *args)
    assert code == 2, f"expected exit 2, got {code} (stderr {err!r})"
    assert out == "", f"expected no stdout, got {out!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tamebpf: "), f"expected one line, got {err!r}"
    assert names in lines[0], f"expected {names!r} in {lines[0]!r}"


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--probe", "1:50", "--probe", "10:200", "--model", "cubic"])
    assert exc.value.code == 2, f"expected exit 2, got {exc.value.code}"
    capsys.readouterr()


def test_installed_command_json() -> None:
    exe = Path(sys.executable).parent / "tamebpf"
    if not exe.exists():
        exe = ROOT / ".venv" / "bin" / "tamebpf"
    proc = subprocess.run(
        [str(exe), *WORKED, "--json"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr}"
    adv = json.loads(proc.stdout)["advice"]
    got = (adv["num_flows"], round(adv["max_nondisruptive_thru_mbps"], 2))
    assert got == (2, 92.88), f"expected (2, 92.88), got {got}"
    assert round(adv["cross_traffic_impact"], 4) == 0.0712, f"got {adv}"


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0, f"expected exit 0, got {exc.value.code}"
    assert "(default 10%)" in out and "(default 1%)" in out, f"defaults missing:\n{out}"
