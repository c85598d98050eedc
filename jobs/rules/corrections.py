"""gold/offset_corrections: committed offsets outside [Min, Max] at the latest snapshot (spec §4, rule 17).

``BELOW_MIN`` when ``C_S < Min_S`` (corrected to ``Min_S``, ``Min_S - C_S`` messages lost to retention);
``ABOVE_MAX`` when ``C_S > Max_S`` (queue truncated or recreated; corrected to ``Max_S``, none lost). This is
what the broker itself does on the next pull (``DefaultMessageStore.getMessage``: OFFSET_TOO_SMALL /
OFFSET_OVERFLOW_BADLY), computed ahead of time.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.rules.snapshots import SERIES_KEY, newest
from schemas import offset_corrections as schema

COLUMNS = schema.REPORT_COLUMNS


def is_below_min(committed: Column, min_offset: Column) -> Column:
    """``C_S < Min_S``: the broker answers OFFSET_TOO_SMALL and moves the group to Min (formats §4)."""
    return committed < min_offset


def is_above_max(committed: Column, max_offset: Column) -> Column:
    """``C_S > Max_S``: OFFSET_OVERFLOW_BADLY, the broker moves the group down to Max (formats §4)."""
    return committed > max_offset


def offset_corrections(series: DataFrame) -> DataFrame:
    """The gold/offset_corrections rows (without run_id), at each key's own newest snapshot, when it has bounds.

    Not at an older snapshot with bounds, as the outputs that only describe the queue are (rule 2): a correction is
    applied to the broker now, and one computed from an older committed offset would move a consumer that has
    moved on since (back from 40 to 22: 18 messages delivered again).

    Args:
        series: :func:`jobs.rules.snapshots.offset_series`.

    Returns:
        ``schemas.offset_corrections.REPORT_COLUMNS``.
    """
    c, lo, hi = F.col("committed_offset"), F.col("min_offset"), F.col("max_offset")
    below, above = is_below_min(c, lo), is_above_max(c, hi)
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    out = (
        newest(series)
        .where(F.col("bounds_known") & (below | above))
        .select(*SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset",
                F.when(below, lo).otherwise(hi).alias("corrected_offset"),
                F.when(below, lo - c).otherwise(F.lit(0)).alias("lost_messages"),
                F.when(below, F.lit("BELOW_MIN")).otherwise(F.lit("ABOVE_MAX")).alias("reason"))
    )
    return out.select(*[F.col(k).cast(types[k]).alias(k) for k in COLUMNS])
