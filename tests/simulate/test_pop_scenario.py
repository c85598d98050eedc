"""Spec §7 ``pop``: the records the simulated 5.x broker stores for a POP group decode with jobs/formats/pop.py, and
the truth has exactly the rows the scenario's construction gives (jobs/simulate/scenarios.py ``pop_consumption``).

Construction (seed independent): TopicPop gets 4 messages every 10 s from 00:00:10, ``pop-<i>`` at queue i % 2,
offset i // 2. A client pops queue 0 offset 0 at 00:00:10.5 with a 20 min invisible time and dies: its original is
deleted by retention (10 min, hour 00) before the revive (POP_LOST). The main client (invisible 30 s): i % 50 == 7
acked after 45 s (late: revived anyway, POP_LATE_ACK at queue 1 offset (i - 1) / 2 for i = 7, 57, ..., 907); i = 20
(queue 0 offset 10) fails every time: IN_DLQ with reconsume_times 17; i = 864 (queue 0 offset 432) fails every time
from 00:36:10: RETRYING at 00:40 (4 retries: its revives from 00:38:10 to 00:38:40 and from 00:39:20 are re-put,
POP_REPUT_WINDOWS_MS); what is popped from 00:39:30 takes 25 s: in flight at 00:40.
"""
from __future__ import annotations

import csv
import pathlib

import pytest

from jobs import simulate
from jobs.formats import commitlog, pop
from jobs.simulate.clock import MINUTE, T0_MS, iso_ms
from jobs.simulate.scenarios import POP_DLQ_I, POP_GROUP, POP_RETRYING_I, POP_TOPIC, pop_consumption
from jobs.simulate.truth import BLOCKING_MIN_AGE_MS, Truth
from test_scenarios import _digest  # tests/simulate: the landing zone's bytes, one hash

C, B = "DefaultCluster", "broker-a"
RETRY = "%RETRY%GID_pop_TopicPop"
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"
S = T0_MS + 40 * MINUTE


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    out = tmp_path_factory.mktemp("pop")
    w = pop_consumption(str(out), 7)
    Truth(w).write(str(out / "_truth"))
    return w, out


def _read(out: pathlib.Path, name: str) -> list[dict[str, str]]:
    with open(out / "_truth" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _original(w, i: int):  # noqa: ANN001, ANN202
    [m] = [m for m in w.stored if m.topic == POP_TOPIC and m.keys == f"pop-{i}"]
    return m


# ------------------------------------------------------------------------------------------- the records


def test_every_checkpoint_and_ack_on_disk_decodes_and_round_trips(world) -> None:
    """Every record of the timer and revive topics in every snapshot's commitlog files is a CK, ack or bAck whose body
    decodes without a problem, re-encodes byte for byte, and whose properties are what jobs.formats.pop says."""
    w, out = world
    seen: dict[int, dict] = {}
    for path in sorted(out.glob("cluster=*/broker=broker-a/snapshot_ts=*/store/commitlog/*")):
        for part in commitlog.decode_file(str(path), body_topics=frozenset({pop.TIMER_TOPIC, REVIVE})):
            assert part.problems == []
            for r in part.table.to_pylist():
                if r["topic"] in (pop.TIMER_TOPIC, REVIVE):
                    seen.setdefault(r["physical_offset"], r)
    written = w.writer.broker_snaps[-1].commitlog[1]  # the run goes on 1 s past the last snapshot
    stored = {m.phys: m for m in w.stored if m.topic in (pop.TIMER_TOPIC, REVIVE) and m.phys < written}
    assert set(seen) == set(stored)  # snapshots every 5 min, retention 10 min: every record was captured
    rows = [seen[p] for p in sorted(seen)]
    cks, acks, problems = pop.decode_pop_bodies([r["tags"] for r in rows], [r["body"] for r in rows],
                                                default_broker_name=B)
    assert problems == [] and cks.num_rows + acks.num_rows == len(rows)
    for ck in cks.to_pylist():
        r = rows[ck["record"]]
        assert pop.encode_checkpoint(ck) == r["body"]
        assert (ck["bitmap"], ck["revive_offset"], ck["broker_name"]) == (0, 0, B)
        assert r["uniq_key"] == pop.ck_uniq_key(ck["topic"], ck["queue_id"], ck["start_offset"], ck["consumer_group"],
                                                ck["pop_time"], B)
        assert int(dict(r["properties"])["TIMER_DELIVER_MS"]) == ck["revive_time"] - 1000
    for a in acks.to_pylist():
        r = rows[a["record"]]
        body = (pop.encode_ack(dict(a, ack_offset=a["ack_offsets"][0])) if a["kind"] == "ack"
                else pop.encode_batch_ack(a))
        assert body == r["body"]
        ao = a["ack_offsets"][0] if a["kind"] == "ack" else -1  # AckMessageProcessor: a bAck's key has ao -1
        assert r["uniq_key"] == pop.ack_uniq_key(a["topic"], a["queue_id"], ao, a["consumer_group"], a["pop_time"], B)
    svc = w.pop_services[B]
    # one CK per popped queue per request and per re-put, each stored twice (timer, then revive topic) unless still
    # in the timer; a re-put of a CK's start offset has that CK's identity
    assert {pop.ck_identity(*(c[k] for k in pop.IDENTITY)) for c in cks.to_pylist()} == {
        ck.identity for ck in svc.checkpoints if ck.copies[0].phys < written}
    assert sorted(int(c["reput_times"] or 0) for c in cks.to_pylist()) == sorted(
        ck.reput_times or 0 for ck in svc.checkpoints for m in ck.copies if m.phys < written)
    assert cks.num_rows == sum(m.phys < written for ck in svc.checkpoints for m in ck.copies)
    assert acks.num_rows == sum(m.phys < written for a in svc.acks for m in a.copies)
    assert {a.kind for a in svc.acks} == {"ack", "bAck"}
    # the stored properties, as the broker builds them
    ck = svc.checkpoints[5]
    timer, fired = ck.copies
    want = pop.ck_message_properties(dict(topic=ck.topic, queue_id=ck.queue_id, start_offset=ck.start_offset,
                                          consumer_group=ck.group, pop_time=ck.pop_time,
                                          invisible_time=ck.invisible_time, broker_name=B),
                                     revive_topic=REVIVE, revive_queue_id=ck.revive_qid, put_ms=timer.store_ts)
    assert [(m.topic, m.queue_id, list(m.props.items())) for m in (timer, fired)] == [
        (c.topic, c.queue_id, list(c.properties.items())) for c in want]
    assert list(fired.props)[:3] == ["TIMER_OUT_MS", "TIMER_DELIVER_MS", "UNIQ_KEY"]  # a HashMap(128)'s order
    assert fired.store_ts == int(fired.props["TIMER_OUT_MS"]) == int(fired.props["TIMER_DEQUEUE_MS"])


def test_a_revive_copy_that_cannot_be_put_is_re_put_as_a_checkpoint(world) -> None:
    """PopReviveService.rePutCK, in the two windows of POP_REPUT_WINDOWS_MS (00:38:10-00:38:40, from 00:39:20): per
    offset not revived a CK with n 1, d [0], so = that offset, the old pt and revive queue, rp + 1 and it grown by
    ckRewriteIntervalsInSeconds[rp] (10 s, then 20 s), stored through the timer like any CK. i = 907 (queue 1 offset
    453 of the CK from 452 popped at 00:37:51, acked late at 45 s) is re-put twice, then revived: the late ack names
    the old pop, so its revive copy is written after it (POP_LATE_ACK, test_truth_rows_seed_7)."""
    w, _ = world
    svc = w.pop_services[B]
    reputs = [ck for ck in svc.checkpoints if ck.reput_times is not None]
    assert [(ck.topic, ck.queue_id, ck.start_offset, ck.offsets, ck.reput_times, iso_ms(ck.pop_time)[11:19],
             ck.invisible_time) for ck in reputs] == [
        (POP_TOPIC, 1, 453, [453], 1, "00:37:51", 40_000), (RETRY, 0, 55, [55], 1, "00:37:53", 40_000),
        (POP_TOPIC, 1, 453, [453], 2, "00:37:51", 60_000), (RETRY, 0, 55, [55], 2, "00:37:53", 60_000),
        (RETRY, 0, 57, [57], 1, "00:38:57", 40_000), (POP_TOPIC, 1, 466, [466], 1, "00:39:01", 40_000),
        (RETRY, 0, 57, [57], 2, "00:38:57", 60_000), (POP_TOPIC, 1, 466, [466], 2, "00:39:01", 60_000)]
    for ck in reputs:
        [old] = [c for c in svc.checkpoints if (c.topic, c.queue_id, c.pop_time) == (ck.topic, ck.queue_id, ck.pop_time)
                 and c.reput_times == (None if ck.reput_times == 1 else ck.reput_times - 1) and ck.start_offset in c.offsets]
        assert (ck.revive_qid, old.revived_at is not None, old.revived) == (old.revive_qid, True, {})
        assert ck.copies[0].store_ts == old.revived_at  # written by the scan that could not revive it
        assert int(ck.copies[0].props["TIMER_DELIVER_MS"]) == ck.pop_time + ck.invisible_time - 1000
        start, end = (S - 110_000, S - 80_000) if old.revived_at < S - 60_000 else (S - 40_000, S)
        assert start <= old.revived_at < end
    first_907 = [ck for ck in svc.checkpoints if ck.reput_times is None and (ck.topic, ck.queue_id) == (POP_TOPIC, 1)
                 and 453 in ck.offsets]
    assert [(ck.start_offset, ck.offsets) for ck in first_907] == [(452, [452, 453])]
    [late] = [a for a in svc.acks if a.ck is first_907[0] and 453 in a.offsets]
    assert (late.kind, late.offsets, late.at - first_907[0].revive_time) == ("ack", [453], 15_102)  # proxy 2 ms + 45 s + flush 100 ms
    [copy] = [c for ck in reputs for c in ck.revived.values() if c is not None and c.keys == "pop-907"]
    assert (copy.reconsume, copy.store_ts > late.at) == (1, True)
    # every revive in a window wrote no revive copy (and lost nothing: no None entry either)
    in_windows = [ck for ck in svc.checkpoints if ck.revived_at is not None and any(
        a <= ck.revived_at < b for a, b in ((S - 110_000, S - 80_000), (S - 40_000, S)))]
    assert len(in_windows) == 21 and all(ck.revived == {} for ck in in_windows)


def test_retry_and_dlq_copies_are_the_brokers(world) -> None:
    w, _ = world
    failing = _original(w, POP_DLQ_I)
    copies = [m for m in w.stored if m.uniq == failing.uniq]
    # the original, 17 revive copies in %RETRY%G_T queue 0 (reconsumeTimes 1..17), then the proxy's forward
    assert [(m.topic, m.queue_id, m.reconsume) for m in copies] == (
        [(POP_TOPIC, 0, 0)] + [(RETRY, 0, r) for r in range(1, 18)] + [("%DLQ%GID_pop", 0, 18)])
    first_pop = min(ck.pop_time for ck in w.pop_services[B].checkpoints
                    if (ck.topic, ck.queue_id) == (POP_TOPIC, 0) and 10 in ck.offsets)
    for m in copies[1:18]:
        assert m.props["1ST_POP_TIME"] == str(first_pop)  # the first revive adds it, later ones keep it
        assert (m.body, m.born_ts, m.born_host) == (failing.body, failing.born_ts, w.brokers[0].addr)
        assert {k: v for k, v in m.props.items() if k != "1ST_POP_TIME"} == failing.props
    dlq = copies[-1]
    assert dlq.props["RETRY_TOPIC"] == RETRY and dlq.props["ORIGIN_MESSAGE_ID"] == copies[17].offset_msg_id()
    b = w.brokers[0]
    assert b.topics[RETRY]["readQueueNums"] == 1 and b.topics[REVIVE]["readQueueNums"] == 8
    assert pop.TIMER_TOPIC in b.topics and "%RETRY%GID_pop" in b.topics  # consumerSendMsgBack created it
    assert b.groups[POP_GROUP]["retryMaxTimes"] == 16
    # consumerOffset.json: the POP group's topic and retry queue, and the revive scan's own progress
    state = b.offsets.state_at(S)
    assert state[(POP_TOPIC, POP_GROUP)] == {0: 478, 1: 478}
    # the retry topic's max at S (864's copy 5, revived by the scan at 00:40:00, comes after the snapshot)
    assert state[(RETRY, POP_GROUP)] == {0: 1 + max(m.queue_offset for m in w.stored
                                                    if m.topic == RETRY and m.store_ts < S)} == {0: 58}
    assert sorted(state[(REVIVE, "CID_RMQ_SYS_REVIVE_GROUP")]) == list(range(8))


def test_committed_offset_moves_at_pop_time(world) -> None:
    """The committed offset is the next offset to pop: it moves with the checkpoint, before any ack."""
    w, _ = world
    b = w.brokers[0]
    for ck in w.pop_services[B].checkpoints[:50]:
        if ck.topic != POP_TOPIC:
            continue
        history = [o for t, tp, g, q, o in b.offsets.history
                   if (tp, g, q) == (POP_TOPIC, POP_GROUP, ck.queue_id) and t == ck.pop_time]
        assert history[-1] == ck.offsets[-1] + 1


# ------------------------------------------------------------------------------------------- the truth


LATE = [i for i in range(7, 956, 50)]  # i % 50 == 7, popped before 00:39:30: 7, 57, ..., 907


def test_truth_rows_seed_7(world) -> None:
    w, out = world
    dlq_msg, retrying_msg = _original(w, POP_DLQ_I), _original(w, POP_RETRYING_I)
    assert [(m.queue_id, m.queue_offset) for m in (dlq_msg, retrying_msg)] == [(0, 10), (0, 432)]
    assert [(r["consumer_group"], r["topic"], r["broker"], r["queue_id"], r["start_offset"], r["end_offset"],
             r["messages"], r["evidence"], r["cause"]) for r in _read(out, "duplicated_ranges")] == [
        (POP_GROUP, POP_TOPIC, B, "1", str(o), str(o), "1", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED")
        for o in range(3, 454, 25)]  # (i - 1) / 2 for i in LATE
    assert [(i - 1) // 2 for i in LATE] == list(range(3, 454, 25))
    assert [(r["consumer_group"], r["topic"], r["queue_id"], r["start_offset"], r["end_offset"], r["messages"],
             r["kind"]) for r in _read(out, "unconsumed_ranges")] == [(POP_GROUP, POP_TOPIC, "0", "0", "0", "1",
                                                                       "POP_LOST")]
    assert _read(out, "dlq_candidates") == [
        {"cluster": C, "consumer_group": POP_GROUP, "client_id": "", "topic": POP_TOPIC, "broker": B, "queue_id": "0",
         "queue_offset": "10", "uniq_key": dlq_msg.uniq, "keys": "pop-20", "reconsume_times": "17",
         "max_reconsume_times": "16", "reason": "IN_DLQ", "last_attempt_ts": "",
         "dlq_eta_ts": "2026-01-05T00:10:39.002Z", "producer_group": ""},
        {"cluster": C, "consumer_group": POP_GROUP, "client_id": "", "topic": POP_TOPIC, "broker": B, "queue_id": "0",
         "queue_offset": "432", "uniq_key": retrying_msg.uniq, "keys": "pop-864", "reconsume_times": "4",
         "max_reconsume_times": "16", "reason": "RETRYING", "last_attempt_ts": "2026-01-05T00:38:57.000Z",
         "dlq_eta_ts": "", "producer_group": ""}]
    assert [(r["consumer_group"], r["topic"], r["queue_id"], r["committed_offset"], r["min_offset"], r["max_offset"],
             r["lag"], r["status"], r["consume_mode"], r["inflight"]) for r in _read(out, "consumer_status")] == [
        (POP_GROUP, RETRY, "0", "58", "44", "58", "0", "OK", "POP", "0"),
        (POP_GROUP, POP_TOPIC, "0", "478", "345", "478", "0", "OK", "POP", "4"),
        (POP_GROUP, POP_TOPIC, "1", "478", "344", "478", "0", "OK", "POP", "4"),
        ("GID_recon", "%RETRY%GID_recon", "0", "0", "0", "0", "0", "OK", "CONCURRENT", "0"),
        ("GID_recon", "TopicTest", "0", "583", "430", "583", "0", "OK", "CONCURRENT", "0"),
        ("GID_recon", "TopicTest", "1", "583", "430", "583", "0", "OK", "CONCURRENT", "0")]
    # a POP group has no traces: no NO_TRACE row; no SKIPPED, BLOCKING_COMMIT or correction
    assert _read(out, "coverage") == [] and _read(out, "offset_corrections") == []


def test_truth_agrees_with_the_simulators_own_log(world) -> None:
    """The truth reads the stored records only; the POP service's own log of what it did says the same."""
    w, out = world
    svc = w.pop_services[B]
    by_uniq = {m.uniq: m for m in w.stored if m.topic == POP_TOPIC}
    # late: an ack at or after its checkpoint's revive time, of a copy the revive had copied again
    def revived(ck, o: int):  # noqa: ANN001, ANN202 - the revive copy of ck's offset o, following its re-puts
        for c in [ck] + [r for r in svc.checkpoints if r.reput_times is not None and r.start_offset == o and
                         (r.topic, r.queue_id, r.pop_time) == (ck.topic, ck.queue_id, ck.pop_time)]:
            if c.revived.get(o) is not None:
                return c.revived[o]
        return None

    late = set()
    for a in svc.acks:
        if a.at >= a.ck.revive_time:
            for o in a.offsets:
                copy = revived(a.ck, o)
                assert copy is not None  # revived anyway
                late.add(by_uniq[copy.uniq].keys)
    assert sorted(late, key=lambda k: int(k[4:])) == [f"pop-{i}" for i in LATE]
    # lost: the one offset the revive could not read back, revived more than 15 min before S
    lost = [(ck.topic, ck.queue_id, o, ck.revived_at) for ck in svc.checkpoints for o, c in ck.revived.items()
            if c is None]
    assert [x[:3] for x in lost] == [(POP_TOPIC, 0, 0)] and lost[0][3] <= S - BLOCKING_MIN_AGE_MS
    assert iso_ms(lost[0][3]) == "2026-01-05T00:20:13.000Z"
    assert w.brokers[0].cqs[(POP_TOPIC, 0)].msgs[0].keys == "pop-0"
    # DLQ: forwarded when popped with reconsumeTimes 17 (retryMaxTimes + 1)
    assert [(h.msg.reconsume, d.reconsume, h.msg.keys) for h, d in svc.dlq] == [(17, 18, "pop-20")]
    # in flight at S: popped by a checkpoint reviving after S, not acked by S; a checkpoint is its identity's first
    # CK (a re-put of a CK's start offset is that CK, spec §4.1)
    acked = {(a.ck.identity, o) for a in svc.acks if a.at <= S for o in a.offsets}
    first: dict[tuple, object] = {}
    for ck in svc.checkpoints:
        first.setdefault(ck.identity, ck)
    inflight: dict[tuple[str, int], set[int]] = {}
    for ck in first.values():
        if ck.revive_time > S and ck.copies[0].store_ts <= S:
            for o in ck.offsets:
                if (ck.identity, o) not in acked:
                    inflight.setdefault((ck.topic, ck.queue_id), set()).add(o)
    assert {k: len(v) for k, v in inflight.items()} == {(POP_TOPIC, 0): 4, (POP_TOPIC, 1): 4}
    # the 2 + 2 messages of the bursts at 00:39:40 and 00:39:50 of each queue (25 s to process)
    assert sorted(inflight[(POP_TOPIC, 0)]) == [474, 475, 476, 477]  # i = 948, 950, 952, 954
    assert sorted(inflight[(POP_TOPIC, 1)]) == [474, 475, 476, 477]  # i = 949, 951, 953, 955
    # the broker still holds i = 933 (failed once at 00:39:01, queue 1 offset 466): its revive was re-put twice
    # (revive 00:40:01), but with its checkpoint's start offset: the same checkpoint, whose revive time passed
    assert [(ck.topic, ck.queue_id, ck.start_offset, ck.reput_times) for ck in svc.checkpoints
            if ck.revive_time > S and ck.copies[0].store_ts <= S and ck not in first.values()] == [
        (POP_TOPIC, 1, 466, 2)]


def test_deterministic_per_seed(tmp_path: pathlib.Path) -> None:
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        simulate.run("pop", str(tmp_path / name), seed=seed)
    assert _digest(str(tmp_path / "a")) == _digest(str(tmp_path / "b"))
    assert _digest(str(tmp_path / "a")) != _digest(str(tmp_path / "c"))
    # the construction, not the seed, decides the findings: the same rows but for the UNIQ keys
    for report in ("duplicated_ranges", "unconsumed_ranges"):
        assert _read(tmp_path / "a", report) == _read(tmp_path / "c", report)


def test_without_pop_records_the_truth_has_no_pop_mode() -> None:
    """The POP truth comes from checkpoints only: a world without them (every other scenario) gets none of it."""
    from jobs.simulate.scenarios import out_of_order_acks

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t = Truth(out_of_order_acks(d, 7))
    assert t.pop.pops == [] and t.pop.pop_topics == {} and t.pop.lost() == {} and t.pop.retrying() == []
    assert {r["consume_mode"] for r in t.consumer_status()} == {"CONCURRENT"}
