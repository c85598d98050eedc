"""``mixed``: every §7 anomaly at random over many groups, brokers, topics and queues.

The world runs 6 virtual hours (00:00-06:00 UTC) on ``1 + scale`` brokers with retention shortened to 1 h
(``fileReservedTime``; deletion still only in hour ``deleteWhen`` 04), so expiry happens inside the run.
Each topic gets three groups (the first topics one more until every kind is drawn); each group draws one
behaviour: healthy (with or without trace), blocked-head + kill, hang past consumeTimeout, slow messages + kill
(out-of-order acks), always-failing key (retry -> DLQ), late-failing key (still RETRYING at the end), offline past
retention (with or without return), skipAccumulatedMessage, reset to an earlier or a later time, broadcast with
dropped failures, a consumer joining (rebalance), an orderly consumer whose failing head blocks a queue for a while
(healed later, or still failing at the end), half of them 5.x FIFO groups (the subscription flag) and half 4.x
(known only by their local retries). Groups without trace are reconciled offsets-only. The brokers' store types
are drawn apart (:func:`store_kinds`): RocksDB v1 and v2 config, tiered storage, compaction and BatchCQ topics.
POP groups (5.x, spec §4.1) have topics and a broker of their own, drawn apart too (:func:`_pop_part`).
"""
from __future__ import annotations

from jobs.simulate import operators
from jobs.simulate.broker import BrokerConfig, Stored
from jobs.simulate.clock import HOUR, MINUTE, SECOND, T0_MS, iso_ms
from jobs.simulate.consumer import PushConsumer
from jobs.simulate.engine import World
from jobs.simulate.stores import StoreKind

KINDS = ["healthy", "healthy-offsets-only", "blocked-head", "hang", "out-of-order", "retry-to-dlq", "retrying",
         "expired", "expired-return", "skip", "rewind", "reset-later", "broadcast", "rebalance", "orderly-blocked"]
END = T0_MS + 6 * HOUR
ANOMALY_SCALE_MAX = 3
BULK_UNIT_MESSAGES = 98_000  # about what one event-loop scale unit stores (98,203 measured)
BULK_MESSAGES_PER_BROKER = 1_000_000


def _ok(c: PushConsumer) -> int:
    return 3 + c.loop.rng.randrange(30)


def bulk_messages_for(scale: int) -> int:
    """Messages of the bulk part at ``scale``: what the event-loop part would store at the scales it skips."""
    return max(0, scale - ANOMALY_SCALE_MAX) * BULK_UNIT_MESSAGES


def mixed(out: str, seed: int, scale: int = 1, bulk_messages: int | None = None, *, hours: int = 6,
          rate: int | None = None, every: int = 30, bulk_brokers: int | None = None) -> World:
    """Build and run the mixed fleet; ``scale`` multiplies brokers, topics and traffic.

    Up to scale 3 every message goes through the event loop (topics on every broker, consumer x queue work
    grows with scale^2). Beyond it the anomaly part stays at scale 3 and the rest of the volume is bulk
    traffic (``jobs.simulate.bulk``): ``BULK_UNIT_MESSAGES`` per extra scale unit, 5 topics per unit on brokers
    of ~1 M messages each. ``bulk_messages`` overrides that volume (tests use a small one).

    A soak (``hours``, ``rate``, ``every``): the same world over ``hours`` virtual hours with a snapshot every
    ``every`` minutes; ``rate`` bulk messages per hour on the fleet a 6-hour run of that rate has (brokers and
    topics follow the rate, not the total, so hour 48 sees the same fleet as hour 4). The defaults are the
    6-hour ``mixed``, byte for byte. ``bulk_brokers``: the bulk topics on that many brokers instead of one per
    ``BULK_MESSAGES_PER_BROKER`` (1 at ``rate`` 1 M: a broker storing 1 M messages an hour, issue 37's exporter).
    """
    w = World(out, seed, broker_cfg=BrokerConfig(segment_size=256 * 1024, cq_entries_per_file=1000,
                                                 file_reserved_ms=1 * HOUR))
    rng = w.rng
    end = T0_MS + hours * HOUR
    bulk = bulk_messages_for(scale) if bulk_messages is None else bulk_messages
    shape = bulk  # the messages that size the bulk fleet (brokers, topics)
    if rate is not None:
        bulk, shape = rate * hours, rate * 6
    scale = min(scale, ANOMALY_SCALE_MAX)
    n_topics = 5 * scale
    brokers = [w.add_broker(f"broker-{chr(ord('a') + i)}", store) for i, store in
               enumerate(store_kinds(seed, 1 + scale, [f"Topic{t:03d}" for t in range(n_topics)]))]
    kinds = list(KINDS)
    rng.shuffle(kinds)
    gi = 0
    for t in range(n_topics):
        topic = f"Topic{t:03d}"
        queues = rng.choice([2, 4, 4, 8])
        w.topic(topic, queues)
        prod = w.producer(trace=rng.random() < 0.5)
        w.traffic(prod, topic, every_ms=rng.choice([3000, 4000, 6000]),
                  start=T0_MS + 10 * SECOND, end=end - 20 * MINUTE, key_prefix=f"k{t}")
        # three groups a topic, and the first topics one more until every kind has a group
        for _ in range(3 + (t < len(kinds) - 3 * n_topics)):
            kind = kinds[gi % len(kinds)] if gi < len(kinds) else rng.choice(kinds)
            _group(w, f"GID_{gi:03d}_{kind.replace('-', '_')}", topic, kind)
            gi += 1
    _pop_part(w, seed, scale, end)
    _inner_batch_part(w, seed, end)
    if bulk:
        n_brokers = bulk_brokers or -(-shape // BULK_MESSAGES_PER_BROKER)
        w.add_bulk(n_brokers, max(1, round(5 * shape / BULK_UNIT_MESSAGES)), bulk,
                   cfg=BrokerConfig(segment_size=4 * 1024 * 1024, cq_entries_per_file=6000,
                                    file_reserved_ms=1 * HOUR),
                   start=T0_MS + 10 * SECOND, end=end - 20 * MINUTE, group_start=T0_MS + 5 * SECOND)
    w.snapshots([T0_MS + m * every * MINUTE for m in range(1, hours * 60 // every + 1)])
    w.run()
    return w


POP_INVISIBLE_MS = 30 * SECOND
POP_TAIL_MS = 30 * SECOND  # popped in the last 30 s before the last snapshot: 25 s to process (in flight at S)


def pop_groups(scale: int) -> int:
    """POP groups of ``mixed`` at ``scale`` (the anomaly scale, at most ``ANOMALY_SCALE_MAX``)."""
    return 1 + min(scale, ANOMALY_SCALE_MAX)


def _pop_part(w: World, seed: int, scale: int, end: int) -> None:
    """The POP groups (spec §4.1, §7 mixed: every consume mode): ``pop_groups(scale)`` 5.x POP groups
    ``GID_pop_<p>``, each alone on its topic ``TopicPop<p>`` (2 or 4 queues) on a broker of their own added after
    every other broker, client and draw: the clients made before keep the broker list they were given (they never
    see it), and everything here draws from a generator of its own (the POP clients, their producer and the POP
    service's randomQ too), so every other group, message and broker is as without it.

    Each topic gets a message every 15, 20 or 30 s (``p<p>-<i>``, queue i % n, offset i // n) until the end; one client
    pops every 5 s (up to 16, invisible 30 s) and acks as it finishes: most in 5-45 ms, i % slow == r in 20 s (in
    time); of a few keys drawn from the first three quarters, 2-3 take 45 s the first time (acked late: POP_LATE_ACK),
    the others but one fail the first time (revived, acked) and the last fails every time (IN_DLQ, reconsume_times
    17); one key sent 4-8 min before the end fails every time (RETRYING at the end); whatever is popped in the last
    30 s takes 25 s (in flight at the last snapshot). The first group's other client pops queue 0 once at 00:00:10.5
    (offset 0, invisible 4 h 15 min - 4 h 45 min) and dies: its revive finds the original gone (retention, hour 04)
    and writes nothing (POP_LOST). The revive copies' puts fail for 15 s from 30 s after the first group's first
    fail-once key and in the last 40 s (rePutCK: those checkpoints are written again with later revive times)."""
    import random

    from jobs.simulate.pop import pop_consumer, pop_service

    rng = random.Random(seed * 1_000_003 + 61)
    w.brokers = list(w.brokers)  # the clients made so far keep the old list: the POP broker is not theirs
    b = w.add_broker(f"broker-{chr(ord('a') + len(w.brokers))}")
    prod = w.producer(rng=rng)
    start = T0_MS + 10 * SECOND
    windows: list[tuple[int, int]] = []
    for p in range(pop_groups(scale)):
        topic, group = f"TopicPop{p:02d}", f"GID_pop_{p:02d}"
        queues = rng.choice([2, 4])
        every = rng.choice([15, 20, 30]) * SECOND
        w.topic(topic, queues, brokers=[b])
        w.traffic(prod, topic, every_ms=every, start=start, end=end - 1, brokers=[b], key_prefix=f"p{p}")
        sent = (end - 1 - start) // every + 1  # messages the topic gets
        slow = (rng.choice([10, 20]), rng.randrange(10))
        early = rng.sample(range(20, sent * 3 // 4), 7)  # 2-3 late acks, 2-3 fail-once, one always failing (DLQ)
        n_late = rng.randrange(2, 4)
        late, fail_once, dlq_i = set(early[:n_late]), set(early[n_late:-1]), early[-1]
        retrying_i = (end - start - rng.randrange(4, 8) * MINUTE) // every

        def behaviour(c, m: Stored, slow=slow, late=late, fail_once=fail_once, dlq_i=dlq_i,  # noqa: ANN001
                      retrying_i=retrying_i) -> tuple[int, str]:
            i = int((m.keys or "p-1").rsplit("-", 1)[1])
            if i in (dlq_i, retrying_i):
                return 30, "fail"
            if c.loop.now >= end - POP_TAIL_MS:
                return 25 * SECOND, "ok"
            if m.reconsume == 0 and i in late:
                return 45 * SECOND, "ok"
            if m.reconsume == 0 and i in fail_once:
                return 50, "fail"
            if i % slow[0] == slow[1]:
                return 20 * SECOND, "ok"
            return 5 + c.rng.randrange(40), "ok"

        pop_consumer(w, group, topic, start_at=T0_MS + 11 * SECOND, behaviour=behaviour, batch=16,
                     invisible_ms=POP_INVISIBLE_MS, poll_ms=5 * SECOND, rng=rng, brokers=[b])
        w.inject("pop_always_fails", group=group, keys=[f"p{p}-{dlq_i}", f"p{p}-{retrying_i}"])
        w.inject("pop_late_acks", group=group, keys=[f"p{p}-{i}" for i in sorted(late)], ack_after_ms=45 * SECOND)
        w.inject("pop_fails_once", group=group, keys=[f"p{p}-{i}" for i in sorted(fail_once)])
        if p == 0:
            invisible = 4 * HOUR + rng.randrange(15, 45) * MINUTE
            pop_consumer(w, group, topic, start_at=T0_MS + 10_500, behaviour=lambda c, m: (0, "hang"), queue_id=0,
                         batch=1, invisible_ms=invisible, receives=1, rng=rng, brokers=[b])
            w.inject("pop_dies_holding", group=group, topic=topic, queue_id=0, queue_offset=0, invisible_ms=invisible)
            # rePutCK: the revive copies' puts fail for 15 s from 30 s after its first fail-once key was sent (that
            # key's first revive, due 30-35 s after, is re-put; so is any other revive in that while)
            first_fail = start + min(fail_once) * every + 30 * SECOND
            windows.append((first_fail, first_fail + 15 * SECOND))
    # and in the last 40 s before the end (the RETRYING keys' revives, still re-put at the last snapshot)
    windows.append((end - 40 * SECOND, end))
    for a, z in windows:
        pop_service(w, b).refuse_revive_puts(a, z)
        w.inject("pop_revive_puts_fail", broker=b.name, start=iso_ms(a), end=iso_ms(z))


INNER_TOPIC = "TopicInner"
INNER_GROUPS = ("GID_inner_healthy", "GID_inner_killed")


def _inner_batch_part(w: World, seed: int, end: int) -> None:
    """Batches on a BatchCQ topic (rocketmq5.md §5): ``TopicInner`` (2 queues) on a broker of its own, added after
    every other broker, client and draw, with a generator of its own (as the POP part), so nothing else changes.
    Every 30 s a producer sends a batch of 1-8 messages (``i<j>``), stored as one ``INNER_BATCH`` record (a batch of
    one too: it has the batch's UNIQ_KEY). Two traced groups consume it: ``GID_inner_healthy``, and
    ``GID_inner_killed``, whose batches' first messages take 2 s and the others 10-17 s, and whose client is killed
    6-10 s after a batch was sent, at a random one of hours 1-5, and replaced 10-120 s later: its committed offset
    is then inside that batch, and the new client's pull gets the whole record again, so the batch's first message
    is consumed twice though it was below the committed offset (PullAPIWrapper unwraps whole records)."""
    import random

    rng = random.Random(seed * 1_000_003 + 83)
    w.brokers = list(w.brokers)  # the clients made so far keep the old list
    b = w.add_broker(f"broker-{chr(ord('a') + len(w.brokers))}", StoreKind(batch_topics={INNER_TOPIC}))
    w.topic(INNER_TOPIC, 2, brokers=[b])
    every, start = 30 * SECOND, T0_MS + 10 * SECOND
    w.batch_traffic(w.producer(rng=rng), INNER_TOPIC, every_ms=every, start=start, end=end - 1, brokers=[b],
                    sizes=(1, 8), rng=rng, key_prefix="i")
    healthy, killed = INNER_GROUPS
    w.inject("healthy", group=healthy, topic=INNER_TOPIC)
    w.consumer(healthy, INNER_TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True, brokers=[b], rng=rng)

    def slow(c: PushConsumer, m: Stored) -> tuple[int, str]:
        # a batch's first message takes 2 s, the others 10-17 s: its committed offset rests inside it for a while
        phys = b.cqs[(m.topic, m.queue_id)].phys
        first = m.queue_offset == 0 or phys[m.queue_offset - 1] != m.phys
        return (2000 if first else 10000 + c.rng.randrange(7000)), "ok"

    a = w.consumer(killed, INNER_TOPIC, behaviour=slow, start_at=T0_MS + 5 * SECOND, from_first=True, brokers=[b],
                   rng=rng)
    # 6-10 s after a batch was sent in hours 1-5: its first message done (and committed), the others not
    kill_at = start + rng.randrange(120, 600) * every + 6 * SECOND + rng.randrange(4 * SECOND)
    w.inject("killed_inside_batches", group=killed, topic=INNER_TOPIC, kill_at=iso_ms(kill_at))
    fact = w.injected[-1]

    def kill() -> None:  # the broker's offsets at the kill are where the new client starts (a fact for the tests)
        fact["committed_at_kill"] = {str(q): o for q, o in sorted(b.offsets.state_at(kill_at).get(
            (INNER_TOPIC, killed), {}).items())}
        a.kill()

    w.at(kill_at, kill)
    w.consumer(killed, INNER_TOPIC, behaviour=slow, start_at=kill_at + rng.randrange(10, 120) * SECOND, brokers=[b],
               rng=rng)


def store_kinds(seed: int, n_brokers: int, topics: list[str]) -> list[StoreKind]:
    """Every 5.x store type at random (spec §7 mixed), drawn from a generator of their own so the anomalies drawn
    are the same as without them: RocksDB v1 on one broker and v2 on another (from a random hour on: the JSON files
    stale after it; the other brokers JSON or either version), tiered storage on one broker (the tier holds every
    offset), one compaction topic and one BatchCQ topic (more at random), the consume queues of one broker in RocksDB."""
    import random

    rng = random.Random(seed * 1_000_003 + 35)
    versions = ["v1", "v2"]
    rng.shuffle(versions)
    rocksdb = (versions + [rng.choice([None, None, "v1", "v2"]) for _ in range(n_brokers)])[:n_brokers]
    tiered = rng.randrange(n_brokers)
    order = list(topics)
    rng.shuffle(order)
    compaction = {order[0]} | {t for t in order[2:] if rng.random() < 0.1}
    batch = {order[1]} | {t for t in order[2:] if t not in compaction and rng.random() < 0.1}
    kinds = [StoreKind(rocksdb=v, since=T0_MS + rng.randrange(60, 300) * MINUTE, tiered=i == tiered,
                       compaction_topics=set(compaction), batch_topics=set(batch)) for i, v in enumerate(rocksdb)]
    kinds[rng.randrange(n_brokers)].rocksdb_cq = True
    return kinds


def _group(w: World, g: str, topic: str, kind: str) -> None:
    rng = w.rng
    start = T0_MS + 5 * SECOND
    trace = kind != "healthy-offsets-only" and not (kind in ("expired", "expired-return") and rng.random() < 0.5)
    w.inject(kind, group=g, topic=topic)
    if kind in ("healthy", "healthy-offsets-only"):
        w.consumer(g, topic, trace=trace, start_at=start, from_first=True)
    elif kind == "blocked-head":
        hang_at = rng.randrange(20, 200)

        def hang(c: PushConsumer, m: Stored) -> tuple[int, str]:
            return (0, "hang") if m.topic == topic and m.queue_offset == hang_at and m.queue_id == 0 else (_ok(c), "ok")

        a = w.consumer(g, topic, trace=trace, behaviour=hang, start_at=start, from_first=True)
        kill_at = T0_MS + rng.randrange(60, 120) * MINUTE
        w.at(kill_at, a.kill)
        w.consumer(g, topic, trace=trace, start_at=kill_at + rng.randrange(10, 120) * SECOND)
    elif kind == "hang":
        hang_at = rng.randrange(20, 200)

        def hang2(c: PushConsumer, m: Stored) -> tuple[int, str]:
            return (0, "hang") if m.topic == topic and m.queue_offset == hang_at and m.queue_id == 0 else (_ok(c), "ok")

        w.consumer(g, topic, trace=trace, behaviour=hang2, start_at=start, from_first=True)
    elif kind == "out-of-order":
        slow = set(rng.sample(range(30, 300), 5))

        def slowly(c: PushConsumer, m: Stored) -> tuple[int, str]:
            return (10 * MINUTE, "ok") if m.topic == topic and m.queue_offset in slow else (_ok(c), "ok")

        a = w.consumer(g, topic, trace=trace, behaviour=slowly, start_at=start, from_first=True)
        kill_at = T0_MS + rng.randrange(30, 200) * MINUTE
        w.at(kill_at, a.kill)
        w.consumer(g, topic, trace=trace, start_at=kill_at + rng.randrange(5, 60) * SECOND)
    elif kind in ("retry-to-dlq", "retrying"):
        bad_from = 0 if kind == "retry-to-dlq" else 4 * HOUR
        n_bad = rng.randrange(1, 4)
        bad_keys: set[str] = set()

        def fails(c: PushConsumer, m: Stored) -> tuple[int, str]:
            if m.keys in bad_keys:
                return 20, "fail"
            if len(bad_keys) < n_bad and m.topic == topic and m.store_ts >= T0_MS + bad_from and rng.random() < 0.01:
                bad_keys.add(m.keys or "")
                return 20, "fail"
            return _ok(c), "ok"

        w.consumer(g, topic, trace=trace, behaviour=fails, start_at=start, from_first=True)
    elif kind in ("expired", "expired-return"):
        a = w.consumer(g, topic, trace=trace, start_at=start, from_first=True)
        w.at(T0_MS + rng.randrange(20, 60) * MINUTE, a.shutdown)
        if kind == "expired-return":
            w.consumer(g, topic, trace=trace, start_at=T0_MS + 4 * HOUR + rng.randrange(30, 90) * MINUTE)
    elif kind in ("skip", "rewind", "reset-later"):
        a = w.consumer(g, topic, trace=trace, start_at=start, from_first=True)
        off_at = T0_MS + rng.randrange(40, 120) * MINUTE
        w.at(off_at, a.shutdown)
        op_at = off_at + rng.randrange(20, 50) * MINUTE
        if kind == "skip":
            w.at(op_at, lambda: operators.skip_accumulated(w, g, topic))
        elif kind == "rewind":
            w.at(op_at, lambda: operators.reset_offset_by_time(w, g, topic, off_at - 30 * MINUTE))
        else:
            w.at(op_at, lambda: operators.reset_offset_by_time(w, g, topic, op_at - 5 * MINUTE))
        w.consumer(g, topic, trace=trace, start_at=op_at + rng.randrange(35, 60) * MINUTE)
    elif kind == "broadcast":
        def flaky(c: PushConsumer, m: Stored) -> tuple[int, str]:
            return (15, "fail") if rng.random() < 0.002 else (_ok(c), "ok")

        for _ in range(3):
            w.consumer(g, topic, broadcast=True, trace=trace, behaviour=flaky, start_at=start, from_first=True)
    elif kind == "rebalance":
        w.consumer(g, topic, trace=trace, start_at=start, from_first=True)
        w.consumer(g, topic, trace=trace, start_at=T0_MS + rng.randrange(30, 300) * MINUTE)
    elif kind == "orderly-blocked":
        # the head of queue 0 fails (retried every second) for 15-45 min at a random time, or from 25-60 min before
        # the 6th hour on (still failing at the last snapshot); a 5.x FIFO group (the flag) or a 4.x orderly one
        if rng.random() < 0.5:
            fail_from = T0_MS + rng.randrange(30, 300) * MINUTE
            fail_until = fail_from + rng.randrange(15, 45) * MINUTE
        else:
            fail_from = T0_MS + 6 * HOUR - rng.randrange(25, 60) * MINUTE
            fail_until = fail_from + 2 * HOUR
        fifo = rng.random() < 0.5
        bad: dict[str, int] = {}

        def blocks(c: PushConsumer, m: Stored) -> tuple[int, str]:
            if m.topic == topic and m.queue_id == 0 and fail_from <= c.loop.now < fail_until:
                bad.setdefault("offset", m.queue_offset)
            head = m.topic == topic and m.queue_id == 0 and m.queue_offset == bad.get("offset")
            return (20, "fail") if head and c.loop.now < fail_until else (_ok(c), "ok")

        w.consumer(g, topic, trace=trace, behaviour=blocks, start_at=start, from_first=True, orderly=True,
                   fifo_flag=fifo)
        w.inject("orderly", group=g, fifo_flag=fifo, fail_from=fail_from, fail_until=fail_until)
    else:  # pragma: no cover
        raise ValueError(kind)
