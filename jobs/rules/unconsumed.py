"""gold/unconsumed_ranges: offsets the group has not consumed (spec §4 Unconsumed, docs/semantics.md 13-16).

* ``BACKLOG`` (rule 14): ``[max(C_S, Min_S), Max_S - 1]`` at the latest snapshot, when not empty.
* ``EXPIRED`` (rule 13): the union of ``[C_s, Min_s - 1]`` over the snapshots with ``C_s < Min_s``.
* ``SKIPPED`` (rule 15, needs deliveries): offsets in ``[max(Min_S, first delivered offset), C_S - 1]`` (a broadcast
  client's own first delivered offset) whose
  message is known and was never consumed successfully, with no retry, DLQ or scheduled retry copy, and that are
  not BROADCAST_DROPPED for the same client (an offset has one kind).
* ``BROADCAST_DROPPED`` (rule 16): a broadcast group's failed deliveries, per client.
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.rules.ranges import interval_union, offset_runs
from jobs.rules.snapshots import (
    QUEUE,
    SERIES_KEY,
    copies_in_flight,
    deliveries_in_window,
    first_original,
    known,
    latest,
    message_at,
    newest,
    original_copies,
)
from jobs.formats.topics import is_system_topic_col
from schemas import unconsumed_ranges as schema

COLUMNS = schema.REPORT_COLUMNS


def _typed(df: DataFrame, kind: str) -> DataFrame:
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    df = df.withColumn("kind", F.lit(kind))
    return df.select(*[F.col(c).cast(types[c]).alias(c) for c in COLUMNS])


def backlog(series: DataFrame, unknown: DataFrame | None = None) -> DataFrame:
    """``BACKLOG``: not consumed yet, still consumable; empty when ``C_S >= Max_S``, and for a key whose newest
    snapshot has no bounds (spec §4.2: an older snapshot's Max is not today's). ``unknown``: those keys'
    newest rows (:func:`jobs.rules.snapshots.unknown_newest`), when the caller has them already."""
    if unknown is None:
        unknown = newest(series).where(~F.col("bounds_known"))
    s = latest(series).join(unknown.select(*SERIES_KEY), on=SERIES_KEY, how="left_anti").select(
        *SERIES_KEY, F.greatest("committed_offset", "min_offset").alias("start_offset"),
        (F.col("max_offset") - 1).alias("end_offset"))
    return _typed(interval_union(s, keys=SERIES_KEY), "BACKLOG")


def expired(series: DataFrame, earlier: DataFrame | None = None) -> DataFrame:
    """``EXPIRED``: deleted by retention before the group consumed them, merged across snapshots.

    ``earlier``: the EXPIRED rows of a previous run, whose snapshots ``series`` need not hold (a horizon run's series
    starts at the previous run's tail, jobs.rules.snapshots.series_after). The union of intervals is the same however
    it is grouped, so merging its maximal runs with the later snapshots' intervals gives the full run's rows.
    """
    s = known(series).where(F.col("committed_offset") < F.col("min_offset")).select(
        *SERIES_KEY, F.col("committed_offset").alias("start_offset"), (F.col("min_offset") - 1).alias("end_offset"))
    if earlier is not None:
        s = s.unionByName(earlier.select(*SERIES_KEY, F.col("start_offset").cast("long"),
                                         F.col("end_offset").cast("long")))
    return _typed(interval_union(s, keys=SERIES_KEY), "EXPIRED")


def with_original(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """Deliveries re-pointed at their original copy (rule 7); deliveries of unknown messages are dropped."""
    orig = first_original(messages).select("cluster", "uniq_key", *[F.col(c).alias(f"o_{c}") for c in
                                                                      ("topic", "broker", "queue_id", "queue_offset", "keys")])
    return (
        deliveries.drop("topic", "broker", "queue_id", "queue_offset")
        .join(orig, on=["cluster", "uniq_key"], how="inner")
        .select("*", *[F.col(f"o_{c}").alias(c) for c in ("topic", "broker", "queue_id", "queue_offset", "keys")])
        .drop(*[f"o_{c}" for c in ("topic", "broker", "queue_id", "queue_offset", "keys")])
    )


def skipped(series: DataFrame, deliveries: DataFrame, messages: DataFrame,
            earlier_first: DataFrame | None = None) -> DataFrame:
    """``SKIPPED``: the committed offset moved past them without a consumption (rule 15).

    ``deliveries`` must be windowed and client-normalised (:func:`jobs.rules.snapshots.deliveries_in_window`).
    The first delivered offset is the group's, a broadcast client's own: a client that joined later (at the
    queue's end, as CONSUME_FROM_LAST_OFFSET does) skipped nothing before its first delivery.
    ``earlier_first``: (SERIES_KEY..., _first) from deliveries not in ``deliveries`` (a horizon run's old part,
    rule 24): the first delivered offset is the lower of the two.
    """
    mapped = with_original(deliveries, messages)
    first = mapped.groupBy(*SERIES_KEY).agg(F.min("queue_offset").alias("_first"))
    if earlier_first is not None:
        first = first.unionByName(earlier_first.select(*SERIES_KEY, "_first")).groupBy(*SERIES_KEY).agg(
            F.min("_first").alias("_first"))
    s = (
        latest(series).where(~is_system_topic_col(F.col("topic")))
        .join(first, on=SERIES_KEY, how="inner")
        .select(*SERIES_KEY, F.greatest("min_offset", "_first").alias("_lo"), (F.col("committed_offset") - 1).alias("_hi"))
    )
    at = message_at(messages).alias("m")
    cand = s.alias("s").join(
        at, on=[F.col(f"s.{k}") == F.col(f"m.{k}") for k in QUEUE]
        + [F.col("m.queue_offset") >= F.col("s._lo"), F.col("m.queue_offset") <= F.col("s._hi")],
        how="inner",
    ).select(*[F.col(f"s.{k}").alias(k) for k in SERIES_KEY], F.col("m.queue_offset").alias("offset"),
             F.col("m.uniq_key").alias("uniq_key"))
    ok = deliveries.where(F.col("success") == F.lit(True)).select("cluster", "consumer_group", "client_id",
                                                                  "uniq_key").distinct()
    pending = copies_in_flight(messages).withColumn("_copy", F.lit(True))
    # An offset has one kind: a broadcast client's dropped offset is BROADCAST_DROPPED, not also SKIPPED.
    dropped = dropped_offsets(deliveries, messages).withColumnRenamed("queue_offset", "offset")
    lost = (
        cand.join(ok, on=["cluster", "consumer_group", "client_id", "uniq_key"], how="left_anti")
        .join(pending, on=["cluster", "consumer_group", "uniq_key"], how="left")
        .where((F.col("client_id") != "") | F.col("_copy").isNull())
        .join(dropped, on=[*SERIES_KEY, "offset"], how="left_anti")
    )
    return _typed(offset_runs(lost, keys=SERIES_KEY, offset="offset"), "SKIPPED")


def dropped_offsets(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """(SERIES_KEY..., queue_offset) of a broadcast group's failed deliveries, per client, at every original copy of
    the key: a delivery names its message by UNIQ_KEY only, so a producer resend's copies are alike, as for TRACE
    duplicates (rule 16; the copy not chosen was otherwise reported SKIPPED)."""
    failed = deliveries.where(F.col("is_broadcast") & (F.col("success") == F.lit(False))).select(
        "cluster", "consumer_group", "client_id", "uniq_key").distinct()
    copies = original_copies(messages).select("cluster", "uniq_key", *QUEUE[1:], "queue_offset")
    return failed.join(copies, on=["cluster", "uniq_key"], how="inner").select(*SERIES_KEY, "queue_offset").distinct()


def broadcast_dropped(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """``BROADCAST_DROPPED``: failed deliveries of a broadcast group (no retry exists), per client (rule 16)."""
    return _typed(offset_runs(dropped_offsets(deliveries, messages), keys=SERIES_KEY, offset="queue_offset"),
                  "BROADCAST_DROPPED")


def unconsumed_ranges(series: DataFrame, deliveries: DataFrame, messages: DataFrame, *,
                      as_of: dt.datetime, unknown: DataFrame | None = None) -> DataFrame:
    """The gold/unconsumed_ranges rows (without run_id).

    Args:
        series: :func:`jobs.rules.snapshots.offset_series`.
        deliveries: silver/deliveries (those started after t_S or ``as_of`` are ignored).
        messages: silver/messages.
        as_of: the reconciliation time.
        unknown: the keys whose newest snapshot has no bounds, if the caller has them (:func:`backlog`).

    Returns:
        ``schemas.unconsumed_ranges.REPORT_COLUMNS``.
    """
    d = deliveries_in_window(deliveries, series, as_of=as_of)
    return (
        backlog(series, unknown)
        .unionByName(expired(series))
        .unionByName(skipped(series, d, messages))
        .unionByName(broadcast_dropped(d, messages))
    )
