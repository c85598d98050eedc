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
        seen_s: float = 0) -> tuple:
    return ("c", "b", phys, "rmq_sys_REVIVE_LOG_c", ts(store_s), "T", 0, so, "G", pt, "b", offsets, kind, ts(seen_s))


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
