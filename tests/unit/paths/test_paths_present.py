"""How path memory is shown: `paths` (table, JSON) and advise's answer from
memory (the same ADVICE line as a probed advice)."""

from __future__ import annotations

import json
from dataclasses import replace

from tamebpf.estimate.record import Target
from tamebpf.model import Settings
from tamebpf.paths.entry import Window
from tamebpf.paths.recall import recall
from tamebpf.present.advice import range_text
from tamebpf.present.paths import age_text, entry_json, recalled_json, render_paths, render_recalled
from tests.unit.paths.test_paths_store import an_entry

TARGET = Target("198.18.3.2", 5201, "tb-snd", "cubic")


def test_age_in_words() -> None:
    assert [age_text(s) for s in (5, 65, 3725, 93600)] == ["5 s", "1 min 5 s", "1 h 2 min",
                                                           "1 d 2 h"]


def test_the_answer_from_memory_says_so_and_keeps_the_advice_line() -> None:
    e = an_entry(1000.0)
    r = recall(e, Settings(max_impact=0.05))
    text = render_recalled(r, TARGET, 1125.0)
    assert "from memory: probed with --capacity (settled probes) 2 min 5 s ago" in text
    assert "nothing was sent" in text
    adv = [ln for ln in text.splitlines() if ln.startswith("ADVICE:")]
    assert adv == [f"ADVICE: {r.advice.num_flows} stream{'s' if r.advice.num_flows > 1 else ''}"
                   f"{range_text(r.streams_range)}"
                   f", {r.advice.max_nondisruptive_thru:.2f} Mbit/s, impact on cross traffic "
                   f"{r.advice.cross_traffic_impact:.1%} (capacity fit, from memory)"]
    passive = render_recalled(recall(replace(e, source="passive", probe_kind="none"),
                                     Settings()), TARGET, 1125.0)
    assert "from memory: learned from transfers 2 min 5 s ago" in passive
    out = json.loads(json.dumps(recalled_json(r, TARGET, 1125.0), allow_nan=False))
    assert out["from_memory"] is True and out["memory"]["age_s"] == 125.0
    assert out["memory"]["source"] == "--capacity" and out["settings"]["max_impact"] == 0.05
    assert out["advice"]["num_flows"] == r.advice.num_flows
    assert len(out["curve"]) == 32 and out["refused"] is None


def test_paths_table_and_json() -> None:
    e = an_entry(1000.0)
    assert "no paths remembered in /x" in render_paths([], 1000.0, "/x")
    text = render_paths([e, replace(e, changed=True)], 1060.0, "/x")
    rows = text.splitlines()
    assert rows[0].split()[:3] == ["destination", "netns", "cc"]
    assert rows[1].split()[:3] == ["198.18.3.2/32", "tb-snd", "cubic"]
    assert rows[1].endswith("no") and rows[2].endswith("yes")
    assert "2 paths in /x" in rows[-1]
    j = json.loads(json.dumps(entry_json(e, 1060.0), allow_nan=False))
    assert j["age_s"] == 60.0 and j["fit"]["estimator"] == "capacity"
    assert j["advice"]["num_flows"] == e.advised_streams


def test_a_passive_answer_says_how_many_transfers_taught_it_over_how_long() -> None:
    e = replace(an_entry(1000.0), source="passive", probe_kind="none")
    r = replace(recall(e, Settings()), transfers=(3, 750.0))
    text = render_recalled(r, TARGET, 1125.0)
    assert "from memory: learned from 3 transfers over 12 min, the last 2 min 5 s ago" in text
    out = recalled_json(r, TARGET, 1125.0)
    assert out["from_memory"] is True and out["memory"]["source"] == "passive"
    assert (out["memory"]["transfers"], out["memory"]["learned_over_s"]) == (3, 750.0)
    assert out["memory"]["pool"] is None
    pooled = replace(e, windows=(Window(4, 30.0, 60.0),) * 9, spread=0.08)
    r = replace(recall(pooled, Settings()), transfers=(3, 750.0))
    text = render_recalled(r, TARGET, 1125.0)
    assert "learned from 3 transfers over 12 min (a pool of 9 settled windows, 9.0 min), " \
        "the last 2 min 5 s ago" in text, text
    memory = recalled_json(r, TARGET, 1125.0)["memory"]
    assert memory["pool"] == {"windows": 9, "seconds": 540.0}
    assert memory["advice"]["spread"] == 0.08
