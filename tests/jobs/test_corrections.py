"""offset_corrections: BELOW_MIN and ABOVE_MAX at each key's latest snapshot (spec §4, docs/semantics.md 17)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from jobs.rules import corrections, snapshots
from schemas import consumer_offsets as CO
from schemas import offset_corrections as OC
from schemas import queue_bounds as QB

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
AS_OF = T0 + dt.timedelta(hours=1)
REPORT = StructType([f for f in OC.SCHEMA.fields if f.name != "run_id"])


def S(minute: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def off(minute: int, c: int, *, topic: str = "T", client: str = "") -> tuple:
    return ("c", "b", S(minute), "G", topic, 0, client, c, topic.startswith("%RETRY%"), "f", False)


def qb(minute: int, lo: int, hi: int, *, topic: str = "T") -> tuple:
    return ("c", "b", S(minute), topic, 0, lo, hi)


def out(minute: int, c: int, lo: int, hi: int, corrected: int, lost: int, reason: str, *, topic: str = "T",
        client: str = "") -> tuple:
    return ("c", "G", client, topic, "b", 0, S(minute), c, lo, hi, corrected, lost, reason)


@pytest.mark.parametrize(
    "offsets, bounds, expected",
    [
        pytest.param([off(1, 100), off(2, 100)], [qb(1, 0, 500), qb(2, 300, 500)],
                     [out(2, 100, 300, 500, 300, 200, "BELOW_MIN")],
                     id="a_group_offline_past_retention_is_corrected_to_min_and_loses_the_gap"),
        pytest.param([off(1, 900)], [qb(1, 0, 40)], [out(1, 900, 0, 40, 40, 0, "ABOVE_MAX")],
                     id="a_truncated_queue_corrects_the_group_down_to_max_and_loses_nothing"),
        pytest.param([off(1, 100), off(2, 350)], [qb(1, 300, 500), qb(2, 300, 500)], [],
                     id="only_the_latest_snapshot_counts_a_group_that_returned_needs_no_fix"),
        pytest.param([off(1, 0), off(1, 40)], [qb(1, 0, 40)], [],
                     id="committed_at_min_or_at_max_is_valid"),
        pytest.param([off(1, 1, topic="%RETRY%G"), off(1, 1, client="10.0.0.5@DEFAULT")],
                     [qb(1, 3, 9, topic="%RETRY%G"), qb(1, 4, 9)],
                     [out(1, 1, 3, 9, 3, 2, "BELOW_MIN", topic="%RETRY%G"),
                      out(1, 1, 4, 9, 4, 3, "BELOW_MIN", client="10.0.0.5@DEFAULT")],
                     id="retry_queues_and_broadcast_clients_are_corrected_too"),
        pytest.param([off(1, 1), off(2, 1)], [qb(1, 4, 9), qb(2, 4, 9)], [out(2, 1, 4, 9, 4, 3, "BELOW_MIN")],
                     id="at_the_newest_snapshot_with_bounds"),
        # the audit's case: below Min at 10:05, moved on to 40 at 10:10, whose snapshot has no consumequeue/ (rule
        # 5: bounds unknown); a reset to the 10:05 Min would deliver 18 messages again
        pytest.param([off(0, 30), off(5, 5), off(10, 40)], [qb(0, 0, 40), qb(5, 22, 40)], [],
                     id="no_correction_from_an_older_offset_when_the_newest_snapshot_has_no_bounds"),
        pytest.param([off(1, 1), off(2, 1)], [qb(1, 4, 9)], [],
                     id="nor_when_the_offset_did_not_move_the_bounds_may_have"),
    ],
)
def test_offset_corrections(spark, offsets, bounds, expected) -> None:  # noqa: ANN001
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=AS_OF)
    assertDataFrameEqual(corrections.offset_corrections(series), spark.createDataFrame(expected, REPORT))


@pytest.mark.parametrize(
    "committed, lo, hi, below, above",
    [
        pytest.param(1, 4, 9, True, False, id="below_min_only"),
        pytest.param(10, 4, 9, False, True, id="above_max_only"),
        pytest.param(9, 4, 9, False, False, id="at_max_is_neither"),
    ],
)
def test_correction_rules(spark, committed, lo, hi, below, above) -> None:  # noqa: ANN001
    df = spark.createDataFrame([(committed, lo, hi)], "c long, lo long, hi long")
    got = df.select(corrections.is_below_min(F.col("c"), F.col("lo")).alias("below"),
                    corrections.is_above_max(F.col("c"), F.col("hi")).alias("above"))
    assertDataFrameEqual(got, spark.createDataFrame([(below, above)], "below boolean, above boolean"))
