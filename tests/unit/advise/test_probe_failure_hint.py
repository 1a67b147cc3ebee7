"""What a failed probe tells the user to do (advise/probes.probe_failure_hint)."""

from __future__ import annotations

from tamebpf.advise.iperf3_client import UNRESOLVED
from tamebpf.advise.probes import probe_failure_hint
from tamebpf.estimate.record import Target


def test_a_name_that_does_not_resolve_is_a_name_to_check_not_a_server_to_start() -> None:
    hint = probe_failure_hint(f"{UNRESOLVED} dtn.example: Name or service not known",
                              Target("dtn.example", 5201, None, "cubic"))
    assert "check the host name 'dtn.example'" in hint
    assert "iperf3 -s" not in hint


def test_inside_a_netns_the_name_must_resolve_there() -> None:
    hint = probe_failure_hint(f"{UNRESOLVED} dtn.example: Temporary failure in name resolution",
                              Target("dtn.example", 5201, "tb-snd", "cubic"))
    assert "in netns tb-snd" in hint


def test_a_refused_connection_asks_for_the_server() -> None:
    hint = probe_failure_hint("cannot connect to 127.0.0.1:5999: Connection refused",
                              Target("127.0.0.1", 5999, None, "cubic"))
    assert "iperf3 -s -p 5999" in hint
