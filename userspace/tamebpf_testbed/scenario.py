"""Scenario files (TOML): a testbed configuration plus a sweep plan."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tamebpf.common.errors import UsageError
from tamebpf_testbed.config import RedParams, TestbedConfig


@dataclass(frozen=True)
class SweepPlan:
    streams: list[int]
    cross: list[int] = field(default_factory=lambda: [0])
    repeats: int = 3
    duration_s: float = 10.0
    warmup_s: float = 3.0
    cc: str = "reno"
    cross_cc: str | None = None
    window_kb: int | None = None
    cross_window_kb: int | None = None

    def __post_init__(self) -> None:
        if not self.streams or min(self.streams) < 1:
            raise UsageError("streams must be a non-empty list of numbers >= 1")
        if min(self.cross, default=0) < 0 or self.repeats < 1 or self.duration_s <= 0:
            raise UsageError("cross >= 0, repeats >= 1 and duration > 0 are required")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    testbed: TestbedConfig
    sweep: SweepPlan


def load(path: Path) -> Scenario:
    try:
        d: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"cannot read scenario {path}", str(err)) from err
    tb = dict(d.get("testbed", {}))
    red = tb.pop("red", None)
    try:
        cfg = TestbedConfig(**tb, red=RedParams(**red) if red else None)
        plan = SweepPlan(**d.get("sweep", {}))
    except TypeError as err:
        raise UsageError(f"bad key in scenario {path}", str(err)) from err
    return Scenario(name=str(d.get("name", path.stem)),
                    description=str(d.get("description", "")), testbed=cfg, sweep=plan)
