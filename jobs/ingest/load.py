"""The load step: the staged messages and trace records, and the run's small-table rows and problems, into their
Delta tables with one commit per table per run; each load is safe to run again."""
from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Callable, Sequence

from jobs.ingest.decode import Decoded
from jobs.ingest.extracted import Extracted, _spark_frame
from jobs.lake import _delta, layout
from jobs.lake.lookups import spans_dnf, spans_filter
from schemas import (
    consumer_offsets,
    delay_offsets,
    files,
    messages,
    order_info,
    pop_acks,
    pop_checkpoints,
    quarantine,
    store_features,
    subscription_groups,
    topic_configs,
    trace_records,
)

UTC = dt.timezone.utc


def load_decoded(spark: Any, lake: str, staged: Decoded, say: Callable[[str], None] = lambda _line: None) -> int:
    """Insert the staged messages whose key is new: one anti-join and one commit for the whole run.

    The anti-join reads only the target rows of the brokers and physical ranges decoded, so a retry is harmless and
    costs what it reads. Returns the number of decoded records (as before: decoded, not necessarily new).
    """
    if not staged.messages:
        return 0
    if _appends_per_broker(lake, staged):
        if not _delta.exists(lake, messages.TABLE):
            _delta.create_empty(spark, lake, messages.TABLE)
        # the exports' messages files are adopted as the table's files, as they are (export layout 2)
        layout.append(lake, messages.TABLE, staged.message_chunks(messages.TABLE, layout.CHUNK_ROWS,
                                                                  messages_files=False),
                      uuid.uuid4().hex, say, adopt=staged.message_parts)
        return staged.messages
    df = staged.read(spark, messages.TABLE, "message")
    _delta.insert_new(spark, df, lake, messages.TABLE, target_filter=spans_filter(staged.spans),
                      rows=staged.messages, target_dnf=spans_dnf(staged.spans), target_rows=staged.lake_overlap)
    return staged.messages


def _appends_per_broker(lake: str, staged: Decoded) -> bool:
    """Whether the staged records go in as files of one broker each, written here (:func:`jobs.lake.layout.append`),
    not by the engine then split (``jobs.lake.layout.split_added``): on the embedded engine, whose appends hold every
    broker (``jobs.lake._delta.clustered``), when no record of the staged spans is in the table yet (the usual case;
    a rerun after a kill has its anti-join) and no record was staged twice (:attr:`Decoded.overlap`)."""
    from jobs.lake import _spark

    if (_delta.table_format() != "delta" or not layout.applies(messages.TABLE) or staged.overlap
            or _spark.engine_from_env() != "sail"):
        return False
    if not _delta.exists(lake, messages.TABLE):
        return True
    if staged.lake_overlap is None:  # known now, for the anti-join's append too
        staged.lake_overlap = _delta.any_rows(lake, messages.TABLE, spans_dnf(staged.spans))
    return not staged.lake_overlap


def load_trace(spark: Any, lake: str, staged: Decoded) -> int:
    """MERGE the staged trace records (insert-only on their key, so re-runs never duplicate); one commit."""
    if not staged.trace:
        return 0
    df = staged.read(spark, trace_records.TABLE, "trace")
    if not _delta.exists(lake, trace_records.TABLE):  # every staged key is new (a record is decoded once a run)
        _delta.insert_new(spark, df, lake, trace_records.TABLE, target_filter="true")
        return staged.trace
    return _delta.merge(spark, df.dropDuplicates(list(trace_records.TABLE.key)), lake, trace_records.TABLE,
                        insert_only=True, target_filter=spans_filter(staged.spans))


def load_pop(spark: Any, lake: str, staged: Decoded) -> dict[str, int]:
    """MERGE the staged POP checkpoints and acks (insert-only on their key, as the trace records); one commit each."""
    counts = {}
    for table, kind, n, renamed in ((pop_checkpoints.TABLE, "pop_ck", staged.pop_checkpoints, None),
                                    (pop_acks.TABLE, "pop_ack", staged.pop_acks, {"kind": "ack_kind"})):
        if not n:
            continue
        df = staged.read(spark, table, kind, renamed)
        if not _delta.exists(lake, table):
            _delta.insert_new(spark, df, lake, table, target_filter="true")
            counts[table.qualified] = n
        else:
            counts[table.qualified] = _delta.merge(spark, df.dropDuplicates(list(table.key)), lake, table,
                                                   insert_only=True, target_filter=spans_filter(staged.spans))
    return counts


# The small tables the snapshots' config files alone give rows (the queue bounds give none: jobs.ingest.bounds adds to
# bronze/files, silver/queue_bounds and the quarantine only)
CONFIG_TABLES = (consumer_offsets.TABLE, subscription_groups.TABLE, topic_configs.TABLE, delay_offsets.TABLE,
                 order_info.TABLE, store_features.TABLE)


def load_small(spark: Any, lake: str, ex: Extracted, now: dt.datetime, tables: Sequence[Any],
               problems: bool = True) -> dict[str, int]:
    """MERGE the rows of the small ``tables`` and, with ``problems``, the quarantine rows; returns rows new or changed
    per table."""
    counts: dict[str, int] = {}
    for table in tables:
        rows = ex.rows.get(table.name, [])
        if not rows:
            continue
        rows = _dedupe(rows, table.key)
        counts[table.qualified] = _delta.merge(spark, _spark_frame(spark, lake, rows, table), lake, table,
                                               insert_only=table is files.TABLE, target_filter=_snapshots_filter(rows))
    if not problems:
        return counts
    qrows = _dedupe([
        {"cluster": c, "broker": b, "snapshot_ts": ts, "source_path": p.source_path, "position": p.position,
         "reason": p.reason, "detected_at": now}
        for c, b, ts, p in ex.problems
    ], quarantine.TABLE.key)
    if qrows:
        counts[quarantine.TABLE.qualified] = _delta.merge(spark, _spark_frame(spark, lake, qrows, quarantine.TABLE),
                                                          lake, quarantine.TABLE, insert_only=True)
    return counts


def _snapshots_filter(rows: list[dict[str, Any]]) -> str | None:
    """SQL on ``t``: the rows of the snapshot times ``rows`` hold, which are the only ones that can share a key with
    them (the key of every table load_small writes holds the snapshot time, or the file's path, which holds it too);
    the table's files written by earlier runs hold other times, so their statistics prune the MERGE's reads (the
    small tables' MERGEs read every earlier snapshot's rows: 0.5 s at hour 4 of the soak, 1.9 s at hour 48).
    None (no pruning) when a row has none."""
    stamps = [r.get("snapshot_ts") for r in rows]
    if not stamps or any(t is None for t in stamps):
        return None
    lo, hi = (t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") for t in (min(stamps), max(stamps)))
    return f"t.snapshot_ts >= TIMESTAMP '{lo}+00:00' AND t.snapshot_ts <= TIMESTAMP '{hi}+00:00'"


def _dedupe(rows: list[dict[str, Any]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    """Last row wins per key (a MERGE source must not hold a key twice)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        seen[tuple(r.get(k) for k in key)] = r
    return list(seen.values())
