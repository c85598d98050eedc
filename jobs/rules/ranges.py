"""Offsets -> maximal runs, and intervals -> their union: the two range shapes every report uses.

Spec §5: a range is a maximal run of consecutive offsets with the same key and kind, inclusive at both ends,
``messages = end - start + 1``. Both transforms are gaps-and-islands with window functions (no per-row
Python), so they run the same on Sail and on classic Spark.
"""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F


def messages_col(start: str = "start_offset", end: str = "end_offset") -> Column:
    """``messages = end - start + 1`` (spec §5)."""
    return (F.col(end) - F.col(start) + F.lit(1)).cast("long")


def offset_runs(offsets: DataFrame, *, keys: Sequence[str], offset: str = "offset",
                max_of: Sequence[str] = ()) -> DataFrame:
    """Maximal runs of consecutive offsets per key.

    Args:
        offsets: one row per (key, offset); repeated offsets count once.
        keys: the columns a run must share (a different kind never merges).
        offset: the offset column.
        max_of: extra columns aggregated with ``max`` over each run (e.g. a cause rank).

    Returns:
        ``keys + [start_offset, end_offset, messages] + max_of``, one row per run.

    Example: offsets 3, 4, 5, 9 of one key give runs (3, 5, 3) and (9, 9, 1).
    """
    keys = list(keys)
    per_offset = offsets.groupBy(*keys, F.col(offset).cast("long").alias("_o")).agg(
        *[F.max(c).alias(c) for c in max_of]
    ) if max_of else offsets.select(*keys, F.col(offset).cast("long").alias("_o")).distinct()
    w = Window.partitionBy(*keys).orderBy("_o")
    # Consecutive offsets share (offset - row_number): the island id.
    islands = per_offset.withColumn("_island", F.col("_o") - F.row_number().over(w))
    return (
        islands.groupBy(*keys, "_island")
        .agg(F.min("_o").alias("start_offset"), F.max("_o").alias("end_offset"), *[F.max(c).alias(c) for c in max_of])
        .select(*keys, "start_offset", "end_offset", messages_col().alias("messages"), *max_of)
    )


def interval_union(intervals: DataFrame, *, keys: Sequence[str]) -> DataFrame:
    """The union of inclusive intervals per key, as maximal runs (overlapping or adjacent intervals merge).

    Args:
        intervals: rows with ``keys``, ``start_offset``, ``end_offset``; empty intervals (end < start) are dropped.
        keys: the columns a run must share.

    Returns:
        ``keys + [start_offset, end_offset, messages]``, one row per maximal run.

    Example: [10, 19] and [15, 24] and [25, 25] give one run [10, 25] of 16 messages.
    """
    keys = list(keys)
    iv = intervals.select(*keys, F.col("start_offset").cast("long").alias("_s"),
                          F.col("end_offset").cast("long").alias("_e")).where(F.col("_e") >= F.col("_s"))
    w = Window.partitionBy(*keys).orderBy("_s", "_e")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    # A new run starts where the interval begins after everything before it ended (+1: adjacent merges).
    starts = iv.withColumn("_reach", F.max("_e").over(before)).withColumn(
        "_new", F.when(F.col("_reach").isNull() | (F.col("_s") > F.col("_reach") + 1), 1).otherwise(0))
    runs = starts.withColumn("_run", F.sum("_new").over(w.rowsBetween(Window.unboundedPreceding, 0)))
    return (
        runs.groupBy(*keys, "_run")
        .agg(F.min("_s").alias("start_offset"), F.max("_e").alias("end_offset"))
        .select(*keys, "start_offset", "end_offset", messages_col().alias("messages"))
    )
