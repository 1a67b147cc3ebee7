"""What the help of the two commands people script says: EXAMPLES in
`advise --help` and `cap set --help` (and so in their man pages), and one
sentence on the advice's accuracy, the same in `advise --help` and the
README's advise row, linking docs/accuracy.md, with no draw statistics."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tamebpf.cli import main
from tamebpf.parsers.advise import ACCURACY

ROOT = Path(__file__).resolve().parents[3]


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(("argv", "example"), [
    (["advise"], "tamebpf advise dtn.example.org --max-impact 5% --format globus-url-copy"),
    (["cap", "set"], "tamebpf cap set --cgroup dtn.slice --dest 198.18.0.0/15 --max-streams 8"),
])
def test_examples_in_help(argv: list[str], example: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(argv, capsys)
    examples = text.split("\nexamples:\n")
    assert len(examples) == 2, f"{' '.join(argv)} --help has no examples: block:\n{text}"
    assert any(line.startswith(f"  sudo {example}") for line in examples[1].splitlines()), (
        f"the examples should keep their lines as written, with {example!r}:\n{examples[1]}")


def test_examples_become_man_page_sections(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_man.py"), "--man",
                    str(tmp_path)], check=True, capture_output=True, timeout=60)
    for page, example in (("tamebpf-advise.1", "--format globus-url-copy --concurrency 4"),
                          ("tamebpf-cap-set.1", "--max-streams 8")):
        man = (tmp_path / page).read_text()
        assert ".SH EXAMPLES" in man, f"{page} has no EXAMPLES section"
        section = man.split(".SH EXAMPLES")[1].split(".SH ")[0]
        assert example.replace("-", r"\-") in section, f"{page}'s EXAMPLES: {section}"


def test_accuracy_sentence_in_help_and_readme(capsys: pytest.CaptureFixture[str]) -> None:
    assert "docs/accuracy.md" in ACCURACY
    sentence = ACCURACY.split(";")[0]
    assert ". " not in ACCURACY.rstrip(".") and sentence.startswith("Accuracy: "), (
        f"one sentence, please: {sentence!r}")
    text = " ".join(help_text(["advise"], capsys).split())
    assert ACCURACY in text, "advise --help should say how accurate the advice is"
    readme = (ROOT / "README.md").read_text()
    row = [line for line in readme.splitlines() if line.startswith("| `sudo tamebpf advise")]
    assert len(row) == 1, "the README's Commands table should have one advise row"
    assert sentence in row[0] and "(docs/accuracy.md)" in row[0], row[0]
    assert "(docs/advise.md)" in row[0], row[0]
    assert len(row[0].split()) < 80, f"the advise row should be a line and a link: {row[0]}"


def test_no_draw_statistics_in_advise_help(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(help_text(["advise"], capsys).split())
    for pattern in (r"\bdraw\b", r"\d+ of \d+", r"\bmedian\b", r"\bmean\b"):
        found = re.search(pattern, text, re.IGNORECASE)
        assert found is None, f"advise --help quotes evaluation statistics: {found!r} in {text}"
