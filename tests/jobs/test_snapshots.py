"""The committed-offset series: which snapshots count and which bounds each one gets (docs/semantics.md 1-5)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F
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
          "snapshots_after int, is_latest boolean")


def row(minute: int, c: int, lo: int | None, hi: int | None, after: int | None, *,
        client: str = "", topic: str = "T") -> tuple:
    return ("c", "G", client, topic, "b", 0, T(minute), c, lo, hi, lo is not None, after, after == 0)


@pytest.mark.parametrize(
    "offsets, bounds, as_of, expected",
    [
        pytest.param([off(1, 5), off(2, 8)], [qb(1, 0, 10), qb(2, 3, 12)], T(9),
                     [row(1, 5, 0, 10, 1), row(2, 8, 3, 12, 0)],
                     id="each_broker_snapshot_takes_its_own_bounds_and_the_newest_is_latest"),
        pytest.param([off(1, 0)], [qb(1, 0, 10, topic="Other")], T(9),
                     [row(1, 0, 0, 0, 0)],
                     id="a_queue_missing_from_a_snapshot_with_consumequeue_has_min_and_max_zero"),
        pytest.param([off(1, 5), off(2, 5)], [qb(1, 0, 10, topic="Other"), qb(2, 0, 10, topic="Other")], T(9),
                     [row(1, 5, None, None, None), row(2, 5, None, None, None)],
                     id="a_queue_that_held_messages_missing_from_consumequeue_is_unknown_not_empty"),
        pytest.param([off(1, 5), off(2, 8), off(2, 4, topic="Other")],
                     [qb(1, 0, 10), ("c", "b", T(2), "T", 0, None, None), qb(2, 0, 6, topic="Other")], T(9),
                     [row(1, 5, 0, 10, 0), row(2, 8, None, None, None), row(2, 4, 0, 6, 0, topic="Other")],
                     id="a_queue_whose_files_could_not_give_bounds_has_unknown_bounds_not_zero"),
        pytest.param([off(1, 5), off(2, 8)], [qb(1, 0, 10)], T(9),
                     [row(1, 5, 0, 10, 0), row(2, 8, None, None, None)],
                     id="a_snapshot_without_consumequeue_has_unknown_bounds_and_s_is_the_last_known_one"),
        pytest.param([off(1, 5), off(3, 9)], [qb(1, 0, 10), qb(3, 0, 12)], T(2),
                     [row(1, 5, 0, 10, 0)],
                     id="snapshots_after_as_of_are_ignored"),
        pytest.param([off(2, 7, client="10.0.0.5@DEFAULT"), off(4, 9, client="10.0.0.5@DEFAULT")],
                     [qb(1, 0, 10), qb(3, 2, 20), qb(4, 4, 30)], T(9),
                     [row(2, 7, 0, 10, 1, client="10.0.0.5@DEFAULT"),
                      row(4, 9, 4, 30, 0, client="10.0.0.5@DEFAULT")],
                     id="a_broadcast_client_snapshot_takes_the_broker_bounds_at_or_before_it"),
        pytest.param([off(0, 3, client="10.0.0.5@DEFAULT"), off(2, 7, client="10.0.0.5@DEFAULT"), off(2, 6),
                      off(3, 8)],
                     [qb(1, 0, 10), qb(2, 1, 11)], T(9),
                     [row(0, 3, None, None, None, client="10.0.0.5@DEFAULT"),
                      row(2, 7, 1, 11, 0, client="10.0.0.5@DEFAULT"), row(2, 6, 1, 11, 0),
                      row(3, 8, None, None, None)],
                     id="a_client_snapshot_before_any_bounds_has_none_and_a_broker_snapshot_never_borrows_older_ones"),
        pytest.param([off(1, 5), off(1, 3, group="G@x"), off(1, 3, topic="T@y")], [qb(1, 0, 10)], T(9),
                     [row(1, 5, 0, 10, 0)],
                     id="groups_and_topics_containing_at_are_skipped"),
    ],
)
def test_offset_series(spark, offsets, bounds, as_of, expected) -> None:  # noqa: ANN001
    actual = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=as_of)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, SERIES))


HELD = "cluster string, broker string, topic string, queue_id int, held_from timestamp"
CLIENT = "10.0.0.5@DEFAULT"


@pytest.mark.parametrize(
    "offsets, bounds, held, expected",
    [
        pytest.param([off(1, 0), off(2, 0)], [qb(1, 0, 10, topic="Other")], [],
                     [row(1, 0, 0, 0, 1), row(2, 0, 0, 0, 0)],
                     id="a_queue_never_used_is_empty_even_in_a_snapshot_without_any_consume_queue_data"),
        pytest.param([off(1, 0), off(2, 0)], [qb(1, 0, 4)], [("c", "b", "T", 0, T(1))],
                     [row(1, 0, 0, 4, 0), row(2, 0, None, None, None)],
                     id="a_queue_with_entries_in_an_earlier_snapshot_is_unknown_without_data_though_c_is_0"),
        pytest.param([off(1, 0), off(3, 0), off(4, 0)], [qb(m, 0, 0, topic="Other") for m in (1, 3)],
                     [("c", "b", "T", 0, T(2))],
                     [row(1, 0, 0, 0, 0), row(3, 0, None, None, None), row(4, 0, None, None, None)],
                     id="a_queue_whose_records_a_snapshot_held_is_unknown_from_then_on"),
        pytest.param([off(1, 0, client=CLIENT), off(3, 0, client=CLIENT)], [qb(2, 0, 0, topic="Other")],
                     [("c", "b", "T", 0, T(3))],
                     [row(1, 0, 0, 0, 0, client=CLIENT), row(3, 0, None, None, None, client=CLIENT)],
                     id="a_client_snapshot_follows_the_same_signs_with_or_without_broker_bounds_before_it"),
    ],
)
def test_no_consume_queue_data_is_unknown_only_for_a_queue_that_held_messages(spark, offsets, bounds, held,
                                                                                expected) -> None:  # noqa: ANN001
    """Spec §4.2 NO_CONSUME_QUEUE: without consume queue data for q, Min and Max are unknown when q held messages by
    then (C > 0, an earlier snapshot's entries, a record of q held by a snapshot); a queue with none of those signs
    (a %RETRY% queue never used) is empty, Min = Max = 0, as the broker reports it."""
    actual = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=T(9), held=spark.createDataFrame(held, HELD))
    assertDataFrameEqual(actual, spark.createDataFrame(expected, SERIES))


def test_held_queues_is_the_first_snapshot_with_entries_or_holding_a_record(spark) -> None:  # noqa: ANN001
    def msg(topic: str, q: int, first: dt.datetime | None, phys: int) -> tuple:
        r = {c: None for c in M.TABLE.columns}
        r.update(cluster="c", broker="b", physical_offset=phys, topic=topic, queue_id=q, queue_offset=0,
                 first_snapshot_ts=first, properties={})
        return tuple(r[c] for c in M.TABLE.columns)

    bounds = [qb(1, 0, 0), qb(2, 3, 4), qb(3, 3, 5), qb(1, 0, 7, topic="U"), qb(9, 0, 2, topic="W")]
    records = [msg("T", 0, T(1), 0), msg("U", 1, T(5), 100), msg("U", 1, T(4), 200), msg("V", 0, None, 300),
               msg("X", 0, T(8), 400)]
    got = snapshots.held_queues(spark.createDataFrame(bounds, QB.SCHEMA), spark.createDataFrame(records, M.SCHEMA),
                                as_of=T(6))
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    assertDataFrameEqual(got, spark.createDataFrame(
        [("c", "b", "T", 0, T(1)), ("c", "b", "U", 0, T(1)), ("c", "b", "U", 1, T(4)), ("c", "b", "V", 0, epoch)],
        HELD))
    later = snapshots.held_queues(spark.createDataFrame(bounds, QB.SCHEMA), spark.createDataFrame(records, M.SCHEMA),
                                  as_of=T(9), after=T(4))
    assertDataFrameEqual(later, spark.createDataFrame(
        [("c", "b", "U", 1, T(5)), ("c", "b", "V", 0, epoch), ("c", "b", "W", 0, T(9)), ("c", "b", "X", 0, T(8))],
        HELD))


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


# One broker: key G/T/0 snapshotted at minutes 1-9 (no consumequeue at 4 and 8: unknown bounds), with decreases at 3,
# 5 (through the unknown 4) and 8; a broadcast client of G2 at 2, 5 and 8 (8 borrows the bounds of 7); a key that
# stops after minute 2 (G3); a key whose newest snapshot (4) has unknown bounds (G4); retention moves Min past the
# committed offset at 5-7 (EXPIRED).
HISTORY_OFFSETS = [off(1, 10), off(2, 20), off(3, 15), off(4, 30), off(5, 25), off(6, 40), off(7, 41), off(8, 35),
                   off(9, 50), off(2, 3, group="G2", client=CLIENT), off(5, 6, group="G2", client=CLIENT),
                   off(8, 9, group="G2", client=CLIENT), off(1, 1, group="G3"), off(2, 2, group="G3"),
                   off(3, 7, group="G4"), off(4, 8, group="G4")]
HISTORY_BOUNDS = [qb(1, 0, 60), qb(2, 0, 60), qb(3, 5, 60), qb(5, 30, 70), qb(6, 45, 80), qb(7, 44, 90),
                  qb(9, 46, 99)]


@pytest.mark.parametrize("since", [3, 4, 6, 7, 8])
def test_a_series_from_a_previous_runs_tail_answers_as_the_whole_history(spark, since: int) -> None:  # noqa: ANN001
    """What a horizon run reads of the series (latest, newest, the last ``keep`` known snapshots and their
    ``snapshots_after``, the tail it leaves, every decrease, EXPIRED, the bounds times) equals the full series' when
    it starts from the run as of ``since``'s tail and reads only the snapshots after it."""
    from jobs.rules import unconsumed

    co, qbs = spark.createDataFrame(HISTORY_OFFSETS, CO.SCHEMA), spark.createDataFrame(HISTORY_BOUNDS, QB.SCHEMA)
    keep, as_of, then = 2, T(9), T(since)
    full = snapshots.offset_series(co, qbs, as_of=as_of)
    before = snapshots.offset_series(co, qbs, as_of=then)
    bounds_at = [tuple(r) for r in snapshots.bounds_times(qbs, as_of=then).collect()]
    assert [r[2].replace(tzinfo=UTC) for r in bounds_at] == [T(3) if since < 5 else T(7) if since == 8 else T(since)]
    # the tail as a run stores it: its status samples (the known snapshots) and its newest unknown snapshots
    from jobs.reconcile import offset_state
    from jobs.rules import status

    stored = offset_state.tail_of(status.status_samples(before, window=keep, keep=keep),
                                  snapshots.unknown_newest(before))
    assertDataFrameEqual(stored, snapshots.tail(before, keep=keep))
    got = snapshots.series_after(co, qbs, stored, since=then, as_of=as_of, bounds_at=bounds_at)
    window = lambda s: s.where(F.col("bounds_known") & (F.col("snapshots_after") < keep))  # noqa: E731
    for part in (snapshots.latest, snapshots.newest, window, lambda s: snapshots.tail(s, keep=keep)):
        assertDataFrameEqual(part(got), part(full))
    # each key's last 2 snapshots with known bounds, and its newest (G's 9; G3's last is minute 2; G4's 4, unknown)
    assert sorted((r.consumer_group, r.snapshot_ts.minute) for r in snapshots.tail(full, keep=keep).collect()) == [
        ("G", 7), ("G", 9), ("G2", 5), ("G2", 8), ("G3", 1), ("G3", 2), ("G4", 3), ("G4", 4)]
    # what a run stores of it: the known ones are its status samples, the rest is the newest unknown one
    assert [(r.consumer_group, r.snapshot_ts.minute) for r in snapshots.unknown_newest(full).collect()] == [("G4", 4)]
    assertDataFrameEqual(snapshots.decreases(before).unionByName(
        snapshots.decreases_after(got, snapshots.tail(before, keep=keep), since=then)), snapshots.decreases(full))
    assert [(r.prev_offset, r.committed_offset) for r in snapshots.decreases(full).orderBy("snapshot_ts").collect()] \
        == [(20, 15), (30, 25), (41, 35)]
    assertDataFrameEqual(unconsumed.expired(got, earlier=unconsumed.expired(before)), unconsumed.expired(full))
    assert sorted((r.consumer_group, r.start_offset, r.end_offset) for r in unconsumed.expired(full).collect()) == [
        ("G", 25, 29), ("G", 40, 44), ("G2", 6, 43)]
    assertDataFrameEqual(snapshots.bounds_times(qbs, as_of=as_of, since=then, bounds_at=bounds_at),
                         snapshots.bounds_times(qbs, as_of=as_of))
