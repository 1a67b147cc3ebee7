"""Run one evaluation by name: `make eval PRESET=NAME [EVAL_ARGS=...]`.

  python -m tamebpf_eval.presets NAME [ARGS...]   run preset NAME, ARGS added last
  python -m tamebpf_eval.presets current [ARGS...] the current method's preset
  python -m tamebpf_eval.presets list             the presets, one line each

The presets are data (presets.toml beside this file): a module of this
package (or, with a dot, of another: tamebpf_bench.follow), its arguments
and the files it writes. The first preset is the current method: `make
eval` with no preset runs it (`current`). Run from the top of the
checkout: the evaluations read and write docs/ by relative path.
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

PRESETS = Path(__file__).with_name("presets.toml")


@dataclass(frozen=True)
class Preset:
    name: str
    about: str
    module: str
    args: tuple[str, ...]
    writes: tuple[str, ...]

    def argv(self, extra: list[str]) -> list[str]:
        """The command line this preset runs, `extra` last."""
        module = self.module if "." in self.module else f"tamebpf_eval.{self.module}"
        return [sys.executable, "-m", module, *self.args, *extra]


def load(path: Path = PRESETS) -> dict[str, Preset]:
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    return {name: Preset(name, t["about"], t["module"], tuple(t.get("args", ())),
                         tuple(t.get("writes", ())))
            for name, t in raw.items()}


CURRENT = "current"


def current(presets: dict[str, Preset]) -> str:
    """The current method's preset: the file's first."""
    return next(iter(presets))


def listing(presets: dict[str, Preset]) -> str:
    width = max(len(n) for n in presets)
    lines = [f"{n:<{width}}  {p.about}" for n, p in presets.items()]
    lines.append(f"(make eval PRESET=NAME [EVAL_ARGS=...]; make eval alone: "
                 f"{current(presets)}; the presets: {PRESETS.name}, tamebpf_eval/)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    presets = load()
    if not argv or argv[0] in ("list", "-h", "--help"):
        print(listing(presets))
        return 0 if argv else 2
    name, extra = argv[0], argv[1:]
    if name == CURRENT:
        name = current(presets)
    p = presets.get(name)
    if p is None:
        print(f"no eval preset {name!r}; the presets:\n{listing(presets)}", file=sys.stderr)
        return 2
    cmd = p.argv(extra)
    sys.stdout.flush()
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
