"""One refresh of the groups, for watch's loop and export's collector.

The aggregation (tamebpf.groups) is pure: it is handed each reading and its
time. Pulling the reading from a flow source and reading the clock happen
here, in one place, so that both callers do them the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tamebpf.common.records import ChangeSource, FlowSource
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tamebpf.groups.group import Refresh


def refresh_groups(agg: Aggregator, source: FlowSource | ChangeSource,
                   caps: Sequence[CapLimit] = (), flows: bool = False) -> Refresh:
    """One reading from `source` (a reader, injected), aggregated. A source
    that can tell what changed is asked only for that, unless the caller
    wants every open flow (`flows`)."""
    if not flows and hasattr(source, "changes"):
        return agg.refresh_changes(source.changes(), caps)
    return agg.refresh_snapshot(source.snapshot(), time.monotonic_ns(), caps, flows)
