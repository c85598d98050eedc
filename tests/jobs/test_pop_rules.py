"""POP rules on tiny inputs (reconciliation spec §4.1 POP part): checkpoints counted once, the offsets they cover,
acks by their first stored copy, late acks, offsets in flight at S and the POP pairs."""
from __future__ import annotations

import datetime as dt

import pytest

from jobs.lake import _spark
from jobs.rules import pop
from schemas import pop_acks as PA
from schemas import pop_checkpoints as PC

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, tzinfo=UTC)
PT = int(T0.timestamp() * 1000)


def ts(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _ends(spark, t: dt.datetime):  # noqa: ANN001, ANN202
    return spark.createDataFrame([("c", t)], "cluster string, t_end timestamp")


def ck(phys: int, store_s: float, *, so: int = 10, n: int = 3, deltas: list[int] | None = None, pt: int = PT,
       it: int = 60000, topic: str = "T", seen_s: float = 0, stored: str = "rmq_sys_wheel_timer",
       rp: str | None = None, bm: int = 0) -> tuple:
    return ("c", "b", phys, stored, ts(store_s), topic, 0, so, "G", pt, "b", it, bm, n, 0, deltas, rp, pt + it,
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
            for r in pop.inflight(state, _ends(spark, ts(120))).collect()] == [("G", "T", "b", 0, 2)]
    assert sorted(tuple(r) for r in pop.pop_pairs(cks).collect()) == [
        ("c", "G", "%RETRY%G+T"), ("c", "G", "%RETRY%G_T"), ("c", "G", "T")]


def test_a_re_put_checkpoint_is_a_pop_of_its_own_offset_that_revives_later(spark) -> None:  # noqa: ANN001
    """PopReviveService.rePutCK: a CK the revive could not act on is written again per unrevived offset (n 1, d [0],
    so = that offset, the old pt, ``rp`` + 1, invisible time + 10 s once overdue). CK covers 10-12 (revive 60 s):
    10 acked at 5 s, 11 acked at 61 s (late: the broker "never expects an ACK matched in the future" once the revive
    time passed), 12 never. At 62 s the broker re-puts 11 and 12 (revive 70 s) and re-puts 10 with the CK's own
    identity (so 10: the same checkpoint, counted once). At S = 65 s 11 and 12 are in flight (their re-puts revive
    at 70 s; the late ack names the old pop), at S = 75 s nothing is; 12's last pop revives at 70 s, so it is lost
    once 900 s have passed."""
    from schemas import messages as M

    cks = spark.createDataFrame([ck(1, 0), ck(2, 62, so=11, n=1, deltas=[0], it=70000, rp="1"),
                                 ck(3, 62, so=12, n=1, deltas=[0], it=70000, rp="1"),
                                 ck(4, 62, so=10, n=1, deltas=[0], it=70000, rp="1")], PC.SCHEMA)
    c = pop.checkpoints(cks, as_of=ts(3600))
    state = pop.popped_state(c, pop.acked(spark.createDataFrame([ack(5, 5, [10]), ack(6, 61, [11])], PA.SCHEMA),
                                          as_of=ts(3600)))
    assert sorted((r.start_offset, r.queue_offset, r.revive_time - PT,
                   None if r.acked_ms is None else r.acked_ms - PT, r.late) for r in state.collect()) == [
        (10, 10, 60000, 5000, False), (10, 11, 60000, 61000, True), (10, 12, 60000, None, None),
        (11, 11, 70000, None, None), (12, 12, 70000, None, None)]
    assert [r.inflight for r in pop.inflight(state, _ends(spark, ts(65))).collect()] == [2]
    assert pop.inflight(state, _ends(spark, ts(75))).where("inflight > 0").count() == 0
    msgs = spark.createDataFrame([msg(i, "T", i, f"K{i}") for i in (10, 11, 12)], M.SCHEMA)
    fate = pop.message_fate(pop.popped_copies(state, msgs), msgs, pop.pop_pairs(c))
    assert sorted((r.uniq_key, r.acked, (r.newest_revive_ms - PT) // 1000) for r in fate.collect()) == [
        ("K10", True, 60), ("K11", True, 70), ("K12", False, 70)]
    assert [(r.start_offset, r.end_offset) for r in
            pop.lost_ranges(fate, _ends(spark, ts(969)), blocking_min_age_s=900).collect()] == []
    assert [(r.start_offset, r.end_offset) for r in
            pop.lost_ranges(fate, _ends(spark, ts(970)), blocking_min_age_s=900).collect()] == [(12, 12)]


def test_a_set_bit_of_a_stored_checkpoints_bitmap_is_an_ack_stored_with_that_copy(spark) -> None:  # noqa: ANN001
    """Spec §4.1: bit i of bm acks the checkpoint's i-th offset (d order). CK covers 10, 12, 15 (d [0, 2, 5]); its
    timer copy (0 s) has bm 0b001, its revive copy (60 s, after the revive time) 0b011 and bit 31 (no 32nd offset):
    10 acked at 0 s with the first copy, 12 late at 60 s; 15 only by the ack message at 30 s; a copy not seen by the
    as-of time does not count."""
    cks = spark.createDataFrame([ck(1, 0, deltas=[0, 2, 5], bm=0b001),
                                 ck(2, 60, deltas=[0, 2, 5], bm=0b011 | -(1 << 31), stored="rmq_sys_REVIVE_LOG_c"),
                                 ck(3, 70, deltas=[0, 2, 5], bm=0b100, seen_s=7200)], PC.SCHEMA)
    acks = spark.createDataFrame([ack(4, 30, [15])], PA.SCHEMA)
    got = pop.acked(acks, as_of=ts(3600), pop_checkpoints=cks)
    assert sorted((r.queue_offset, r.acked_ms - PT) for r in got.collect()) == [(10, 0), (12, 60000), (15, 30000)]
    state = pop.popped_state(pop.checkpoints(cks, as_of=ts(3600)), got)
    assert sorted((r.queue_offset, r.late) for r in state.collect()) == [(10, False), (12, True), (15, False)]


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


@pytest.mark.parametrize("computed_once", [False, True], ids=["as_one_plan", "shared_frames_materialized"])
def test_late_acks_are_duplicates_and_unrevived_pops_are_lost(spark, tmp_path, computed_once) -> None:  # noqa: ANN001
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
    # (the scheduled run computes its shared frames once, into Parquet: the same rows)
    keep = _spark.materializer(spark, str(tmp_path)) if computed_once else (lambda df, _name: df)
    fate = pop.message_fate(pop.popped_copies(state, msgs), msgs, pop.pop_pairs(c), keep)
    if computed_once:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pop_copies", "pop_newest", "pop_pops"]
    assert sorted((r.uniq_key, r.queue_offset, r.newest_r, r.late_again, r.acked, r.in_dlq,
                   None if r.newest_revive_ms is None else (r.newest_revive_ms - PT) // 1000)
                  for r in fate.collect()) == [
        ("K10", 10, 0, False, True, False, 60), ("K11", 11, 1, True, True, False, 130),
        ("K12", 12, 1, False, False, False, 140), ("K13", 13, 0, False, False, False, 160),
        ("K14", 14, 0, False, False, False, 3610), ("K15", 15, 0, False, False, True, 60),
        ("K16", 16, 1, False, False, False, None)]
    assert [tuple(r) for r in pop.late_ack_ranges(fate).collect()] == [
        ("c", "G", "", "T", "b", 0, 11, 11, 1, "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED")]
    assert [tuple(r) for r in pop.lost_ranges(fate, _ends(spark, as_of), blocking_min_age_s=900).collect()] == [
        ("c", "G", "", "T", "b", 0, 12, 13, 2, "POP_LOST")]
    assert [(r.topic, r.inflight) for r in pop.inflight(state, _ends(spark, as_of)).orderBy("topic").collect()] == [("T", 1)]


def test_pop_pairs_name_the_topic_of_a_retry_topics_checkpoint(spark) -> None:  # noqa: ANN001
    from jobs.rules import pop

    cks = pop.checkpoints(spark.createDataFrame([
        ck(1, 0), ck(2, 0, topic="%RETRY%G_T", so=0, n=1), ck(3, 0, topic="%RETRY%G+U", so=0, n=1),
        ck(4, 0, topic="%RETRY%H_V", so=0, n=1)], PC.SCHEMA), as_of=ts(60))
    assert sorted(tuple(r) for r in pop.pop_pairs(cks).collect()) == [
        ("c", "G", "%RETRY%G+T"), ("c", "G", "%RETRY%G+U"), ("c", "G", "%RETRY%G_T"), ("c", "G", "%RETRY%G_U"),
        ("c", "G", "%RETRY%H_V"), ("c", "G", "T"), ("c", "G", "U")]


def test_merged_takes_the_pop_pairs_rows_out_and_puts_the_pop_rows_in() -> None:
    """A POP pair loses its SKIPPED and push RETRYING/BLOCKING_COMMIT rows and gets the POP rows; its status row is
    POP with its in-flight count; a broadcast group stays BROADCAST; other pairs are untouched."""
    import pandas as pd

    from jobs.rules import pop

    unc = pd.DataFrame([("c", "G", "", "T", "b", 0, 1, 2, 2, "SKIPPED"), ("c", "G", "", "T", "b", 0, 5, 9, 5, "BACKLOG"),
                        ("c", "H", "", "T", "b", 0, 1, 2, 2, "SKIPPED")],
                       columns=["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset",
                                "end_offset", "messages", "kind"])
    dlq = pd.DataFrame([("c", "G", "T", "RETRYING"), ("c", "G", "T", "IN_DLQ"), ("c", "G", "T", "BLOCKING_COMMIT")],
                       columns=["cluster", "consumer_group", "topic", "reason"])
    dup = pd.DataFrame(columns=["cluster", "consumer_group", "topic", "evidence"])
    st = pd.DataFrame([("c", "G", "", "T", "b", 0, "CONCURRENT", 0), ("c", "B", "x@1", "T", "b", 0, "BROADCAST", 0),
                       ("c", "H", "", "T", "b", 0, "ORDERLY", 0)],
                      columns=["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "consume_mode",
                               "inflight"])
    found = {"pairs": pd.DataFrame([("c", "G", "T"), ("c", "B", "T")], columns=["cluster", "consumer_group", "topic"]),
             "duplicated": pd.DataFrame([("c", "G", "T", "POP_LATE_ACK")], columns=dup.columns),
             "lost": pd.DataFrame([("c", "G", "", "T", "b", 0, 3, 3, 1, "POP_LOST")], columns=unc.columns),
             "retrying": pd.DataFrame([("c", "G", "T", "RETRYING")], columns=dlq.columns),
             "inflight": pd.DataFrame([("c", "G", "T", "b", 0, 4)], columns=[*pop.QUEUE, "inflight"])}
    got = pop.merged({"unconsumed_ranges": unc, "dlq_candidates": dlq, "duplicated_ranges": dup,
                      "consumer_status": st}, found)
    assert got["unconsumed_ranges"][["consumer_group", "start_offset", "kind"]].values.tolist() == [
        ["G", 5, "BACKLOG"], ["H", 1, "SKIPPED"], ["G", 3, "POP_LOST"]]
    assert got["dlq_candidates"]["reason"].tolist() == ["IN_DLQ", "RETRYING"]
    assert got["duplicated_ranges"].values.tolist() == [["c", "G", "T", "POP_LATE_ACK"]]
    assert got["consumer_status"][["consumer_group", "consume_mode", "inflight"]].values.tolist() == [
        ["G", "POP", 4], ["B", "BROADCAST", 0], ["H", "ORDERLY", 0]]
    assert pop.pop_only_groups(found["pairs"], {("c", "G", "T"), ("c", "G", "%RETRY%G"), ("c", "B", "T")}) == {
        ("c", "B")}


def test_a_popped_record_the_lake_lacks_and_a_copy_without_its_original_are_reported_where_they_are(spark) -> None:  # noqa: ANN001
    """T/0/50 was popped but the lake holds no record there: a message of its own, lost at T/0/50. K60's original
    expired before any snapshot held it; its revive copy (r 1, %RETRY%G_T/0/5) was popped and never acked: lost at
    the copy's place."""
    from jobs.rules import pop
    from schemas import messages as M

    msgs = spark.createDataFrame([msg(1, RETRY, 5, "K60", 1)], M.SCHEMA)
    cks = spark.createDataFrame([ck(1, 0, so=50, n=1), ck(2, 0, so=5, n=1, topic=RETRY)], PC.SCHEMA)
    as_of = ts(3600)
    c = pop.checkpoints(cks, as_of=as_of)
    state = pop.popped_state(c, pop.acked(spark.createDataFrame([], PA.SCHEMA), as_of=as_of))
    fate = pop.message_fate(pop.popped_copies(state, msgs), msgs, pop.pop_pairs(c))
    assert sorted(tuple(r) for r in pop.lost_ranges(fate, _ends(spark, as_of), blocking_min_age_s=900).collect()) == [
        ("c", "G", "", RETRY, "b", 0, 5, 5, 1, "POP_LOST"), ("c", "G", "", "T", "b", 0, 50, 50, 1, "POP_LOST")]
