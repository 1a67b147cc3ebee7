"""The README's main job (make run) in its non-interactive mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

# The checkout's userspace first, as `make run` has it (tamebpf_eval.demo).
USERSPACE = Path(__file__).resolve().parents[2] / "userspace"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(USERSPACE), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_demo_advises_watches_and_cleans_up() -> None:
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.split())
    # The 16 streams run from about 8.5 s after watch starts (2 s, then 4
    # streams for 6 s: tamebpf_eval/demo.py). Refresh k covers the second up
    # to L + k, L >= 1 s being watch's start-up: 12 refreshes see them in the
    # 9th to 12th even where L is shortest, and in more the slower it is.
    res = subprocess.run([sys.executable, "-m", "tamebpf_eval.demo", "--batch",
                          "--refreshes", "12"],
                         capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
                         env=ENV)
    out = res.stdout
    assert res.returncode == 0, f"demo failed ({res.returncode}): {res.stderr[-2000:]}"
    assert "ADVICE:" in out, "no advice printed"
    advice = [ln for ln in out.splitlines() if ln.startswith("ADVICE:")]
    assert len(advice) == 3 and advice[1].endswith("from memory)"), advice
    assert advice[1].split(",")[0] == advice[0].split(",")[0], advice
    watch_rows = [ln for ln in out.splitlines() if ln.startswith(" iperf3 ")]
    # COMM DESTINATION DIR STRMS ...
    assert any(ln.split()[3].rstrip("!") == "16" for ln in watch_rows), (
        f"watch never showed the 16-stream transfer: {watch_rows[-3:]}")
    assert out.rstrip().endswith("done: nothing left behind")
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout.split()
    left = [ns for ns in after if ns.startswith("demo") and ns not in before]
    assert not left, f"demo left namespaces {left}"
