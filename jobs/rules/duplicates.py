"""gold/duplicated_ranges: offsets due to be delivered, or delivered, twice (spec §4 Duplicated).

* ``REWIND`` (rule 11): one row per decrease ``C_{s+1} < C_s``: ``[C_{s+1}, C_s - 1]``.
* ``TRACE`` (rule 10): every original copy of a UNIQ_KEY with two or more first deliveries (retryTimes 0)
  by the group (by the same client for a broadcast group); maximal runs per queue, each run taking the most
  severe cause of its offsets (rule 12, :func:`jobs.rules.replay.duplicate_causes`).
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs.rules import replay
from jobs.rules.ranges import messages_col, offset_runs
from jobs.rules.snapshots import SERIES_KEY, decreases, deliveries_in_window, original_copies
from schemas import duplicated_ranges as schema

COLUMNS = schema.REPORT_COLUMNS


def _typed(df: DataFrame) -> DataFrame:
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    return df.select(*[F.col(c).cast(types[c]).alias(c) for c in COLUMNS])


def rewind_ranges(falls: DataFrame) -> DataFrame:
    """``REWIND`` rows: ``[C_{s+1}, C_s - 1]`` for every decrease (:func:`jobs.rules.snapshots.decreases`), one row
    per decrease (never merged)."""
    return _typed(
        falls.select(
            *SERIES_KEY, F.col("committed_offset").alias("start_offset"),
            (F.col("prev_offset") - 1).alias("end_offset"),
        ).select("*", messages_col().alias("messages"), F.lit("REWIND").alias("evidence"),
                 F.lit("REWIND").alias("cause"))
    )


def duplicate_pairs(deliveries: DataFrame) -> DataFrame:
    """(cluster, G, client, UNIQ_KEY) with >= 2 first deliveries: the first one's host and start, the second's start.

    ``deliveries`` must already be windowed and client-normalised (:func:`jobs.rules.snapshots.deliveries_in_window`).
    """
    firsts = deliveries.where((F.col("retry_times") == 0) & F.col("uniq_key").isNotNull())
    key = ["cluster", "consumer_group", "client_id", "uniq_key"]
    w = Window.partitionBy(*key).orderBy("start_ts", "request_id")
    ranked = firsts.withColumn("_rn", F.row_number().over(w))
    return (
        ranked.groupBy(*key)
        .agg(F.count(F.lit(1)).alias("_n"),
             F.max(F.when(F.col("_rn") == 1, F.coalesce(F.col("client_host"), F.lit("")))).alias("d1_host"),
             F.max(F.when(F.col("_rn") == 1, F.col("start_ts"))).alias("d1_start"),
             F.max(F.when(F.col("_rn") == 2, F.col("start_ts"))).alias("b"))
        .where(F.col("_n") >= 2)
        .drop("_n")
    )


def duplicated_offsets(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """Every original copy of a key with >= 2 first deliveries, per (G, client): producer resends count twice."""
    copies = original_copies(messages).select("cluster", "uniq_key", "topic", "broker", "queue_id", "queue_offset")
    return duplicate_pairs(deliveries).join(copies, on=["cluster", "uniq_key"], how="inner")


def trace_ranges(falls: DataFrame, deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """``TRACE`` rows: maximal runs of duplicated offsets, cause = the most severe of the run (``falls``: the
    decreases of the committed offsets, :func:`jobs.rules.snapshots.decreases`)."""
    caused = replay.duplicate_causes(duplicated_offsets(deliveries, messages), replay.commit_timeline(deliveries),
                                     replay.queues(deliveries), falls)
    runs = offset_runs(caused.withColumn("_rank", replay.cause_rank_col(F.col("cause"))),
                       keys=SERIES_KEY, offset="queue_offset", max_of=["_rank"])
    return _typed(runs.select("*", F.lit("TRACE").alias("evidence"),
                              replay.cause_of_rank_col(F.col("_rank")).alias("cause")))


def duplicated_ranges(series: DataFrame, deliveries: DataFrame, messages: DataFrame, *,
                      as_of: dt.datetime, falls: DataFrame | None = None) -> DataFrame:
    """The gold/duplicated_ranges rows (without run_id).

    Args:
        series: :func:`jobs.rules.snapshots.offset_series`.
        deliveries: silver/deliveries (those started after t_S or ``as_of`` are ignored).
        messages: silver/messages.
        as_of: the reconciliation time.
        falls: every decrease of the committed offsets, when ``series`` does not hold every snapshot (a horizon
            run's, jobs.reconcile.offset_state); default :func:`jobs.rules.snapshots.decreases` of ``series``.

    Returns:
        ``schemas.duplicated_ranges.REPORT_COLUMNS``.
    """
    d = deliveries_in_window(deliveries, series, as_of=as_of)
    falls = decreases(series) if falls is None else falls
    return rewind_ranges(falls).unionByName(trace_ranges(falls, d, messages))
