"""The acceptance scenarios of spec §7, each a function that builds and runs a :class:`World`.

Every scenario starts at T0 = 2026-01-05T00:00:00Z on broker(s) of cluster ``DefaultCluster`` and takes
snapshots at fixed virtual times; what it injects is recorded in ``world.injected`` (-> ``_truth/scenario.json``).
The truth is not taken from here: it is computed afterwards from what happened (:mod:`jobs.simulate.truth`).
"""
from __future__ import annotations

from typing import Callable

from jobs.simulate import operators
from jobs.simulate.broker import BrokerConfig, Stored
from jobs.simulate.clock import DAY, HOUR, MINUTE, SECOND, T0_MS, iso_ms
from jobs.simulate.consumer import PushConsumer
from jobs.simulate.engine import World

TOPIC = "TopicTest"
GROUP = "GID_recon"


def _ok(c: PushConsumer) -> int:
    return 5 + c.loop.rng.randrange(20)


def blocked_head(out: str, seed: int, scale: int = 1) -> World:
    """2101 hangs, 2102-2200 succeed, the process is killed, a new instance takes the queue."""
    w = World(out, seed)
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 1)
    p = w.producer(trace=True)
    w.fill(p, b, TOPIC, 0, 2101, at=T0_MS + 10 * SECOND, spacing_ms=20, key_prefix="order")
    w.loop.at(T0_MS + 5 * MINUTE, lambda: [p.send(b, TOPIC, 0, keys=f"order-{2101 + i}", tags="TagA",
                                                  body=b"body-%06d" % (2101 + i)) for i in range(100)])

    def first(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (0, "hang") if m.queue_offset == 2101 and not m.topic.startswith("%") else (_ok(c), "ok")

    a = w.consumer(GROUP, TOPIC, behaviour=first, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.at(T0_MS + 8 * MINUTE, lambda: (a.kill(), w.inject("kill", client=a.client_id, hung_offset=2101)))
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 9 * MINUTE)
    w.snapshots([T0_MS + m * MINUTE for m in (4, 7, 10, 13)])
    w.run()
    return w


def queue2_offset32(out: str, seed: int, scale: int = 1) -> World:
    """4 queues; offset 32 of queue 2 hangs past consumeTimeout (15 min); queues 0, 1, 3 advance."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 4)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=1000, start=T0_MS + 10 * SECOND, end=T0_MS + 22 * MINUTE)

    def hang32(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (0, "hang") if (m.topic, m.queue_id, m.queue_offset) == (TOPIC, 2, 32) else (_ok(c), "ok")

    w.consumer(GROUP, TOPIC, behaviour=hang32, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.inject("hang", topic=TOPIC, queue_id=2, queue_offset=32)
    w.snapshots([T0_MS + m * MINUTE for m in (5, 10, 15, 20, 25)])
    w.run()
    return w


def out_of_order_acks(out: str, seed: int, scale: int = 1) -> World:
    """msg0 and msg3-7 finish before msg1-2; the process is killed; after restart 1-7 come again."""
    w = World(out, seed)
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 1)
    p = w.producer(trace=True)
    w.fill(p, b, TOPIC, 0, 8, at=T0_MS + 30 * SECOND, spacing_ms=1)

    def slow12(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (120 * SECOND, "ok") if m.queue_offset in (1, 2) and m.topic == TOPIC else (10, "ok")

    a = w.consumer(GROUP, TOPIC, behaviour=slow12, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.at(T0_MS + 60 * SECOND, lambda: (a.kill(), w.inject("kill", client=a.client_id)))
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 150 * SECOND)
    w.snapshots([T0_MS + s * SECOND for s in (25, 90, 180, 240)])
    w.run()
    return w


def retry_to_dlq(out: str, seed: int, scale: int = 1) -> World:
    """One message fails every time: 16 retries at delay levels 3..18 (~4 h 46 m), then %DLQ%G."""
    w = World(out, seed)
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 1)
    p = w.producer(trace=True)
    w.fill(p, b, TOPIC, 0, 10, at=T0_MS + 30 * SECOND, spacing_ms=100)

    def fail5(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (50, "fail") if m.keys == "msg-5" else (_ok(c), "ok")

    w.consumer(GROUP, TOPIC, behaviour=fail5, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.inject("always_fails", topic=TOPIC, queue_id=0, queue_offset=5)
    w.snapshots([T0_MS + m * 30 * MINUTE for m in range(1, 12)])
    w.run()
    return w


def expired_offset(out: str, seed: int, scale: int = 1) -> World:
    """Two groups go offline for longer than retention (72 h); one returns and jumps to MinOffset."""
    w = World(out, seed, broker_cfg=BrokerConfig(segment_size=64 * 1024, cq_entries_per_file=1000))
    w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer()
    w.traffic(p, TOPIC, every_ms=20 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 5 * DAY)
    gone = w.consumer("GID_gone", TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True, trace=False)
    back = w.consumer("GID_back", TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True, trace=False)
    w.at(T0_MS + 1 * HOUR, lambda: (gone.shutdown(), back.shutdown(), w.inject("offline", groups=["GID_gone", "GID_back"])))
    w.consumer("GID_back", TOPIC, start_at=T0_MS + 4 * DAY + 12 * HOUR, trace=False)
    w.snapshots([T0_MS + h * 12 * HOUR for h in range(1, 11)])
    w.run()
    return w


def skip_accumulated(out: str, seed: int, scale: int = 1) -> World:
    """An operator skips the backlog of an offline group (skipAccumulatedMessage)."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=2 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 40 * MINUTE)
    a = w.consumer(GROUP, TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.at(T0_MS + 10 * MINUTE, lambda: (a.shutdown(), w.inject("offline", group=GROUP)))
    w.at(T0_MS + 20 * MINUTE, lambda: operators.skip_accumulated(w, GROUP, TOPIC))
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 25 * MINUTE)
    w.snapshots([T0_MS + m * 5 * MINUTE for m in range(1, 9)] + [T0_MS + 41 * MINUTE])
    w.run()
    return w


def rewind(out: str, seed: int, scale: int = 1) -> World:
    """An operator resets an offline group to an earlier time; the group then consumes it all again."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=2 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 40 * MINUTE)
    a = w.consumer(GROUP, TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.at(T0_MS + 15 * MINUTE, lambda: (a.shutdown(), w.inject("offline", group=GROUP)))
    w.at(T0_MS + 16 * MINUTE, lambda: operators.reset_offset_by_time(w, GROUP, TOPIC, T0_MS + 5 * MINUTE))
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 22 * MINUTE)
    w.snapshots([T0_MS + m * 5 * MINUTE for m in range(1, 9)] + [T0_MS + 41 * MINUTE])
    w.run()
    return w


def broadcast(out: str, seed: int, scale: int = 1) -> World:
    """A broadcast group on 3 clients with local offsets.json; one delivery fails on one client and is dropped."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=1 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 8 * MINUTE)
    clients: list[PushConsumer] = []

    def fail_once(c: PushConsumer, m: Stored) -> tuple[int, str]:
        if c is clients[1] and (m.queue_id, m.queue_offset) == (1, 20):
            return 30, "fail"
        return _ok(c), "ok"

    for _ in range(3):
        clients.append(w.consumer("GID_bcast", TOPIC, broadcast=True, behaviour=fail_once,
                                  start_at=T0_MS + 5 * SECOND, from_first=True))
    w.inject("broadcast_failure", client_index=1, queue_id=1, queue_offset=20)
    w.snapshots([T0_MS + m * 2 * MINUTE for m in range(1, 6)])
    w.run()
    return w


def rebalance(out: str, seed: int, scale: int = 1) -> World:
    """A second consumer joins under load; queues move; only unpersisted progress is delivered twice."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 4)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=10, start=T0_MS + 10 * SECOND, end=T0_MS + 3 * MINUTE)
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 90 * SECOND)
    w.inject("join", group=GROUP, at_ms=T0_MS + 90 * SECOND)
    w.snapshots([T0_MS + s * SECOND for s in (60, 120, 180, 240)])
    w.run()
    return w


def orderly_blocked(out: str, seed: int, scale: int = 1) -> World:
    """A 4.x orderly group (no FIFO flag): the message at offset 40 of queue 1 fails every time for 30 minutes; it is
    re-consumed locally every second, never sent back, and the queue's committed offset stays at 40. Beside it: a
    5.x FIFO group (the flag set, consuming fine) and a concurrent group whose failing key goes through %RETRY%."""
    w = World(out, seed)
    w.add_broker("broker-a")
    w.topic(TOPIC, 4)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=1000, start=T0_MS + 10 * SECOND, end=T0_MS + 31 * MINUTE)
    bad = (TOPIC, 1, 40)

    def fails40(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (20, "fail") if (m.topic, m.queue_id, m.queue_offset) == bad else (_ok(c), "ok")

    def fails_concurrent(c: PushConsumer, m: Stored) -> tuple[int, str]:
        return (20, "fail") if m.keys == "order-100" else (_ok(c), "ok")

    w.consumer("GID_orderly", TOPIC, behaviour=fails40, start_at=T0_MS + 5 * SECOND, from_first=True, orderly=True)
    w.consumer("GID_fifo", TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True, orderly=True, fifo_flag=True)
    w.consumer("GID_concurrent", TOPIC, behaviour=fails_concurrent, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.inject("orderly_always_fails", group="GID_orderly", topic=TOPIC, queue_id=1, queue_offset=40)
    w.inject("always_fails", group="GID_concurrent", keys="order-100")
    w.snapshots([T0_MS + m * 5 * MINUTE for m in range(1, 7)] + [T0_MS + 33 * MINUTE])
    w.run()
    return w


def store_types(out: str, seed: int, scale: int = 1) -> World:
    """5.x store types (spec §4.2, §7 store-types). broker-a keeps its config in RocksDB v1 from day 1 (its JSON
    files frozen then) and its consume queues in RocksDB, and has a compaction topic; broker-b keeps it in RocksDB v2, has tiered storage (the tier
    holds every offset) and a BatchCQ topic. Two groups go offline for longer than retention: on broker-a's plain
    topic that is EXPIRED and a BELOW_MIN correction, on its compaction topic nothing the files support, on
    broker-b nothing (the tier still serves them). A traced group consumes the BatchCQ topic; a producer's
    transaction is never resolved (TRANSACTION_DISCARDED)."""
    from jobs.simulate.consumer import send_unresolved_transaction
    from jobs.simulate.stores import StoreKind

    w = World(out, seed, broker_cfg=BrokerConfig(segment_size=64 * 1024, cq_entries_per_file=1000))
    since = T0_MS + 1 * DAY
    a = w.add_broker("broker-a", StoreKind(rocksdb="v1", since=since, compaction_topics={"TopicCompact"},
                                           rocksdb_cq=True))
    w.add_broker("broker-b", StoreKind(rocksdb="v2", since=since + 12 * HOUR, tiered=True, tier_min=0,
                                       batch_topics={"TopicBatch"}))
    for topic in (TOPIC, "TopicCompact", "TopicBatch"):
        w.topic(topic, 2)
    p = w.producer(trace=True)
    for i, topic in enumerate((TOPIC, "TopicCompact", "TopicBatch")):
        w.traffic(p, topic, every_ms=60 * SECOND // scale, start=T0_MS + (10 + i) * SECOND, end=T0_MS + 5 * DAY)
    plain = w.consumer("GID_plain", TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True, trace=False)
    compact = w.consumer("GID_compact", "TopicCompact", start_at=T0_MS + 5 * SECOND, from_first=True, trace=False)
    w.consumer("GID_batch", "TopicBatch", start_at=T0_MS + 5 * SECOND, from_first=True)
    w.at(T0_MS + 1 * HOUR, lambda: (plain.shutdown(), compact.shutdown(),
                                    w.inject("offline", groups=["GID_plain", "GID_compact"])))
    w.at(T0_MS + 2 * DAY, lambda: (send_unresolved_transaction(p, a, TOPIC, 1, keys="tx-1", tags="TagA",
                                                               body=b"order 1"), w.inject("transaction_unresolved")))
    w.snapshots([T0_MS + h * 12 * HOUR for h in range(1, 11)])
    w.run()
    return w


POP_TOPIC = "TopicPop"
POP_GROUP = "GID_pop"
POP_LATE = (50, 7)  # i % 50 == 7: the first copy is acked after 45 s, past its 30 s invisible time
POP_FAIL_ONCE = (50, 33)  # i % 50 == 33: the first copy fails (not acked), its revive copy is acked
POP_SLOW = (10, 4)  # i % 10 == 4: 20 s to process, acked in time
POP_DLQ_I = 20  # fails every time: 17 pops (retryMaxTimes 16 + 1), then the proxy forwards it to %DLQ%GID_pop
POP_RETRYING_I = 864  # fails every time from 00:36:10: still retrying at the last snapshot
POP_TAIL_MS = 30 * SECOND  # popped in the last 30 s before the last snapshot: 25 s to process (in flight at S)
# the revive copies' puts fail in these windows before the last snapshot (rePutCK): i = 907's late first copy (popped
# at about 00:37:51, revived from about 00:38:23) is re-put twice with its own start offset (a checkpoint of its
# own); what is revived in the last 40 s is re-put with its checkpoint's start offset (the same checkpoint: not in
# flight again)
POP_REPUT_WINDOWS_MS = ((110 * SECOND, 80 * SECOND), (40 * SECOND, 0))


def pop_consumption(out: str, seed: int, scale: int = 1) -> World:
    """Spec §7 ``pop``: a 5.x POP group (gRPC SimpleConsumers behind the proxy, no traces) on TopicPop (2 queues),
    beside a traced concurrent push group on TopicTest. Retention is 10 min in hour 00 (``fileReservedTime``,
    ``deleteWhen`` 00) on 64 KiB commitlog segments, so old segments go while the POP group works.

    TopicPop gets 4 messages every 10 s from 00:00:10 (``pop-<i>``, queue i % 2, offset i // 2). One client pops
    queue 0 once at 00:00:10.5 (one message, offset 0, invisible 20 min) and dies: the revive at about 00:20:13 finds
    the original deleted by retention (its segment went at about 00:11) and writes nothing: POP_LOST. The main client
    pops every 2 s (up to 16 messages, invisible 30 s) and acks as it finishes (one AckMessage request per 100 ms:
    ``bAck`` for 2+ entries of one checkpoint, else ``ack``): most messages in 5-45 ms; i % 10 == 4 in 20 s (in time);
    i % 50 == 7 in 45 s (late: revived anyway, the retry copy is processed again and acked: POP_LATE_ACK);
    i % 50 == 33 fails once (revived, retried, acked); i = 20 fails every time (IN_DLQ with reconsume_times 17);
    i = 864 fails every time from 00:36:10 (RETRYING at 00:40); whatever is popped from 00:39:30 takes 25 s (in
    flight at the last snapshot). The revive copies' puts fail from 00:38:10 to 00:38:40 and from 00:39:20 on
    (``POP_REPUT_WINDOWS_MS``): the broker re-puts those checkpoints (rePutCK), later revive times, the late ack
    naming the old pop. Snapshots every 5 min to 00:40."""
    from jobs.simulate.pop import pop_consumer, pop_service

    w = World(out, seed, broker_cfg=BrokerConfig(segment_size=64 * 1024, file_reserved_ms=10 * MINUTE,
                                                 delete_when_hour=0))
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    w.topic(POP_TOPIC, 2)
    end = T0_MS + 40 * MINUTE
    traced = w.producer(trace=True)
    w.traffic(traced, TOPIC, every_ms=2 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 39 * MINUTE)
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True)
    grpc = w.producer()
    sent = {"i": 0}

    def burst() -> None:
        for _ in range(4):
            i = sent["i"]
            grpc.send(b, POP_TOPIC, i % 2, keys=f"pop-{i}", tags="TagA", body=b"pop-payload-%06d" % i)
            sent["i"] += 1

    w.loop.every(T0_MS + 10 * SECOND, 10 * SECOND, burst, until_ms=end - 1)

    def behaviour(c, m: Stored) -> tuple[int, str]:  # noqa: ANN001 - a PopConsumer
        i = int((m.keys or "pop--1").rsplit("-", 1)[1])
        if i in (POP_DLQ_I, POP_RETRYING_I):
            return 30, "fail"
        if c.loop.now >= end - POP_TAIL_MS:
            return 25 * SECOND, "ok"
        if m.reconsume == 0 and i % POP_LATE[0] == POP_LATE[1]:
            return 45 * SECOND, "ok"
        if m.reconsume == 0 and i % POP_FAIL_ONCE[0] == POP_FAIL_ONCE[1]:
            return 50, "fail"
        if i % POP_SLOW[0] == POP_SLOW[1]:
            return 20 * SECOND, "ok"
        return 5 + c.loop.rng.randrange(40), "ok"

    pop_consumer(w, POP_GROUP, POP_TOPIC, start_at=T0_MS + 5 * SECOND, behaviour=behaviour, batch=16,
                 invisible_ms=30 * SECOND, poll_ms=2 * SECOND)
    pop_consumer(w, POP_GROUP, POP_TOPIC, start_at=T0_MS + 10_500, behaviour=lambda c, m: (0, "hang"), queue_id=0,
                 batch=1, invisible_ms=20 * MINUTE, receives=1)
    w.inject("pop_dies_holding", group=POP_GROUP, topic=POP_TOPIC, queue_id=0, queue_offset=0,
             invisible_ms=20 * MINUTE)
    for before, until in POP_REPUT_WINDOWS_MS:
        pop_service(w, b).refuse_revive_puts(end - before, end - until)
        w.inject("pop_revive_puts_fail", broker=b.name, start=iso_ms(end - before), end=iso_ms(end - until))
    w.inject("pop_always_fails", group=POP_GROUP, keys=[f"pop-{POP_DLQ_I}", f"pop-{POP_RETRYING_I}"])
    w.inject("pop_late_acks", group=POP_GROUP, every=POP_LATE[0], remainder=POP_LATE[1], ack_after_ms=45 * SECOND)
    w.snapshots([T0_MS + m * 5 * MINUTE for m in range(1, 9)])
    w.run()
    return w


SCENARIOS: dict[str, Callable[[str, int, int], World]] = {
    "blocked-head": blocked_head,
    "queue2-offset32": queue2_offset32,
    "out-of-order-acks": out_of_order_acks,
    "retry-to-dlq": retry_to_dlq,
    "expired-offset": expired_offset,
    "skip-accumulated": skip_accumulated,
    "rewind": rewind,
    "broadcast": broadcast,
    "rebalance": rebalance,
    "orderly-blocked": orderly_blocked,
    "store-types": store_types,
    "pop": pop_consumption,
}
