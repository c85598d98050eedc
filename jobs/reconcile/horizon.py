"""Reconcile over a horizon: a scheduled run recomputes what its answers can still change (docs/semantics.md rule 24).

The cut is ``K = as_of - retention_h`` (``RMQ_RECON_RETENTION_H``, default 72 h: RocketMQ's ``fileReservedTime``).
A record or delivery is *recent* when a snapshot after K first held it (``first_snapshot_ts``), *old* otherwise.
Old answers are final in the gold rows of the previous completed run P (read at its ledger versions); the run
recomputes from the recent part and merges, so that its rows equal a full run's, every column:

* offsets and bounds (``consumer_offsets``, ``queue_bounds``): those after P's as-of time, with the offset state P
  left (jobs.reconcile.offset_state: each key's tail, every decrease, the EXPIRED rows): every output that depends
  only on them equals a full run's; ``subscription_groups`` after the previous run's time, with its latest rows;
* ``messages`` and ``deliveries``: the recent part, plus exact lookups of old rows where an answer needs them
  (the record at a committed offset, the original copy of a recent DLQ record, a ProcessQueue's open entries);
* per queue, ``lo`` = its lowest recent offset: old messages lie below it. TRACE, SKIPPED and BROADCAST_DROPPED
  offsets below ``lo`` and RETRYING, IN_DLQ and BROADCAST_DROPPED rows of old keys come from P;
* a group whose data crosses the cut (a key with old and recent deliveries, a recent key with an old copy, an old
  delivery settled after P, a P range across ``lo``, ...) is computed in full (:func:`checks`); so is every group
  when P is missing, incompatible, older than K, or the lake changed below P's as-of time.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

import pandas as pd

from jobs.lake import _delta
from jobs.lake.lookups import RECORD_KEY, copies_of, records_at
from jobs.reconcile import gold_runs, offset_state
from jobs.problems import UsageError
from schemas import reconcile_runs
from schemas import snapshots as snapshots_schema

RETENTION_ENV = "RMQ_RECON_RETENTION_H"
DEFAULT_RETENTION_H = 72.0
UTC = dt.timezone.utc
# Audit hours (jobs.rules.audit) read records first held from 1 h before their window: a snapshot copy takes less.
AUDIT_SLACK = dt.timedelta(hours=1)
QUEUE = ["cluster", "topic", "broker", "queue_id"]
SERIES_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
GROUP = ["cluster", "consumer_group"]
MODE_COLUMNS = ("cluster", "consumer_group", "topic")  # the mode rows a run keeps (reconcile.mode_state)


def retention_hours(value: float | str | None = None) -> float:
    """``value``, else ``RMQ_RECON_RETENTION_H``, else 72; refused unless a positive number of hours."""
    raw = value if value not in (None, "") else os.environ.get(RETENTION_ENV, DEFAULT_RETENTION_H)
    try:
        hours = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        hours = float("nan")
    if not hours > 0:
        raise UsageError(f"retention_h {raw!r}: not a positive number of hours; give the broker's fileReservedTime "
                         f"(default {DEFAULT_RETENTION_H:g}) via --retention-h, the DAG Param or {RETENTION_ENV}")
    return hours


def params_of(*, window: int, dlq_warn_retries: int, blocking_min_age_s: int, groups: list[str] | None) -> dict:
    """What two runs must share for one to carry the other's rows."""
    return {"window": int(window), "dlq_warn_retries": int(dlq_warn_retries),
            "blocking_min_age_s": int(blocking_min_age_s), "groups": sorted(groups) if groups else None}


class SnapshotFolders:
    """The ledger of snapshot folders (bronze/snapshots, one row per folder) at the run's version, read in the engine:
    the horizon's digests and the report's missing inputs. The ledger grows by a row per broker and snapshot (35,000
    a broker-year at 15 minutes) for as long as the lake lives; the driver receives a digest and a row per broker."""

    def __init__(self, spark: Any, lake: str, version: int | None) -> None:
        self.present = version is not None and _delta.exists(lake, snapshots_schema.TABLE)
        self.frame = _delta.read(spark, lake, snapshots_schema.TABLE, at=version) if self.present else None

    def until(self, until: dt.datetime) -> Any:
        from pyspark.sql import functions as F

        from jobs.rules import snapshots

        assert self.frame is not None
        return self.frame.where(F.col("snapshot_ts") <= snapshots._ts(until))

    def digest(self, until: dt.datetime) -> str:
        """A digest of the snapshot folders taken (and their listings) up to ``until``: changes when the lake below
        does. Order-free (a count and a sum of 64-bit row hashes), so the engine computes it in one pass."""
        if not self.present:
            return "none"
        from pyspark.sql import functions as F

        row = self.until(until).agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.xxhash64("cluster", "broker", "snapshot_ts", "listing_digest").cast("decimal(38,0)")).alias("h"),
        ).collect()[0]
        return f"{int(row['n'])}:{row['h'] if row['h'] is not None else 0}"

    def newest_missing(self, until: dt.datetime) -> list[dict[str, Any]]:
        """Each broker's (and clients folder's) newest folder at or before ``until`` when it lacks files, by key."""
        if not self.present:
            return []
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        w = Window.partitionBy("cluster", "broker").orderBy(F.col("snapshot_ts").desc())
        rows = (self.until(until).withColumn("_rn", F.row_number().over(w))
                .where((F.col("_rn") == 1) & F.col("missing").isNotNull() & (F.col("missing") != ""))
                .select("cluster", "broker", "snapshot_ts", "folder", "missing").collect())
        return sorted((r.asDict() for r in rows), key=lambda r: (r["cluster"], r["broker"]))


def previous_run(lake: str, *, run_id: str, as_of: dt.datetime, cut: dt.datetime, params: dict,
                 folders: SnapshotFolders) -> tuple[dict | None, str]:
    """The completed run whose rows this run carries, or None and why not.

    P = the latest completed run (by as-of, then completion) with as-of in [cut, as_of], other than this run id,
    reconciled with the same parameters and all groups (a ``--groups`` or otherwise different run is passed over),
    and a lake that has not changed at or below its as-of time since (the same snapshot folders and listings: a late
    file below it makes its rows stale).
    """
    runs = gold_runs.completed_runs(lake)
    runs = runs.assign(as_of=pd.to_datetime(runs["as_of"], utc=True))
    ok = runs[(runs["run_id"] != run_id) & (runs["as_of"] <= pd.Timestamp(as_of))]
    if not len(ok):  # (a rerun of the only run so far says the same as the first run did)
        return None, "no completed run to carry"
    ok = ok.sort_values(["as_of", "completed_at", "run_id"], kind="mergesort")
    if ok.iloc[-1]["as_of"] < pd.Timestamp(cut):
        return None, f"the previous run {ok.iloc[-1]['run_id']} is older than the horizon"
    ok = ok[ok["as_of"] >= pd.Timestamp(cut)]
    summaries = _summaries(lake, list(ok["run_id"]))
    same = [r for r in ok.itertuples(index=False)
            if (summaries.get(r.run_id, {}).get("horizon") or {}).get("params") == params]
    if not same:
        return None, "no run since the horizon ran with the same parameters and all groups"
    best = same[-1]
    mine = summaries[best.run_id]["horizon"]
    if mine.get("snapshots_digest") != folders.digest(best.as_of.to_pydatetime()):
        return None, f"snapshots at or before {best.as_of} changed since the previous run {best.run_id}"
    run = gold_runs.run(lake, str(best.run_id))
    run["as_of"] = best.as_of.to_pydatetime()
    run["horizon"] = mine
    return run, ""


def _summaries(lake: str, run_ids: list[str]) -> dict[str, dict]:
    df = _delta.read_pandas_columns(lake, reconcile_runs.TABLE, ["run_id", "summary"],
                                    filters=[("run_id", "in", run_ids)])
    return {r: json.loads(t) if t else {} for r, t in zip(df["run_id"], df["summary"]) if r in set(run_ids)}


# --------------------------------------------------------------------------------------------- frames (Spark)


def split_frames(frames: dict[str, Any], *, as_of: dt.datetime, cut: dt.datetime) -> dict[str, Any]:
    """The recent and old parts of messages and deliveries as an as-of run sees them, and ``lo`` per queue."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots
    from jobs.formats.topics import is_system_topic_col

    k = snapshots._ts(cut)
    m = snapshots.messages_as_of(frames["messages"], as_of=as_of)
    d = snapshots.deliveries_as_of(frames["deliveries"], as_of=as_of)
    recent_m = m.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") > k))
    old_m = m.where(F.col("first_snapshot_ts") <= k)
    recent_d = d.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") > k))
    old_d = d.where(F.col("first_snapshot_ts") <= k)
    lo = (recent_m.where(~is_system_topic_col(F.col("topic")) & F.col("queue_offset").isNotNull())
          .groupBy(*QUEUE).agg(F.min(F.col("queue_offset").cast("long")).alias("lo")))
    return {"recent_m": recent_m, "old_m": old_m, "recent_d": recent_d, "old_d": old_d, "lo": lo,
            "key_index": frames.get("key_index")}


def open_entries(old_d: Any, recent_d: Any, *, cut: dt.datetime, small: Any = lambda df, _name: df) -> Any:
    """Old deliveries a recent answer can still depend on (the tail of their ProcessQueue timelines).

    An old delivery that had not left by the group's first recent delivery (in flight, SubAfter after the cut or
    ending after it) can pin a recent commit (rule 12: HEAD_BLOCKED) or be BLOCKING_COMMIT; the replay also needs the
    deliveries of its host and queue from the one just before it, so that its ProcessQueue lifetime is found as in a
    full run (earlier entries left before every recent pair's second delivery: they cannot block it).

    The open deliveries and their hosts are found among the old deliveries that can be open by their own columns (one
    small action: the first recent start), whose row groups' statistics skip the rest; only the hosts' timelines read
    every old delivery (0.95 s -> 0.70 s at 562 K old deliveries, issue 39). ``small`` computes a frame once
    (``jobs.lake._spark.materializer``): the open deliveries and their hosts' ranked entries, each read twice.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from jobs.rules import snapshots
    from jobs.rules.replay import TIMELINE_KEY

    k = snapshots._ts(cut)
    first_recent = recent_d.groupBy(*GROUP).agg(F.min("start_ts").alias("_m"))
    is_open = (F.col("end_ts").isNull() | F.col("after_snapshot_ts").isNull() | (F.col("after_snapshot_ts") > k)
               | (F.col("_m").isNotNull() & (F.col("end_ts") >= F.col("_m"))))
    # what can be open, on the old deliveries' own columns: a group's first recent delivery starts at or after the
    # first of all (exact: every open delivery passes)
    m = recent_d.agg(F.unix_micros(F.min("start_ts"))).collect()[0][0]
    maybe = F.col("end_ts").isNull() | F.col("after_snapshot_ts").isNull() | (F.col("after_snapshot_ts") > k)
    if m is not None:
        maybe = maybe | (F.col("end_ts") >= F.timestamp_micros(F.lit(int(m))))
    opened = small(old_d.where(maybe).join(first_recent, on=GROUP, how="left").where(is_open)
                   .select(*old_d.columns), "open_deliveries")
    host = [F.coalesce(F.col(c), F.lit("")).alias(c) if c in ("client_id", "client_host") else F.col(c)
            for c in TIMELINE_KEY]

    def keyed(df: Any) -> Any:  # the timeline entries, with their host and queue as the replay keys them
        return (df.where((F.col("retry_times") == 0) & F.col("queue_offset").isNotNull() & F.col("start_ts").isNotNull())
                .select("*", *[h.alias("_" + c) for h, c in zip(host, TIMELINE_KEY)]))

    hk = ["_" + c for c in TIMELINE_KEY]
    left = F.coalesce("end_ts", "sent_back_ts")  # as the replay orders its entries (rule 12a)
    w = Window.partitionBy(*hk).orderBy("start_ts", "queue_offset", left, "request_id")
    # only the timelines with an open entry are ordered (the small side on the left: Sail builds from it), and only
    # their entries are joined to the groups' first recent starts
    hosts = keyed(opened).select(*hk).distinct()
    ranked = small(hosts.join(keyed(old_d), on=hk, how="inner").join(first_recent, on=GROUP, how="left")
                   .withColumn("_open", is_open).drop("_m").withColumn("_rn", F.row_number().over(w)), "open_timelines")
    first_open = ranked.where("_open").groupBy(*hk).agg(F.min("_rn").alias("_from"))
    tail = (first_open.join(ranked, on=hk, how="inner").where(F.col("_rn") >= F.col("_from") - 1)
            .select(*old_d.columns))
    return tail.unionByName(opened).distinct()


def committed_positions(series: Any, lo: Any) -> Any:
    """(QUEUE, queue_offset) of every key's committed offset at its latest and newest snapshot, below ``lo``."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    at = (snapshots.latest(series).select(*QUEUE, "committed_offset")
          .unionByName(snapshots.newest(series).select(*QUEUE, "committed_offset")))
    return (at.join(lo, on=QUEUE, how="left").where(F.col("lo").isNull() | (F.col("committed_offset") < F.col("lo")))
            .select(*QUEUE, F.col("committed_offset").alias("queue_offset")).distinct())


POSITION_SCHEMA = "cluster string, topic string, broker string, queue_id int, queue_offset long"
HIT_SCHEMA = POSITION_SCHEMA + ", physical_offset long"
# the columns of the records at committed offsets the reports read (message_at: time lag, BLOCKING_COMMIT)
AT_COLUMNS = [*RECORD_KEY, "topic", "queue_id", "uniq_key", "keys", "store_ts"]
AT_SCHEMA = ("cluster string, broker string, physical_offset long, queue_offset long, topic string, queue_id int, "
             "uniq_key string, keys string, store_us long")


def position_hits(old_m: Any, positions: Any, carried: dict | None = None) -> tuple[Any, dict[str, int]]:
    """(QUEUE, queue_offset, physical_offset) of the old records at ``positions`` (QUEUE, queue_offset; small), and
    how many positions were searched where.

    ``carried``: what the previous run looked up (:func:`carried_positions`: its positions, the hits it found and
    its cut, at or before this run's). The lake at or below the previous run's as-of time is as that run saw it
    (:func:`previous_run`), so at a position it looked up only a record first held after its cut can be new: its
    hits plus a search of the records first held since then. Only the other positions are searched in every old
    record. A stalled group's committed offset stays where it is run after run, and the search over every old
    record was a pass over the whole history's queue columns (0.76 s at 41 M records, issue 39).
    """
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    at = [*QUEUE, "queue_offset"]
    narrow = lambda m: m.select(*QUEUE, F.col("queue_offset").cast("long").alias("queue_offset"),  # noqa: E731
                                "physical_offset")
    if carried is None:
        return positions.join(narrow(_near(old_m, positions)), on=at, how="inner"), \
            {"positions_searched_in_all": positions.count()}
    known = positions.join(carried["looked"], on=at, how="left_semi")
    new = positions.join(carried["looked"], on=at, how="left_anti")
    since = narrow(old_m.where(F.col("first_snapshot_ts") > snapshots._ts(carried["cut"])))
    hits = (carried["hits"].join(known, on=at, how="left_semi")
            .unionByName(known.join(since, on=at, how="inner")))
    n_new = new.count()
    if n_new:  # positions the previous run did not look up: every old record of their brokers
        hits = hits.unionByName(new.join(narrow(_near(old_m, new)), on=at, how="inner"))
    return hits, {"positions_carried": known.count(), "positions_searched_in_all": n_new}


def _near(old_m: Any, positions: Any) -> Any:
    """The old records of the brokers of ``positions`` within each broker's range of their offsets: a filter on a
    broker's files (one broker each, ``jobs.lake.layout``) that the statistics prune, so that a position on a small
    broker does not pass over the bulk brokers' records. Exact: a record at a position passes it."""
    from functools import reduce

    from pyspark.sql import functions as F

    spans = [r for r in positions.groupBy("cluster", "broker").agg(F.min("queue_offset").alias("lo"),
                                                                   F.max("queue_offset").alias("hi")).collect()
             if None not in tuple(r)]  # (a null never joins)
    return old_m.where(reduce(lambda a, b: a | b, [
        (F.col("cluster") == r["cluster"]) & (F.col("broker") == r["broker"])
        & F.col("queue_offset").between(int(r["lo"]), int(r["hi"])) for r in spans], F.lit(False)))


def carried_positions(spark: Any, previous: dict | None, cut: dt.datetime) -> dict | None:
    """The previous run's looked-up positions and hits (:func:`position_hits`) as its ledger row keeps them; None if
    it has none (a full run, or a run before they were kept) or its cut is after this run's."""
    kept = ((previous or {}).get("horizon") or {}).get("positions")
    if not kept:
        return None
    kept_cut = dt.datetime.fromisoformat(kept["cut"])
    if kept_cut > cut:
        return None
    from pyspark.sql import functions as F

    records = None
    if "records" in kept:  # (kept since the records are carried: a run before read every hit's record once)
        records = spark.createDataFrame([tuple(r) for r in kept["records"]], AT_SCHEMA).select(
            *[F.timestamp_micros("store_us").alias("store_ts") if c == "store_ts" else c for c in AT_COLUMNS])
    return {"cut": kept_cut,
            "looked": spark.createDataFrame([tuple(r) for r in kept["looked"]], POSITION_SCHEMA),
            "hits": spark.createDataFrame([tuple(r) for r in kept["hits"]], HIT_SCHEMA),
            "records": records}


def kept_positions(positions: Any, hits: Any, cut: dt.datetime, records: Any = None) -> dict:
    """What the next run carries of this run's look-up by position (the frames small, computed once): the positions,
    the hits and, when given, the hits' records (:data:`AT_COLUMNS`)."""
    from pyspark.sql import functions as F

    def rows(df: Any, cols: list[str]) -> list[list]:  # (a null never joins: nothing to carry)
        return sorted([str(r[0]), str(r[1]), str(r[2]), *[int(v) for v in r[3:]]] for r in df.select(*cols).collect()
                      if None not in tuple(r))

    kept = {"cut": cut.astimezone(UTC).isoformat(),
            "looked": rows(positions, [*QUEUE, "queue_offset"]),
            "hits": rows(hits, [*QUEUE, "queue_offset", "physical_offset"])}
    if records is not None:  # (a record's key is never null: silver/messages' key)
        kept["records"] = sorted(
            [*r] for r in records.select(*[F.unix_micros("store_ts").alias("store_us") if c == "store_ts" else c
                                           for c in AT_COLUMNS]).collect())
    return kept


def at_records(old_m: Any, hits: Any, carried: dict | None, small: Any) -> Any:
    """The records (:data:`AT_COLUMNS`) at ``hits``: those the previous run read, from what it kept (a record never
    changes: silver/messages gains a copy's row once), the others read by position (:func:`records_at`). A stalled
    group's committed offset stays where it is, and its record lies in a row group of the broker's oldest file: read
    again each run, 248 records cost 0.46-0.50 s at 44 M records (issue 39)."""
    cols = old_m.select(*AT_COLUMNS)
    kept = (carried or {}).get("records")
    if kept is None:
        return records_at(cols, hits, small, "at_records")
    known = kept.join(hits.select(*RECORD_KEY), on=RECORD_KEY, how="left_semi")
    fresh = hits.join(kept.select(*RECORD_KEY), on=RECORD_KEY, how="left_anti")
    return small(known.unionByName(records_at(cols, fresh, small, "at_fresh")), "at_records")


def lookups(parts: dict[str, Any], series: Any, small: Any = lambda df, _name: df, *,
            carried: dict | None = None) -> dict[str, Any]:
    """Old records a recent answer reads: at committed offsets (time lag, BLOCKING_COMMIT: the columns
    ``jobs.rules.snapshots.message_at`` reads, the others null) and the copies of keys of recent DLQ records (IN_DLQ's
    original); and the old copies of recently delivered keys (a check).

    Each is a join of a small frame (computed once by ``small``, so the engine knows it is small and builds its hash
    table from it) to narrow columns, whose hits are then read whole (:func:`records_at`): never a pass over all old
    records that keeps what it sees. By key, the narrow columns are silver/key_index's where the lake keeps it
    (``jobs.lake.lookups.copies_of``: a long per record, not the key's string); by position, the old records'.
    """
    from pyspark.sql import functions as F

    from jobs.formats.topics import DLQ_PREFIX, is_system_topic_col
    from jobs.rules.snapshots import newest

    old_m = parts["old_m"]
    narrow = old_m.select(*RECORD_KEY, "topic", "queue_id", "uniq_key")  # queue_offset: a long
    positions = small(committed_positions(series, parts["lo"]), "positions")
    # read where a committed offset points: by message_at (the status' time lag, BLOCKING_COMMIT) alone, so only the
    # columns it reads (committed offsets lie all over the history: a read of every column was 10 s at 46 M records);
    # found on the queue and offset columns (no string but the topic's, dictionary-encoded), then read by position:
    # the keys' strings of every old record are not decoded
    # (a stalled group's committed offset: the previous run's hits, ``carried``, and the records first held since)
    types = {f.name: f.dataType for f in old_m.schema.fields}
    hits, searched = position_hits(old_m, positions, carried)
    hits = small(hits, "position_hits")
    at = at_records(old_m, hits, carried, small)
    at_positions = small(at.select(*[F.col(c) if c in at.columns else F.lit(None).cast(types[c]).alias(c)
                                     for c in old_m.columns]), "at_positions")
    dlq_keys = small(parts["recent_m"].where(F.col("topic").startswith(DLQ_PREFIX) & F.col("uniq_key").isNotNull())
                     .select("cluster", "uniq_key").distinct(), "dlq_keys")
    index = parts.get("key_index")  # by key: through silver/key_index where the lake keeps it
    dlq_copies = copies_of(old_m, dlq_keys, index, small, "dlq_copies")
    # the original copies of the retry copies at committed offsets: BLOCKING_COMMIT on a %RETRY% queue is reported
    # at the original (rule 20), which can be older than the copy
    retry_at = small(newest(series).where(is_system_topic_col(F.col("topic")))
                     .select(*QUEUE, F.col("committed_offset").cast("long").alias("queue_offset")).distinct(),
                     "retry_positions")
    stored = parts["recent_m"].select(*QUEUE, F.col("queue_offset").cast("long"), "uniq_key").unionByName(
        narrow.select(*QUEUE, "queue_offset", "uniq_key"))
    retry_keys = small(retry_at.join(stored, on=[*QUEUE, "queue_offset"], how="inner")
                       .where(F.col("uniq_key").isNotNull()).select("cluster", "uniq_key").distinct(), "retry_keys")
    retry_originals = copies_of(old_m.where(~is_system_topic_col(F.col("topic"))), retry_keys, index, small,
                                "retry_originals")
    delivered = small(parts["recent_d"].where(F.col("uniq_key").isNotNull()).select("cluster", "uniq_key").distinct(),
                      "delivered_keys")
    old_copies = copy_owners(copies_of(old_m, delivered, index, small, "old_copies_of_recent_keys"))
    return {"at_positions": at_positions, "dlq_copies": dlq_copies, "retry_originals": retry_originals,
            "old_copies_of_recent_keys": old_copies, "positions": positions, "position_hits": hits,
            "at_records": at, "positions_searched": searched}


def copy_owners(messages: Any) -> Any:
    """(cluster, uniq_key, owner) of the copies a group's answers read: an original (owner null: every group's) or a
    copy in the group's own %RETRY%/%DLQ% topic or on its way there (owner = the group, rule 15). Another group's retry
    copy changes nothing of this group's answers."""
    from pyspark.sql import functions as F

    from jobs.rules.snapshots import copies_in_flight
    from jobs.formats.topics import is_system_topic_col

    originals = (messages.where(F.col("uniq_key").isNotNull() & ~is_system_topic_col(F.col("topic")))
                 .select("cluster", "uniq_key", F.lit(None).cast("string").alias("owner")))
    own = copies_in_flight(messages).select("cluster", "uniq_key", F.col("consumer_group").alias("owner"))
    return originals.unionByName(own).distinct()


def _owned_by(df: Any) -> Any:
    """Rows of (cluster, consumer_group, ..., owner) where the copy counts for the group."""
    from pyspark.sql import functions as F

    return df.where(F.col("owner").isNull() | (F.col("owner") == F.col("consumer_group")))


def group_checks(frames: dict[str, Any], parts: dict[str, Any], looked: dict[str, Any], series: Any, *,
                 as_of: dt.datetime, cut: dt.datetime, previous_as_of: dt.datetime,
                 small: Any = lambda df, _name: df) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where a group's data crosses the cut: (cluster, consumer_group, reason) of the groups computed in full, and
    (cluster, consumer_group, uniq_key) of its *retry chains*, the keys recomputed on their own.

    A retry chain: a clustering group's key first delivered before the cut and retried across it (no first delivery
    after it), with a copy in the group's own retry topic the previous run already saw. Its TRACE and SKIPPED answers
    are final (no new first delivery; the copy keeps it from SKIPPED then and now); its RETRYING and IN_DLQ rows are
    recomputed from all its deliveries and copies (:func:`chain_rows`).

    ``small`` computes a frame once (``jobs.lake._spark.materializer``): the crossing keys, which the old records
    are then joined to (the copies' owners of every key ever stored were a distinct over the whole history: 2.2 GiB
    at 19 M records).
    """
    from pyspark.sql import functions as F

    from jobs.rules import dlq, snapshots

    k = snapshots._ts(cut)
    key = [*GROUP, "uniq_key"]
    recent_keys = parts["recent_d"].where(F.col("uniq_key").isNotNull()).select(*key).distinct()
    old_d = parts["old_d"]
    old_keys = old_d.select(*key)
    both = recent_keys.join(old_keys, on=key, how="left_semi")
    old_copy = _owned_by(looked["old_copies_of_recent_keys"].join(recent_keys, on=["cluster", "uniq_key"],
                                                                  how="inner")).select(*key).distinct()
    # every record first held after the cut, as-of or not: an old key's copy the deliveries' mapping may have used
    later = frames["messages"].where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") > k))
    old_key_set = small(old_keys.select("cluster", "uniq_key").where(F.col("uniq_key").isNotNull()).distinct(),
                        "old_keys")
    later = copy_owners(records_at(later, old_key_set.join(later.select(*RECORD_KEY, "uniq_key"),
                                                           on=["cluster", "uniq_key"], how="inner"),
                                   small, "later_copies_of_old_keys"))
    new_copy = _owned_by(later.join(old_keys, on=["cluster", "uniq_key"], how="inner")).select(*key).distinct()
    crossing = small(both.withColumn("reason", F.lit("a key delivered both before and after the horizon"))
                     .unionByName(new_copy.withColumn("reason", F.lit("a key delivered before the horizon has a "
                                                                      "copy stored after it")))
                     .unionByName(old_copy.withColumn("reason", F.lit("a key delivered after the horizon has a "
                                                                      "copy stored before it"))), "crossing")
    crossing_keys = small(crossing.select("cluster", "uniq_key").distinct(), "crossing_keys")
    # retry chains: clustering group, no recent first delivery, an own copy the previous run saw
    first_recent = parts["recent_d"].where(F.col("retry_times") == 0).select(*key).distinct() \
        .withColumn("_first_recent", F.lit(True))
    seen = frames["messages"].where(F.col("first_snapshot_ts").isNull()
                                    | (F.col("first_snapshot_ts") <= snapshots._ts(previous_as_of)))
    # only the copies of crossing keys matter (the join below): the small frame on the left, as relevant_messages
    seen = records_at(seen, crossing_keys.join(seen.select(*RECORD_KEY, "uniq_key"), on=["cluster", "uniq_key"],
                                               how="inner"), small, "seen_copies_of_crossing_keys")
    own = (copy_owners(seen).where(F.col("owner").isNotNull())
           .select("cluster", F.col("owner").alias("consumer_group"), "uniq_key").distinct()
           .withColumn("_own", F.lit(True)))
    bcast = snapshots.broadcast_groups(series).withColumn("_bcast", F.lit(True))
    judged = (crossing.join(first_recent, on=key, how="left").join(own, on=key, how="left")
              .join(bcast, on=GROUP, how="left").toPandas())
    chain = judged["_first_recent"].isna() & judged["_own"].notna() & judged["_bcast"].isna()
    chains = judged[chain][key].drop_duplicates().reset_index(drop=True)
    settled = old_d.where((F.col("after_snapshot_ts") > snapshots._ts(previous_as_of))
                          | (F.col("sent_back_snapshot_ts") > snapshots._ts(previous_as_of))).select(*GROUP).distinct()
    subs = frames["subscription_groups"]
    now = dlq.retry_max_times(subs, as_of=as_of).withColumnRenamed("retry_max", "_now")
    then = dlq.retry_max_times(subs, as_of=previous_as_of).withColumnRenamed("retry_max", "_then")
    changed = (now.join(then, on=[*GROUP, "broker"], how="full").where(~F.col("_now").eqNullSafe(F.col("_then")))
               .select(*GROUP).distinct())
    reasons = [
        (settled, "a delivery from before the horizon ended (or was sent back) after the previous run"),
        (changed, "retryMaxTimes changed since the previous run"),
    ]
    out = None
    for df, why in reasons:
        df = df.withColumn("reason", F.lit(why))
        out = df if out is None else out.unionByName(df)
    assert out is not None
    groups = pd.concat([judged[~chain][[*GROUP, "reason"]], out.toPandas()], ignore_index=True)
    return groups, chains


def chain_rows(spark: Any, parts: dict[str, Any], series: Any, subscription_groups: Any, chains: pd.DataFrame, *,
               as_of: dt.datetime, dlq_warn_retries: int) -> pd.DataFrame:
    """RETRYING and IN_DLQ rows of retry chains, from every delivery and copy of their keys (few rows, exact)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from jobs.rules import dlq
    from jobs.rules.snapshots import deliveries_in_window
    from schemas import dlq_candidates

    key = [*GROUP, "uniq_key"]
    x = spark.createDataFrame(chains[key].values.tolist(), StructType([StructField(c, StringType()) for c in key]))
    d = x.join(parts["recent_d"].unionByName(parts["old_d"]), on=key, how="inner")
    m = x.select("cluster", "uniq_key").distinct().join(parts["recent_m"].unionByName(parts["old_m"]),
                                                        on=["cluster", "uniq_key"], how="inner")
    dw = deliveries_in_window(d, series, as_of=as_of)
    rmax = dlq.retry_max_times(subscription_groups, as_of=as_of)
    rows = (dlq.in_dlq(dw, m, rmax).unionByName(dlq.retrying(dw, m, rmax, dlq_warn_retries=dlq_warn_retries))
            .join(x, on=key, how="left_semi"))
    return naive_utc(rows.select(*dlq_candidates.REPORT_COLUMNS).toPandas())


OLD_MAX_SCHEMA = "cluster string, topic string, broker string, queue_id int, old_max long"


def old_maxima(old_m: Any, carried: Any = None, carried_cut: dt.datetime | None = None) -> Any:
    """Per queue (``QUEUE``), ``old_max``: the highest offset of its old records (first held at or before the cut),
    system topics (``%...``) left out; ``read``: how many of them the run read.

    ``carried``: the previous run's maxima (this schema), as of its cut ``carried_cut`` (at or before this run's).
    The lake at or below the previous run's as-of time is as that run saw it (:func:`previous_run`), so only the
    records first held after its cut can raise a maximum: the run reads those instead of every old record (a scan
    of the whole history each run, 3.8 s at hour 48 of the soak).
    """
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    m = old_m.where(~F.col("topic").startswith("%") & F.col("queue_offset").isNotNull())
    if carried is not None:
        m = m.where(F.col("first_snapshot_ts") > snapshots._ts(carried_cut))
    m = m.groupBy(*QUEUE).agg(F.max(F.col("queue_offset").cast("long")).alias("old_max"),
                              F.count(F.lit(1)).alias("read"))
    if carried is not None:
        m = (m.unionByName(carried.select(*QUEUE, "old_max", F.lit(0).cast("long").alias("read")))
             .groupBy(*QUEUE).agg(F.max("old_max").alias("old_max"), F.sum("read").alias("read")))
    return m


def offsets_in_order(lo: Any, old_max: Any) -> bool:
    """Whether every old record of a queue lies below the queue's lowest recent offset ``lo`` (ingestion reads each
    segment from where the previous snapshot stopped); if not, ``lo`` does not split old from recent and the run is
    full. ``old_max``: :func:`old_maxima`."""
    from pyspark.sql import functions as F

    stray = lo.join(old_max, on=QUEUE, how="inner").where(F.col("old_max") >= F.col("lo"))
    return stray.limit(1).count() == 0


def _old_rows(old_max: pd.DataFrame) -> list[list]:
    return sorted([str(c), str(t), str(b), int(q), int(m)]
                  for c, t, b, q, m in old_max[[*QUEUE, "old_max"]].itertuples(index=False))


def full_run_state(frames: dict[str, Any], series: Any, *, as_of: dt.datetime, cut: dt.datetime,
                   small: Any) -> dict[str, Any]:
    """What a full run keeps for the next run to carry, as a horizon run keeps it: the old records' maxima
    (:func:`old_maxima`) and the look-ups at committed offsets (:func:`position_hits`) as of its cut. Without them
    the first scheduled run after a backfill passes over every old record twice (1.3 s and 0.76 s at 41 M records);
    the full run reads every record anyway. ``frames["messages"]``: every stored record."""
    parts = split_frames(frames, as_of=as_of, cut=cut)
    positions = small(committed_positions(series, parts["lo"]), "positions")
    hits = small(position_hits(parts["old_m"], positions)[0], "position_hits")
    records = at_records(parts["old_m"], hits, None, small)
    old_rows = _old_rows(old_maxima(parts["old_m"]).toPandas())
    return {"old_max": {"cut": cut.astimezone(UTC).isoformat(), "rows": old_rows},
            "positions": kept_positions(positions, hits, cut, records)}


def carried_maxima(spark: Any, previous: dict) -> tuple[Any, dt.datetime | None]:
    """The previous run's :func:`old_maxima` and its cut, as its ledger row keeps them; (None, None) if it has none
    (a full run, or a run before they were kept)."""
    kept = (previous.get("horizon") or {}).get("old_max")
    if not kept:
        return None, None
    cut = dt.datetime.fromisoformat(kept["cut"])
    rows = [(c, t, b, int(q), int(m)) for c, t, b, q, m in kept["rows"]]
    return spark.createDataFrame(rows, OLD_MAX_SCHEMA), cut


def first_delivered(old_d: Any, series: Any) -> Any:
    """(SERIES_KEY..., _first): the lowest offset old deliveries reached (rule 15), a broadcast client's own."""
    from pyspark.sql import functions as F

    from jobs.rules.snapshots import with_clients

    return (with_clients(old_d.where(F.col("queue_offset").isNotNull()), series).groupBy(*SERIES_KEY)
            .agg(F.min(F.col("queue_offset").cast("long")).alias("_first")))


# ------------------------------------------------------------------------------------------- merge (pandas)

CAUSE_RANK = {"UNKNOWN": 0, "UNPERSISTED": 1, "HEAD_BLOCKED": 2, "REWIND": 3}


def naive_utc(df: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as the engine hands them to pandas (naive UTC, ns), so carried and recomputed rows compare."""
    df = df.copy()
    for c in df.columns:
        if isinstance(df[c].dtype, pd.DatetimeTZDtype):
            df[c] = df[c].dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[ns]")
    return df


def merge_runs(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Maximal runs again after a union: adjacent or overlapping rows of one key and ``kind`` become one row
    (spec §5); a TRACE run keeps the most severe cause of its parts (rule 10: the cause of a run is its maximum)."""
    if not len(df):
        return df
    keys = SERIES_KEY + [kind]
    df = df.sort_values(keys + ["start_offset", "end_offset"], kind="mergesort").reset_index(drop=True)
    out: list[dict] = []
    for r in df.to_dict("records"):
        last = out[-1] if out else None
        if last is not None and all(last[k] == r[k] for k in keys) and r["start_offset"] <= last["end_offset"] + 1:
            last["end_offset"] = max(last["end_offset"], r["end_offset"])
            if "cause" in r and CAUSE_RANK.get(r["cause"], 0) > CAUSE_RANK.get(last["cause"], 0):
                last["cause"] = r["cause"]
            continue
        out.append(dict(r))
    res = pd.DataFrame(out, columns=df.columns)
    res["messages"] = res["end_offset"] - res["start_offset"] + 1
    return res.astype(df.dtypes.to_dict())


def with_lo(df: pd.DataFrame, lo: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its queue's ``lo`` (NaN: the queue has no recent record, every offset of it is old)."""
    return df.merge(lo, on=QUEUE, how="left")


def in_groups(df: pd.DataFrame, groups: set[tuple[str, str]]) -> pd.Series:
    if not len(df):
        return pd.Series([], dtype=bool)
    return pd.Series([(c, g) in groups for c, g in zip(df["cluster"], df["consumer_group"])], index=df.index)


def previous_rows(lake: str, previous: dict) -> dict[str, pd.DataFrame]:
    """The rows of P this run may carry (one run's rows at its ledger versions)."""
    from schemas import consumer_status, dlq_candidates, duplicated_ranges, unconsumed_ranges

    def rows(mod: Any, kinds: list[str] | None = None, col: str = "") -> pd.DataFrame:
        df = gold_runs.run_rows(lake, previous, mod.TABLE, list(mod.REPORT_COLUMNS))
        if kinds is not None:
            df = df[df[col].isin(kinds)]
        return naive_utc(df.reset_index(drop=True))

    return {"trace": rows(duplicated_ranges, ["TRACE"], "evidence"),
            "unconsumed": rows(unconsumed_ranges, ["SKIPPED", "BROADCAST_DROPPED"], "kind"),
            "dlq": rows(dlq_candidates, ["IN_DLQ", "RETRYING", "BROADCAST_DROPPED", "TRANSACTION_DISCARDED"], "reason"),
            "status": rows(consumer_status)}


def range_checks(prev: dict[str, pd.DataFrame], lo: pd.DataFrame, latest: pd.DataFrame,
                 first_old: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(cluster, group, reason) of groups whose carried ranges cannot be split at ``lo`` exactly.

    A P TRACE range across ``lo`` mixes old and recent causes; an old SKIPPED part (offsets below ``lo`` the committed
    offset is past) is carried only when P judged all of it (P's Min at most today's, P's committed offset past it).
    """
    out: list[tuple[str, str, str]] = []
    t = with_lo(prev["trace"], lo)
    cross = t[t["lo"].notna() & (t["start_offset"] < t["lo"]) & (t["end_offset"] >= t["lo"])]
    out += [(c, g, "a TRACE range of the previous run crosses the horizon offset")
            for c, g in zip(cross["cluster"], cross["consumer_group"])]
    if len(first_old) and len(latest):
        s = latest.merge(first_old, on=SERIES_KEY, how="inner")
        s = with_lo(s, lo)
        hi = s["committed_offset"].where(s["lo"].isna(), s[["committed_offset", "lo"]].min(axis=1))
        s = s.assign(_hi=hi - 1, _lo=s[["min_offset", "_first"]].max(axis=1))
        s = s[s["_lo"] <= s["_hi"]]
        p = prev["status"][SERIES_KEY + ["committed_offset", "min_offset"]].rename(
            columns={"committed_offset": "_pc", "min_offset": "_pmin"})
        s = s.merge(p, on=SERIES_KEY, how="left")
        bad = s[s["_pc"].isna() | (s["_pmin"] > s["min_offset"]) | (s["_pc"] < s["_hi"] + 1)]
        out += [(c, g, "offsets before the horizon were committed past after the previous run")
                for c, g in zip(bad["cluster"], bad["consumer_group"])]
    return out


def carried(prev: dict[str, pd.DataFrame], lo: pd.DataFrame, latest: pd.DataFrame,
            keep: set[tuple[str, str]]) -> dict[str, pd.DataFrame]:
    """P's final rows of the groups in ``keep``: what lies below ``lo`` (rule 24)."""
    from schemas import dlq_candidates, duplicated_ranges, unconsumed_ranges

    t = prev["trace"][in_groups(prev["trace"], keep)]
    t = with_lo(t, lo)
    trace = t[t["lo"].isna() | (t["end_offset"] < t["lo"])][duplicated_ranges.REPORT_COLUMNS]
    u = with_lo(prev["unconsumed"][in_groups(prev["unconsumed"], keep)], lo)
    # BROADCAST_DROPPED: the offsets below lo; SKIPPED: below lo and min(C_S), from today's Min_S (rule 24)
    b = u[u["kind"] == "BROADCAST_DROPPED"].copy()
    b["end_offset"] = b["end_offset"].where(b["lo"].isna(), b[["end_offset"]].assign(x=b["lo"] - 1).min(axis=1))
    sk = u[u["kind"] == "SKIPPED"].merge(latest[SERIES_KEY + ["committed_offset", "min_offset"]], on=SERIES_KEY,
                                         how="inner")
    top = sk["committed_offset"].where(sk["lo"].isna(), sk[["committed_offset", "lo"]].min(axis=1)) - 1
    sk["end_offset"] = sk[["end_offset"]].assign(x=top).min(axis=1)
    sk["start_offset"] = sk[["start_offset", "min_offset"]].max(axis=1)
    unconsumed = pd.concat([b, sk])
    unconsumed = unconsumed[unconsumed["start_offset"] <= unconsumed["end_offset"]][unconsumed_ranges.REPORT_COLUMNS]
    d = with_lo(prev["dlq"][in_groups(prev["dlq"], keep)], lo)
    old_key = d["lo"].isna() | (d["queue_offset"] < d["lo"])
    dlq = d[d["reason"].isin(["IN_DLQ", "TRANSACTION_DISCARDED"]) | old_key][dlq_candidates.REPORT_COLUMNS]
    return {"trace": trace, "unconsumed": unconsumed.astype({c: "int64" for c in ("start_offset", "end_offset")}),
            "dlq": dlq}


def _groups_frame(spark: Any, groups: set[tuple[str, str]]) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("cluster", StringType()), StructField("consumer_group", StringType())])
    return spark.createDataFrame(sorted(groups), schema)


def _only(df: Any, groups: Any, *, keep: bool) -> Any:
    return df.join(groups, on=GROUP, how="left_semi" if keep else "left_anti")


def series_of(series: Any, groups: Any) -> Any:
    """The offset series of ``groups``, plus one key at each cluster's newest snapshot: t_S of rule 8 is the cluster's
    newest snapshot over every group, so the window of the groups' deliveries is the full run's (that key's rows are
    dropped with the other groups')."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("cluster").orderBy(F.col("snapshot_ts").desc(), *SERIES_KEY[1:])
    edge = series.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")
    return _only(series, groups, keep=True).unionByName(_only(edge, groups, keep=False))


def reports_from(spark: Any, series: Any, dels: Any, msgs: dict[str, Any], subscription_groups: Any, *,
                 as_of: dt.datetime, window: int, dlq_warn_retries: int, blocking_min_age_s: int,
                 falls: Any, commits: Any, evidence: Any, fifo: Any, expired_before: Any = None,
                 earlier_first: Any = None) -> dict[str, Any]:
    """The five reports (Spark frames) from the frames a horizon run reads (messages by use: ``recent`` for the
    reports that read records one by one, ``positions`` for those at a committed offset, ``dlq`` for IN_DLQ; the
    offsets as jobs.reconcile.offset_state carries them: ``falls`` every decrease, ``commits`` the snapshots since
    the first of ``dels``, ``expired_before`` the previous run's EXPIRED rows; ``evidence`` the local redeliveries,
    jobs.rules.modes; ``fifo`` the groups with the FIFO flag, :func:`jobs.rules.modes.fifo_groups`, built once a
    run)."""
    from jobs.rules import corrections, dlq, duplicates, modes, replay, status, unconsumed
    from jobs.rules.snapshots import deliveries_in_window

    dw = deliveries_in_window(dels, series, as_of=as_of)
    rmax = dlq.retry_max_times(subscription_groups, as_of=as_of)
    orderly = modes.orderly_pairs(series, evidence, fifo)
    recent = msgs["recent"]
    return {
        "duplicated_ranges": duplicates.duplicated_ranges(series, dels, recent, as_of=as_of, falls=falls),
        "unconsumed_ranges": (unconsumed.backlog(series).unionByName(unconsumed.expired(series, expired_before))
                              .unionByName(unconsumed.skipped(series, dw, recent, earlier_first))
                              .unionByName(unconsumed.broadcast_dropped(dw, recent))),
        "offset_corrections": corrections.offset_corrections(series),
        "dlq_candidates": (dlq.in_dlq(dw, msgs["dlq"], rmax)
                           .unionByName(dlq.retrying(dw, recent, rmax, dlq_warn_retries=dlq_warn_retries,
                                                     orderly=orderly))
                           .unionByName(dlq.blocking_commit(series, dw, msgs["positions"], rmax,
                                                            blocking_min_age_s=blocking_min_age_s))
                           .unionByName(dlq.broadcast_dropped(dw, recent))
                           .unionByName(dlq.orderly_blocked(series, dw, msgs["positions"], rmax, orderly, fifo,
                                                            dlq_warn_retries=dlq_warn_retries))
                           .unionByName(dlq.transaction_discarded(recent))),
        "consumer_status": status.consumer_status(series, msgs["positions"], window=window,
                                                  modes=modes.mode_rows(series, evidence, fifo)),
        "_agreement": replay.agreement(dels, commits, as_of=as_of),
    }


def commits_since_first(consumer_offsets: Any, dels: Any, *, as_of: dt.datetime) -> Any:
    """The snapshots the replay of ``dels`` can compare: from the first delivery's start on (an earlier snapshot has
    no ProcessQueue in the replay, jobs.rules.replay.replayed_commits), not every snapshot since the lake began."""
    from pyspark.sql import functions as F

    from jobs.rules import snapshots

    first = dels.agg(F.min("start_ts")).collect()[0][0]  # (naive UTC, as snapshots._ts takes it; None: no delivery)
    return snapshots.commits(consumer_offsets, as_of=as_of, since=first)


def newest_store_hour(m: Any, *, as_of: dt.datetime) -> dt.datetime | None:
    """The audit window's last hour: the newest store hour of any queue's record stored by ``as_of`` (``m``: the records
    the run sees), as ``jobs.rules.audit.stored_hours`` ends it."""
    from pyspark.sql import functions as F

    from jobs.formats.topics import is_system_topic_col
    from jobs.rules import snapshots

    got = (m.where((F.col("store_ts") <= snapshots._ts(as_of)) & ~is_system_topic_col(F.col("topic"))
                   & F.col("queue_offset").isNotNull()).agg(F.max("store_ts")).collect()[0][0])
    return _utc_hour(got)


def full_audit_state(stats: Any) -> dict[str, Any]:
    """What a full run keeps of its audit (``summary.horizon.audit``): the window's last hour (the newest hour of its
    hour stats, ``jobs.rules.audit.stored_hours``), so that the next run carries the full run's gold/audit_hours rows
    instead of computing the 72 hours again (issue 39: 42 M records read by the first hourly run after a 40-hour
    backfill, 32 of its 96 CPU seconds)."""
    from pyspark.sql import functions as F

    return {"whole": "a full run", "newest_hour": _hour_text(_utc_hour(stats.agg(F.max("hour")).collect()[0][0]))}


def _utc_hour(t: Any) -> dt.datetime | None:
    """An engine timestamp (naive UTC) as an aware UTC hour: the audit window's ends."""
    return None if t is None else pd.Timestamp(t).floor("h").to_pydatetime().replace(tzinfo=UTC)


def _hour_text(hour: dt.datetime | None) -> str | None:
    """How ``summary.horizon.audit.newest_hour`` keeps an hour."""
    return None if hour is None else hour.strftime("%Y-%m-%dT%H:%M:%SZ")


def audit_frame(spark: Any, lake: str, frames: dict[str, Any], series: Any, *, as_of: dt.datetime, previous: dict,
                tmp: str, then: Any = None) -> tuple[Any, dict[str, Any]]:
    """gold/audit_hours (jobs.rules.audit) and what it read: the previous run's hour stats plus those of the records it
    did not see (:func:`jobs.rules.audit.seen_between`), not every record of the 72 hours.

    Whole (every record of the window, as a full run) when P kept no ``newest_hour`` (a run of a release before
    :func:`full_audit_state`) or the lake holds records without a snapshot (a tabular export: P saw them whatever
    their time, so they do not split by time). A queue P's keys did not consume has no stats in P's rows: its hours
    are computed whole. The window ends at the newest store hour of any queue (P's or the new records'). Deliveries: those first held from
    ``AUDIT_SLACK`` before the window (a snapshot folder holds what was stored while it was copied, and so were the
    trace records of their deliveries).
    """
    from pyspark.sql import functions as F

    from jobs.lake import _spark
    from jobs.rules import audit, snapshots
    from schemas import audit_hours as audit_schema

    m = snapshots.messages_as_of(frames["stored_messages"], as_of=as_of)
    d = snapshots.deliveries_as_of(frames["deliveries"], as_of=as_of)
    before = (previous.get("horizon") or {}).get("audit") or {}
    version = previous.get("table_versions", {}).get(audit_schema.TABLE.qualified)
    why = ("the previous run kept no audit state" if "newest_hour" not in before or version is None
           else "records without a snapshot" if m.where(F.col("first_snapshot_ts").isNull()).limit(1).count()
           else "")
    if why:
        stored = m.where(F.col("store_ts") <= snapshots._ts(as_of))
        newest = newest_store_hour(m, as_of=as_of)
        band = stored if newest is None else stored.where(
            F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") >= snapshots._ts(
                newest - dt.timedelta(hours=audit.AUDIT_HOURS) - AUDIT_SLACK)))
        stats = audit.hour_stats(band)
        info: dict[str, Any] = {"whole": why, "messages_read": band.count()}
    else:
        since = previous["as_of"]
        changed = _spark.materialize(spark, audit.hour_stats(audit.seen_between(m, since=since, as_of=as_of)),
                                     f"{tmp}/audit_changed")
        if then is None:  # (the previous run's keys: its tail holds every one, jobs.reconcile.offset_state)
            then = snapshots.offset_series(frames["consumer_offsets"], frames["queue_bounds"], as_of=since)
        new_queues = _spark.materialize(spark, series.select(*QUEUE).distinct().join(
            then.select(*QUEUE).distinct(), on=QUEUE, how="left_anti"), f"{tmp}/audit_new_queues")
        kept = (_delta.read(spark, lake, audit_schema.TABLE, at=version if _delta.table_format() == "delta" else None)
                .where(F.col("run_id") == previous["run_id"])
                .select(*QUEUE, "hour", "first_offset", "last_offset", "stored").distinct())
        stats = audit.combine(kept, changed)
        queues_whole = new_queues.count()
        if queues_whole:  # (a join with no queue still reads every record's queue columns)
            # the small side on the left: the engine builds its hash table from it
            whole = audit.hour_stats(new_queues.join(m.where(F.col("store_ts") <= snapshots._ts(as_of)), on=QUEUE,
                                                     how="inner"))
            stats = stats.join(new_queues, on=QUEUE, how="left_anti").unionByName(whole)
        row = changed.agg(F.max("hour"), F.sum("stored")).collect()[0]
        hours = [pd.Timestamp(before["newest_hour"]).to_pydatetime()] if before["newest_hour"] else []
        hours += [_utc_hour(row[0])] if row[0] is not None else []
        newest = max(hours) if hours else None
        info = {"carried": previous["run_id"], "messages_read": int(row[1] or 0),
                "queues_whole": queues_whole}
    info["newest_hour"] = _hour_text(newest)
    if newest is None:  # nothing stored: no hour to audit
        return audit.audit_rows(series, d.limit(0), stats.limit(0)), info
    start = newest - dt.timedelta(hours=audit.AUDIT_HOURS)
    window = spark.range(1).select(F.lit(newest).cast("timestamp").alias("_newest"))
    band_d = d.where(F.col("first_snapshot_ts").isNull()
                     | (F.col("first_snapshot_ts") >= snapshots._ts(start - AUDIT_SLACK)))
    # read several times (audit.delivered_per_hour): computed once
    windowed = _spark.materialize(spark, audit.in_window(stats, window), f"{tmp}/audit_stats")
    rows = audit.audit_rows(series, snapshots.deliveries_in_window(band_d, series, as_of=as_of), windowed,
                            keep=lambda df, name: _spark.materialize(spark, df, f"{tmp}/{name}"))
    return rows, info


def compute(spark: Any, lake: str, frames: dict[str, Any], tmp: str, *, as_of: dt.datetime, cut: dt.datetime,
            previous: dict, window: int, dlq_warn_retries: int, blocking_min_age_s: int,
            say: Any) -> dict[str, Any] | None:
    """The run's report rows (pandas), dashboard frames and what it read; None when the lake does not split at the
    cut (the caller then runs in full)."""
    from pyspark.sql import functions as F

    from jobs.lake import _spark
    from jobs.reconcile import reconcile
    from jobs.rules import dlq, modes, snapshots, status
    from schemas import messages as messages_schema

    parts = split_frames(frames, as_of=as_of, cut=cut)
    kept_max, kept_cut = carried_maxima(spark, previous)
    if kept_cut is not None and kept_cut > cut:
        kept_max = kept_cut = None
    old_max = old_maxima(parts["old_m"], kept_max, kept_cut).toPandas()  # one row per queue, computed once
    old_rows = _old_rows(old_max)
    if not offsets_in_order(parts["lo"], spark.createDataFrame([tuple(r) for r in old_rows], OLD_MAX_SCHEMA)):
        return None
    # retryMaxTimes as of the previous run and after: its latest rows and the silver rows after its time
    subs = offset_state.subscriptions(spark, lake, frames["subscription_groups"], previous)
    if subs is not None:
        frames = {**frames, "subscription_groups": _spark.materialize(spark, subs, f"{tmp}/subscriptions")}
    # every report reads the offset series, some several times: computed once (Sail recomputes a shared frame); from
    # the previous run's tail and the offsets after its time when it left them (jobs.reconcile.offset_state)
    held = _spark.materialize(spark, offset_state.held(spark, lake, frames, previous, as_of=as_of), f"{tmp}/held")
    offsets = offset_state.carried(spark, lake, frames, previous, as_of=as_of, window=window, held=held)
    series = _spark.materialize(spark, offsets.series if offsets is not None else snapshots.offset_series(
        frames["consumer_offsets"], frames["queue_bounds"], as_of=as_of, held=held), f"{tmp}/series")
    falls = _spark.materialize(spark, offset_state.with_later_falls(offsets, series) if offsets is not None
                               else snapshots.decreases(series), f"{tmp}/falls")
    expired_before = offsets.expired_before if offsets is not None else None
    say("reconcile:   old records in order")
    looked = lookups(parts, series, small=_spark.materializer(spark, f"{tmp}/lookups"),
                     carried=carried_positions(spark, previous, cut))
    reasons, chains = group_checks(frames, parts, looked, series, as_of=as_of, cut=cut,
                                   previous_as_of=previous["as_of"], small=_spark.materializer(spark, f"{tmp}/checks"))
    say("reconcile:   group checks done")
    prev = previous_rows(lake, previous)
    lo = parts["lo"].toPandas()
    latest = snapshots.latest(series).select(*SERIES_KEY, "committed_offset", "min_offset").toPandas()
    first_old = first_delivered(parts["old_d"], series)
    more = range_checks(prev, lo, latest, first_old.toPandas())
    # consume modes (jobs.rules.modes): the previous run's local redeliveries plus the recent ones; a group whose
    # orderly pairs changed since then is computed in full (its carried RETRYING rows were judged by the old mode)
    old_evidence = _rows_frame(spark, previous["horizon"]["local_redelivery"], MODE_COLUMNS)
    fresh = modes.local_redeliveries(snapshots.deliveries_in_window(parts["recent_d"], series, as_of=as_of),
                                     parts["recent_m"])
    evidence = _spark.materialize(spark, old_evidence.unionByName(fresh).distinct(), f"{tmp}/evidence")
    fifo = _spark.materialize(spark, modes.fifo_groups(frames["subscription_groups"], as_of=as_of), f"{tmp}/fifo")
    orderly_now = modes.orderly_pairs(series, evidence, fifo)
    changed = {(c, g) for c, g, _ in {tuple(r) for r in _pairs(orderly_now)}
               ^ {tuple(r) for r in previous["horizon"]["orderly"]}}
    more = [*more, *[(c, g, "its consume mode changed since the previous run") for c, g in sorted(changed)]]
    why_full: dict[tuple[str, str], set[str]] = {}
    for c, g, why in [*zip(reasons["cluster"], reasons["consumer_group"], reasons["reason"]), *more]:
        why_full.setdefault((c, g), set()).add(why)
    fallback = {cg: "; ".join(sorted(whys)) for cg, whys in why_full.items()}  # every reason, in a stable order
    full_groups = _groups_frame(spark, set(fallback))
    say(f"reconcile: horizon {reconcile.reports.format_ts(cut)}, carrying {previous['run_id']}; checked, "
        f"{len(fallback)} group(s) in full")

    # the recent part: recent deliveries and the old ones still open, recent records and the looked-up old ones
    tail = open_entries(parts["old_d"], parts["recent_d"], cut=cut, small=_spark.materializer(spark, f"{tmp}/open"))
    dels = _only(parts["recent_d"].unionByName(tail), full_groups, keep=False)
    dels = _spark.materialize(spark, dels, f"{tmp}/deliveries")
    # the records at a committed offset the reports read lie at a key's latest or newest snapshot: the series has them
    recent = _spark.materialize(spark, snapshots.relevant_messages(
        parts["recent_m"], dels, series, small=_spark.materializer(spark, f"{tmp}/recent"))
        .select(*messages_schema.TABLE.columns), f"{tmp}/messages")
    # computed once (lookups' small)
    at_positions, dlq_copies, retry_originals = looked["at_positions"], looked["dlq_copies"], looked["retry_originals"]
    msgs = {"recent": recent, "positions": recent.unionByName(at_positions).unionByName(retry_originals),
            "dlq": recent.unionByName(dlq_copies)}
    out = reports_from(spark, series, dels, msgs, frames["subscription_groups"], as_of=as_of, window=window,
                       dlq_warn_retries=dlq_warn_retries, blocking_min_age_s=blocking_min_age_s, falls=falls,
                       commits=commits_since_first(frames["consumer_offsets"], dels, as_of=as_of),
                       evidence=evidence, fifo=fifo, expired_before=expired_before,
                       earlier_first=_only(first_old, full_groups, keep=False))
    pdfs = {n: naive_utc(_only(df, full_groups, keep=False).select(*reconcile.REPORT_MODULES[n].REPORT_COLUMNS)
                         .toPandas()) for n, df in out.items() if not n.startswith("_")}
    agreement = [_only(out["_agreement"], full_groups, keep=False).toPandas()]
    offsets_read = "all" if offsets is None else \
        f"after {reconcile.reports.format_ts(offsets.since)} and the previous run's tail"
    read = {"consumer_offsets": offsets_read, "queue_bounds": offsets_read, "series_rows": series.count(),
            "subscription_groups": "all" if subs is None else
            f"after {reconcile.reports.format_ts(previous['as_of'])} and the previous run's latest",
            "messages_recent": parts["recent_m"].count(), "messages_old_for_order": int(old_max["read"].sum()),
            "messages_old_looked_up": at_positions.count() + dlq_copies.count() + retry_originals.count(),
            **looked["positions_searched"],
            "deliveries_recent_and_open": dels.count()}
    say("reconcile:   recent part reconciled")

    if fallback:  # those groups as a full run computes them
        d_full = _only(frames["deliveries"], full_groups, keep=True)
        m_full = _spark.materialize(spark, snapshots.relevant_messages(
            frames["stored_messages"], d_full, _only(frames["consumer_offsets"], full_groups, keep=True),
            small=_spark.materializer(spark, f"{tmp}/full")).select(*messages_schema.TABLE.columns),
            f"{tmp}/messages_full")
        dw_full = snapshots.deliveries_as_of(d_full, as_of=as_of)
        ev_full = _spark.materialize(spark, modes.local_redeliveries(
            snapshots.deliveries_in_window(dw_full, series, as_of=as_of),
            snapshots.messages_as_of(m_full, as_of=as_of)), f"{tmp}/evidence_full")
        evidence = _only(evidence, full_groups, keep=False).unionByName(_only(ev_full, full_groups, keep=True))
        full = reports_from(spark, series_of(series, full_groups), dw_full,
                            {k: snapshots.messages_as_of(m_full, as_of=as_of) for k in ("recent", "positions", "dlq")},
                            frames["subscription_groups"], as_of=as_of, window=window,
                            dlq_warn_retries=dlq_warn_retries, blocking_min_age_s=blocking_min_age_s, falls=falls,
                            commits=commits_since_first(_only(frames["consumer_offsets"], full_groups, keep=True),
                                                        dw_full, as_of=as_of),
                            evidence=ev_full, fifo=fifo, expired_before=expired_before)
        for n in pdfs:
            extra = naive_utc(_only(full[n], full_groups, keep=True)
                              .select(*reconcile.REPORT_MODULES[n].REPORT_COLUMNS).toPandas())
            pdfs[n] = pd.concat([pdfs[n], extra], ignore_index=True) if len(extra) else pdfs[n]
        agreement.append(_only(full["_agreement"], full_groups, keep=True).toPandas())
        read["deliveries_of_full_groups"] = d_full.count()
        read["messages_of_full_groups"] = "all (relevant_messages)"
        say("reconcile:   groups in full reconciled")

    keep = {(c, g) for c, g in zip(latest["cluster"], latest["consumer_group"])}
    keep |= {(c, g) for df in prev.values() for c, g in zip(df["cluster"], df["consumer_group"])}
    keep -= set(fallback)
    pdfs = merge(pdfs, carried(prev, lo, latest, keep))
    chains = chains[in_groups(chains, keep)] if len(chains) else chains
    if len(chains):  # their RETRYING and IN_DLQ rows, recomputed whole
        d = pdfs["dlq_candidates"]
        mine = d.merge(chains.assign(_x=True), on=[*GROUP, "uniq_key"], how="left")["_x"].notna().to_numpy()
        redo = chain_rows(spark, parts, series, frames["subscription_groups"], chains, as_of=as_of,
                          dlq_warn_retries=dlq_warn_retries)
        pdfs["dlq_candidates"] = pd.concat([d[~(mine & d["reason"].isin(["IN_DLQ", "RETRYING"]).to_numpy())], redo],
                                           ignore_index=True).astype(d.dtypes.to_dict())
        read["retry_chains"] = len(chains)
    audit_rows, audit_info = audit_frame(spark, lake, frames, series, as_of=as_of, previous=previous, tmp=tmp,
                                         then=offsets.tail_before if offsets is not None else None)
    traced = _rows_frame(spark, previous["horizon"]["traced"], ("cluster", "consumer_group")).unionByName(
        snapshots.deliveries_as_of(parts["recent_d"], as_of=as_of).select("cluster", "consumer_group"))
    mode_state = reconcile.mode_state(evidence, orderly_now, traced)
    return {"pdfs": pdfs, "agreement": pd.concat(agreement, ignore_index=True), "modes": mode_state,
            "status_samples": status.status_samples(series, window=window), "audit_hours": audit_rows,
            "series_tail": snapshots.unknown_newest(series), "offset_decreases": falls, "series": series,
            "subscription_latest": dlq.latest_subscriptions(frames["subscription_groups"], as_of=as_of),
            "held_queues": held, "offsets": offsets,
            "audit": audit_info, "read": read,
            "full_groups": {f"{c}/{g}": why for (c, g), why in sorted(fallback.items())},
            "old_max": {"cut": cut.astimezone(UTC).isoformat(), "rows": old_rows},
            "positions": kept_positions(looked["positions"], looked["position_hits"], cut, looked["at_records"])}


def _rows_frame(spark: Any, rows: list[list[str]], columns: tuple[str, ...]) -> Any:
    """Rows a previous run kept in its ledger summary (jobs.reconcile.reconcile.mode_state) as a string frame."""
    from pyspark.sql.types import StringType, StructField, StructType

    return spark.createDataFrame([tuple(r) for r in rows], StructType([StructField(c, StringType()) for c in columns]))


def _pairs(df: Any) -> list[list[str]]:
    return [[str(c), str(g), str(t)] for c, g, t in df.select(*MODE_COLUMNS).collect()]


def merge(pdfs: dict[str, pd.DataFrame], keep: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Recomputed rows plus P's final rows, ranges made maximal again (rule 24)."""
    out = dict(pdfs)
    dup = pdfs["duplicated_ranges"]
    trace = pd.concat([dup[dup["evidence"] == "TRACE"], keep["trace"]], ignore_index=True)
    out["duplicated_ranges"] = pd.concat([dup[dup["evidence"] != "TRACE"], merge_runs(trace, "evidence")],
                                         ignore_index=True).astype(dup.dtypes.to_dict())
    unc = pdfs["unconsumed_ranges"]
    moved = unc["kind"].isin(["SKIPPED", "BROADCAST_DROPPED"])
    ranges = pd.concat([unc[moved], keep["unconsumed"]], ignore_index=True).astype(unc.dtypes.to_dict())
    out["unconsumed_ranges"] = pd.concat([unc[~moved], merge_runs(ranges, "kind")],
                                         ignore_index=True).astype(unc.dtypes.to_dict())
    d = pdfs["dlq_candidates"]
    k = keep["dlq"]
    recomputed = d[d["reason"] == "IN_DLQ"][["cluster", "consumer_group", "uniq_key", "dlq_eta_ts"]].assign(_r=True)
    k = k.merge(recomputed, on=["cluster", "consumer_group", "uniq_key", "dlq_eta_ts"], how="left")
    k = k[~((k["reason"] == "IN_DLQ") & k["_r"].notna())].drop(columns="_r")
    # a discarded transaction's row is at its newest copy: a recent copy replaces the one P reported
    where = ["cluster", "topic", "broker", "queue_id", "uniq_key"]
    redone = d[d["reason"] == "TRANSACTION_DISCARDED"][where].drop_duplicates().assign(_t=True)
    k = k.merge(redone, on=where, how="left")
    k = k[~((k["reason"] == "TRANSACTION_DISCARDED") & k["_t"].notna())].drop(columns="_t")
    out["dlq_candidates"] = pd.concat([d, k], ignore_index=True).astype(d.dtypes.to_dict())
    return out
