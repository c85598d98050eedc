"""consumer_status: Burrow's evaluator adapted to snapshots (spec §4 Consumer status, formats §9).

The table below is the correctness proof of the rules, as Burrow's ``caching_test.go`` is for its evaluator.
Editing rules: lags are in messages (Max - C), lists are oldest first; add a case for every wrong status found
(citing the issue), and justify any change to an existing case in the pull request.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from jobs.rules import snapshots, status
from schemas import consumer_offsets as CO
from schemas import consumer_status as CS
from schemas import messages as M
from schemas import queue_bounds as QB


@dataclass(frozen=True)
class Case:
    offsets: list[int]
    lags: list[int]
    enough: bool  # has_enough_snapshots
    lag_zero: bool  # is_lag_zero
    rewound: bool  # has_rewound
    stalled: bool  # is_stalled
    never_decreasing: bool  # is_lag_never_decreasing
    status: str


RULE_CASES = [
    # 1. One snapshot: there is no trend to judge (Burrow's minimum-complete), OK whatever the rules say.
    Case([5], [3], False, False, False, True, True, "OK"),
    # 2. Caught up at the latest snapshot: OK, nothing else matters.
    Case([10, 20], [5, 0], True, True, False, False, False, "OK"),
    # 3. Dropped from 50 to 20 and still below 50: REWIND (a reset the group has not caught up with).
    Case([50, 20, 30], [10, 40, 30], True, False, True, False, False, "REWIND"),
    # 4. Rewound (40 < 50) but with no lag at the latest snapshot (the queue shrank): rule 1 comes first, OK.
    Case([50, 20, 40], [10, 40, 0], True, True, True, False, False, "OK"),
    # 5. Dropped, then recovered past the old high-water mark: not a rewind any more; lag went down, OK.
    Case([50, 20, 55], [10, 40, 5], True, False, False, False, False, "OK"),
    # 6. The committed offset never moved while lag stayed: STALL (one hung message pins the commit).
    Case([32, 32, 32], [10, 20, 30], True, False, False, True, True, "STALL"),
    # 7. Moving, but the lag grows at every snapshot: WARN (falling behind).
    Case([10, 12, 14], [5, 6, 7], True, False, False, False, True, "WARN"),
    # 8. An unchanged lag counts as not decreasing: WARN.
    Case([10, 12, 14], [5, 6, 6], True, False, False, False, True, "WARN"),
    # 9. The lag went down once inside the window: OK.
    Case([10, 20, 30], [5, 3, 4], True, False, False, False, False, "OK"),
    # 10. Offsets stuck, but the lag was 0 at first (new messages just arrived): not every lag > 0, OK.
    Case([10, 10, 10], [0, 5, 5], True, False, False, False, False, "OK"),
    # 11. Committed above Max (negative lag, an ABOVE_MAX correction): no lag to judge, OK.
    Case([20, 30], [-5, -5], True, False, False, False, False, "OK"),
    # 12. A reset from 40 to 30 that stays at 30: REWIND wins over the WARN-looking lag (never decreased).
    Case([40, 30, 30], [5, 15, 15], True, False, True, False, True, "REWIND"),
]


@pytest.mark.parametrize("n", range(len(RULE_CASES)), ids=lambda n: f"case_{n + 1}")
def test_rules(n: int) -> None:
    c = RULE_CASES[n]
    msg = f"TEST {n + 1}: Expected %s to return %s"
    assert status.has_enough_snapshots(c.offsets) is c.enough, msg % ("has_enough_snapshots", c.enough)
    assert status.is_lag_zero(c.lags) is c.lag_zero, msg % ("is_lag_zero", c.lag_zero)
    assert status.has_rewound(c.offsets) is c.rewound, msg % ("has_rewound", c.rewound)
    assert status.is_stalled(c.offsets, c.lags) is c.stalled, msg % ("is_stalled", c.stalled)
    assert status.is_lag_never_decreasing(c.lags) is c.never_decreasing, msg % ("is_lag_never_decreasing",
                                                                                 c.never_decreasing)
    assert status.partition_status(c.offsets, c.lags) == c.status, msg % ("partition_status", c.status)


UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
REPORT = StructType([f for f in CS.SCHEMA.fields if f.name != "run_id"])


def S(minute: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def off(minute: int, c: int, q: int = 0) -> tuple:
    return ("c", "b", S(minute), "G", "T", q, "", c, False, "f", False)


def qb(minute: int, lo: int, hi: int, q: int = 0) -> tuple:
    return ("c", "b", S(minute), "T", q, lo, hi)


def msg(qo: int, store_minute: float, q: int = 0) -> tuple:
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker="b", physical_offset=1000 * q + qo, topic="T", queue_id=q, queue_offset=qo,
             uniq_key=f"K{q}-{qo}", store_ts=S(store_minute), reconsume_times=0, properties={})
    return tuple(r[c] for c in M.TABLE.columns)


def out(minute: int, c: int, lo: int, hi: int, time_lag: int, st: str, q: int = 0) -> tuple:
    return ("c", "G", "", "T", "b", q, S(minute), c, lo, hi, hi - c, hi - max(c, lo), time_lag, st, "CONCURRENT", 0)


@pytest.mark.parametrize(
    "offsets, bounds, messages, window, expected",
    [
        pytest.param(
            [off(5, 10), off(10, 30), off(15, 50), off(5, 32, 2), off(10, 32, 2), off(15, 32, 2)],
            [qb(5, 0, 40), qb(10, 0, 60), qb(15, 0, 70), qb(5, 0, 40, 2), qb(10, 0, 60, 2), qb(15, 0, 80, 2)],
            [msg(50, 14.5), msg(32, 1, 2)], 10,
            [out(15, 50, 0, 70, 30, "OK"), out(15, 32, 0, 80, 14 * 60, "STALL", 2)],
            id="queue2_pinned_at_offset_32_stalls_while_queue0_advances"),
        pytest.param(
            [off(1, 50), off(2, 20), off(3, 30), off(4, 40)], [qb(m, 0, 100) for m in (1, 2, 3, 4)], [], 10,
            [out(4, 40, 0, 100, 0, "REWIND")],
            id="a_rewind_inside_the_window_is_rewind_and_an_unknown_message_has_no_time_lag"),
        pytest.param(
            [off(1, 50), off(2, 20), off(3, 30), off(4, 40)], [qb(m, 0, 100) for m in (1, 2, 3, 4)], [], 3,
            [out(4, 40, 0, 100, 0, "OK")],
            id="a_rewind_older_than_the_window_is_forgotten"),
        pytest.param(
            [off(1, 12), off(2, 12)], [qb(1, 0, 10), qb(2, 0, 10)], [msg(12, 0)], 10,
            [out(2, 12, 0, 10, 0, "OK")],
            id="committed_above_max_gives_negative_lags_and_no_time_lag"),
        pytest.param(
            [off(1, 2), off(2, 2)], [qb(1, 5, 10), qb(2, 5, 12)], [msg(2, 0.5)], 10,
            [out(2, 2, 5, 12, 90, "STALL")],
            id="consumable_lag_starts_at_min_when_committed_is_below_it"),
    ],
)
def test_consumer_status(spark, offsets, bounds, messages, window, expected) -> None:  # noqa: ANN001
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=S(60))
    actual = status.consumer_status(series, spark.createDataFrame(messages, M.SCHEMA), window=window)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, REPORT))


def test_every_rule_case_keeps_its_status_when_many_keys_share_an_applyinpandas_call(spark) -> None:  # noqa: ANN001
    # 12 cases x 20 queues = 240 keys in 32 hash buckets: each call judges several keys, whose rows it must split
    # exactly (a row of a neighbouring key in the window changes the status of cases 3-12). The snapshot order is
    # scrambled by giving queues different minute offsets.
    offsets, bounds, expected = [], [], []
    for q in range(240):
        c = RULE_CASES[q % len(RULE_CASES)]
        for i, (o, lag) in enumerate(zip(c.offsets, c.lags)):
            minute = 3 * i + q % 3
            offsets.append(off(minute, o, q))
            bounds.append(qb(minute, 0, o + lag, q))
        expected.append(("c", "G", "", "T", "b", q, c.status))
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=S(60))
    actual = sorted(tuple(r) for r in status.window_status(series, window=10).collect())
    assert actual == sorted(expected)
    assert len({e[-1] for e in expected}) == 4
