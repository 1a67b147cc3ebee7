"""docs/deploy.md: the one page an operator deploys from, linked from the
README, with every step the issue names, and the flags and exit codes the
code really has."""

from __future__ import annotations

import re
from pathlib import Path

from tamebpf.common.errors import EXIT_STATUS
from tamebpf.present.toolflags import FORMATS, TOOLS, tool_flags

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = (ROOT / "docs" / "deploy.md").read_text()


def test_linked_from_the_readme() -> None:
    docs = (ROOT / "README.md").read_text().split("## Documentation")[1]
    assert "`docs/deploy.md`" in docs


def test_every_step_has_a_section() -> None:
    heads = re.findall(r"^## (.*)$", DEPLOY, re.M)
    for want in ("Install", "peer", "Caps at boot", "Metrics", "Removal", "verified"):
        assert any(want in h for h in heads), f"no section for {want!r}: {heads}"
    assert "iperf3 -s" in DEPLOY and "firewall" in DEPLOY and "nft " in DEPLOY


def test_exit_codes_are_the_codes() -> None:
    documented = {int(c) for c in re.findall(r"\*\*(\d+)\*\*", DEPLOY)}
    assert documented == set(EXIT_STATUS), (documented, set(EXIT_STATUS))


def test_format_flags_are_what_advise_prints() -> None:
    for tool in FORMATS:
        if tool == "shell":
            continue
        flags = tool_flags(tool, 7).strip().replace("7", "N")
        assert f"`{flags}`" in DEPLOY, f"{tool}: `{flags}` not in docs/deploy.md"


def test_concurrency_flags_are_what_advise_prints() -> None:
    text = " ".join(DEPLOY.split())
    for tool, spec in TOOLS.items():
        if spec.concurrent is not None:
            flags = spec.concurrent.format(k="K", n="N")
            assert f"`{flags}`" in text, f"{tool}: `{flags}` not in docs/deploy.md"
    example = tool_flags("globus-url-copy", 10, concurrency=4).strip()
    assert f"`{example}`" in text, f"docs/deploy.md's example should be `{example}`"
