"""Offsets -> maximal runs and interval union: the shapes every range report is made of (spec §5)."""
from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.rules.ranges import interval_union, offset_runs

RUN = "k string, kind string, start_offset long, end_offset long, messages long"


@pytest.mark.parametrize(
    "offsets, expected",
    [
        pytest.param([("q", "A", 3), ("q", "A", 4), ("q", "A", 5), ("q", "A", 9)],
                     [("q", "A", 3, 5, 3), ("q", "A", 9, 9, 1)], id="consecutive_offsets_merge_into_one_run"),
        pytest.param([("q", "A", 7), ("q", "A", 7), ("q", "A", 8)],
                     [("q", "A", 7, 8, 2)], id="a_repeated_offset_counts_once"),
        pytest.param([("q", "A", 1), ("q", "B", 2)],
                     [("q", "A", 1, 1, 1), ("q", "B", 2, 2, 1)], id="adjacent_offsets_of_different_kinds_never_merge"),
        pytest.param([("q", "A", 1), ("r", "A", 2)],
                     [("q", "A", 1, 1, 1), ("r", "A", 2, 2, 1)], id="adjacent_offsets_of_different_keys_never_merge"),
        pytest.param([("q", "A", 0)], [("q", "A", 0, 0, 1)], id="a_single_offset_is_a_run_of_one_message"),
    ],
)
def test_offset_runs(spark, offsets, expected) -> None:  # noqa: ANN001
    df = spark.createDataFrame(offsets, "k string, kind string, offset long")
    assertDataFrameEqual(offset_runs(df, keys=["k", "kind"]), spark.createDataFrame(expected, RUN))


def test_offset_runs_take_the_max_of_extra_columns_per_run(spark) -> None:  # noqa: ANN001
    df = spark.createDataFrame([("q", "A", 1, 0), ("q", "A", 2, 3), ("q", "A", 2, 1), ("q", "A", 5, 1)],
                               "k string, kind string, offset long, rank int")
    expected = spark.createDataFrame([("q", "A", 1, 2, 2, 3), ("q", "A", 5, 5, 1, 1)], RUN + ", rank int")
    assertDataFrameEqual(offset_runs(df, keys=["k", "kind"], max_of=["rank"]), expected)


@pytest.mark.parametrize(
    "intervals, expected",
    [
        pytest.param([("q", "E", 10, 19), ("q", "E", 15, 24)], [("q", "E", 10, 24, 15)],
                     id="overlapping_intervals_from_two_snapshots_are_one_run"),
        pytest.param([("q", "E", 10, 19), ("q", "E", 20, 24)], [("q", "E", 10, 24, 15)],
                     id="adjacent_intervals_merge"),
        pytest.param([("q", "E", 10, 19), ("q", "E", 21, 24)], [("q", "E", 10, 19, 10), ("q", "E", 21, 24, 4)],
                     id="a_gap_of_one_offset_splits_runs"),
        pytest.param([("q", "E", 0, 100), ("q", "E", 5, 6), ("q", "E", 50, 101)], [("q", "E", 0, 101, 102)],
                     id="an_interval_inside_another_does_not_end_the_run"),
        pytest.param([("q", "E", 10, 9), ("q", "E", 3, 3)], [("q", "E", 3, 3, 1)],
                     id="empty_intervals_are_dropped"),
        pytest.param([("q", "E", 1, 2), ("q", "F", 3, 4)], [("q", "E", 1, 2, 2), ("q", "F", 3, 4, 2)],
                     id="different_kinds_never_merge"),
    ],
)
def test_interval_union(spark, intervals, expected) -> None:  # noqa: ANN001
    df = spark.createDataFrame(intervals, "k string, kind string, start_offset long, end_offset long")
    assertDataFrameEqual(interval_union(df, keys=["k", "kind"]), spark.createDataFrame(expected, RUN))
