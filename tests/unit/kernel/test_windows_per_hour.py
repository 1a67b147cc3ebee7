"""The bound on ACK windows a path gets an hour (kernel/acktrain.py,
WindowsPerHour), which export's sampler and the scouts' windows share:
checked against a plain count of the windows in the hour before each
request, over any order of requests on a few paths."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.kernel.acktrain import HOUR_S, WindowsPerHour

PATHS = ("a", "b", "c")
# (seconds since the previous request, which path): requests come in time order.
requests = st.lists(st.tuples(st.floats(min_value=0.0, max_value=2 * HOUR_S),
                              st.sampled_from(PATHS)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(requests, st.integers(min_value=1, max_value=4))
def test_a_window_opens_while_the_last_hour_had_fewer_than_per_hour(
        steps: list[tuple[float, str]], per_hour: int) -> None:
    limit: WindowsPerHour[str] = WindowsPerHour(per_hour)
    opened: list[tuple[float, str]] = []
    now = 0.0
    for gap, path in steps:
        now += gap
        last_hour = sum(1 for t, p in opened if p == path and now - t < HOUR_S)
        assert limit.count(path, now) == last_hour, (path, now, opened)
        assert limit.allows(path, now) is (last_hour < per_hour), (path, now, opened)
        if limit.allows(path, now):
            limit.opened(path, now)
            opened.append((now, path))
    for path in PATHS:  # no hour ever held more than per_hour of one path's windows
        times = [t for t, p in opened if p == path]
        assert all(sum(1 for u in times if t <= u < t + HOUR_S) <= per_hour for t in times)


def test_a_path_gets_windows_again_an_hour_after_its_first() -> None:
    limit: WindowsPerHour[str] = WindowsPerHour(2)
    limit.opened("a", 0.0)
    limit.opened("a", 100.0)
    assert not limit.allows("a", 200.0), "a third window within the hour"
    assert limit.allows("b", 200.0), "another path's windows count against this one"
    assert limit.count("a", HOUR_S) == 1 and limit.allows("a", HOUR_S)
    assert limit.count("a", HOUR_S + 100.0) == 0
