"""`tamebpf watch`: a live, top-like view of TCP transfers and the model's advice.

The loop here only reads the kernel (FlowReader), feeds the aggregator
(tamebpf.groups) and draws what tamebpf.present.watch renders.  Three
outputs: a curses screen (a terminal), refreshes printed one after another
(--iterations / --once, or when stdout is not a terminal), and JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import curses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from tamebpf.cap.view import read_caps
from tamebpf.common.lifecycle import terminate_as_exit
from tamebpf.common.records import FlowSource, ReaderStats
from tamebpf.common.values import parse_count, parse_duration
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.group import Group
from tamebpf.kernel.flows import FlowReader
from tamebpf.options import settings_from
from tamebpf.paths.store import state_dir
from tamebpf.present.group_json import group_to_json
from tamebpf.present.watch import (
    KEY_BACKSPACE,
    KEY_DOWN,
    KEY_ENTER,
    KEY_ESC,
    KEY_UP,
    ViewState,
    render,
)
from tamebpf.refresh import refresh_groups


def run(args: argparse.Namespace) -> int:
    args.interval = parse_duration(str(args.interval), "--interval", 0.01, 86400)
    if args.iterations is not None:
        args.iterations = parse_count(args.iterations, "--iterations", 1)
    agg = Aggregator(args.group_by, settings_from(args), retain_s=max(60.0, 30 * args.interval))
    state = ViewState(sort=args.sort, filter=args.filter, show_idle=args.all)
    directory = state_dir(args.state_dir)
    with terminate_as_exit(), FlowReader(cgroup=args.cgroup, netns=args.netns,
                                         verbose=args.verbose, command="watch") as reader:
        loop = Loop(reader, agg, args.interval, state_dir=directory)
        if args.json:
            return loop.json_lines(sys.stdout, args.iterations, state)
        if args.iterations is not None or not (sys.stdout.isatty() and sys.stdin.isatty()):
            return loop.printed(sys.stdout, args.iterations, state)
        return loop.screen(state)


class Loop:
    """Reads a snapshot every interval, on a fixed schedule: a refresh that
    runs late is not made up for, so the view never falls behind."""

    def __init__(self, source: FlowSource, agg: Aggregator, interval: float,
                 clock: Callable[[], float] = time.monotonic, state_dir: str | None = None
                 ) -> None:
        self.source, self.agg, self.interval, self.clock = source, agg, interval, clock
        self.state_dir = state_dir
        self.groups: list[Group] = []
        self.open_flows = 0
        self.stats: ReaderStats | None = None
        self.next = 0.0
        self.ticks = 0  # refreshes after the baseline

    def refresh(self) -> list[Group]:
        got = refresh_groups(self.agg, self.source, read_caps(self.state_dir))
        self.groups, self.open_flows = got.groups, got.open_flows
        self.stats = self.source.stats()
        return self.groups

    def start(self) -> None:
        """The first snapshot only sets the baseline for the rates: nothing
        is shown from it."""
        self.refresh()
        self.groups = []
        self.next = self.clock() + self.interval

    def due_in(self) -> float:
        return self.next - self.clock()

    def tick(self) -> None:
        self.refresh()
        self.ticks += 1
        self.next += self.interval
        now = self.clock()
        if self.next <= now:  # fell behind: skip the missed refreshes
            self.next = now + self.interval

    def wait(self) -> None:
        delay = self.due_in()
        if delay > 0:
            time.sleep(delay)

    def frame_lines(self, state: ViewState, width: int, height: int | None,
                    message: str = "") -> list[str]:
        shown = state.select(self.groups)
        frame = state.frame(
            shown, len(self.groups) - len(shown), self.open_flows, self.interval,
            time.strftime("%H:%M:%S"),
            "PROCESS" if self.agg.group_by == "comm" else "CGROUP",
            self.stats.closed_dropped if self.stats else 0, message)
        return render(frame, width, height)

    def printed(self, out: IO[str], iterations: int | None, state: ViewState) -> int:
        width = shutil.get_terminal_size((80, 24)).columns
        self.start()
        done = 0
        while iterations is None or done < iterations:
            self.wait()
            self.tick()
            if done:
                out.write("\n")
            out.write("\n".join(self.frame_lines(state, width, None)) + "\n")
            out.flush()
            done += 1
        return 0

    def json_lines(self, out: IO[str], iterations: int | None, state: ViewState) -> int:
        self.start()
        done = 0
        while iterations is None or done < iterations:
            self.wait()
            self.tick()
            now = time.time()
            for g in state.select(self.groups):
                out.write(json.dumps(group_to_json(g, now), allow_nan=False) + "\n")
            out.flush()
            done += 1
        return 0

    def screen(self, state: ViewState) -> int:
        os.environ.setdefault("ESCDELAY", "25")
        stdscr = curses.initscr()
        try:
            curses.noecho()
            curses.cbreak()
            stdscr.keypad(True)
            with contextlib.suppress(curses.error):
                curses.curs_set(0)
            waiting = "measuring the first interval..."
            self._draw(stdscr, state, waiting)
            self.start()
            while True:
                stdscr.timeout(max(0, int(self.due_in() * 1000)))
                ch = stdscr.getch()
                if ch != -1:
                    name = key_name(ch)
                    if name and not state.key(name, state.select(self.groups)):
                        return 0
                if self.due_in() <= 0:
                    if state.paused:
                        self.agg_only()
                    else:
                        self.tick()
                if self.ticks == 0:
                    self._draw(stdscr, state, waiting)
                elif ch != -1 or not state.paused:
                    self._draw(stdscr, state)
        except KeyboardInterrupt:
            return 0
        finally:
            with contextlib.suppress(curses.error):
                stdscr.keypad(False)
                curses.nocbreak()
                curses.echo()
            curses.endwin()

    def agg_only(self) -> None:
        """While paused: keep measuring (history, counters), keep the screen."""
        shown = self.groups
        self.tick()
        self.groups = shown

    def _draw(self, stdscr: Any, state: ViewState, message: str = "") -> None:
        height, width = stdscr.getmaxyx()
        lines = self.frame_lines(state, width, height, message)
        stdscr.erase()
        for y, line in enumerate(lines[:height]):
            attr = curses.A_BOLD if y == 0 else curses.A_REVERSE if y == 2 else curses.A_NORMAL
            with contextlib.suppress(curses.error):  # the bottom-right cell
                stdscr.addnstr(y, 0, line, width, attr)
        stdscr.refresh()


def key_name(ch: int) -> str | None:
    """A curses key code as ViewState.key() names it."""
    special = {
        curses.KEY_UP: KEY_UP, curses.KEY_DOWN: KEY_DOWN, curses.KEY_ENTER: KEY_ENTER,
        10: KEY_ENTER, 13: KEY_ENTER, 27: KEY_ESC, curses.KEY_BACKSPACE: KEY_BACKSPACE,
        127: KEY_BACKSPACE, 8: KEY_BACKSPACE,
    }
    if ch in special:
        return special[ch]
    if 32 <= ch < 127:
        return chr(ch)
    return None
