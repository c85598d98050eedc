"""POP rules on tiny inputs (reconciliation spec §4.1 POP part): checkpoints counted once, the offsets they cover,
acks by their first stored copy, late acks, offsets in flight at S and the POP pairs."""
from __future__ import annotations

import datetime as dt

from jobs.rules import pop
from schemas import pop_acks as PA
from schemas import pop_checkpoints as PC

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, tzinfo=UTC)
PT = int(T0.timestamp() * 1000)


def ts(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def ck(phys: int, store_s: float, *, so: int = 10, n: int = 3, deltas: list[int] | None = None, pt: int = PT,
       it: int = 60000, topic: str = "T", seen_s: float = 0, stored: str = "rmq_sys_wheel_timer") -> tuple:
    return ("c", "b", phys, stored, ts(store_s), topic, 0, so, "G", pt, "b", it, 0, n, 0, deltas, None, pt + it,
            ts(seen_s))


def ack(phys: int, store_s: float, offsets: list[int], *, so: int = 10, pt: int = PT, kind: str = "ack",
        seen_s: float = 0, topic: str = "T") -> tuple:
    return ("c", "b", phys, "rmq_sys_REVIVE_LOG_c", ts(store_s), topic, 0, so, "G", pt, "b", offsets, kind, ts(seen_s))


def test_a_checkpoint_is_counted_once_and_covers_its_deltas_or_its_run(spark) -> None:  # noqa: ANN001
    cks = spark.createDataFrame([ck(100, 0, deltas=[0, 2, 5]), ck(900, 59, deltas=[0, 2, 5],
                                                                 stored="rmq_sys_REVIVE_LOG_c"),
                                 ck(200, 1, so=20, n=2, pt=PT + 1000)], PC.SCHEMA)
    got = pop.checkpoints(cks, as_of=ts(3600))
    assert sorted((r.start_offset, r.pop_time - PT, r.first_store_ts.replace(tzinfo=UTC)) for r in got.collect()) == [
        (10, 0, ts(0)), (20, 1000, ts(1))]
    assert sorted((r.start_offset, r.queue_offset) for r in pop.popped(got).collect()) == [
        (10, 10), (10, 12), (10, 15), (20, 20), (20, 21)]


def test_acks_by_their_first_copy_late_or_in_time_and_what_is_in_flight(spark) -> None:  # noqa: ANN001
    """CK (pt, invisible 60 s) covers 10-12 and CK2 (pt + 100 s) covers 20-21. 10 acked at 5 s (its revive copy of
    the ack at 60 s is later), 11 acked at 61 s (late), 12 never; at S = 120 s CK's offsets are past their revive
    time, CK2's 20-21 are not (revive at 160 s): in flight 2 (21 acked after S counts as in flight at S)."""
    cks = pop.checkpoints(spark.createDataFrame([ck(100, 0), ck(200, 100, so=20, n=2, pt=PT + 100_000)], PC.SCHEMA),
                          as_of=ts(3600))
    acks = pop.acked(spark.createDataFrame([ack(300, 5, [10]), ack(400, 60, [10]), ack(500, 61, [11, 12][:1]),
                                            ack(600, 130, [21], so=20, pt=PT + 100_000, seen_s=100)], PA.SCHEMA),
                     as_of=ts(3600))
    state = pop.popped_state(cks, acks)
    assert sorted((r.queue_offset, r.acked_ms - PT if r.acked_ms is not None else None, r.late)
                  for r in state.collect()) == [(10, 5000, False), (11, 61000, True), (12, None, None),
                                                (20, None, None), (21, 130000, False)]
    assert [(r.consumer_group, r.topic, r.broker, r.queue_id, r.inflight)
            for r in pop.inflight(state, t_s=ts(120)).collect()] == [("G", "T", "b", 0, 2)]
    assert [tuple(r) for r in pop.pop_pairs(cks).collect()] == [("c", "G", "T")]


def test_copies_not_seen_by_the_as_of_time_do_not_count(spark) -> None:  # noqa: ANN001
    cks = spark.createDataFrame([ck(100, 0, seen_s=600)], PC.SCHEMA)
    assert pop.checkpoints(cks, as_of=ts(300)).count() == 0
    acks = spark.createDataFrame([ack(300, 5, [10], seen_s=600), ack(400, 60, [10], seen_s=60)], PA.SCHEMA)
    assert [(r.queue_offset, r.acked_ms - PT) for r in pop.acked(acks, as_of=ts(300)).collect()] == [(10, 60000)]


def msg(phys: int, topic: str, qo: int, uniq: str, r: int = 0) -> tuple:
    from schemas import messages as M

    row = {c: None for c in M.TABLE.columns}
    row.update(cluster="c", broker="b", physical_offset=phys, topic=topic, queue_id=0, queue_offset=qo, uniq_key=uniq,
               reconsume_times=r, store_ts=ts(0), properties={})
    return tuple(row[c] for c in M.TABLE.columns)


RETRY = "%RETRY%G_T"


def test_late_acks_are_duplicates_and_unrevived_pops_are_lost(spark) -> None:  # noqa: ANN001
    """Originals K10-K16 at T/0/10-16. 10 acked in time. 11 acked late, its revive copy (r 1) popped and acked: one
    POP_LATE_ACK. 12 never acked, its revive copy popped (revive at 140 s) and never acked, no newer copy: lost.
    13 popped (revive 160 s), never acked, never revived (the original had expired): lost; 12-13 one range. 14 popped
    at 3550 s: its revive time (3610 s) is after S (3600 s): in flight, not lost. 15 in %DLQ%G: not lost.
    16's revive copy was not popped yet: the retry topic's backlog, not lost."""
    from jobs.rules import pop
    from schemas import messages as M

    msgs = spark.createDataFrame([msg(i, "T", i, f"K{i}") for i in range(10, 17)]
                                 + [msg(100, RETRY, 0, "K11", 1), msg(101, RETRY, 1, "K12", 1),
                                    msg(102, RETRY, 2, "K16", 1), msg(200, "%DLQ%G", 0, "K15", 2)], M.SCHEMA)
    cks = spark.createDataFrame([
        ck(1, 0), ck(2, 100, so=13, n=1, pt=PT + 100_000), ck(3, 3550, so=14, n=1, pt=PT + 3_550_000),
        ck(4, 0, so=15, n=2, pt=PT + 1), ck(5, 70, so=0, n=1, pt=PT + 70_000, topic=RETRY),
        ck(6, 80, so=1, n=1, pt=PT + 80_000, topic=RETRY)], PC.SCHEMA)
    acks = spark.createDataFrame([ack(7, 5, [10]), ack(8, 61, [11]), ack(9, 75, [0], so=0, pt=PT + 70_000,
                                                                         topic=RETRY)], PA.SCHEMA)
    as_of = ts(3600)
    c = pop.checkpoints(cks, as_of=as_of)
    state = pop.popped_state(c, pop.acked(acks, as_of=as_of))
    fate = pop.message_fate(pop.popped_copies(state, msgs), msgs, pop.pop_pairs(c))
    assert sorted((r.uniq_key, r.queue_offset, r.newest_r, r.late_again, r.acked, r.in_dlq,
                   None if r.newest_revive_ms is None else (r.newest_revive_ms - PT) // 1000)
                  for r in fate.collect()) == [
        ("K10", 10, 0, False, True, False, 60), ("K11", 11, 1, True, True, False, 130),
        ("K12", 12, 1, False, False, False, 140), ("K13", 13, 0, False, False, False, 160),
        ("K14", 14, 0, False, False, False, 3610), ("K15", 15, 0, False, False, True, 60),
        ("K16", 16, 1, False, False, False, None)]
    assert [tuple(r) for r in pop.late_ack_ranges(fate).collect()] == [
        ("c", "G", "", "T", "b", 0, 11, 11, 1, "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED")]
    assert [tuple(r) for r in pop.lost_ranges(fate, t_s=as_of, blocking_min_age_s=900).collect()] == [
        ("c", "G", "", "T", "b", 0, 12, 13, 2, "POP_LOST")]
    assert [(r.topic, r.inflight) for r in pop.inflight(state, t_s=as_of).orderBy("topic").collect()] == [("T", 1)]
