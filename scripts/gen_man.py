#!/usr/bin/env python3
"""Man pages (section 1) and a bash completion file, generated from the
argparse parser of `tamebpf` (tamebpf.cli.build_parser), so they cannot
drift from the options the command really takes.

    scripts/gen_man.py --man build/man --completion build/completion

writes one page per command and sub-command (tamebpf.1, tamebpf-watch.1,
tamebpf-cap-set.1, ...) and build/completion/tamebpf (source it, or install
it as /usr/share/bash-completion/completions/tamebpf).  `make man` runs it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field

# Commands that load BPF programs: the docs/performance.md section that
# measures what they cost.  tests/unit/cli/test_gen_man.py checks this against
# the command modules that use tamebpf.kernel.
OVERHEAD = {
    "watch": "flows: telemetry overhead",
    "flows": "flows: telemetry overhead",
    "export": "flows: telemetry overhead",
    "advise": "flows: telemetry overhead",
    "cap": "cap: connect() overhead",
    "run": "flows: telemetry overhead",  # and a pace cap's, as `cap` (docs/run.md)
}
OVERHEAD_TEXT = {
    "flows: telemetry overhead": (
        "{cmd} loads BPF programs into the kernel: at each reading an iterator over every TCP "
        "socket and one over the processes' open files (to name each flow's owner), and a "
        "tracepoint on TCP state changes that records closed flows. Nothing runs per "
        "packet; the cost is per reading and per connection state change."),
    "cap: connect() overhead": (
        "{cmd} attaches BPF programs to a cgroup: they run on every connect(), socket "
        "release and TCP state change of the cgroup's sockets (not per packet), and stay "
        "attached, pinned in bpffs, after tamebpf exits, until the last cap is removed."),
}
# Commands that also attach the ACK log (bpf/acktrain.bpf.c) for a while,
# and when: while attached it runs per received segment.
ACK_LOG = {
    "advise": "while it probes",
    "run": ("for the transfer's first 5 s, then, while the path has no capacity in "
            "memory, for a 2-s window on each new scout of the following cap (3 at most)"),
    "export": ("for a 2-s window on a following cap's new scout whose path has no capacity "
               "in memory, and with --ack-sampling for 5-s windows on transfers whose path "
               "has none, at most 3 an hour per path"),
}
ACK_LOG_TEXT = (
    "{cmd} also attaches a tracepoint that runs for every TCP segment the host receives "
    "{when}, and is detached after; its cost while attached is measured in "
    'docs/performance.md, section "export: ACK sampling window overhead".')
FILE_METAVARS = re.compile(r"FILE|PATH|DIR")


@dataclass
class Page:
    """One (sub-)command: its words after `tamebpf`, its parser, its summary."""

    words: tuple[str, ...]
    parser: argparse.ArgumentParser
    summary: str
    children: list[Page] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "-".join(("tamebpf", *self.words))

    @property
    def command(self) -> str:
        return " ".join(("tamebpf", *self.words))


def subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = (),
         summary: str = "") -> Iterator[Page]:
    """The page of parser, then those of its sub-commands, depth first."""
    page = Page(words, parser, summary or (parser.description or "").split(".")[0])
    sub = subparsers(parser)
    helps = {a.dest: a.help or "" for a in sub._choices_actions} if sub else {}
    yield page
    if sub is not None:
        for name, child in sub.choices.items():
            for p in walk(child, (*words, name), helps.get(name, "")):
                if p.words == (*words, name):
                    page.children.append(p)
                yield p


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._SubParsersAction)]


def expand_help(action: argparse.Action, prog: str) -> str:
    """The help text with argparse's %(name)s placeholders filled in."""
    if not action.help:
        return ""
    values: dict[str, object] = {"prog": prog}
    for key, val in vars(action).items():
        if val is argparse.SUPPRESS:
            continue
        values[key] = getattr(val, "__name__", val)
    if action.choices is not None:
        values["choices"] = ", ".join(str(c) for c in action.choices)
    return action.help % values


def metavar(action: argparse.Action) -> str:
    """What follows the option string ('' for flags)."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


# ---------------------------------------------------------------- troff


def esc(text: str) -> str:
    """Text safe in a troff line: backslashes, minus signs, leading dots."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def bold(text: str) -> str:
    return f"\\fB{esc(text)}\\fR"


def ital(text: str) -> str:
    return f"\\fI{esc(text)}\\fR"


def usage_item(action: argparse.Action) -> str:
    if not action.option_strings:
        return ital(metavar(action))
    opt = bold(action.option_strings[-1] if len(action.option_strings) == 1
               else min(action.option_strings, key=len))
    mv = metavar(action)
    return f"{opt} {ital(mv)}" if mv else opt


def synopsis(page: Page) -> list[str]:
    parser = page.parser
    grouped: dict[int, argparse._MutuallyExclusiveGroup] = {}
    for g in parser._mutually_exclusive_groups:
        for a in g._group_actions:
            grouped[id(a)] = g
    items: list[str] = []
    done: set[int] = set()
    for action in options(parser):
        if not action.option_strings:
            continue
        group = grouped.get(id(action))
        if group is not None:
            if id(group) in done:
                continue
            done.add(id(group))
            inner = " | ".join(usage_item(a) for a in group._group_actions)
            items.append(f"({inner})" if group.required else f"[{inner}]")
        else:
            items.append(usage_item(action) if action.required else f"[{usage_item(action)}]")
    for action in options(parser):
        if not action.option_strings:
            items.append(usage_item(action))
    sub = subparsers(parser)
    if sub is not None:
        items.append(f"{ital(str(sub.metavar or 'COMMAND'))} [{ital('OPTIONS')}]")
    return [f".B {esc(page.command)}", *items]


def paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def man_page(page: Page, version: str) -> str:
    parser = page.parser
    out = [f'.TH {page.name.upper()} 1 "" "tamebpf {version}" "tamebpf manual"',
           ".SH NAME", f"{esc(page.name)} \\- {esc(page.summary or page.command)}",
           ".SH SYNOPSIS", *synopsis(page), ".SH DESCRIPTION"]
    for p in paragraphs(parser.description or page.summary):
        out += [esc(p), ".PP"]
    out.pop()
    positionals = [a for a in options(parser) if not a.option_strings]
    if positionals:
        out.append(".SH ARGUMENTS")
        for a in positionals:
            out += [".TP", ital(metavar(a)), esc(expand_help(a, parser.prog) or "-")]
    out.append(".SH OPTIONS")
    for a in options(parser):
        if not a.option_strings:
            continue
        mv = metavar(a)
        head = ", ".join(bold(o) for o in a.option_strings) + (f" {ital(mv)}" if mv else "")
        out += [".TP", head, esc(expand_help(a, parser.prog) or "-")]
    if page.children:
        out.append(".SH COMMANDS")
        for c in page.children:
            out += [".TP", bold(c.words[-1]), f"{esc(c.summary)}; see \\fB{esc(c.name)}\\fR(1)."]
    if parser.epilog:
        out += epilog(parser.epilog)
    section = OVERHEAD.get(page.words[0]) if page.words else None
    if section is not None:
        out += [".SH OVERHEAD", esc(OVERHEAD_TEXT[section].format(cmd=page.command)),
                f'What it costs is measured in docs/performance.md, section "{esc(section)}"; '
                "\\fBmake bench\\fR reproduces the numbers."]
        when = ACK_LOG.get(page.words[0])
        if when is not None:
            out.append(esc(ACK_LOG_TEXT.format(cmd=page.command, when=when)))
    out += exit_status(page)
    parent = {"-".join(("tamebpf", *page.words[:-1]))} if page.words else set()
    also = sorted(({"tamebpf"} | parent | {c.name for c in page.children}) - {page.name})
    out += [".SH SEE ALSO", ",\n".join(f"\\fB{esc(n)}\\fR(1)" for n in also)]
    if page.words[:1] == ("export",):
        out[-1] += ";\ndocs/metrics.md (every metric), contrib/ (dashboard and alert rules)"
    return "\n".join(out) + "\n"


def exit_status(page: Page) -> list[str]:
    """EXIT STATUS from tamebpf.errors.EXIT_STATUS: 'no advice' only on the
    pages of the commands that advise (and the top-level page)."""
    from tamebpf.errors import EXIT_NO_ADVICE, EXIT_STATUS

    out = [".SH EXIT STATUS"]
    for code, meaning in EXIT_STATUS.items():
        if code == EXIT_NO_ADVICE and page.words not in ((), ("advise",)):
            continue
        out += [".TP", bold(str(code)), esc(meaning)]
    return out


def epilog(text: str) -> list[str]:
    """`examples:` blocks as EXAMPLES (kept verbatim), the rest as NOTES."""
    examples: list[str] = []
    notes: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = block.splitlines()
        if lines and re.fullmatch(r"examples?:", lines[0].strip()):
            # dedented as a block: a continued line keeps its indent
            body = textwrap.dedent("\n".join(lines[1:]))
            examples += [esc(x.rstrip()) for x in body.splitlines() if x.strip()]
        else:
            notes += [esc(" ".join(block.split())), ".PP"]
    out: list[str] = []
    if examples:
        out += [".SH EXAMPLES", ".nf", *examples, ".fi"]
    if notes:
        out += [".SH NOTES", *notes[:-1]]
    return out


# ---------------------------------------------------------------- bash


def sh_case(entries: dict[str, str]) -> str:
    lines = [f'        "{k}") echo "{v}" ;;' for k, v in entries.items() if v]
    return "\n".join(lines) if lines else "        *) ;;"


def completion(pages: list[Page]) -> str:
    commands, opts, valued, choices, files, pos_files = {}, {}, {}, {}, {}, {}
    for p in pages:
        path = " ".join(p.words)
        commands[path] = " ".join(c.words[-1] for c in p.children)
        acts = options(p.parser)
        opts[path] = " ".join(o for a in acts for o in a.option_strings)
        for a in acts:
            if not a.option_strings:
                if FILE_METAVARS.search(metavar(a)):
                    pos_files[path] = "1"
                continue
            for o in a.option_strings:
                if takes_value(a):
                    valued[f"{path}|{o}"] = "1"
                if a.choices is not None:
                    choices[f"{path}|{o}"] = " ".join(str(c) for c in a.choices)
                elif takes_value(a) and FILE_METAVARS.search(metavar(a)):
                    files[f"{path}|{o}"] = "1"
    return f"""\
# bash completion for tamebpf; generated by scripts/gen_man.py from the
# argparse parser (do not edit). Source it, or install it as
# /usr/share/bash-completion/completions/tamebpf.

_tamebpf_commands() {{
    case "$1" in
{sh_case(commands)}
    esac
}}

_tamebpf_options() {{
    case "$1" in
{sh_case(opts)}
    esac
}}

_tamebpf_choices() {{
    case "$1|$2" in
{sh_case(choices)}
    esac
}}

_tamebpf_takes_value() {{
    case "$1|$2" in
{sh_case(valued)}
    esac
}}

_tamebpf_wants_file() {{
    case "$1|$2" in
{sh_case(files)}
    esac
}}

_tamebpf_positional_file() {{
    case "$1" in
{sh_case(pos_files)}
    esac
}}

_tamebpf() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev="" path="" word skip="" i sub
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        if [[ -n $skip ]]; then
            skip=""
        elif [[ $word == -* ]]; then
            [[ $word != *=* && -n $(_tamebpf_takes_value "$path" "$word") ]] && skip=1
        else
            for sub in $(_tamebpf_commands "$path"); do
                if [[ $word == "$sub" ]]; then
                    path=${{path:+$path }}$word
                    break
                fi
            done
        fi
    done
    ((COMP_CWORD > 1)) && prev=${{COMP_WORDS[COMP_CWORD-1]}}
    if [[ $prev == -* && -n $(_tamebpf_takes_value "$path" "$prev") ]]; then
        local values
        values=$(_tamebpf_choices "$path" "$prev")
        if [[ -n $values ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$values" -- "$cur")
        elif [[ -n $(_tamebpf_wants_file "$path" "$prev") ]]; then
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        else
            COMPREPLY=()
        fi
    elif [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_tamebpf_options "$path")" -- "$cur")
    elif [[ -n $(_tamebpf_commands "$path") ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_tamebpf_commands "$path")" -- "$cur")
    elif [[ -n $(_tamebpf_positional_file "$path") ]]; then
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    else
        COMPREPLY=()
    fi
    return 0
}}

complete -F _tamebpf tamebpf
"""


# ---------------------------------------------------------------- main


def generate(man_dir: str | None, completion_dir: str | None) -> list[str]:
    """Write the pages and/or the completion file; the paths written."""
    from tamebpf import __version__
    from tamebpf.cli import build_parser

    pages = list(walk(build_parser()))
    written = []
    if man_dir:
        os.makedirs(man_dir, exist_ok=True)
        for p in pages:
            path = os.path.join(man_dir, p.name + ".1")
            with open(path, "w", encoding="utf-8") as f:
                f.write(man_page(p, __version__))
            written.append(path)
    if completion_dir:
        os.makedirs(completion_dir, exist_ok=True)
        path = os.path.join(completion_dir, "tamebpf")
        with open(path, "w", encoding="utf-8") as f:
            f.write(completion(pages))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--man", metavar="DIR", help="write the man pages here")
    ap.add_argument("--completion", metavar="DIR", help="write the bash completion file here")
    args = ap.parse_args(argv)
    if not args.man and not args.completion:
        ap.error("nothing to do: give --man DIR and/or --completion DIR")
    for path in generate(args.man, args.completion):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
