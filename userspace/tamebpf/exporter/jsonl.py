"""The records `export --jsonl` writes for one reading: one per group (the
shape of `watch --json`), then one on the exporter itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tamebpf.present.group_json import group_to_json

if TYPE_CHECKING:  # the module imports prometheus_client, which --jsonl alone does not need
    from tamebpf.exporter.collector import Reading


def reading_to_jsonl(r: Reading, programs: int) -> list[dict[str, Any]]:
    """The records of one reading: one per group, then one on the exporter."""
    out: list[dict[str, Any]] = [{"type": "group", **group_to_json(g, r.time_s)}
                                 for g in r.groups]
    st = r.stats
    out.append({
        "type": "exporter",
        "time": round(r.time_s, 3),
        "ok": r.ok,
        "programs_attached": programs,
        "flows": r.open_flows,
        "groups": len(r.groups),
        "read_duration_s": r.duration_s,
        "closed_fill": st.closed_fill if st else None,
        "closed_max": st.closed_max if st else None,
        "closed_dropped": st.closed_dropped if st else None,
        "owners_dropped": st.owners_dropped if st else None,
    })
    return out
