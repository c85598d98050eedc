"""The offset state a reconcile run leaves for the next one, so that a scheduled run reads the offsets of what is new
(docs/semantics.md rule 24), not every snapshot since the lake began.

A run P leaves, at the versions its ledger row records:

* each key's tail (:func:`jobs.rules.snapshots.tail`): its last ``max(window, 48)`` snapshots with known bounds, which
  gold/status_samples holds already for the dashboard, and its newest one when that one's bounds are unknown
  (gold/series_tail, rarely a row);
* gold/offset_decreases: every decrease of a committed offset up to its time (REWIND, and the REWIND cause);
* its EXPIRED rows (gold/unconsumed_ranges): the union of every snapshot's expired interval up to its time;
* in its ledger row: each broker's newest snapshot with queue bounds (a broadcast client's later snapshot may take
  them) and each broker's newest consumerOffset.json (the corrected file's original);
* gold/subscription_latest: each (group, broker)'s latest retryMaxTimes row up to its time (the DLQ rules' input:
  :func:`subscriptions` gives it back with the silver rows after that time).

A run carrying P (:func:`jobs.reconcile.horizon.previous_run`: same parameters, the lake unchanged at or below P's
as-of time) then reads the offsets and bounds after P's time only (:func:`jobs.rules.snapshots.series_after`) and
merges: its series' answers, decreases and EXPIRED rows equal a full run's. A P that left no state (a run of an
older version) is not an error: the offsets are read whole, as a full run reads them.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pandas as pd

from jobs.lake import _delta
from jobs.reconcile import gold_runs
from schemas import held_queues, offset_decreases, series_tail, status_samples, subscription_latest, unconsumed_ranges

UTC = dt.timezone.utc
CARRIED_TABLES = {"series_tail": series_tail.TABLE, "offset_decreases": offset_decreases.TABLE,
                  "subscription_latest": subscription_latest.TABLE, "held_queues": held_queues.TABLE}


def tail_keep(window: int) -> int:
    """How many known snapshots of a key the tail keeps: the status window and the dashboard's samples."""
    from jobs.rules.status import TIMELINE_SNAPSHOTS

    return max(int(window), TIMELINE_SNAPSHOTS)


@dataclass
class Offsets:
    """The offset frames a run's reports read, and where they came from."""

    series: Any  # SERIES_COLUMNS (jobs.rules.snapshots)
    falls_before: Any = None  # P's decreases (jobs.rules.snapshots.decreases), up to its time
    expired_before: Any = None  # P's EXPIRED rows (None: the series holds every snapshot)
    tail_before: Any = None  # P's tail (its keys and queues)
    since: dt.datetime | None = None  # P's as-of time (None: whole history)
    bounds_at: list[tuple[str, str, dt.datetime]] | None = None  # P's, for bounds_times
    files_before: pd.DataFrame | None = None  # P's newest consumerOffset.json per broker


def _iso(ts: Any) -> str:
    t = pd.Timestamp(ts)
    t = t.tz_localize(UTC) if t.tzinfo is None else t.tz_convert(UTC)
    return t.isoformat()


def _parse(text: str) -> dt.datetime:
    return pd.Timestamp(text).tz_convert(UTC).to_pydatetime()


def held(spark: Any, lake: str, frames: dict[str, Any], previous: dict, *, as_of: dt.datetime) -> Any:
    """jobs.rules.snapshots.held_queues as of ``as_of``: P's gold/held_queues rows and the bounds and records after
    P's time (the whole tables when P left none)."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    messages = frames.get("stored_messages", frames["messages"])
    version = previous.get("table_versions", {}).get(held_queues.TABLE.qualified)
    if version is None:
        return snapshots.held_queues(frames["queue_bounds"], messages, as_of=as_of)
    at = version if _delta.table_format() == "delta" else None
    before = (_delta.read(spark, lake, held_queues.TABLE, at=at).where(F.col("run_id") == F.lit(previous["run_id"]))
              .select(*snapshots.HELD_COLUMNS))
    later = snapshots.held_queues(frames["queue_bounds"], messages, as_of=as_of, after=previous["as_of"])
    return snapshots.merge_held(before.unionByName(later))


def carried(spark: Any, lake: str, frames: dict[str, Any], previous: dict, *, as_of: dt.datetime,
            window: int, held: Any = None) -> Offsets | None:
    """The series from P's tail and the offsets after P's time, P's decreases plus the later ones, P's EXPIRED rows;
    None when P left no offset state (the caller reads the offsets whole)."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    kept = (previous.get("horizon") or {}).get("offsets")
    versions = previous.get("table_versions", {})
    if not kept or kept.get("tail_keep") != tail_keep(window) \
            or any(t.qualified not in versions
                   for t in (series_tail.TABLE, offset_decreases.TABLE, unconsumed_ranges.TABLE, status_samples.TABLE)):
        return None
    since = previous["as_of"]

    from jobs.formats import topics

    def rows(table: Any) -> Any:
        at = versions[table.qualified] if _delta.table_format() == "delta" else None
        # a run before RocketMQ's own groups and topics were left out may have carried them (spec §4.2)
        return _delta.read(spark, lake, table, at=at).where(
            (F.col("run_id") == F.lit(previous["run_id"])) & ~topics.is_system_group_col(F.col("consumer_group"))
            & ~topics.is_reserved_topic_col(F.col("topic")))

    tail = tail_of(rows(status_samples.TABLE), rows(series_tail.TABLE))
    falls_before = rows(offset_decreases.TABLE).select(*offset_decreases.COLUMNS)
    expired_before = rows(unconsumed_ranges.TABLE).where(F.col("kind") == "EXPIRED")
    bounds_at = [(c, b, _parse(t)) for c, b, t in kept["bounds_at"]]
    series = snapshots.series_after(frames["consumer_offsets"], frames["queue_bounds"], tail, since=since,
                                    as_of=as_of, bounds_at=bounds_at, held=held)
    files = pd.DataFrame(kept["files"], columns=["cluster", "broker", "snapshot_ts", "source_file"])
    files["snapshot_ts"] = pd.to_datetime(files["snapshot_ts"], utc=True).dt.tz_localize(None)
    return Offsets(series=series, falls_before=falls_before, expired_before=expired_before, tail_before=tail,
                   since=since, bounds_at=bounds_at, files_before=files)


def subscriptions(spark: Any, lake: str, subscription_groups: Any, previous: dict) -> Any | None:
    """silver/subscription_groups as the DLQ rules need it at P's time and after: P's gold/subscription_latest rows
    and the silver rows after P's as-of time (the lake at or below it is P's: ``horizon.previous_run``); None when
    P left none (the caller reads the table whole)."""
    from pyspark.sql import functions as F

    version = previous.get("table_versions", {}).get(subscription_latest.TABLE.qualified)
    if version is None:
        return None
    at = version if _delta.table_format() == "delta" else None
    before = (_delta.read(spark, lake, subscription_latest.TABLE, at=at)
              .where(F.col("run_id") == F.lit(previous["run_id"])))
    return with_later_subscriptions(before, subscription_groups, previous["as_of"])


def with_later_subscriptions(latest: Any, subscription_groups: Any, since: Any) -> Any:
    """``latest`` (each group and broker's latest row at ``since``: jobs.rules.dlq.latest_subscriptions) and the
    rows after ``since``: everything retryMaxTimes at ``since`` or later reads (docs/semantics.md rule 24)."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    later = subscription_groups.where(F.col("snapshot_ts") > snapshots._ts(since))  # noqa: SLF001
    return latest.select(*subscription_latest.COLUMNS).unionByName(later.select(*subscription_latest.COLUMNS))


def tail_of(samples: Any, unknown_newest: Any) -> Any:
    """A run's tail (:func:`jobs.rules.snapshots.tail`) from its gold/status_samples and gold/series_tail rows: the
    samples are its last ``tail_keep(window)`` known snapshots per key, series_tail each key's newest unknown one."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    known = samples.select(*snapshots.SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset",
                           F.lit(True).alias("bounds_known"))
    return known.unionByName(unknown_newest.select(*snapshots.TAIL_COLUMNS))


def with_later_falls(offsets: Offsets, series: Any) -> Any:
    """P's decreases plus those after its time, from the (materialized) ``series``."""
    from jobs.rules import snapshots

    return offsets.falls_before.unionByName(snapshots.decreases_after(series, offsets.tail_before, since=offsets.since))


def latest_files(consumer_offsets: Any, *, as_of: dt.datetime, since: dt.datetime | None = None,
                 before: pd.DataFrame | None = None) -> pd.DataFrame:
    """(cluster, broker, snapshot_ts, source_file): each broker's newest consumerOffset.json at or before ``as_of``
    (the original a corrected file is written from); from the snapshots after ``since`` and P's ``before``."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    co = consumer_offsets.where((F.col("client_id") == "") & (F.col("snapshot_ts") <= snapshots._ts(as_of)))
    if since is not None:
        co = co.where(F.col("snapshot_ts") > snapshots._ts(since))
    newest = co.groupBy("cluster", "broker").agg(F.max("snapshot_ts").alias("snapshot_ts"))
    now = (newest.join(co.select("cluster", "broker", "snapshot_ts", "source_file").distinct(),
                       ["cluster", "broker", "snapshot_ts"]).toPandas())
    if before is not None and len(before):
        later = set(zip(now["cluster"], now["broker"]))
        keep = before[[(c, b) not in later for c, b in zip(before["cluster"], before["broker"])]]
        now = pd.concat([now, keep], ignore_index=True) if len(now) else keep.reset_index(drop=True)
    return now


def state(spark: Any, frames: dict[str, Any], offsets: Offsets | None, files: pd.DataFrame, *,
          as_of: dt.datetime, window: int) -> dict[str, Any]:
    """What the run's ledger row keeps for the next run: each broker's newest bounds time and offsets file, and how
    many known snapshots a key's tail holds (a run that needs more reads the offsets whole)."""
    from jobs.rules import snapshots

    since = offsets.since if offsets is not None else None
    times = snapshots.bounds_times(frames["queue_bounds"], as_of=as_of, since=since,
                                   bounds_at=(offsets.bounds_at or []) if offsets is not None else [])
    bounds_at = sorted([str(r["cluster"]), str(r["broker"]), _iso(r["snapshot_ts"])] for r in times.collect())
    kept_files = sorted([str(r["cluster"]), str(r["broker"]), _iso(r["snapshot_ts"]), r["source_file"]]
                        for r in files.to_dict("records"))
    return {"bounds_at": bounds_at, "files": kept_files, "tail_keep": tail_keep(window)}
