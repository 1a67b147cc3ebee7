"""The library's snapshot comparison (userspace/c/lib/flowdiff.c) on
synthetic records: no kernel, only the C code FlowReader.changes uses."""

from __future__ import annotations

import ctypes
import random
from collections.abc import Iterator

import pytest

from tamebpf.kernel import native
from tamebpf.kernel.abi import TB_FLOW_CLOSED, TbFlow


class Diff:
    def __init__(self) -> None:
        self.lib = native.load()
        self.h = self.lib.tb_flowdiff_new()
        assert self.h

    def close(self) -> None:
        self.lib.tb_flowdiff_free(self.h)

    def update(self, recs: list[TbFlow]) -> tuple[set[int], set[int], int]:
        """(cookies of changed records, vanished cookies, latest read time)."""
        arr = (TbFlow * max(1, len(recs)))(*recs)
        idx = ctypes.POINTER(ctypes.c_uint32)()
        van = ctypes.POINTER(ctypes.c_uint64)()
        n_idx, n_van, read_ns = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_uint64()
        rc = self.lib.tb_flowdiff_update(self.h, arr, len(recs), ctypes.byref(idx),
                                         ctypes.byref(n_idx), ctypes.byref(van),
                                         ctypes.byref(n_van), ctypes.byref(read_ns))
        assert rc == 0
        return ({recs[idx[i]].cookie for i in range(n_idx.value)},
                set(van[:n_van.value]), read_ns.value)


@pytest.fixture
def diff() -> Iterator[Diff]:
    d = Diff()
    yield d
    d.close()


def rec(cookie: int, acked: int = 0, t: int = 0, closed: bool = False) -> TbFlow:
    r = TbFlow()
    r.cookie, r.bytes_acked, r.update_ns = cookie, acked, t
    r.flags = TB_FLOW_CLOSED if closed else 0
    return r


def test_new_changed_closed_and_vanished(diff: Diff) -> None:
    assert diff.update([rec(1), rec(2), rec(3)]) == ({1, 2, 3}, set(), 0)
    # Only the read time moved: nothing changed.
    assert diff.update([rec(1, t=5), rec(2, t=6), rec(3, t=7)]) == (set(), set(), 7)
    assert diff.update([rec(1, acked=10, t=8), rec(2, t=8), rec(3, t=8)])[0] == {1}
    # 2 closes (its final record), 3 goes without one.
    changed, gone, _ = diff.update([rec(1, acked=10), rec(2, closed=True)])
    assert (changed, gone) == ({2}, {3})
    # 3 back: new again; 2 is not expected again, so not "vanished".
    assert diff.update([rec(1, acked=10), rec(3)])[:2] == ({3}, set())


def test_many_flows_grow_and_churn_like_a_dict() -> None:
    """Thousands of flows (the table grows past its first 1024 slots) with
    random churn: the C answers equal a dict-based model of the same rule."""
    rng = random.Random(7)
    d = Diff()
    try:
        model: dict[int, int] = {}  # cookie -> acked, the last snapshot's open flows
        live: dict[int, int] = {}
        nxt = 1
        for step in range(30):
            for _ in range(rng.randint(0, 400)):
                live[nxt] = 0
                nxt += 1
            snap, closed = [], []
            for c in list(live):
                r = rng.random()
                if r < 0.05:
                    closed.append(c)
                    del live[c]
                elif r < 0.08:
                    del live[c]  # vanishes without a closed record
                elif r < 0.3:
                    live[c] += rng.randint(1, 1000)
            snap = [rec(c, live[c], t=step) for c in live] + \
                [rec(c, 0, closed=True) for c in closed]
            rng.shuffle(snap)
            want_changed = {c for c, a in live.items() if model.get(c) != a} | set(closed)
            want_gone = {c for c in model if c not in live and c not in closed}
            changed, gone, _ = d.update(snap)
            assert changed == want_changed, f"step {step}"
            assert gone == want_gone, f"step {step}"
            model = dict(live)
        assert len(model) > 1024
    finally:
        d.close()
