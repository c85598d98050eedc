"""duplicated_ranges: TRACE duplicates with their cause and REWIND rows (spec §4, docs/semantics.md 10-12)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.rules import duplicates, snapshots
from schemas import consumer_offsets as CO
from schemas import deliveries as D
from schemas import duplicated_ranges as DR
from schemas import messages as M
from schemas import queue_bounds as QB

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
AS_OF = T0 + dt.timedelta(hours=1)
A, B = "10.0.0.1", "10.0.0.2"
C5, C6 = "10.0.0.5@DEFAULT", "10.0.0.6@DEFAULT"


def S(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def off(sec: float, c: int, *, group: str = "G", client: str = "") -> tuple:
    return ("c", "b", S(sec), group, "T", 0, client, c, False, "f", False)


def qb(sec: float, lo: int = 0, hi: int = 10_000) -> tuple:
    return ("c", "b", S(sec), "T", 0, lo, hi)


def msg(qo: int, uniq: str | None = None, *, phys: int | None = None) -> tuple:
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker="b", physical_offset=phys if phys is not None else 1000 + qo, topic="T", queue_id=0,
             queue_offset=qo, uniq_key=uniq or f"K{qo}", store_ts=S(0), reconsume_times=0, properties={})
    return tuple(r[c] for c in M.TABLE.columns)


def dl(req: str, qo: int, start: float, end: float | None, *, host: str = A, retry: int = 0, group: str = "G",
       client: str = "", uniq: str | None = None) -> tuple:
    r = {c: None for c in D.TABLE.columns}
    r.update(cluster="c", consumer_group=group, request_id=req, uniq_key=uniq or f"K{qo}", retry_times=retry,
             start_ts=S(start), end_ts=None if end is None else S(end), success=None if end is None else True,
             topic="T", broker="b", queue_id=0, queue_offset=qo, client_host=host, client_id=client)
    return tuple(r[c] for c in D.TABLE.columns)


def out(start: int, end: int, evidence: str, cause: str, *, group: str = "G", client: str = "") -> tuple:
    return ("c", group, client, "T", "b", 0, start, end, end - start + 1, evidence, cause)


CASES = [
    pytest.param(
        # 2101 hangs on A; 2102-2104 finish; A is killed; B takes the queue and redelivers 2101-2104.
        [off(60, 2101), off(240, 2105)], [msg(o) for o in range(2101, 2105)],
        [dl("a1", 2101, 10, None), dl("a2", 2102, 10, 11), dl("a3", 2103, 10, 12), dl("a4", 2104, 10, 13),
         dl("b1", 2101, 200, 201, host=B), dl("b2", 2102, 201, 202, host=B), dl("b3", 2103, 202, 203, host=B),
         dl("b4", 2104, 203, 204, host=B)],
        [out(2101, 2104, "TRACE", "HEAD_BLOCKED")],
        id="blocked_head_is_one_trace_range_from_the_hung_offset_caused_by_head_blocked"),
    pytest.param(
        # msg0 and msg3-7 finish, msg1-2 never finish (killed): committed 1, not 8; 1-7 come again.
        [off(90, 1), off(180, 8)], [msg(o) for o in range(8)],
        [dl("a0", 0, 1, 2), dl("a1", 1, 1, None), dl("a2", 2, 1, None)] + [dl(f"a{o}", o, 1, 2) for o in range(3, 8)]
        + [dl(f"b{o}", o, 150, 151, host=B) for o in range(1, 8)],
        [out(1, 7, "TRACE", "HEAD_BLOCKED")],
        id="out_of_order_acks_duplicate_everything_after_the_lowest_unfinished_offset"),
    pytest.param(
        # A finished 0-3 but was killed before its persist tick; B starts again at 0.
        [off(25, 0), off(90, 4)], [msg(o) for o in range(4)],
        [dl(f"a{o}", o, 1, 2) for o in range(4)] + [dl(f"b{o}", o, 30, 31, host=B) for o in range(4)],
        [out(0, 3, "TRACE", "UNPERSISTED")],
        id="progress_lost_inside_the_persist_interval_is_unpersisted"),
    pytest.param(
        # An operator resets G from 7 back to 5 between the two deliveries of 5 and 6.
        [off(60, 7), off(120, 5), off(180, 7)], [msg(5), msg(6)],
        [dl("a5", 5, 30, 31), dl("a6", 6, 30, 31), dl("r5", 5, 130, 131), dl("r6", 6, 130, 131)],
        [out(5, 6, "REWIND", "REWIND"), out(5, 6, "TRACE", "REWIND")],
        id="a_rewind_gives_a_rewind_row_and_trace_duplicates_caused_by_the_rewind"),
    pytest.param(
        [off(60, 10), off(120, 4), off(180, 8), off(240, 6)], [], [],
        [out(4, 9, "REWIND", "REWIND"), out(6, 7, "REWIND", "REWIND")],
        id="two_overlapping_decreases_give_one_rewind_row_each"),
    pytest.param(
        # The producer resent K: stored at 3 and 4 with the same UNIQ_KEY; both copies are duplicated.
        [off(60, 5)], [msg(3, "K"), msg(4, "K")],
        [dl("a", 3, 10, 11, uniq="K"), dl("b", 3, 20, 21, uniq="K")],
        [out(3, 4, "TRACE", "UNPERSISTED")],
        id="a_producer_resend_duplicates_both_stored_copies"),
    pytest.param(
        [off(60, 5)], [msg(3)],
        [dl("a", 3, 10, 11), dl("b", 3, 20, 21, retry=1)],
        [],
        id="a_retry_delivery_is_expected_and_not_a_duplicate"),
    pytest.param(
        [off(60, 5)], [msg(3)],
        [dl("a", 3, 10, 11), dl("b", 3, 3700, 3701, host=B)],
        [],
        id="a_delivery_started_after_the_window_is_ignored"),
]


@pytest.mark.parametrize("offsets, messages, deliveries, expected", CASES)
def test_duplicated_ranges(spark, offsets, messages, deliveries, expected) -> None:  # noqa: ANN001
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA),
                                     spark.createDataFrame([qb(r[2].timestamp() - T0.timestamp()) for r in offsets],
                                                           QB.SCHEMA), as_of=AS_OF)
    actual = duplicates.duplicated_ranges(series, spark.createDataFrame(deliveries, D.SCHEMA),
                                          spark.createDataFrame(messages, M.SCHEMA), as_of=AS_OF)
    schema = DR.SCHEMA.__class__([f for f in DR.SCHEMA.fields if f.name != "run_id"])
    assertDataFrameEqual(actual, spark.createDataFrame(expected, schema))


def test_broadcast_duplicates_are_counted_per_client(spark) -> None:  # noqa: ANN001
    """C5 got K0 twice (a duplicate for C5); C6 got K0 once and K1 once, as did C5: not duplicates."""
    offsets = [off(60, 2, group="GB", client=C5), off(60, 2, group="GB", client=C6)]
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame([qb(60)], QB.SCHEMA),
                                     as_of=AS_OF)
    dels = [dl("x1", 0, 10, 11, group="GB", host="10.0.0.5", client=C5),
            dl("x2", 0, 20, 21, group="GB", host="10.0.0.5", client=C5),
            dl("y1", 0, 10, 11, group="GB", host="10.0.0.6", client=C6),
            dl("x3", 1, 12, 13, group="GB", host="10.0.0.5", client=C5),
            dl("y2", 1, 12, 13, group="GB", host="10.0.0.6", client=C6)]
    actual = duplicates.duplicated_ranges(series, spark.createDataFrame(dels, D.SCHEMA),
                                          spark.createDataFrame([msg(0), msg(1)], M.SCHEMA), as_of=AS_OF)
    schema = DR.SCHEMA.__class__([f for f in DR.SCHEMA.fields if f.name != "run_id"])
    assertDataFrameEqual(actual, spark.createDataFrame([out(0, 0, "TRACE", "UNPERSISTED", group="GB", client=C5)],
                                                       schema))
