"""One check for a path entry (paths/valid.py), wherever it comes in: every
absurd value is refused naming its field, random series never raise, and
labels are printed escaped (words.printable)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.common.words import printable
from tamebpf.paths.entry import PathEntry
from tamebpf.paths.remote import parse_result
from tamebpf.paths.valid import Refusal, as_raw, checked_entry, refusal
from tests.unit.paths.test_paths_store import an_entry

NOW = 2_000_000_000.0
DEST, CC = "198.18.3.2/32", "cubic"


def entry() -> PathEntry:
    return an_entry(NOW - 100.0)


def with_fit(**change: object) -> dict[str, object]:
    raw = as_raw(entry())
    raw["fit"] = {**entry().fit.as_dict(), **change}
    return raw


def with_value(**change: object) -> dict[str, object]:
    return {**as_raw(entry()), **change}


def test_a_sound_entry_passes_unchanged() -> None:
    assert checked_entry(as_raw(entry()), NOW) == entry()
    assert refusal(entry(), NOW) is None
    # As the store's row holds it: the fit as JSON text, the estimator beside it.
    row = {**as_raw(entry()), "fit": entry().fit.to_json(), "estimator": "capacity"}
    assert checked_entry(row, NOW) == entry()


@pytest.mark.parametrize("raw, field", [
    (with_fit(capacity=math.nan), "fit.capacity"),
    (with_fit(capacity=math.inf), "fit.capacity"),
    (with_fit(capacity=-57.5), "fit.capacity"),
    (with_fit(capacity=1e308), "fit.capacity"),
    (with_fit(capacity="191.2"), "fit.capacity"),
    (with_fit(capacity=10**400), "fit.capacity"),
    (with_fit(probes=[[10**9, 150.0]]), "fit.probes[0].streams"),
    (with_fit(probes=[[1, 40.0], [0, 150.0]]), "fit.probes[1].streams"),
    (with_fit(probes=[[1, -1.0]]), "fit.probes[0].goodput"),
    (with_fit(probes=[[True, 1.0]]), "fit.probes[0].streams"),
    (with_fit(probes=[[1, 40.0, 3]]), "fit.probes[0]"),
    (with_fit(probes=[]), "fit.probes"),
    (with_fit(probes="1,10"), "fit.probes"),
    (with_fit(coeffs=[1e-5, 2e-5]), "fit.coeffs"),
    (with_fit(coeffs=[1e-5, math.nan, 2e-5]), "fit.coeffs[1]"),
    (with_fit(coeffs=[0, 0, 0]), "fit.coeffs"),
    (with_fit(coeffs=[-1e-5, 1e-5, 1e-5]), "fit.coeffs[0]"),
    (with_fit(model="magic"), "fit.model"),
    (with_fit(estimator="oracle"), "fit.estimator"),
    (with_fit(evidence_limit=2000), "fit.evidence_limit"),
    (with_value(fit="{not json"), "fit"),
    (with_value(fit="[" * 100_000 + "]" * 100_000), "fit"),
    (with_value(fit="[1, 2]"), "fit"),
    (with_value(estimator="share"), "estimator"),
    (with_value(when=math.nan), "when"),
    (with_value(when=NOW + 3600), "when"),
    (with_value(when=-1.0), "when"),
    (with_value(when="yesterday"), "when"),
    (with_value(advised_streams=10**9), "advised_streams"),
    (with_value(advised_streams=2.5), "advised_streams"),
    (with_value(advised_mbps="lots"), "advised_mbps"),
    (with_value(advised_impact=1.5), "advised_impact"),
    (with_value(capacity_mbps=math.inf), "capacity_mbps"),
    (with_value(capacity_low_mbps=0.0), "capacity_low_mbps"),
    (with_value(link_mbps=2e7), "link_mbps"),
    (with_value(competing_flows=-1.0), "competing_flows"),
    (with_value(rtt_ms=math.nan), "rtt_ms"),
    (with_value(impact_high=math.nan), "impact_high"),
    (with_value(source="gossip"), "source"),
    (with_value(probe_kind=None), "probe_kind"),
    (with_value(dest="not-an-address"), "dest"),
    (with_value(netns=""), "netns"),
    (with_value(congestion="x" * 1000), "congestion"),
    (with_value(host=b"bytes"), "host"),
    (with_value(changed=2), "changed"),
    (with_value(streams_low=5, streams_high=2), "streams_low"),
    (with_value(streams_high=0), "streams_high"),
    (with_value(spread=math.nan), "spread"),
    (with_value(id="7"), "id"),
    (with_value(windows="[[4, 30.0"), "windows"),
    (with_value(windows={"4": 30.0}), "windows"),
    (with_value(windows=[[4, 30.0, 60.0]] * 65), "windows"),
    (with_value(windows=[[4, 30.0]]), "windows[0]"),
    (with_value(windows=[[4, 30.0, 60.0], [0, 30.0, 60.0]]), "windows[1].streams"),
    (with_value(windows=[[4, math.inf, 60.0]]), "windows[0].goodput"),
    (with_value(windows="[[4, 30.0, -1]]"), "windows[0].seconds"),
    (with_value(windows=[[4, 30.0, 1e12]]), "windows[0].seconds"),
])
def test_an_absurd_value_is_refused_naming_its_field(raw: dict[str, object],
                                                    field: str) -> None:
    got = checked_entry(raw, NOW)
    assert isinstance(got, Refusal), f"{field}: accepted {got}"
    assert got.field == field, got
    assert len(str(got)) < 200 and "\n" not in str(got), str(got)


def test_an_entry_built_here_is_checked_as_one_read_back() -> None:
    assert refusal(replace(entry(), capacity_mbps=math.nan), NOW) == Refusal(
        "capacity_mbps", "is nan, not a finite number")
    assert refusal(replace(entry(), when=NOW + 61), NOW) is not None
    assert refusal(replace(entry(), when=NOW + 59), NOW) is None  # another clock's slack


def test_printable_escapes_what_a_terminal_acts_on() -> None:
    assert printable("node-1:9477 é ü") == "node-1:9477 é ü"
    forged = "a\x1b[2K\rADVICE: 64 streams\n\x9b31m\x7f\u202e\x00"
    shown = printable(forged)
    assert shown == "a\\x1b[2K\\rADVICE: 64 streams\\n\\x9b31m\\x7f\\u202e\\x00"
    assert all(c.isprintable() for c in shown)


# -- random series: an entry is valid or refused, never an exception ------

ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                st.sampled_from(["NaN", "+Inf", "1e308", str(NOW - 5), str(NOW + 600), DEST,
                                 CC, "probe", "settled", "{"]),
                st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-5, 2000)),
                         max_size=4),
                st.lists(st.lists(st.integers(-5, 2000), max_size=3), max_size=3))
LABELS = ("instance", "dest", "congestion", "netns", "source", "probes", "fit")
FIT_FIELDS = tuple(entry().fit.as_dict())


def a_series(changes: list[tuple[str, Any]]) -> dict[str, Any]:
    """A sound series with a few of its labels, fit fields or its value
    replaced by odd ones."""
    fit = entry().fit.as_dict()
    metric: dict[str, Any] = {"instance": "a:9477", "dest": DEST, "congestion": CC,
                              "netns": "host", "source": "probe", "probes": "settled"}
    value: Any = [NOW, str(NOW - 10)]
    for where, odd in changes:
        if where in FIT_FIELDS:
            fit[where] = odd
        elif where == "value":
            value = odd
        elif where == "time":
            value = [NOW, odd]
        else:
            metric[where] = odd
    metric.setdefault("fit", json.dumps(fit))
    return {"metric": metric, "value": value}


series = st.one_of(
    st.lists(st.tuples(st.sampled_from(LABELS + FIT_FIELDS + ("value", "time")), ODD),
             max_size=3).map(a_series),
    ODD, st.dictionaries(st.sampled_from(["metric", "value"]), ODD))


@settings(max_examples=500, deadline=None)
@given(st.lists(series, max_size=6))
def test_random_series_give_valid_entries_or_refusals(result: list[Any]) -> None:
    got = parse_result(result, DEST, CC, NOW)
    assert len(got.entries) + len(got.refused) == len(result)
    for r in got.entries:
        e = r.entry
        assert (e.key.dest, e.key.congestion) == (DEST, CC)
        assert refusal(e, NOW) is None, e
    for node, why in got.refused:
        assert isinstance(node, str) and why.field, why
        assert "\n" not in printable(node) + str(why)


def test_the_random_series_hold_sound_ones_too() -> None:
    """The property above must see entries accepted, not only refused."""
    got = parse_result([a_series([]), a_series([("netns", "ns-2")])], DEST, CC, NOW)
    assert len(got.entries) == 2 and not got.refused, got.refused
