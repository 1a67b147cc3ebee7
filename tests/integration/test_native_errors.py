"""libtamebpf's error text is per thread: the exporter calls the library from
several threads, and each must read the error of its own failed call."""

from __future__ import annotations

import ctypes
import threading

from tamebpf.kernel import native
from tamebpf.kernel.abi import TbCapCount


def test_each_thread_reads_its_own_last_error() -> None:
    lib = native.load()
    both_set = threading.Barrier(2)
    seen: dict[str, str] = {}

    def fail_then_read(name: str) -> None:
        # A real call that fails and names its input: a pin directory that is not there.
        rc = lib.tb_cap_read_count(f"/nonexistent-tamebpf-{name}".encode(), 1,
                                   ctypes.byref(TbCapCount()))
        assert rc < 0, f"reading a cap from a missing directory returned {rc}"
        both_set.wait(5)  # the other thread's call has failed too before we read ours
        seen[name] = native.last_error(lib)

    threads = [threading.Thread(target=fail_then_read, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert "/nonexistent-tamebpf-a/" in seen["a"], seen
    assert "/nonexistent-tamebpf-b/" in seen["b"], seen
