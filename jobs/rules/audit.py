"""gold/audit_hours: the hourly audit's inputs, per group, client, queue and store hour (dashboard audit view).

In a consume queue offsets grow with store time (the broker appends under one lock), so the messages a queue
stored in one hour are one offset interval. Each interval is stored once per run with how many of its offsets
the group's trace shows delivered; the dashboard intersects the intervals with the run's committed offsets and
ranges (``jobs.ops.dashboard``). Pure DataFrame -> DataFrame, like every report.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.rules.snapshots import QUEUE, SERIES_KEY, _ts
from jobs.formats.topics import is_system_topic_col
from schemas import audit_hours as schema

AUDIT_HOURS = 72


def hour_stats(messages: DataFrame) -> DataFrame:
    """(QUEUE, hour, first_offset, last_offset, stored) of every store hour of every queue, no window: the offsets
    each queue stored per hour. ``messages`` must already be the records the run sees, up to its as-of time."""
    return (
        messages.where(~is_system_topic_col(F.col("topic")) & F.col("queue_offset").isNotNull())
        .groupBy(*QUEUE, F.date_trunc("hour", F.col("store_ts")).alias("hour"))
        .agg(F.min(F.col("queue_offset").cast("long")).alias("first_offset"),
             F.max(F.col("queue_offset").cast("long")).alias("last_offset"),
             F.count(F.lit(1)).alias("stored"))
    )


def seen_between(messages: DataFrame, *, since: dt.datetime, as_of: dt.datetime) -> DataFrame:
    """The records a run as of ``as_of`` counts and one as of ``since`` did not: first held by a snapshot after
    ``since``, or stored after it (a snapshot folder is named before it is copied and can hold records stored after its
    name). With the records both see, this partitions what the later run sees (no record is in both), so the earlier
    run's hour stats plus these give the later run's (:func:`combine`).

    ``messages`` must be the records the later run sees (first held at or before ``as_of``, none without a snapshot).
    """
    return messages.where(((F.col("first_snapshot_ts") > _ts(since)) | (F.col("store_ts") > _ts(since)))
                          & (F.col("store_ts") <= _ts(as_of)))


def combine(*stats: DataFrame) -> DataFrame:
    """Hour stats of disjoint sets of records, as one: the lowest first offset, the highest last, the sum stored."""
    out = stats[0]
    for s in stats[1:]:
        out = out.unionByName(s)
    return (out.groupBy(*QUEUE, "hour")
            .agg(F.min("first_offset").alias("first_offset"), F.max("last_offset").alias("last_offset"),
                 F.sum("stored").cast("long").alias("stored")))


def in_window(stats: DataFrame, newest: DataFrame, *, hours: int = AUDIT_HOURS) -> DataFrame:
    """The hours of ``stats`` in the ``hours`` hours up to ``newest`` (a one-row frame ``_newest``)."""
    return (newest.crossJoin(stats)
            .where((F.col("hour") > F.col("_newest") - F.expr(f"INTERVAL {int(hours)} HOURS"))
                   & (F.col("hour") <= F.col("_newest")))
            .drop("_newest"))


def stored_hours(messages: DataFrame, *, as_of: dt.datetime, hours: int = AUDIT_HOURS) -> DataFrame:
    """(QUEUE, hour, first_offset, last_offset, stored): the offsets each queue stored per hour, in the last ``hours``
    hours up to the newest store hour at or before ``as_of`` (not the as-of time itself: a run as of today over a
    lake whose traffic stopped last week still audits that traffic).

    ``messages`` must already be the records the run sees (:func:`jobs.rules.snapshots.messages_as_of`).
    """
    per_hour = hour_stats(messages.where(F.col("store_ts") <= _ts(as_of)))
    return in_window(per_hour, per_hour.agg(F.max("hour").alias("_newest")), hours=hours)


def audit_rows(series: DataFrame, deliveries: DataFrame, stats: DataFrame,
               keep: Callable[[DataFrame, str], DataFrame] = lambda df, name: df) -> DataFrame:
    """The gold/audit_hours rows (without run_id) from the windowed hour stats (:func:`stored_hours`).

    Args:
        series: :func:`jobs.rules.snapshots.offset_series` (which queues each group and client consumes).
        deliveries: windowed, client-normalised deliveries (:func:`jobs.rules.snapshots.deliveries_in_window`).
        stats: the hour stats of every stored record the run sees, in the window (not only the traced ones).
        keep: computes a frame once (``jobs.lake._spark.materializer``): the delivered offsets are read twice
            (:func:`delivered_per_hour`), and the engine would otherwise read the window's deliveries twice.

    Returns:
        ``schemas.audit_hours.COLUMNS``: one row per key of ``series`` and hour its queue stored messages in.
    """
    from pyspark.sql import Window

    # each key numbered (report-sized, one partition; deterministic, so a recomputed frame numbers alike): the
    # delivered offsets are made distinct, sorted and placed per key, on one long, not six columns (issue 39)
    keys = keep(series.select(*SERIES_KEY).distinct().withColumn(
        "_kid", F.row_number().over(Window.partitionBy(F.lit(0)).orderBy(*SERIES_KEY))), "audit_keys")
    per_key = keys.join(stats, on=QUEUE, how="inner")
    seen = keep(deliveries.where(~is_system_topic_col(F.col("topic")) & F.col("queue_offset").isNotNull())
                .join(keys, on=SERIES_KEY, how="inner")  # (an equi-join: a key with a null column matches nothing)
                .select("_kid", F.col("queue_offset").cast("long").alias("_o")).distinct(), "audit_seen")
    placed = delivered_per_hour(per_key.select("_kid", "hour", "first_offset", "last_offset"), seen, key=["_kid"])
    out = per_key.join(placed, on=["_kid", "hour"], how="left").withColumn(
        "delivered", F.coalesce(F.col("delivered"), F.lit(0)))
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    return out.select(*[F.col(k).cast(types[k]).alias(k) for k in schema.COLUMNS])


def delivered_per_hour(per_key: DataFrame, seen: DataFrame, *, key: list[str] = SERIES_KEY) -> DataFrame:
    """(``key``, hour, delivered): how many of the offsets ``seen`` (``key``, ``_o``) lie in each hour's
    [first_offset, last_offset] of ``per_key``; an offset in two hours' intervals counts in both. ``key``: the
    series key's columns, or one column numbering them (:func:`audit_rows`).

    A queue's hours are disjoint intervals in offset order (offsets grow with store time): each delivered offset is
    then placed by the nearest interval start at or below it, one sort per key, where a range join compared it with
    every hour of its key (issue 39: deliveries times hours, 40 hours of history, 4 times 10 hours' cost). Keys whose
    intervals overlap (a store clock that went back) are joined on the range as before.
    """
    from pyspark.sql import Window

    seen = seen.where(reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in key]))  # as an equi-join
    by_start = Window.partitionBy(*key).orderBy("first_offset", "hour")
    overlapping = (per_key.withColumn("_before", F.max("last_offset").over(
        by_start.rowsBetween(Window.unboundedPreceding, -1)))
        .where(F.col("_before") >= F.col("first_offset")).select(*key).distinct())
    b = per_key.join(overlapping, on=key, how="left_semi").alias("b")
    ranged = (
        b.join(seen.join(overlapping, on=key, how="left_semi").alias("d"),
               on=[F.col(f"b.{k}") == F.col(f"d.{k}") for k in key]
               + [F.col("d._o") >= F.col("b.first_offset"), F.col("d._o") <= F.col("b.last_offset")], how="inner")
        .select(*[F.col(f"b.{k}").alias(k) for k in key], F.col("b.hour").alias("hour"))
    )
    starts = (per_key.join(overlapping, on=key, how="left_anti")
              .select(*key, F.col("first_offset").alias("_o"), F.lit(0).alias("_k"), "hour",
                      F.col("last_offset").alias("_last")))
    no_hour = F.lit(None).cast(per_key.schema["hour"].dataType)
    offsets = (seen.join(overlapping, on=key, how="left_anti")
               .select(*key, "_o", F.lit(1).alias("_k"), no_hour.alias("hour"),
                       F.lit(None).cast("long").alias("_last")))
    upto = Window.partitionBy(*key).orderBy("_o", "_k").rowsBetween(Window.unboundedPreceding, 0)
    placed = (starts.unionByName(offsets)
              .select(*key, "_o", "_k", F.last("hour", ignorenulls=True).over(upto).alias("_hour"),
                      F.last("_last", ignorenulls=True).over(upto).alias("_upto"))
              .where((F.col("_k") == 1) & F.col("_hour").isNotNull() & (F.col("_o") <= F.col("_upto")))
              .select(*key, F.col("_hour").alias("hour")))
    return placed.unionByName(ranged).groupBy(*key, "hour").agg(F.count(F.lit(1)).alias("delivered"))
