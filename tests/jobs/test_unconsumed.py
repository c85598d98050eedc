"""unconsumed_ranges: BACKLOG, EXPIRED, SKIPPED, BROADCAST_DROPPED (spec §4, docs/semantics.md 13-16)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from jobs.rules import snapshots, unconsumed
from schemas import consumer_offsets as CO
from schemas import deliveries as D
from schemas import messages as M
from schemas import queue_bounds as QB
from schemas import unconsumed_ranges as UR

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
AS_OF = T0 + dt.timedelta(hours=1)
C5, C6 = "10.0.0.5@DEFAULT", "10.0.0.6@DEFAULT"
REPORT = StructType([f for f in UR.SCHEMA.fields if f.name != "run_id"])


def S(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def off(sec: float, c: int, *, group: str = "G", client: str = "") -> tuple:
    return ("c", "b", S(sec), group, "T", 0, client, c, False, "f", False)


def qb(sec: float, lo: int, hi: int) -> tuple:
    return ("c", "b", S(sec), "T", 0, lo, hi)


def msg(qo: int, uniq: str | None = None, *, topic: str = "T", props: dict | None = None) -> tuple:
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker="b", physical_offset=(5000 if topic != "T" else 1000) + qo, topic=topic, queue_id=0,
             queue_offset=qo, uniq_key=uniq or f"K{qo}", store_ts=S(0), reconsume_times=0, properties=props or {})
    return tuple(r[c] for c in M.TABLE.columns)


def dl(req: str, qo: int, success: bool | None, *, start: float = 10, retry: int = 0, group: str = "G",
       client: str = "", host: str = "10.0.0.1") -> tuple:
    r = {c: None for c in D.TABLE.columns}
    r.update(cluster="c", consumer_group=group, request_id=req, uniq_key=f"K{qo}", retry_times=retry,
             start_ts=S(start), end_ts=None if success is None else S(start + 1), success=success, topic="T",
             broker="b", queue_id=0, queue_offset=qo, client_host=host, client_id=client)
    return tuple(r[c] for c in D.TABLE.columns)


def out(start: int, end: int, kind: str, *, group: str = "G", client: str = "") -> tuple:
    return ("c", group, client, "T", "b", 0, start, end, end - start + 1, kind)


CASES = [
    pytest.param([off(60, 5)], [qb(60, 0, 10)], [], [], [out(5, 9, "BACKLOG")],
                 id="backlog_runs_from_the_committed_offset_to_max_minus_one"),
    pytest.param([off(60, 10), off(60, 12, group="H")], [qb(60, 0, 10)], [], [], [],
                 id="backlog_is_empty_when_committed_is_at_or_above_max"),
    pytest.param([off(60, 2)], [qb(60, 5, 10)], [], [], [out(5, 9, "BACKLOG"), out(2, 4, "EXPIRED")],
                 id="backlog_starts_at_min_when_committed_is_below_it_and_the_rest_expired"),
    pytest.param([off(60, 2), off(120, 2), off(180, 8)], [qb(60, 5, 10), qb(120, 8, 10), qb(180, 8, 12)], [], [],
                 [out(2, 7, "EXPIRED"), out(8, 11, "BACKLOG")],
                 id="expired_is_the_union_of_overlapping_intervals_from_several_snapshots"),
    pytest.param(
        # first delivered offset 3; 3, 4 consumed; 5 waits in %RETRY%G; 6 never delivered; 7 failed, no retry copy
        [off(60, 8)], [qb(60, 0, 10)],
        [msg(o) for o in range(1, 8)] + [msg(0, "K5", topic="%RETRY%G")],
        [dl("d3", 3, True), dl("d4", 4, True), dl("d5", 5, False), dl("d7", 7, False)],
        [out(6, 7, "SKIPPED"), out(8, 9, "BACKLOG")],
        id="skipped_offsets_are_known_never_consumed_and_have_no_retry_copy"),
    pytest.param([off(60, 5)], [qb(60, 0, 5)], [msg(o) for o in range(5)], [], [],
                 id="a_group_without_deliveries_gets_no_skipped_rows"),
    pytest.param(
        [off(60, 5, group="GB", client=C5), off(60, 5, group="GB", client=C6)], [qb(60, 0, 5)],
        [msg(3), msg(4)],
        # C5's failed 3 is BROADCAST_DROPPED only (an offset has one kind); C6's 4, still in flight when C6 committed
        # past it, is SKIPPED for C6
        [dl("x3", 3, False, group="GB", client=C5, host="10.0.0.5"), dl("x4", 4, True, group="GB", client=C5, host="10.0.0.5"),
         dl("y3", 3, True, group="GB", client=C6, host="10.0.0.6"), dl("y4", 4, None, group="GB", client=C6, host="10.0.0.6")],
        [out(3, 3, "BROADCAST_DROPPED", group="GB", client=C5), out(4, 4, "SKIPPED", group="GB", client=C6)],
        id="a_broadcast_failure_is_dropped_not_skipped_for_that_client_only"),
    pytest.param(
        [off(60, 8, group="GB", client=C5), off(60, 8, group="GB", client=C6)], [qb(60, 0, 8)],
        [msg(o) for o in range(8)],
        # C5 consumed 2..7 but 4; C6 joined at 6 (CONSUME_FROM_LAST_OFFSET): 2..5 were never C6's to consume
        [dl(f"x{o}", o, True, group="GB", client=C5, host="10.0.0.5") for o in (2, 3, 5, 6, 7)]
        + [dl(f"y{o}", o, True, group="GB", client=C6, host="10.0.0.6") for o in (6, 7)],
        [out(4, 4, "SKIPPED", group="GB", client=C5)],
        id="a_broadcast_client_skips_nothing_before_its_own_first_delivery"),
    pytest.param(
        [off(60, 3, group="GB", client=C5), off(60, 3)], [qb(60, 0, 3)],
        # a producer resend: K1 stored at 1 and at 2; both of C5's deliveries of K1 failed (and G's, clustering)
        [msg(0), msg(1, "K1"), msg(2, "K1")],
        [dl("x0", 0, True, group="GB", client=C5, host="10.0.0.5"),
         dl("x1", 1, False, group="GB", client=C5, host="10.0.0.5"),
         dl("x2", 1, False, start=11, group="GB", client=C5, host="10.0.0.5"),
         dl("g0", 0, True), dl("g1", 1, False)],
        [out(1, 2, "BROADCAST_DROPPED", group="GB", client=C5), out(1, 2, "SKIPPED")],
        id="a_dropped_resend_is_dropped_at_both_copies_as_a_skipped_one_is_skipped_at_both"),
]


@pytest.mark.parametrize("offsets, bounds, messages, deliveries, expected", CASES)
def test_unconsumed_ranges(spark, offsets, bounds, messages, deliveries, expected) -> None:  # noqa: ANN001
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=AS_OF)
    actual = unconsumed.unconsumed_ranges(series, spark.createDataFrame(deliveries, D.SCHEMA),
                                          spark.createDataFrame(messages, M.SCHEMA), as_of=AS_OF)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, REPORT))
