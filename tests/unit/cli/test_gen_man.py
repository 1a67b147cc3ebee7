"""scripts/gen_man.py (argparse-manpage and shtab, from the parser): a man
page for every command and sub-command with every option and its help as a
reader sees them (rendered by groff), the top-level page naming every
command, an OVERHEAD section exactly for the commands that load BPF, pages
groff renders without warnings, and a bash completion that, run in bash,
completes every command, option and choice."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tamebpf.cli import build_parser, command_names

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gen_man.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_man", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_man"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gen_man = load_script()


def parsers(parser: argparse.ArgumentParser,
            words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                           argparse.ArgumentParser]]:
    """Every (sub-)command's words and parser, walked independently of gen_man."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*words, name))


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._SubParsersAction)]


def plain(troff: str) -> str:
    """Troff source as the text a reader sees (fonts and escapes removed)."""
    return re.sub(r"\\f[BIRP]", "", troff).replace("\\-", "-").replace("\\e", "\\")


def render(page: Path) -> str:
    """The page as a reader sees it: groff's text, in lines long enough that
    nothing is hyphenated, fonts left out, typographic dashes and quotes as
    ASCII."""
    groff = shutil.which("groff")
    assert groff, "groff renders the pages here: apt-get install groff-base"
    run = subprocess.run([groff, "-man", "-Tutf8", "-P-cbou", "-rLL=2000n", "-rHY=0",
                          str(page)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, f"groff on {page.name}: {run.stderr}"
    return run.stdout.translate({0x2010: "-", 0x2212: "-", 0x2018: "'", 0x2019: "'"})


def section(text: str, heading: str) -> str:
    """A rendered page's section: from its heading to the next one."""
    m = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    assert m, f"no {heading} section in:\n{text[:1500]}"
    return m[1]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen_man")
    run = subprocess.run([sys.executable, str(SCRIPT), "--man", str(out / "man"),
                          "--completion", str(out / "completion")],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT / "userspace"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, f"gen_man.py failed: {run.stderr}"
    return out


def test_a_page_per_command_with_every_option_and_its_help(generated: Path) -> None:
    expected = {"-".join(("tamebpf", *w)) + ".1": (w, p) for w, p in parsers(build_parser())}
    pages = {p.name for p in (generated / "man").iterdir()}
    assert pages == set(expected), (
        f"missing pages {sorted(set(expected) - pages)}, extra {sorted(pages - set(expected))}")
    assert {f"tamebpf-{c}.1" for c in command_names()} <= pages
    for page, (words, parser) in expected.items():
        title = page[:-2].upper().replace("-", "\\-")
        source = (generated / "man" / page).read_text()
        assert source.startswith(f'.TH {title} "1" '), f"{page}: {source.splitlines()[0]!r}"
        text = render(generated / "man" / page)
        command = " ".join(("tamebpf", *words))
        name = section(text, "NAME")
        assert flat(name).startswith(f"{page[:-2]} - "), f"{page}: NAME {name!r}"
        synopsis = flat(section(text, "SYNOPSIS"))
        assert synopsis.startswith(command + " "), f"{page}: SYNOPSIS {synopsis!r}"
        section(text, "DESCRIPTION")
        options = flat(section(text, "OPTIONS"))
        formatter = parser._get_formatter()
        for action in documented_actions(parser):
            assert action.help, f"{page}: {action.option_strings or action.dest} has no help"
            if isinstance(action, argparse._HelpAction):
                # argparse-manpage leaves --help out of OPTIONS; SYNOPSIS has it.
                assert "[-h]" in synopsis, f"{page}: no [-h] in SYNOPSIS {synopsis!r}"
                continue
            for opt in action.option_strings:
                assert re.search(rf"(^|[ ,]){re.escape(opt)}( |,|$)", options), (
                    f"{page}: option {opt} not in OPTIONS")
            if action.option_strings:  # argparse's usage names one of them
                assert any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", synopsis)
                           for o in action.option_strings), (
                    f"{page}: {action.option_strings} not in SYNOPSIS {synopsis!r}")
            help_text = flat(formatter._expand_help(action))
            assert "%(" not in help_text and "%%" not in help_text, f"{page}: {help_text!r}"
            where = options if action.option_strings else flat(text)
            assert help_text in where, (
                f"{page}: help of {action.option_strings or action.dest} missing: {help_text!r}")


def test_the_top_page_names_every_command(generated: Path) -> None:
    text = flat(render(generated / "man" / "tamebpf.1"))
    for command, _ in parsers(build_parser()):
        if command:
            assert f"tamebpf {' '.join(command)} " in text, (
                f"tamebpf.1 does not name 'tamebpf {' '.join(command)}'")
    also = flat(section(render(generated / "man" / "tamebpf.1"), "SEE ALSO"))
    assert also.split(", ") == sorted(f"tamebpf-{c}(1)" for c in command_names()), also


def test_overhead_section_exactly_for_commands_that_load_bpf(generated: Path) -> None:
    loads_bpf = set()
    for name in command_names():
        source = (ROOT / "userspace" / "tamebpf" / "commands" / f"{name}.py").read_text()
        if re.search(r"^from tamebpf\.kernel\b|^import tamebpf\.kernel\b|"
                     r"^from tamebpf\.commands\.watch import", source, re.M):
            loads_bpf.add(name)
    assert loads_bpf == set(gen_man.OVERHEAD), (
        f"commands using tamebpf.kernel {sorted(loads_bpf)} vs with an OVERHEAD section "
        f"{sorted(gen_man.OVERHEAD)}: update gen_man.OVERHEAD")
    perf = (ROOT / "docs" / "performance.md").read_text()
    for words, _ in parsers(build_parser()):
        page = (generated / "man" / ("-".join(("tamebpf", *words)) + ".1")).read_text()
        has = "\n.SH OVERHEAD\n" in page
        assert has == bool(words and words[0] in loads_bpf), (
            f"tamebpf {' '.join(words)}: OVERHEAD section {'present' if has else 'missing'}")
        if has:
            section = gen_man.OVERHEAD[words[0]]
            assert f"## {section}\n" in perf, f"docs/performance.md has no section {section!r}"
            assert "docs/performance.md" in page


def test_pages_render_without_warnings(generated: Path) -> None:
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff not installed")
    for page in sorted((generated / "man").iterdir()):
        run = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", str(page)],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode == 0 and not run.stderr.strip(), (
            f"groff warns on {page.name}: {run.stderr}")
    text = subprocess.run([groff, "-man", "-Tutf8", "-P-c", "-rLL=200n",
                           str(generated / "man" / "tamebpf-export.1")],
                          capture_output=True, text=True, timeout=30).stdout
    text = re.sub(r".\x08", "", text)
    assert "--listen ADDR:PORT" in text and "OVERHEAD" in text, f"rendered:\n{text[:2000]}"


def complete(completion: Path, *lines: str, cwd: Path | None = None) -> list[list[str]]:
    """COMPREPLY for each command line (the word being completed last, '' for
    a fresh word), from the generated function run in bash (in cwd)."""
    registered = re.search(r"^complete .*-F (\w+) tamebpf$", completion.read_text(), re.M)
    assert registered, "the completion file registers no function for tamebpf"
    script = [f"source {completion}"]
    for line in lines:
        argv = line.split(" ")
        arr = " ".join(f"'{w}'" for w in argv)
        script += [f"COMP_WORDS=({arr}); COMP_CWORD={len(argv) - 1}; COMPREPLY=()",
                   registered[1], 'printf "%s " "${COMPREPLY[@]}"; echo']
    run = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(script)],
                         capture_output=True, text=True, timeout=30, cwd=cwd)
    assert run.returncode == 0 and not run.stderr, f"bash: {run.stderr}"
    out = run.stdout.splitlines()
    assert len(out) == len(lines), f"expected {len(lines)} answers, got {out}"
    return [sorted(x.split()) for x in out]


def test_bash_completion_completes_commands_options_and_choices(generated: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    comp = generated / "completion" / "tamebpf"
    cases: list[tuple[str, list[str]]] = []
    for words, parser in parsers(build_parser()):
        prefix = " ".join(("tamebpf", *words))
        opts = [o for a in documented_actions(parser) for o in a.option_strings]
        cases.append((prefix + " -", sorted(opts)))
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            cases.append((prefix + " ", sorted(subs[0].choices)))
        for a in documented_actions(parser):
            if a.choices is not None and a.option_strings:
                cases.append((f"{prefix} {a.option_strings[-1]} ",
                              sorted(str(c) for c in a.choices)))
    # An option's value is not taken for a command; a partial word is narrowed.
    cases.append(("tamebpf export --jsonl watch --per", ["--per-flow"]))
    cases.append(("tamebpf --log-level info ca", ["cap"]))
    cases.append(("tamebpf --log-format json watch --on", ["--once"]))
    cases.append(("tamebpf cap set --cgroup cap --dest 10.0.0.0/8 --max-", ["--max-impact",
                                                                            "--max-streams"]))
    answers = complete(comp, *(c for c, _ in cases))
    wrong = [(line, want, got) for (line, want), got in zip(cases, answers, strict=True)
             if got != want]
    assert not wrong, "completion differs:\n" + "\n".join(
        f"  {line!r}: expected {want}, got {got}" for line, want, got in wrong)
    assert len(cases) > 20, f"only {len(cases)} completion cases"


def test_bash_completion_completes_file_names_where_a_file_goes(generated: Path,
                                                                 tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    for name in ("caps.toml", "flows.jsonl"):
        (tmp_path / name).write_text("")
    cases = {"tamebpf cap apply ": ["caps.toml", "flows.jsonl"],  # FILE
             "tamebpf export --jsonl f": ["flows.jsonl"],  # --jsonl FILE
             "tamebpf paths list --state-dir c": ["caps.toml"],  # --state-dir DIR
             "tamebpf watch --interval ": []}  # SEC: no file names
    answers = complete(generated / "completion" / "tamebpf", *cases, cwd=tmp_path)
    assert dict(zip(cases, answers, strict=True)) == cases


def test_troff_escapes() -> None:
    assert gen_man.esc(".x -y \\z\n'q") == "\\&.x \\-y \\ez\n\\&'q"
    assert plain(gen_man.esc("--per-flow a\\b")) == "--per-flow a\\b"


def test_needs_somewhere_to_write() -> None:
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=60, env={"PYTHONPATH": str(ROOT / "userspace")})
    assert run.returncode == 2 and "nothing to do" in run.stderr, run.stderr


def test_exit_status_section_on_every_page(generated: Path) -> None:
    for page in sorted((generated / "man").iterdir()):
        text = plain(page.read_text())
        assert "\n.SH EXIT STATUS\n" in text, f"{page.name}: no EXIT STATUS"
        section = text.split("\n.SH EXIT STATUS\n")[1].split("\n.SH ")[0]
        codes = re.findall(r"^\.TP\n(\d+)$", section, re.M)
        want = ["0", "1", "2", "3", "130"] if page.name in ("tamebpf.1", "tamebpf-advise.1") \
            else ["0", "1", "2", "130"]
        assert codes == want, f"{page.name}: exit codes {codes}, expected {want}"
    advise = plain((generated / "man" / "tamebpf-advise.1").read_text())
    assert "no advice is possible" in advise
