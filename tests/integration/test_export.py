"""`tamebpf export` for real: a Prometheus server (Debian package
`prometheus`) started on loopback scrapes the exporter while iperf3 runs and
ends; the counters it stored never reset and add up to what iperf3 sent.
Also `promtool check metrics` on a live scrape, a parse of it, the JSON-lines
sink, SIGTERM, and two exports as two nodes of one host (--netns, --node)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tamebpf.common.errors import TamebpfError
from tests.integration.kernel_fixtures import (
    cgroup,
    delete_netns,
    free_port,
    iperf3_available,
    sh,
    spawn,
    stop,
    unique,
    wait_for,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed"),
]

TAMEBPF = [sys.executable, "-m", "tamebpf"]
# The client's upload: on loopback the server's download is a group too.
GROUP = '{comm="iperf3",remote_addr="127.0.0.1",direction="send"}'


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        body: bytes = r.read()
    return body.decode()


@contextlib.contextmanager
def exporter(*args: str, listen: str = "127.0.0.1:0"
             ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`tamebpf export --listen LISTEN ...`; yields it and its /metrics URL."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*TAMEBPF, "export", "--listen", listen, *args],
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            url: list[str] = []

            def ready() -> bool:
                err.seek(0)
                said = err.read()
                m = re.search(r"serving metrics on (\S+)", said)
                if m:
                    url.append(m.group(1))
                assert proc.poll() is None, f"exporter exited {proc.returncode}: {said}"
                return bool(m)

            wait_for(ready, 15, "the exporter to listen")
            yield proc, url[0]
        finally:
            stop(proc)  # type: ignore[arg-type]


def prometheus_config(target: str | Sequence[str], rule_files: Sequence[str] = (),
                      job_extra: str = "", interval_s: float = 1.0) -> str:
    targets = ", ".join(f"'{t}'" for t in ([target] if isinstance(target, str) else target))
    text = (f"global: {{scrape_interval: {interval_s:g}s, evaluation_interval: "
            f"{interval_s:g}s}}\n"
            "scrape_configs:\n"
            f"  - job_name: tamebpf\n    static_configs: [{{targets: [{targets}]}}]\n"
            + job_extra)
    if rule_files:
        text += "rule_files:\n" + "".join(f"  - '{os.path.abspath(r)}'\n" for r in rule_files)
    return text


@contextlib.contextmanager
def prometheus(target: str | Sequence[str], rule_files: Sequence[str] = (), job_extra: str = "",
               interval_s: float = 1.0) -> Iterator[str]:
    """A Prometheus server on a free loopback port with its own storage,
    scraping the target(s) every interval_s (job "tamebpf", with job_extra's
    settings: YAML lines indented 4) and evaluating rule_files as often;
    yields its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian package 'prometheus' not installed")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tamebpf-prom-") as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(prometheus_config(target, rule_files, job_extra, interval_s))
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            def ready() -> bool:
                assert proc.poll() is None, f"prometheus exited {proc.returncode}"
                try:
                    return "Ready" in http_get(base + "/-/ready", 1)
                except OSError:
                    return False

            wait_for(ready, 20, "prometheus to be ready", step=0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    data = json.loads(http_get(url))
    assert data["status"] == "success", f"query {promql!r} failed: {data}"
    result: list[dict[str, Any]] = data["data"]["result"]
    return result


def value(base: str, promql: str) -> float | None:
    result = query(base, promql)
    return float(result[0]["value"][1]) if result else None


def iperf3_run(cg: str, streams: int, seconds: int, rate: str) -> dict[str, Any]:
    """A whole iperf3 transfer on loopback in cgroup cg; its JSON report."""
    port = free_port()
    server = spawn(["iperf3", "-s", "-1", "-p", str(port)], cgroup_path=cg,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: bool(sh("ss", "-tlnH", f"sport = :{port}").strip()), 5,
                 f"iperf3 server on port {port}")
        client = spawn(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams),
                        "-t", str(seconds), "-b", rate, "-J"], cgroup_path=cg,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            out, _ = client.communicate(timeout=seconds + 15)
        finally:
            stop(client)
        report: dict[str, Any] = json.loads(out)
        assert "error" not in report, f"iperf3 failed: {report['error']}"
        return report
    finally:
        stop(server)


def loopback_target() -> str:
    """An exporter address to start Prometheus with before the exporter
    starts: its scrapes begin about 5 s after its own start (its target
    discovery's interval), and the exporter's start-up is spent in them."""
    return f"127.0.0.1:{free_port()}"


def test_real_prometheus_scrapes_monotone_counters_across_closing_flows() -> None:
    target = loopback_target()
    with cgroup() as cg, prometheus(target) as prom, exporter("--cgroup", cg, listen=target):
        wait_for(lambda: value(prom, 'up{job="tamebpf"}') == 1, 15,
                 "prometheus to scrape the exporter successfully", step=0.3)
        report = iperf3_run(cg, streams=4, seconds=4, rate="40M")
        sent = int(report["end"]["sum_sent"]["bytes"])
        # A scrape after every flow closed: at least the 5 client flows (4 +
        # control).
        wait_for(lambda: (value(prom, f"tamebpf_group_flows_closed_total{GROUP}") or 0) >= 5
                 and value(prom, f"tamebpf_group_flows{GROUP}") == 0, 15,
                 "a scrape showing the iperf3 flows closed", step=0.3)
        streams = value(prom, f"max_over_time(tamebpf_group_streams{GROUP}[2m])")
        assert streams == 4, f"expected 4 streams at the peak, Prometheus stored {streams}"
        names = json.loads(http_get(prom + "/api/v1/label/__name__/values"))["data"]
        counters = [n for n in names if n.startswith("tamebpf_") and n.endswith("_total")]
        assert "tamebpf_group_acked_bytes_total" in counters, f"stored counters: {counters}"
        for name in counters:
            resets = query(prom, f"resets({name}[2m]) > 0")
            assert resets == [], f"{name} went backwards: {[r['metric'] for r in resets]}"
        acked = value(prom, f"tamebpf_group_acked_bytes_total{GROUP}")
        assert acked is not None and sent <= acked <= sent * 1.01 + 100_000, (
            f"expected acked bytes ~ iperf3's {sent}, Prometheus has {acked}")
        srtt = value(prom, f"max_over_time(tamebpf_group_srtt_seconds{GROUP}[2m])")
        assert srtt is not None and 0 < srtt < 0.05, f"loopback srtt {srtt} s"
        assert value(prom, "tamebpf_programs_attached") == 3
        assert value(prom, 'tamebpf_events_dropped_total{event="closed_flow"}') == 0


def test_live_scrape_passes_promtool_and_parses() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package 'prometheus') not installed")
    with cgroup() as cg, exporter("--cgroup", cg, "--per-flow") as (proc, url):
        iperf3_run(cg, streams=2, seconds=1, rate="10M")
        text = http_get(url)
        check = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=20)
        assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (
            f"promtool check metrics: rc {check.returncode}: {check.stdout}{check.stderr}")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        closed = [s for s in families["tamebpf_group_flows_closed"].samples
                  if s.labels.get("comm") == "iperf3" and s.name.endswith("_total")]
        assert closed and closed[0].value >= 3, f"expected iperf3's closed flows, got {closed}"
        assert families["tamebpf_up"].samples[0].value == 1
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        assert rc == 0, f"expected exit 0 on SIGTERM (a service stopped), got {rc}"
        with pytest.raises(OSError):
            http_get(url, 1)


def test_jsonl_sink_without_prometheus() -> None:
    with cgroup() as cg, tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "metrics.jsonl")
        proc = subprocess.Popen([*TAMEBPF, "export", "--listen", "off", "--jsonl", path,
                                 "--interval", "0.5", "--cgroup", cg],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: os.path.exists(path) and os.path.getsize(path) > 0, 15,
                     "the first JSON lines")
            iperf3_run(cg, streams=2, seconds=2, rate="20M")
            wait_for(lambda: any(r.get("comm") == "iperf3" and r["flows"] == 0
                                 for r in read_jsonl(path)), 10,
                     "a record after iperf3 ended")
        finally:
            stop(proc)  # type: ignore[arg-type]
        recs = [r for r in read_jsonl(path) if r["type"] == "group" and r["comm"] == "iperf3"
                and r["direction"] == "send"]
        assert max(r["streams"] for r in recs) == 2, f"got streams {[r['streams'] for r in recs]}"
        acked = [r["counters"]["bytes_acked"] for r in recs]
        assert acked == sorted(acked), f"bytes_acked went backwards in the sink: {acked}"
        health = [r for r in read_jsonl(path) if r["type"] == "exporter"]
        assert health and health[-1]["programs_attached"] == 3 and health[-1]["ok"]


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def test_sighup_logs_a_hangup_line_and_stops_cleanly() -> None:
    """export has no reload: a SIGHUP (systemd users send it) is logged as
    event "hangup" and stops it as SIGTERM does, exit 0, programs detached."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*TAMEBPF, "--log-format", "json", "export", "--listen",
                                 "127.0.0.1:0", "--no-learn"],
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            def listening() -> bool:
                err.seek(0)
                assert proc.poll() is None, f"exporter exited {proc.returncode}: {err.read()}"
                return "serving metrics on" in err.read()

            wait_for(listening, 15, "the exporter to listen")
            proc.send_signal(signal.SIGHUP)
            rc = proc.wait(timeout=10)
        finally:
            stop(proc)  # type: ignore[arg-type]
        err.seek(0)
        lines = [json.loads(line) for line in err.read().splitlines() if line.startswith("{")]
    assert rc == 0, f"expected exit 0 on SIGHUP (as on SIGTERM), got {rc}: {lines}"
    hangups = [r for r in lines if r.get("event") == "hangup"]
    assert len(hangups) == 1, f"expected one log line with event hangup, got {lines}"
    assert not any("Traceback" in str(r) for r in lines), lines


@contextlib.contextmanager
def loopback_netns(count: int) -> Iterator[list[str]]:
    """count fresh network namespaces with their loopback up; deleted with
    everything still running in them."""
    names = [unique("tbnode") for _ in range(count)]
    try:
        for ns in names:
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", netns=ns)
        yield names
    finally:
        for ns in names:
            delete_netns(ns)


def scrape_families(url: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(http_get(url))}


def test_two_nodes_of_one_host_each_export_their_own_namespace() -> None:
    """A container host runs one export per node, each with --netns of the
    node's namespace and --node: each one's per-path series count its own
    namespace's iperf3 streams (2 in A, 3 in B, all to 127.0.0.0/24), not
    the other's nor the host's, and every series names its node."""
    want = {"A": 2, "B": 3}
    with loopback_netns(2) as (ns_a, ns_b), \
            exporter("--netns", ns_a, "--node", "A", "--no-learn") as (_, url_a), \
            exporter("--netns", ns_b, "--node", "B", "--no-learn") as (_, url_b):
        urls = {"A": url_a, "B": url_b}
        procs = []
        try:
            for node, ns in (("A", ns_a), ("B", ns_b)):
                procs.append(spawn(["iperf3", "-s", "-1", "-p", "5201"], netns=ns,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                wait_for(lambda ns=ns: bool(sh("ss", "-tlnH", "sport = :5201", netns=ns)),
                         5, f"iperf3 server in {ns}")
                procs.append(spawn(["iperf3", "-c", "127.0.0.1", "-p", "5201", "-P",
                                    str(want[node]), "-t", "15", "-b", "20M"], netns=ns,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

            def site_streams(node: str) -> dict[tuple[str, str, str], float]:
                fam = scrape_families(urls[node]).get("tamebpf_site_path_streams")
                return {(s.labels["dest"], s.labels["direction"], s.labels["node"]): s.value
                        for s in fam.samples} if fam else {}

            def both_steady() -> bool:
                return all(site_streams(n).get(("127.0.0.0/24", "send", n)) == k and
                           site_streams(n).get(("127.0.0.0/24", "receive", n)) == k
                           for n, k in want.items())

            # On a time-out the assertions below say what each export showed.
            with contextlib.suppress(TamebpfError):
                wait_for(both_steady, 10, "each export to show its own namespace's streams",
                         step=0.5)
            for node, url in urls.items():
                got = site_streams(node)
                k = want[node]
                assert got == {("127.0.0.0/24", "send", node): k,
                               ("127.0.0.0/24", "receive", node): k}, (
                    f"node {node}: expected {k} streams each way to 127.0.0.0/24 only, "
                    f"got {got}")
                families = scrape_families(url)
                others = {s.labels.get("node") for f in families.values() for s in f.samples
                          if s.labels.get("node") != node}
                assert not others, f"node {node}'s /metrics has series of node {others}"
                groups = {(s.labels["comm"], s.labels["direction"]): s.value
                          for s in families["tamebpf_group_streams"].samples if s.value}
                assert groups == {("iperf3", "send"): k, ("iperf3", "receive"): k}, (
                    f"node {node}: expected only its iperf3 groups with streams, got {groups}")
        finally:
            for proc in procs:
                stop(proc)
