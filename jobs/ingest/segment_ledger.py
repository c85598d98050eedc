"""The segment ledger (bronze/segments): how far each commitlog segment has been decoded, so that a run reads only
what the segments gained since."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from jobs.ingest.extracted import _spark_frame
from jobs.lake import _delta
from schemas import segments


@dataclass
class SegmentState:
    """How far one commitlog segment of one broker has been decoded (a row of bronze/segments)."""

    cluster: str
    broker: str
    segment: str
    start_offset: int
    decoded_to: int = 0
    segment_size: int = 0
    complete: bool = False
    snapshot_ts: dt.datetime | None = None


def _segment_state_key(cluster: str, broker: str, segment: str) -> tuple[str, str, str]:
    return (cluster, broker, segment)


def load_segments_state(lake: str) -> dict[tuple[str, str, str], SegmentState]:
    if not _delta.exists(lake, segments.TABLE):
        return {}
    df = _delta.read_pandas(lake, segments.TABLE)
    out = {}
    for r in df.to_dict("records"):
        st = SegmentState(r["cluster"], r["broker"], r["segment"], int(r["start_offset"]), int(r["decoded_to"]),
                          int(r["segment_size"]), bool(r["complete"]),
                          None if r["snapshot_ts"] is None or r["snapshot_ts"] != r["snapshot_ts"]
                          else r["snapshot_ts"].to_pydatetime())
        out[_segment_state_key(st.cluster, st.broker, st.segment)] = st
    return out


def save_segments_state(spark: Any, lake: str, state: dict[tuple[str, str, str], SegmentState],
                        now: dt.datetime) -> int:
    rows = [{"cluster": s.cluster, "broker": s.broker, "segment": s.segment, "start_offset": s.start_offset,
             "decoded_to": s.decoded_to, "segment_size": s.segment_size, "complete": s.complete,
             "snapshot_ts": s.snapshot_ts, "updated_at": now} for s in state.values()]
    if not rows:
        return 0
    return _delta.merge(spark, _spark_frame(spark, lake, rows, segments.TABLE), lake, segments.TABLE)
