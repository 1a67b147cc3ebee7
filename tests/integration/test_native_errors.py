"""libtamebpf's error text is per thread: the exporter calls the library from
several threads, and each must read the error of its own failed call."""

from __future__ import annotations

import ctypes
import threading

from tamebpf.kernel import native


def test_each_thread_reads_its_own_last_error() -> None:
    lib = native.load()
    both_set = threading.Barrier(2)
    seen: dict[str, str] = {}

    def fail_then_read(name: str) -> None:
        lib.tb_set_error(b"%s", ctypes.c_char_p(f"failure in {name}".encode()))
        both_set.wait(5)  # the other thread's error is set before we read ours
        seen[name] = native.last_error(lib)

    threads = [threading.Thread(target=fail_then_read, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen["a"].startswith("failure in a"), seen
    assert seen["b"].startswith("failure in b"), seen
