"""advise --reverse: a download's probe samples, its congestion control and
path key, and how its advice is printed."""

from __future__ import annotations

import json
import logging

import pytest

from tamebpf.advise.probes import _check_congestion, _received_point, probe_congestion
from tamebpf.common.records import RxCounts
from tamebpf.estimate.advice import build
from tamebpf.estimate.record import Target
from tamebpf.model import Settings
from tamebpf.paths.entry import REMOTE_CC
from tamebpf.paths.where import path_key
from tamebpf.present.advice import render, to_json
from tamebpf.present.toolflags import tool_flags
from tests.unit.advise.test_advise_report import link_pairs, probe, with_acks
from tests.unit.groups.test_groups_fakes import make_flow

DOWN = Target("198.18.3.2", 5201, "tb-snd", "system", "receive")
UP = Target("198.18.3.2", 5201, "tb-snd", "system", "send")


def test_a_received_sample_counts_what_arrived() -> None:
    f = make_flow(1, bytes_received=9_000_000, data_segs_in=6200, bytes_acked=1,
                  data_segs_out=3, total_retrans=2, srtt_us=40_000, rcv_rtt_us=52_000)
    p = _received_point(f, 1.5, RxCounts(segs=6200, episodes=3, fills=17, dups=1), "cubic")
    assert (p.bytes_acked, p.data_segs_out) == (9_000_000, 6200), p
    # the sender's retransmissions as the holes filled, its loss events as the holes
    assert (p.total_retrans, p.cong_events) == (17, 3), p
    assert p.srtt_us == 52_000, "the receiver's RTT, not the handshake's srtt"
    assert not p.slow_start and p.congestion_control == "cubic"


def test_a_received_sample_before_any_loss_is_slow_start() -> None:
    f = make_flow(1, bytes_received=100_000, data_segs_in=70, rcv_rtt_us=None)
    p = _received_point(f, 0.2, None, None)
    assert p.slow_start and p.total_retrans == 0 and p.cong_events == 0
    assert p.srtt_us == f.srtt_us, "no receiver RTT yet: the handshake's"


def test_a_download_runs_the_servers_congestion_control() -> None:
    assert probe_congestion(DOWN)[0] == REMOTE_CC
    asked = Target("h", 5201, None, "reno", "receive")
    assert probe_congestion(asked) == ("reno", "--congestion, asked of the server")


def test_a_server_that_ran_another_cc_is_said(caplog: pytest.LogCaptureFixture) -> None:
    asked = Target("h", 5201, None, "reno", "receive")
    with caplog.at_level(logging.WARNING, logger="tamebpf"):
        _check_congestion({"server_congestion": "reno"}, asked)
        assert caplog.text == ""
        _check_congestion({"server_congestion": "cubic"}, asked)
    assert "sent with cubic, not the reno asked" in caplog.text, caplog.text


def test_downloads_are_their_own_path() -> None:
    down, up = path_key("198.18.3.2", None, "bbr", "receive"), path_key("198.18.3.2", None, "bbr")
    assert down.direction == "receive" and up.direction == "send", (down, up)
    assert down.congestion == REMOTE_CC, "the senders' cc is not known to transfers that teach it"
    assert down != up


def test_download_advice_says_so_in_text_and_json() -> None:
    probes = [with_acks(probe(1, 50.0), link_pairs(200.0)), probe(10, 180.0, loss=0.003)]
    down = build(DOWN, probes, Settings(max_impact=0.05))
    up = build(UP, probes, Settings(max_impact=0.05))
    assert render(down).startswith("advice for downloads from 198.18.3.2:5201 (from netns")
    assert render(up).startswith("advice for 198.18.3.2:5201")
    out, out_up = json.loads(json.dumps(to_json(down))), to_json(up)
    assert (out["direction"], out_up["direction"]) == ("receive", "send")
    assert out["target"]["direction"] == "receive"
    assert out["capacity_estimate"]["method"] == "data-spacing", out["capacity_estimate"]
    assert out_up["capacity_estimate"]["method"] != "data-spacing"
    assert "data segment pairs" in render(down) and "ACK pairs" in render(up)
    spread = build(DOWN, [with_acks(probe(1, 50.0), [10.0 + i / 10 for i in range(300)]),
                          probes[1]], Settings(max_impact=0.05))
    reason = spread.capacity_estimate.reason if spread.capacity_estimate else None
    assert reason and "ACK" not in reason and "data" in reason, reason
    # the same model: the advice does not depend on which way the data went
    assert out["advice"] == out_up["advice"]


@pytest.mark.parametrize(("tool", "download"), [
    ("iperf3", "-R -P 5\n"),
    ("fdt", "-pull -P 5\n"),
    # these name a download by its source and destination: the same flags
    ("globus-url-copy", "-p 5\n"),
    ("rclone", "--transfers 1 --multi-thread-streams 5\n"),
    ("xrdcp", "--streams 5\n"),
    ("shell", "5\n"),
])
def test_download_flags(tool: str, download: str) -> None:
    assert tool_flags(tool, 5, download=True) == download
