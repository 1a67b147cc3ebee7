"""Path memory's pure side: an advice stored and recalled gives, for any
limits, the advice the probes themselves give (paths/recall.py), and the
rules for when an entry may answer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tamebpf.estimate.advice import build, streams_range
from tamebpf.estimate.record import AdviseResult
from tamebpf.model import Settings
from tamebpf.paths.entry import FitData, PathEntry, PathKey
from tamebpf.paths.recall import entry_from_advice, expected_mbps, recall, recall_curve, usable
from tamebpf.paths.valid import checked_fit
from tests.unit.advise.test_advise_report import TARGET, probe

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
SETTINGS = [Settings(max_impact=x, max_streams=m)
            for x in (0.02, 0.05, 0.10, 0.30, 0.60) for m in (4, 32)]


def results(settings: Settings) -> dict[str, AdviseResult]:
    """One advice per estimator: the free throughput fit, the fit anchored
    on a given capacity, and the capacity share of BBR probes."""
    return {
        "throughput": build(TARGET, [probe(1, 50.0), probe(10, 200.0)], settings),
        "capacity": build(TARGET, [probe(1, 40.0), probe(10, 150.0)], settings,
                          capacity_mbps=200.0),
        "share": build(TARGET, [probe(1, 60.0, cc="bbr"), probe(10, 150.0, cc="bbr")],
                       settings, capacity_mbps=200.0),
    }


@pytest.mark.parametrize("estimator", ["throughput", "capacity", "share"])
def test_a_recalled_entry_advises_as_the_probes_do_for_any_limits(estimator: str) -> None:
    stored = entry_from_advice(results(Settings(max_impact=0.10))[estimator], KEY, 1000.0,
                               "settled")
    assert stored is not None and stored.fit.estimator == estimator
    # Through the JSON the store keeps, as a later process reads it.
    fit = checked_fit(stored.fit.to_json())
    assert isinstance(fit, FitData), fit
    stored = replace(stored, fit=fit)
    seen = set()
    for s in SETTINGS:
        direct = results(s)[estimator].prediction
        again = recall(stored, s)
        assert again.advice == direct.advice, s
        assert again.curve == direct.curve, s
        seen.add(again.advice.num_flows)
    assert len(seen) >= 3, f"the limits should move the advice: {seen}"


def test_the_entry_keeps_what_the_advice_rests_on() -> None:
    r = results(Settings(max_impact=0.10))["capacity"]
    e = entry_from_advice(r, KEY, 1000.0, "quick")
    assert e is not None and r.capacity is not None
    assert e.source == "--capacity" and e.link_mbps == 200.0
    assert e.capacity_mbps == r.capacity.goodput_mbps
    assert e.competing_flows == pytest.approx(r.capacity.competing_flows)
    assert e.advised_streams == r.prediction.advice.num_flows
    assert e.max_impact == 0.10 and e.rtt_ms == 20.0 and e.probe_kind == "quick"
    assert e.impact_low is not None and e.impact_high is not None
    assert e.impact_low <= e.advised_impact <= e.impact_high
    free = entry_from_advice(results(Settings())["throughput"], KEY, 1000.0, "settled")
    assert free is not None and free.source == "probe" and free.link_mbps is None


def test_a_refusal_is_not_remembered() -> None:
    r = build(TARGET, [probe(1, 60.0, cc="bbr"), probe(10, 150.0, cc="bbr")], Settings())
    assert r.refused
    assert entry_from_advice(r, KEY, 1000.0, "settled") is None


def entry(**kw: object) -> PathEntry:
    e = entry_from_advice(results(Settings())["throughput"], KEY, 1000.0, "settled")
    assert e is not None
    return replace(e, **kw)  # type: ignore[arg-type]


def test_when_an_entry_may_answer() -> None:
    assert usable(entry(), 1000.0 + 3599, 3600, quick=False, link_mbps=None) is None
    assert "old" in (usable(entry(), 1000.0 + 3601, 3600, False, None) or "")
    assert "changed" in (usable(entry(changed=True), 1001.0, 3600, False, None) or "")
    # A default advise waits for settled probes; --quick takes any answer.
    quick = entry(probe_kind="quick")
    assert "quick" in (usable(quick, 1001.0, 3600, False, None) or "")
    assert usable(quick, 1001.0, 3600, True, None) is None
    assert usable(entry(probe_kind="none", source="passive"), 1001.0, 3600, False, None) is None
    # --capacity asks for an answer anchored on that rate.
    assert usable(entry(), 1001.0, 3600, False, 100.0) is not None
    assert usable(entry(link_mbps=100.0), 1001.0, 3600, False, 100.0) is None
    assert "future" in (usable(entry(), 800.0, 3600, False, None) or "")


def test_cap_auto_advice_is_remembered_too(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """advise_target (cap --auto) stores its probed advice like advise does;
    the probes are replaced by a built result (no kernel in a unit test)."""
    import tamebpf.advise.advisor as advise
    from tamebpf.paths.store import PathStore

    monkeypatch.setenv("TAMEBPF_STATE_DIR", str(tmp_path))
    r = results(Settings(max_impact=0.10))["capacity"]
    monkeypatch.setattr(advise, "run_advice", lambda *a, **k: r)
    monkeypatch.setattr(advise, "probe_congestion", lambda t: ("cubic", "--congestion"))
    advised = advise.advise_target("198.18.3.2", 0.10, congestion="cubic")
    assert isinstance(advised, tuple), advised
    n, mbps = advised
    stored = PathStore(str(tmp_path)).latest()
    assert [(e.key.dest, e.key.congestion, e.advised_streams) for e in stored] == [
        ("198.18.3.2/32", "cubic", n)]
    assert stored[0].advised_mbps == mbps


@pytest.mark.parametrize("estimator", ["throughput", "capacity", "share"])
def test_the_count_range_is_stored_and_recalled_for_any_limits(estimator: str) -> None:
    probed = results(Settings(max_impact=0.10))[estimator]
    assert probed.streams_range is not None
    low, high = probed.streams_range
    assert low <= probed.prediction.advice.num_flows <= high
    stored = entry_from_advice(probed, KEY, 1000.0, "settled")
    assert stored is not None and (stored.streams_low, stored.streams_high) == (low, high)
    assert stored.spread is not None and stored.spread > 0
    # The same limits: the stored range; others: the stored spread rerun.
    assert recall(stored, Settings(max_impact=0.10)).streams_range == (low, high)
    for s in SETTINGS:
        r = recall(stored, s)
        assert r.streams_range == streams_range(results(s)[estimator], s, spread=stored.spread)
    # An entry from before ranges (schema 1) still answers with one.
    old = replace(stored, streams_low=None, streams_high=None, spread=None)
    got = recall(old, Settings(max_impact=0.10)).streams_range
    assert got[0] <= probed.prediction.advice.num_flows <= got[1]


@pytest.mark.parametrize("estimator", ["throughput", "capacity", "share"])
def test_the_curve_without_its_range_is_recall_s_curve(estimator: str) -> None:
    """recall_curve and expected_mbps (the learner's per-refresh reads) give
    recall's own curve, advice and points, for any limits and any count."""
    stored = entry_from_advice(results(Settings(max_impact=0.10))[estimator], KEY, 1000.0,
                               "settled")
    assert stored is not None
    for s in SETTINGS:
        full = recall(stored, s)
        assert recall_curve(stored, s) == (full.curve, full.advice), s
        for n in (1, s.max_streams):
            assert expected_mbps(stored, n, s) == full.curve[n - 1].throughput, (s, n)
    # A count past the caller's max_streams is reached, not cut off.
    wide = recall(stored, Settings(max_streams=40)).curve[39].throughput
    assert expected_mbps(stored, 40, Settings(max_streams=4)) == wide
    with pytest.raises(ValueError):
        expected_mbps(stored, 0, Settings())
