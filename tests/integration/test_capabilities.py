"""Capability mode: an unprivileged user holding CAP_BPF, CAP_PERFMON and
CAP_NET_ADMIN (what a service unit grants with AmbientCapabilities=) runs
the telemetry commands; caps also need CAP_SYS_ADMIN, to count a cgroup's
streams in every network namespace. Real kernel, real BPF, real sockets."""

from __future__ import annotations

import json
import os
import socket

import pytest

from tests.integration.kernel_fixtures import cgroup, private_bpffs
from tests.integration.unprivileged import run_as_user

pytestmark = pytest.mark.root
TELEMETRY_CAPS = "+bpf,+perfmon,+net_admin"
CAP_CAPS = TELEMETRY_CAPS + ",+sys_admin"


def test_flows_with_capabilities_sees_the_machines_flows() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname(), timeout=5)
        peer, _ = server.accept()
        try:
            res = run_as_user("flows", "--json", caps=TELEMETRY_CAPS)
            assert res.returncode == 0, res.stderr
            ports = {f["local_port"] for f in json.loads(res.stdout)}
            want = client.getsockname()[1]
            assert want in ports, f"expected the test's flow (port {want}) among {sorted(ports)}"
        finally:
            client.close()
            peer.close()


def test_caps_need_sys_admin_and_work_with_it() -> None:
    with cgroup() as cg, private_bpffs() as fs:
        pins = os.path.join(fs, "tamebpf")
        env = {"TAMEBPF_PIN_DIR": pins}
        name = os.path.basename(cg)
        set_argv = ("cap", "set", "--cgroup", name, "--dest", "198.18.0.0/15",
                    "--max-streams", "2")
        res = run_as_user(*set_argv, caps=TELEMETRY_CAPS, env=env)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 1 and len(lines) == 1 and "CAP_SYS_ADMIN" in lines[0], \
            (res.returncode, lines)
        assert not os.path.exists(pins), "a refused cap set left pins"
        res = run_as_user(*set_argv, caps=CAP_CAPS, env=env)
        assert res.returncode == 0, res.stderr
        listed = run_as_user("cap", "list", "--json", caps=CAP_CAPS, env=env)
        caps = json.loads(listed.stdout)
        assert [(c["cgroup"], c["max_streams"]) for c in caps] == [(f"/{name}", 2)], caps
        res = run_as_user("cap", "rm", "--cgroup", name, "--dest", "198.18.0.0/15",
                          caps=CAP_CAPS, env=env)
        assert res.returncode == 0, res.stderr
