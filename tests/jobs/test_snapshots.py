"""The committed-offset series: which snapshots count and which bounds each one gets (docs/semantics.md 1-5)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.rules import snapshots
from schemas import consumer_offsets as CO
from schemas import messages as M
from schemas import queue_bounds as QB

UTC = dt.timezone.utc


def T(minute: int) -> dt.datetime:
    return dt.datetime(2026, 1, 5, 0, minute, tzinfo=UTC)


def off(minute: int, c: int, *, group: str = "G", topic: str = "T", q: int = 0, client: str = "",
        broker: str = "b") -> tuple:
    return ("c", broker, T(minute), group, topic, q, client, c, topic.startswith("%RETRY%"), "f", False)


def qb(minute: int, lo: int, hi: int, *, topic: str = "T", q: int = 0, broker: str = "b") -> tuple:
    return ("c", broker, T(minute), topic, q, lo, hi)


SERIES = ("cluster string, consumer_group string, client_id string, topic string, broker string, queue_id int, "
          "snapshot_ts timestamp, committed_offset long, min_offset long, max_offset long, bounds_known boolean, "
          "snapshot_index int, snapshots_after int, is_latest boolean")


def row(minute: int, c: int, lo: int | None, hi: int | None, idx: int | None, after: int | None, *,
        client: str = "", topic: str = "T") -> tuple:
    return ("c", "G", client, topic, "b", 0, T(minute), c, lo, hi, lo is not None, idx, after, after == 0)


@pytest.mark.parametrize(
    "offsets, bounds, as_of, expected",
    [
        pytest.param([off(1, 5), off(2, 8)], [qb(1, 0, 10), qb(2, 3, 12)], T(9),
                     [row(1, 5, 0, 10, 1, 1), row(2, 8, 3, 12, 2, 0)],
                     id="each_broker_snapshot_takes_its_own_bounds_and_the_newest_is_latest"),
        pytest.param([off(1, 5)], [qb(1, 0, 10, topic="Other")], T(9),
                     [row(1, 5, 0, 0, 1, 0)],
                     id="a_queue_missing_from_a_snapshot_with_consumequeue_has_min_and_max_zero"),
        pytest.param([off(1, 5), off(2, 8)], [qb(1, 0, 10)], T(9),
                     [row(1, 5, 0, 10, 1, 0), row(2, 8, None, None, None, None)],
                     id="a_snapshot_without_consumequeue_has_unknown_bounds_and_s_is_the_last_known_one"),
        pytest.param([off(1, 5), off(3, 9)], [qb(1, 0, 10), qb(3, 0, 12)], T(2),
                     [row(1, 5, 0, 10, 1, 0)],
                     id="snapshots_after_as_of_are_ignored"),
        pytest.param([off(2, 7, client="10.0.0.5@DEFAULT"), off(4, 9, client="10.0.0.5@DEFAULT")],
                     [qb(1, 0, 10), qb(3, 2, 20), qb(4, 4, 30)], T(9),
                     [row(2, 7, 0, 10, 1, 1, client="10.0.0.5@DEFAULT"),
                      row(4, 9, 4, 30, 2, 0, client="10.0.0.5@DEFAULT")],
                     id="a_broadcast_client_snapshot_takes_the_broker_bounds_at_or_before_it"),
        pytest.param([off(0, 3, client="10.0.0.5@DEFAULT"), off(2, 7, client="10.0.0.5@DEFAULT"), off(2, 6),
                      off(3, 8)],
                     [qb(1, 0, 10), qb(2, 1, 11)], T(9),
                     [row(0, 3, None, None, None, None, client="10.0.0.5@DEFAULT"),
                      row(2, 7, 1, 11, 1, 0, client="10.0.0.5@DEFAULT"), row(2, 6, 1, 11, 1, 0),
                      row(3, 8, None, None, None, None)],
                     id="a_client_snapshot_before_any_bounds_has_none_and_a_broker_snapshot_never_borrows_older_ones"),
        pytest.param([off(1, 5), off(1, 3, group="G@x"), off(1, 3, topic="T@y")], [qb(1, 0, 10)], T(9),
                     [row(1, 5, 0, 10, 1, 0)],
                     id="groups_and_topics_containing_at_are_skipped"),
    ],
)
def test_offset_series(spark, offsets, bounds, as_of, expected) -> None:  # noqa: ANN001
    actual = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=as_of)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, SERIES))


def test_decreases_are_listed_between_consecutive_snapshots_with_or_without_bounds(spark) -> None:  # noqa: ANN001
    # Snapshot 3 has no consumequeue folder (unknown bounds): it still has a committed offset, so 20 -> 30 -> 10
    # is compared through it, and the drop 30 -> 10 is a decrease although only snapshot 4 has bounds.
    series = snapshots.offset_series(
        spark.createDataFrame([off(1, 50), off(2, 20), off(3, 30), off(4, 10)], CO.SCHEMA),
        spark.createDataFrame([qb(m, 0, 100) for m in (1, 2, 4)], QB.SCHEMA), as_of=T(9))
    expected = spark.createDataFrame(
        [("c", "G", "", "T", "b", 0, T(1), 50, T(2), 20), ("c", "G", "", "T", "b", 0, T(3), 30, T(4), 10)],
        "cluster string, consumer_group string, client_id string, topic string, broker string, queue_id int, "
        "prev_ts timestamp, prev_offset long, snapshot_ts timestamp, committed_offset long")
    assertDataFrameEqual(snapshots.decreases(series), expected)


def _msg(phys: int, topic: str, qo: int, uniq: str, props: dict | None = None, broker: str = "b") -> tuple:
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker=broker, physical_offset=phys, topic=topic, queue_id=0, queue_offset=qo,
             uniq_key=uniq, properties=props or {})
    return tuple(r[c] for c in M.TABLE.columns)


def test_original_copies_rank_the_lowest_broker_and_physical_offset_first(spark) -> None:  # noqa: ANN001
    msgs = spark.createDataFrame([_msg(200, "T", 7, "K"), _msg(100, "T", 3, "K"), _msg(50, "%RETRY%G", 0, "K"),
                                  _msg(10, "T", 1, "K", broker="a")], M.SCHEMA)
    got = snapshots.original_copies(msgs).select("broker", "queue_offset", "copy_rank")
    assertDataFrameEqual(got, spark.createDataFrame([("a", 1, 1), ("b", 3, 2), ("b", 7, 3)],
                                                    "broker string, queue_offset long, copy_rank int"))


def test_copies_in_flight_are_retry_dlq_and_scheduled_retry_copies_of_the_group(spark) -> None:  # noqa: ANN001
    msgs = spark.createDataFrame([
        _msg(1, "%RETRY%G", 0, "K1"), _msg(2, "%DLQ%G", 0, "K2"),
        _msg(3, "SCHEDULE_TOPIC_XXXX", 0, "K3", {"REAL_TOPIC": "%RETRY%G"}),
        _msg(4, "SCHEDULE_TOPIC_XXXX", 0, "K4", {"REAL_TOPIC": "T"}), _msg(5, "T", 0, "K5"),
    ], M.SCHEMA)
    assertDataFrameEqual(snapshots.copies_in_flight(msgs), spark.createDataFrame(
        [("c", "G", "K1"), ("c", "G", "K2"), ("c", "G", "K3")], "cluster string, consumer_group string, uniq_key string"))


def test_relevant_messages_keep_every_record_a_report_reads(spark) -> None:  # noqa: ANN001
    """Kept: copies of delivered or retried keys (1, 9; 5, 6), their queues (2; 7), a record at a committed offset
    (4), system topics (5). Dropped: untraced records elsewhere (3, 8, 10)."""
    from schemas import deliveries as D

    msgs = spark.createDataFrame([
        _msg(1, "T", 0, "K1"), _msg(2, "T", 1, "U2"), _msg(3, "U", 5, "U3"), _msg(4, "U", 7, "U4"),
        _msg(5, "%RETRY%G", 0, "K9"), _msg(6, "V", 3, "K9"), _msg(7, "V", 4, "U7"), _msg(8, "W", 0, None),
        _msg(9, "T", 2, "K1", broker="a"), _msg(10, "X", 0, "U10", broker="a"),
    ], M.SCHEMA)
    d = {c: None for c in D.TABLE.columns}
    d.update(cluster="c", consumer_group="G", request_id="r", uniq_key="K1", retry_times=0)
    dels = spark.createDataFrame([tuple(d[c] for c in D.TABLE.columns)], D.SCHEMA)
    offsets = spark.createDataFrame([off(1, 7, topic="U"), off(1, 99, topic="W")], CO.SCHEMA)
    got = snapshots.relevant_messages(msgs, dels, offsets)
    assert got.columns == M.TABLE.columns
    assert sorted(r[0] for r in got.select("physical_offset").collect()) == [1, 2, 4, 5, 6, 7, 9]
