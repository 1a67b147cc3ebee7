"""The exporter without a kernel: scrape an injected registry fed synthetic
flows; names, units, help, monotone counters, cardinality, docs/metrics.md."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tamebpf.cap.book import FollowChange, FollowSpec
from tamebpf.commands.export import parse_listen, write_jsonl
from tamebpf.common import logs
from tamebpf.common.errors import UsageError
from tamebpf.common.records import Cap
from tamebpf.exporter.collector import TamebpfCollector, make_registry
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tamebpf.kernel.flows import Flow, ReaderStats
from tamebpf.model import Settings
from tamebpf.paths.entry import PathKey
from tests.unit.groups.test_groups import predict_advice
from tests.unit.groups.test_groups_fakes import SECOND, Transfer, cap_record
from tests.unit.paths.test_paths_store import an_entry

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


class FakeReader:
    """Transfers stepping one second per snapshot, or failing when told."""

    def __init__(self, transfers: list[Transfer]) -> None:
        self.transfers, self.now, self.fail = transfers, 0, False

    def snapshot(self) -> list[Flow]:
        if self.fail:
            raise OSError("the kernel said no")
        self.now += SECOND
        return [f for t in self.transfers for f in t.step(1.0, self.now)]

    def stats(self) -> ReaderStats:
        return ReaderStats(closed_recorded=7, closed_dropped=2, owners_dropped=1,
                           closed_fill=3, closed_max=1024)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(collector: TamebpfCollector) -> tuple[str, Samples, dict[str, tuple[str, str]]]:
    """(text, {(sample name, labels): value}, {family: (type, help)})."""
    text = generate_latest(make_registry(collector)).decode()
    samples: Samples = {}
    families = {}
    for fam in text_string_to_metric_families(text):
        families[fam.name] = (fam.type, fam.documentation)
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples, families


def fresh(collector: TamebpfCollector) -> tuple[str, Samples, dict[str, tuple[str, str]]]:
    collector._last_mono = float("-inf")  # a new reading, without waiting MIN_REFRESH_S
    return scrape(collector)


IPERF = (("comm", "iperf3"), ("direction", "send"), ("remote_addr", "10.0.0.2"))


def test_group_series_have_the_kernel_counters() -> None:
    t = Transfer(streams=4, mbps=80.0, loss=0.01, srtt_us=30_000)
    col = TamebpfCollector(FakeReader([t]), Aggregator())
    fresh(col)
    _, s, _ = fresh(col)
    acked = sum(f.bytes_acked for f in t.flows.values())
    assert s[("tamebpf_group_acked_bytes_total", IPERF)] == acked, (
        f"expected {acked} bytes acked, got {s[('tamebpf_group_acked_bytes_total', IPERF)]}")
    retrans = sum(f.total_retrans for f in t.flows.values())
    assert s[("tamebpf_group_retransmitted_segments_total", IPERF)] == retrans
    assert s[("tamebpf_group_streams", IPERF)] == 4
    assert s[("tamebpf_group_flows", IPERF)] == 4
    assert s[("tamebpf_group_srtt_seconds", IPERF)] == pytest.approx(0.030)
    assert s[("tamebpf_events_dropped_total", (("event", "closed_flow"),))] == 2
    assert s[("tamebpf_map_entries", (("map", "closed"),))] == 3
    assert s[("tamebpf_programs_attached", ())] == 3 and s[("tamebpf_up", ())] == 1


def test_names_units_and_help_follow_prometheus_practice() -> None:
    col = TamebpfCollector(FakeReader([Transfer(streams=2, mbps=10.0)]), Aggregator(),
                           per_flow=True,
                           caps=lambda: [CapLimit(1), CapLimit(2**32 - 1, pace_bps=8e6)],
                           cap_table=lambda: [cap_record(cgroup="/a", dest="10.0.0.0/8",
                                                         max_streams=1, streams=2, refused=5)])
    fresh(col)
    text, samples, families = fresh(col)
    for name, (kind, doc) in families.items():
        assert name.startswith("tamebpf_"), f"{name}: missing the tamebpf_ prefix"
        assert doc.strip(), f"{name}: no help text"
        assert kind in ("counter", "gauge"), f"{name}: unexpected type {kind}"
        assert not re.search(r"_(ms|us|milliseconds|kb|mb|bits)(_|$)", name), (
            f"{name}: not a base unit")
    counters = [n for n, (kind, _) in families.items() if kind == "counter"]
    assert len(counters) >= 10, f"expected the counters of the docs, got {counters}"
    for sample_name, _ in samples:
        if any(sample_name.startswith(c) for c in counters):
            assert sample_name.endswith(("_total", "_created")), (
                f"counter sample {sample_name} lacks _total")
    assert "# HELP tamebpf_group_srtt_seconds " in text


def test_counters_never_go_backwards_when_flows_close_between_scrapes() -> None:
    t = Transfer(streams=6, mbps=60.0, loss=0.02)
    col = TamebpfCollector(FakeReader([t]), Aggregator())
    last: Samples = {}
    for step, streams in enumerate((6, 6, 3, 3, 1, 0, 0, 4, 2)):
        t.set_streams(streams)
        _, samples, _ = fresh(col)
        for key, value in samples.items():
            if key[0].endswith("_total") and key in last:
                assert value >= last[key], (
                    f"step {step}: {key[0]}{dict(key[1])} went from {last[key]} to {value}")
        last.update({k: v for k, v in samples.items() if k[0].endswith("_total")})
    assert last[("tamebpf_group_flows_closed_total", IPERF)] == 8, (
        f"expected 8 closed flows, got {last[('tamebpf_group_flows_closed_total', IPERF)]}")


def test_per_flow_series_only_when_asked() -> None:
    t = Transfer(streams=3, mbps=30.0)
    _, without, _ = fresh(TamebpfCollector(FakeReader([t]), Aggregator()))
    per_flow = [k for k in without if k[0].startswith("tamebpf_flow_")]
    assert not per_flow, f"per-flow series without --per-flow: {per_flow[:3]}"
    col = TamebpfCollector(FakeReader([Transfer(streams=3, mbps=30.0)]), Aggregator(),
                           per_flow=True)
    _, with_flows, _ = fresh(col)
    cookies = {dict(k[1])["cookie"] for k in with_flows if k[0] == "tamebpf_flow_acked_bytes_total"}
    assert len(cookies) == 3, f"expected 3 flows' series, got {cookies}"


def test_cardinality_is_bounded_by_max_groups() -> None:
    transfers = [Transfer(streams=1, mbps=1.0, remote=f"10.3.0.{i}", next_cookie=i * 10)
                 for i in range(1, 30)]
    reader = FakeReader(transfers)
    col = TamebpfCollector(reader, Aggregator(max_groups=5))
    fresh(col)
    for t in transfers:
        t.set_streams(0)
    fresh(col)
    _, samples, _ = fresh(col)
    groups = {k[1] for k in samples if k[0] == "tamebpf_group_acked_bytes_total"}
    assert len(groups) == 5, f"expected 5 groups kept, got {len(groups)}"
    assert samples[("tamebpf_groups_evicted_total", ())] == 24


def test_advice_and_caps_appear() -> None:
    t = Transfer(streams=1, mbps=50.0)
    kernel_caps = [cap_record(cgroup="/test", dest="10.0.0.0/8", max_streams=4, streams=10,
                              refused=3)]
    col = TamebpfCollector(FakeReader([t]), Aggregator(settings=Settings(max_impact=0.10)),
                           caps=lambda: [CapLimit(4, "/test", "10.0.0.0/8")],
                           cap_table=lambda: kernel_caps)
    for i in range(12):
        if i == 6:
            t.set_streams(10)
            t.mbps = 200.0
        _, s, _ = fresh(col)
    want = predict_advice("1:50", "10:200")  # one answer: what `tamebpf predict` says
    assert s[("tamebpf_group_advice_streams", IPERF)] == want["num_flows"]
    assert s[("tamebpf_group_advice_throughput_bytes_per_second", IPERF)] == pytest.approx(
        want["max_nondisruptive_thru_mbps"] * 1e6 / 8, rel=1e-3)
    assert s[("tamebpf_group_advice_impact_ratio", IPERF)] == pytest.approx(
        want["cross_traffic_impact"], abs=1e-3)
    assert s[("tamebpf_group_over_advice", IPERF)] == 1
    assert s[("tamebpf_group_cap_streams", IPERF)] == 4
    assert s[("tamebpf_group_over_cap", IPERF)] == 1
    cap = (("cgroup", "/test"), ("dest", "10.0.0.0/8"))
    assert s[("tamebpf_cap_refused_connections_total", cap)] == 3
    assert s[("tamebpf_cap_max_streams", cap)] == 4


def test_a_failed_reading_keeps_the_last_values() -> None:
    reader = FakeReader([Transfer(streams=2, mbps=20.0)])
    col = TamebpfCollector(reader, Aggregator())
    fresh(col)
    _, before, _ = fresh(col)
    reader.fail = True
    _, after, _ = fresh(col)
    assert after[("tamebpf_up", ())] == 0 and after[("tamebpf_read_errors_total", ())] == 1
    key = ("tamebpf_group_acked_bytes_total", IPERF)
    assert after[key] == before[key], f"expected {before[key]} kept, got {after[key]}"


def test_a_failed_reading_is_logged_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("json", "info")
    reader = FakeReader([Transfer(streams=2, mbps=20.0)])
    col = TamebpfCollector(reader, Aggregator())
    fresh(col)
    capsys.readouterr()
    reader.fail = True
    fresh(col)
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["level"], r["event"]) for r in records] == [("warning", "read_error")], records
    assert "the kernel said no" in records[0]["msg"] and records[0]["read_errors"] == 1


def test_text_logs_and_levels(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("text", "warning")
    logs.log.info("not shown")
    logs.log.warning("shown %d", 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tamebpf: ") and err[0].endswith(
        "warning: shown 1"), err


def test_scrapes_close_together_share_one_reading() -> None:
    reader = FakeReader([Transfer(streams=2, mbps=20.0)])
    col = TamebpfCollector(reader, Aggregator())
    scrape(col)
    scrape(col)
    assert reader.now == SECOND, (
        f"expected 1 snapshot for 2 quick scrapes, got {reader.now // SECOND}")


def cap_rows() -> list[Cap]:
    """What the kernel's cap table gives the exporter: a refuse and a pace cap."""
    return [cap_record(cgroup="/a", dest="10.0.0.0/8", max_streams=1, streams=0, refused=0),
            cap_record(id=2, cgroup="/b", dest="10.0.0.0/8", mode="pace",
                       rate_bytes_per_s=10**6, streams=2, refused=0)]


def a_follow() -> FollowSpec:
    """Cap 2 of cap_rows, following its path, after one change."""
    spec = FollowSpec("/b", "10.0.0.0/8", PathKey("10.0.0.2/32", "host", "cubic"), 0.3,
                      "10.0.0.2", 1.0, updated=2.0, competing_flows=3.0)
    return spec.changed(FollowChange(2.0, 8.0, 12.0, 3.0, "test"))


def test_follow_metrics_say_what_the_agent_set() -> None:
    col = TamebpfCollector(FakeReader([]), Aggregator(min_samples=1), cap_table=cap_rows,
                           follows=lambda: [a_follow()])
    _, samples, _ = fresh(col)
    got = {name: v for (name, labels), v in samples.items()
           if name.startswith("tamebpf_cap_follow") and dict(labels) == {
               "cgroup": "/b", "dest": "10.0.0.0/8"}}
    assert got == {"tamebpf_cap_follow_target_bytes_per_second": 12e6 / 8,
                   "tamebpf_cap_follow_changes_total": 1.0,
                   "tamebpf_cap_follow_competing_flows": 3.0,
                   "tamebpf_cap_follow_updated_timestamp_seconds": 2.0}


def documented() -> set[str]:
    return set(re.findall(r"^\| `(tamebpf_[a-z_]+)` \|", DOCS.read_text(), re.M))


def every_series(node: str | None = None) -> Samples:
    """A scrape in which every family the collector knows has samples."""
    col = TamebpfCollector(
        FakeReader([Transfer(streams=1, mbps=50.0)]), Aggregator(min_samples=1), node=node,
        per_flow=True, caps=lambda: [CapLimit(1), CapLimit(2**32 - 1, pace_bps=8e6)],
        cap_table=cap_rows, paths=lambda: [an_entry()], follows=lambda: [a_follow()])
    t = col.source.transfers[0]  # type: ignore[attr-defined]
    for i in range(6):
        if i == 3:
            t.set_streams(4)
        _, samples, _ = fresh(col)
    return samples


def test_every_metric_is_in_docs_and_every_documented_one_exists() -> None:
    samples = every_series()
    emitted = {name for name, _ in samples if not name.endswith("_created")}
    docs = documented()
    assert emitted - docs == set(), f"metrics missing from docs/metrics.md: {emitted - docs}"
    assert docs - emitted == set(), f"documented but never emitted: {docs - emitted}"


def test_jsonl_sink_writes_groups_and_health() -> None:
    out = io.StringIO()
    col = TamebpfCollector(FakeReader([Transfer(streams=2, mbps=16.0)]), Aggregator())
    write_jsonl(col, out, 0.01, iterations=2)
    recs = [json.loads(x) for x in out.getvalue().splitlines()]
    kinds = [r["type"] for r in recs]
    assert kinds == ["group", "exporter", "group", "exporter"], f"got {kinds}"
    g = recs[2]
    assert (g["comm"], g["streams"], g["counters"]["bytes_acked"]) == ("iperf3", 2, 6_000_000), (
        f"got {g['comm']}, {g['streams']}, {g['counters']['bytes_acked']}")
    assert recs[3]["closed_dropped"] == 2 and recs[3]["programs_attached"] == 3


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:9477", ("127.0.0.1", 9477)), ("[::1]:0", ("::1", 0)),
    (":9477", ("0.0.0.0", 9477)), ("off", None),
])
def test_parse_listen(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9477", "host:port", "127.0.0.1:70000"])
def test_parse_listen_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_listen(text)


def test_only_export_needs_prometheus_client() -> None:
    """EL9 packages no prometheus_client for Python 3.11: every other command
    must run without it, and export must say how to get it."""
    import subprocess
    import sys
    code = ("import sys\n"
            "sys.modules['prometheus_client'] = None  # as if not installed\n"
            "from tamebpf.cli import main\n"
            "assert main(['predict', '--probe', '1:50', '--probe', '10:200',"
            " '--max-impact', '10%']) == 0\n"
            "sys.exit(main(['export', '--listen', '127.0.0.1:0']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert "needs the Python package prometheus_client" in res.stderr, res.stderr
    assert "pip install prometheus_client" in res.stderr, res.stderr
