"""Following as the user asks for it and sees it: the caps-file key, the
CLI's checks, and `cap list`'s line (docs/paths.md, "Caps that follow the
path")."""

from __future__ import annotations

import argparse

import pytest

from tamebpf.cap.book import FollowChange, FollowSpec
from tamebpf.cap.load import parse_capfile
from tamebpf.cap.show import follow_line, render_table
from tamebpf.commands.cap import spec_from_args
from tamebpf.common.errors import UsageError
from tamebpf.paths.entry import PathKey
from tests.unit.groups.test_groups_fakes import cap_record

AUTO = '''
[[cap]]
cgroup = "transfer.slice"
dest = "192.0.2.7/32"
mode = "pace"
auto = "192.0.2.7"
max_impact = "10%"
'''


def test_the_caps_file_key() -> None:
    (spec,) = parse_capfile(AUTO + "follow = true\n", "caps.toml")
    assert spec.follow and spec.mode == "pace"
    (spec,) = parse_capfile(AUTO, "caps.toml")
    assert not spec.follow
    (refuse,) = parse_capfile(AUTO.replace('mode = "pace"', 'mode = "refuse"')
                              + "follow = true\n", "caps.toml")
    assert refuse.follow and refuse.mode == "refuse"
    with pytest.raises(UsageError, match="follow must be true or false"):
        parse_capfile(AUTO + 'follow = "yes"\n', "caps.toml")
    fixed = '[[cap]]\ncgroup = "a"\ndest = "192.0.2.7/32"\nmode = "pace"\nrate = "1G"\n'
    with pytest.raises(UsageError, match="follow = true needs auto"):
        parse_capfile(fixed + "follow = true\n", "caps.toml")


def args(**kw: object) -> argparse.Namespace:
    base = {"cgroup": "transfer.slice", "dest": "192.0.2.7/32", "max_streams": None,
            "auto": None, "max_impact": None, "congestion": "system", "mode": "pace",
            "rate": None, "all_processes": False, "follow": True}
    return argparse.Namespace(**{**base, **kw})


def test_the_cli_flag() -> None:
    spec = spec_from_args(args(auto="192.0.2.7", max_impact="10%"))
    assert spec.follow
    with pytest.raises(UsageError, match="--follow needs --auto HOST"):
        spec_from_args(args(rate="1G"))


def following(**kw: object) -> FollowSpec:
    spec = FollowSpec("/b", "10.0.0.0/8", PathKey("10.0.0.2/32", "host", "cubic"), 0.1,
                      "dtn2", 100.0, **kw)  # type: ignore[arg-type]
    return spec


def test_cap_list_shows_the_target_the_agent_set() -> None:
    cap = cap_record(id=2, cgroup="/b", dest="10.0.0.0/8", mode="pace",
                     rate_bytes_per_s=10**6, streams=2, refused=0)
    spec = following(updated=1000.0, competing_flows=2.1).changed(
        FollowChange(990.0, 8.0, 52.31, 2.1, "test"))
    text = render_table([cap], {}, [spec])
    assert "52.31 Mbit/s" in text and "8 Mbit/s" not in text
    line = follow_line(spec, now=1010.0)
    assert line == ("follows dtn2 (cubic, max impact 10%): target 52.31 Mbit/s, 1 change, "
                    "the last 20 s ago; about 2.1 competing flows")
    assert "is 'tamebpf export' running?" in follow_line(following(), now=1010.0)
    stale = follow_line(spec, now=1000.0 + 600)
    assert "last read 10 min ago" in stale
