"""POP consumption (5.x) in the simulated world: the broker's POP service and a POP client.

Modelled on apache/rocketmq 8fc57f1468d182eea11c01e089c0250d647dc5f3 (the commit :mod:`jobs.formats.pop` reads;
paths under broker/src/main/java/org/apache/rocketmq/broker/, ``processor/`` unless said), default broker config
(``enablePopBufferMerge=false``, ``popFromRetryProbability=20``, ``reviveQueueNum=8``, ``reviveInterval=1000``,
``enableRetryTopicV2=false``, ``initPopOffsetByCheckMsgInMem=true``, ``timerWheelEnable=true``), and a gRPC client
behind the proxy (``proxy/.../grpc/v2/consumer/PopMessageResultFilterImpl``, ``proxy/.../ProducerProcessor``).

:class:`PopService` (one per broker) is what the broker does:

- ``pop`` = ``PopMessageProcessor.processRequest`` for one request: a revive queue ``ckMessageNumber++ % 8`` and one
  pop time per request; with probability 20 % (``randomQ < popFromRetryProbability``) the POP retry topic
  ``%RETRY%G_T`` first, then the topic's queues from ``randomQ % n`` (queueId -1) or the one queue asked for, then
  (when not full) the retry topic. Per queue (``popMsgFromQueue``): the offset is the group's committed offset, or
  ``getInitOffset`` (retry topic: its min; else 0 when the queue's first message is still there, else max - 1),
  committed at once; ``OFFSET_TOO_SMALL`` commits ``nextBeginOffset`` and reads again; found messages make one
  checkpoint (``appendCheckPoint``: bm 0, n, d, so = the offset read from, it, pt, bn) stored as a message through
  ``buildCkMsg`` (TIMER_DELIVER_MS = pt + it - 1000: a timer copy in ``rmq_sys_wheel_timer`` now, the re-put copy
  in ``rmq_sys_REVIVE_LOG_<cluster>`` queue rq when the timer fires, ``jobs.formats.pop.ck_message_properties``),
  and the committed offset moves to the batch's ``nextBeginOffset`` (``PopBufferMergeService.addCkJustOffset`` then
  ``scanCommitOffset`` a few ms later: here the same ms).
- ``ack`` / ``batch_ack`` = ``AckMessageProcessor.appendAck``: an ``ack`` (``ao`` = the offset) or a ``bAck``
  (``ao`` -1, ``aol``) body in the CK's revive queue, TIMER_DELIVER_MS = pt + it (a timer copy and its re-put, or
  straight into the revive topic when already due: a late ack); an offset outside the queue's [min, max] is not
  acked (single: NO_MESSAGE; batch: left out, nothing written when none is left).
- the revive scan (``PopReviveService``, one per revive queue, every ``reviveInterval``): the CK copies of each
  revive queue in queue order; a CK is revived once ``endTime - reviveTime > ackTimeInterval + 1 s`` (2 s), endTime
  taken as the scan time (the revive topic keeps receiving acks and CKs, and an idle scan moves it to now); the
  acks that reached the revive topic by then set its bits; every other offset is read back (``getBizMessage``): gone
  (below the queue's min after retention) -> nothing is written (``needRetry`` false for a local store: "can not
  get biz msg ... then continue", the message is lost); else ``reviveRetry`` writes the copy to ``%RETRY%G_T`` queue
  0 (``addRetryTopicIfNotExist``: 1 queue, perm 6, and ``initPopRetryOffset`` commits 0 for the group) with
  reconsumeTimes + 1 and the properties of ``jobs.formats.pop.revive_copy_properties``; then the scan's progress,
  the revive queue offset of the last CK it processed, is committed for ``CID_RMQ_SYS_REVIVE_GROUP``. A revive
  copy whose put fails (``refuse_revive_puts``; ``reviveRetry`` false: e.g. a slave acting as master whose
  ``EscapeBridge.putMessageToSpecificQueue`` to another broker fails, UNKNOWN_ERROR with no append result) is
  ``rePutCK``: a new CK per such offset (n 1, d [0], so = the offset, the old pt, ``rp`` = the old one + 1 and,
  the revive time having passed, ``it`` + ``ckRewriteIntervalsInSeconds[rp]``) stored through ``buildCkMsg`` in
  the same revive queue, revived like any CK when it comes due (``skipWhenCKRePutReachMaxTimes`` false: never
  dropped).

:class:`PopConsumer` is one client process (a gRPC SimpleConsumer through the proxy; 5.x gRPC clients write no
message trace): a receive every ``poll_ms`` (a POP request on every broker of the topic), each message handed to a
behaviour (duration, outcome) as a push consumer's is; ``ok`` acks it when done (acks are flushed every
``ack_flush_ms``: the entries of one checkpoint flushed together become one ``bAck``, a single entry an ``ack``,
``ConsumerProcessor.batchAckMessage``), ``fail`` does not ack (it comes back when its invisible time is over),
``hang`` never returns. A popped message whose reconsumeTimes reaches ``retryMaxTimes + 1`` is not handed to the
client: the proxy (``PopMessageResultFilterImpl``: ``TO_DLQ``) forwards it to ``%DLQ%G``
(``forwardMessageToDeadLetterQueue``: ``consumerSendMsgBack`` with delayLevel -1, which also creates ``%RETRY%G``)
and acks it.

Every record is written with :func:`put_exact`: ``Broker.put``'s commitlog and consume queue path, but with the
properties in the order given (a timer-fired copy lists them in a ``HashMap(128)``'s order, which ``Broker.put``'s
16-bucket reordering would change). Not modelled: ``changeInvisibleTime`` (nack / renew), orderly POP, the POP
buffer merge, the KV store (RIP-73), ``rePutCK`` of a revive read that must be retried (a remote broker's
message: one broker serves its own queues here), timer roll-over (invisible times up to 2 days),
``timerlog``/``timercheck`` files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from jobs.formats import pop as fmt
from jobs.formats.commitlog_encode import encode_message, tags_hash
from jobs.simulate.broker import Stored
from jobs.simulate.clock import SECOND

if TYPE_CHECKING:  # pragma: no cover
    import random

    from jobs.simulate.broker import Broker
    from jobs.simulate.engine import World

POP_FROM_RETRY_PROBABILITY = 20  # BrokerConfig.popFromRetryProbability
REVIVE_INTERVAL_MS = 1000  # BrokerConfig.reviveInterval
REVIVE_MARGIN_MS = fmt.ACK_TIME_INTERVAL_MS + 1000  # mergeAndRevive: endTime - reviveTime > ackTimeInterval + SECOND
PROXY_RTT_MS = 2  # proxy <-> broker <-> client hops of one request

# Outcome of one consumption: (duration ms, "ok" | "fail" | "hang")
PopBehaviour = Callable[["PopConsumer", Stored], tuple[int, str]]


def put_exact(broker: "Broker", *, topic: str, queue_id: int, props: dict[str, str], body: bytes, born_ts: int,
              born_host: tuple[str, int], reconsume: int = 0) -> Stored:
    """``Broker.put`` (``CommitLog.asyncPutMessage`` + dispatch to the consume queue) with ``props`` stored in the
    order given, not reordered: the record as the broker writes it, also in the world's record log."""
    now = broker.loop.now
    cq = broker.cq(topic, queue_id)
    qoff = cq.max_offset
    props = dict(props)
    probe = encode_message(physical_offset=0, topic=topic, queue_id=queue_id, queue_offset=qoff, body=body,
                           properties=props, born_ts_ms=born_ts, store_ts_ms=now, born_host=born_host,
                           store_host=broker.addr, reconsume_times=reconsume)
    phys = broker.commitlog.reserve(len(probe), now)
    record = probe[:28] + phys.to_bytes(8, "big") + probe[36:]
    broker.commitlog.write(phys, record, now)
    msg = Stored(broker.name, topic, queue_id, qoff, phys, len(record), now, born_ts, props, reconsume, body,
                 born_host, broker.addr)
    cq.append(phys, len(record), tags_hash(props.get("TAGS")), msg)
    broker.on_store(msg)
    for fn in broker.arrival_listeners.pop((topic, queue_id), []):
        fn()
    return msg


@dataclass
class Checkpoint:
    """One ``PopCheckPoint`` as the broker built it, with what happened to it."""

    topic: str
    queue_id: int
    start_offset: int
    group: str
    pop_time: int
    invisible_time: int
    broker_name: str
    revive_qid: int
    offsets: list[int]
    client: str
    reput_times: Optional[int] = None  # rp: set on the CKs rePutCK writes
    copies: list[Stored] = field(default_factory=list)  # timer copy, the copy the timer fires
    revived_at: Optional[int] = None
    revived: dict[int, Optional[Stored]] = field(default_factory=dict)  # offset -> retry copy (None: lost)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def identity(self) -> tuple[str, int, int, str, int, str]:
        return (self.topic, self.queue_id, self.start_offset, self.group, self.pop_time, self.broker_name)

    def body(self) -> bytes:
        return fmt.encode_checkpoint({
            "topic": self.topic, "queue_id": self.queue_id, "start_offset": self.start_offset,
            "consumer_group": self.group, "pop_time": self.pop_time, "invisible_time": self.invisible_time,
            "num": len(self.offsets), "deltas": [o - self.start_offset for o in self.offsets],
            "broker_name": self.broker_name,
            "reput_times": None if self.reput_times is None else str(self.reput_times)})


@dataclass
class Handle:
    """A popped message as the client holds it (its receipt handle: the CK it belongs to and its offset)."""

    ck: Checkpoint
    offset: int
    msg: Stored


@dataclass
class AckRecord:
    """An ack or bAck the broker wrote (the simulator's own log of it)."""

    ck: Checkpoint
    offsets: list[int]
    kind: str  # ack | bAck
    at: int
    copies: list[Stored] = field(default_factory=list)


class PopService:
    """A broker's POP side: pops, acks, the revive scan (module docstring)."""

    def __init__(self, world: "World", broker: "Broker", rng: Optional["random.Random"] = None) -> None:
        self.world = world
        self.broker = broker
        self.loop = broker.loop
        self.rng = rng if rng is not None else self.loop.rng  # randomQ's generator (default the world's)
        self.revive_topic = fmt.revive_topic(broker.cluster)
        # TopicConfigManager's constructor: the revive topic (reviveQueueNum queues) and, timerWheelEnable, the timer
        # topic (1 queue); both perm 6 (TopicConfig's default)
        broker.create_topic(self.revive_topic, fmt.REVIVE_QUEUE_NUM)
        broker.create_topic(fmt.TIMER_TOPIC, 1)
        self.ck_counter = 0  # PopMessageProcessor.ckMessageNumber
        self.checkpoints: list[Checkpoint] = []
        self.acks: list[AckRecord] = []
        self.dlq: list[tuple[Handle, Stored]] = []
        # revive queue -> the CK copies that reached it (revive topic), in queue order, and the scan's position
        self._revive_cks: dict[int, list[tuple[Stored, Checkpoint]]] = {q: [] for q in range(fmt.REVIVE_QUEUE_NUM)}
        self._revive_pos: dict[int, int] = {q: 0 for q in range(fmt.REVIVE_QUEUE_NUM)}
        self._acked: dict[tuple[str, int, int, str, int, str], set[int]] = {}  # acks that reached the revive topic
        self.refused_puts: list[tuple[int, int]] = []  # [start, end) ms: every revive copy's put fails then
        self.loop.every(self.loop.now + REVIVE_INTERVAL_MS, REVIVE_INTERVAL_MS, self._revive_tick)

    # ------------------------------------------------------------------ timer messages

    def _put_timer(self, copies: list[fmt.StoredCopy], body: bytes,
                   on_revive_topic: Callable[[Stored], None]) -> list[Stored]:
        """Store the first copy now; the fired copy (the revive topic) when its TIMER_OUT_MS comes."""
        b = self.broker
        born = self.loop.now
        out: list[Stored] = []
        if not copies:
            return out
        first = put_exact(b, topic=copies[0].topic, queue_id=copies[0].queue_id, props=copies[0].properties,
                          body=body, born_ts=born, born_host=b.addr)
        out.append(first)
        if len(copies) == 1:
            on_revive_topic(first)
            return out
        fired = copies[1]

        def fire() -> None:
            m = put_exact(b, topic=fired.topic, queue_id=fired.queue_id, props=fired.properties, body=body,
                          born_ts=born, born_host=b.addr)
            out.append(m)
            on_revive_topic(m)

        self.loop.at(int(fired.properties[fmt.PROPERTY_TIMER_DEQUEUE_MS]), fire)
        return out

    def _timer_args(self, deliver_ms: int) -> dict[str, int]:
        """enqueue/dequeue times of a timer message put now: the wheel takes it at the put (a whole second) and fires
        it at TIMER_OUT_MS, or at once when that has already passed."""
        now = self.loop.now
        out_ms = deliver_ms - fmt.TIMER_PRECISION_MS if deliver_ms % fmt.TIMER_PRECISION_MS == 0 else \
            deliver_ms // fmt.TIMER_PRECISION_MS * fmt.TIMER_PRECISION_MS
        return {"enqueue_ms": now // fmt.TIMER_PRECISION_MS * fmt.TIMER_PRECISION_MS,
                "dequeue_ms": max(out_ms, now)}

    # ------------------------------------------------------------------ pop

    def pop(self, client: str, group: str, topic: str, queue_id: int, max_n: int, invisible_ms: int) -> list[Handle]:
        """One POP request (``queue_id`` -1: every queue of the topic)."""
        b = self.broker
        if max_n > fmt.MAX_POP_NUM:
            raise ValueError(f"maxMsgNums {max_n} > {fmt.MAX_POP_NUM}")
        if group not in b.groups or topic not in b.topics:
            return []
        random_q = self.rng.randrange(100)
        revive_qid = self.ck_counter % fmt.REVIVE_QUEUE_NUM
        self.ck_counter += 1
        need_retry = random_q < POP_FROM_RETRY_PROBABILITY
        pop_time = self.loop.now
        retry = fmt.pop_retry_topic(group, topic)
        got: list[Handle] = []

        def from_topic(t: str) -> None:
            cfg = b.topics.get(t)
            if cfg is None:
                return
            n = cfg["readQueueNums"]
            for i in range(n):
                self._pop_queue(client, group, t, (random_q + i) % n, max_n, invisible_ms, pop_time, revive_qid, got)

        if need_retry:
            from_topic(retry)
        if queue_id < 0:
            from_topic(topic)
        elif queue_id < b.topics[topic]["readQueueNums"]:
            self._pop_queue(client, group, topic, queue_id, max_n, invisible_ms, pop_time, revive_qid, got)
        if not need_retry and len(got) < max_n:
            from_topic(retry)
        return got

    def _init_offset(self, group: str, topic: str, qid: int) -> int:
        """``getInitOffset`` (committed: ``init`` is true on the second ``getPopOffset`` of ``popMsgFromQueue``)."""
        b = self.broker
        lo, hi = b.bounds(topic, qid)
        if topic.startswith(fmt.RETRY_PREFIX):
            off = lo
        elif lo <= 0 and hi > 0:  # initPopOffsetByCheckMsgInMem: offset 0 is still there
            off = 0
        else:
            off = max(hi - 1, 0)
        b.offsets.commit(self.loop.now, topic, group, qid, off)
        return off

    def _pop_queue(self, client: str, group: str, topic: str, qid: int, max_n: int, invisible_ms: int,
                   pop_time: int, revive_qid: int, got: list[Handle]) -> None:
        b = self.broker
        offset = b.offsets.read(topic, group, qid)
        if offset < 0:
            offset = self._init_offset(group, topic, qid)
        if len(got) >= max_n:
            return
        status, nxt, msgs = b.pull(topic, qid, offset, max_n - len(got))
        if status == "OFFSET_MOVED":  # OFFSET_TOO_SMALL / OVERFLOW_BADLY: commit nextBeginOffset and read again
            b.offsets.commit(self.loop.now, topic, group, qid, nxt)
            offset = nxt
            status, nxt, msgs = b.pull(topic, qid, offset, max_n - len(got))
        if status != "FOUND" or not msgs:
            return
        ck = Checkpoint(topic, qid, offset, group, pop_time, invisible_ms, b.name, revive_qid,
                        [m.queue_offset for m in msgs], client)
        self._store_ck(ck)
        b.offsets.commit(self.loop.now, topic, group, qid, nxt)  # PopBufferMergeService.commitOffset
        got.extend(Handle(ck, m.queue_offset, m) for m in msgs)

    def _store_ck(self, ck: Checkpoint) -> None:
        """``buildCkMsg`` + ``putMessage``: the timer copy now, the revive topic's copy when the timer fires."""
        copies = fmt.ck_message_properties(
            {"topic": ck.topic, "queue_id": ck.queue_id, "start_offset": ck.start_offset,
             "consumer_group": ck.group, "pop_time": ck.pop_time, "invisible_time": ck.invisible_time,
             "broker_name": ck.broker_name},
            revive_topic=self.revive_topic, revive_queue_id=ck.revive_qid, put_ms=self.loop.now,
            **self._timer_args(ck.revive_time - fmt.ACK_TIME_INTERVAL_MS))
        ck.copies = self._put_timer(copies, ck.body(),
                                    lambda m, ck=ck: self._revive_cks[ck.revive_qid].append((m, ck)))
        self.checkpoints.append(ck)

    def refuse_revive_puts(self, start_ms: int, end_ms: int) -> None:
        """From ``start_ms`` to ``end_ms`` every revive copy's put fails (the CK puts do not): each offset is
        re-put as a CK."""
        self.refused_puts.append((start_ms, end_ms))

    # ------------------------------------------------------------------ ack

    def ack(self, ck: Checkpoint, offsets: list[int], *, batch: bool) -> Optional[AckRecord]:
        """``appendAck``: one ``ack`` (a single offset) or one ``bAck`` for offsets of one checkpoint."""
        lo, hi = self.broker.bounds(ck.topic, ck.queue_id)
        offsets = [o for o in offsets if lo <= o <= hi]  # the range check of AckMessageProcessor
        if not offsets or (not batch and len(offsets) != 1):
            return None
        fields: dict[str, Any] = {"topic": ck.topic, "queue_id": ck.queue_id, "start_offset": ck.start_offset,
                                  "consumer_group": ck.group, "pop_time": ck.pop_time, "broker_name": ck.broker_name}
        if batch:
            fields["ack_offsets"] = offsets
            body = fmt.encode_batch_ack(fields)
        else:
            fields["ack_offset"] = offsets[0]
            body = fmt.encode_ack(fields)
        copies = fmt.ack_message_properties(fields, invisible_time=ck.invisible_time, revive_topic=self.revive_topic,
                                            revive_queue_id=ck.revive_qid, put_ms=self.loop.now, batch=batch,
                                            **self._timer_args(ck.pop_time + ck.invisible_time))
        rec = AckRecord(ck, list(offsets), fmt.BATCH_ACK_TAG if batch else fmt.ACK_TAG, self.loop.now)

        def reached(m: Stored) -> None:
            self._acked.setdefault(ck.identity, set()).update(offsets)

        rec.copies = self._put_timer(copies, body, reached)
        self.acks.append(rec)
        return rec

    # ------------------------------------------------------------------ DLQ (the proxy's forward)

    def forward_to_dlq(self, h: Handle) -> Stored:
        """``forwardMessageToDeadLetterQueue``: ``consumerSendMsgBack`` (delayLevel -1: ``%RETRY%G`` created, the
        copy to ``%DLQ%G`` with reconsumeTimes + 1), then the message is acked."""
        b = self.broker
        b.ensure_retry_topic(h.ck.group)
        dlq = b.send_back(h.msg, h.ck.group, max_reconsume=0, delay_level=-1)
        self.dlq.append((h, dlq))
        return dlq

    # ------------------------------------------------------------------ revive

    def _revive_tick(self) -> None:
        now = self.loop.now
        for rq in range(fmt.REVIVE_QUEUE_NUM):
            cks = self._revive_cks[rq]
            pos = self._revive_pos[rq]
            last: Optional[Stored] = None
            while pos < len(cks):
                copy, ck = cks[pos]
                if now - ck.revive_time <= REVIVE_MARGIN_MS:
                    break
                if ck.revived_at is None:  # a CK is revived once however many copies reach the queue
                    self._revive(ck)
                last = copy
                pos += 1
            self._revive_pos[rq] = pos
            if last is not None:
                self.broker.offsets.commit(now, self.revive_topic, fmt.REVIVE_GROUP, rq, last.queue_offset)

    def _revive(self, ck: Checkpoint) -> None:
        b = self.broker
        ck.revived_at = self.loop.now
        if ck.topic not in b.topics or ck.group not in b.groups:
            return
        acked = self._acked.get(ck.identity, set())
        refused: list[int] = []
        for o in ck.offsets:
            if o in acked:
                continue
            lo, hi = b.bounds(ck.topic, ck.queue_id)
            if not lo <= o < hi:  # getBizMessage finds nothing (retention): "can not get biz msg ... then continue"
                ck.revived[o] = None
                continue
            msg = b.cqs[(ck.topic, ck.queue_id)].msgs[o]
            assert msg is not None
            copy, times = fmt.revive_copy_properties(msg.props, msg.reconsume, ck_topic=ck.topic,
                                                     consumer_group=ck.group, pop_time=ck.pop_time)
            fails = any(a <= self.loop.now < z for a, z in self.refused_puts)  # reviveRetry false
            if copy.topic not in b.topics:  # addRetryTopicIfNotExist + initPopRetryOffset
                b.create_topic(copy.topic, 1, 6)
                if b.offsets.read(copy.topic, ck.group, 0) < 0:
                    b.offsets.commit(self.loop.now, copy.topic, ck.group, 0, 0)
            if fails:  # after addRetryTopicIfNotExist, as reviveRetry does
                refused.append(o)
                continue
            ck.revived[o] = put_exact(b, topic=copy.topic, queue_id=copy.queue_id, props=copy.properties,
                                      body=msg.body, born_ts=msg.born_ts, born_host=b.addr, reconsume=times)
        for o in refused:  # the futures' whenComplete: rePutCK per offset not revived
            self._re_put(ck, o)

    def _re_put(self, old: Checkpoint, offset: int) -> None:
        """``PopReviveService.rePutCK`` (``skipWhenCKRePutReachMaxTimes`` false: never dropped)."""
        times = old.reput_times or 0  # parseRePutTimes: 0 when rp is absent
        it = old.invisible_time
        if old.revive_time <= self.loop.now:  # "never expect an ACK matched in the future"
            it += fmt.CK_REWRITE_INTERVALS_S[min(times, len(fmt.CK_REWRITE_INTERVALS_S) - 1)] * SECOND
        self._store_ck(Checkpoint(old.topic, old.queue_id, offset, old.group, old.pop_time, it, old.broker_name,
                                  old.revive_qid, [offset], old.client, reput_times=times + 1))


def pop_service(world: "World", broker: "Broker", rng: Optional["random.Random"] = None) -> PopService:
    """The broker's POP service (created on first use: the broker is a 5.x broker with the timer wheel on; ``rng``:
    the generator of its draws, the world's by default)."""
    services: dict[str, PopService] = world.__dict__.setdefault("pop_services", {})
    if broker.name not in services:
        services[broker.name] = PopService(world, broker, rng)
    return services[broker.name]


class PopConsumer:
    """One POP client process of ``group`` on ``topic`` (module docstring)."""

    def __init__(self, world: "World", group: str, topic: str, *, behaviour: PopBehaviour, batch: int = 16,
                 invisible_ms: int = 30 * SECOND, poll_ms: int = 2 * SECOND, queue_id: int = -1,
                 receives: Optional[int] = None, ack_flush_ms: int = 100, retry_max_times: int = 16,
                 rng: Optional["random.Random"] = None, brokers: Optional[list["Broker"]] = None) -> None:
        self.world = world
        self.loop = world.loop
        self.rng = rng if rng is not None else self.loop.rng
        self.brokers = brokers  # the brokers the proxy serves the group on (None: every broker of the world)
        self.group = group
        self.topic = topic
        self.behaviour = behaviour
        self.batch = batch
        self.invisible_ms = invisible_ms
        self.poll_ms = poll_ms
        self.queue_id = queue_id
        self.receives_left = receives
        self.ack_flush_ms = ack_flush_ms
        self.retry_max_times = retry_max_times
        self.ip = world.next_ip()
        self.client_id = f"{self.ip}@{self.rng.randrange(10**12, 10**13)}"
        self.alive = False
        self.handles: list[Handle] = []  # every message handed to the client
        self.outcomes: dict[int, tuple[str, int]] = {}  # id(handle) -> (outcome, done at)
        self._pending: list[Handle] = []
        self._flush_scheduled = False

    def _brokers(self) -> list["Broker"]:
        return self.world.brokers if self.brokers is None else self.brokers

    def services(self) -> list[PopService]:
        return [pop_service(self.world, b) for b in self._brokers() if self.topic in b.topics]

    def start(self) -> None:
        self.alive = True
        for b in self._brokers():
            b.ensure_group(self.group, retry_max_times=self.retry_max_times)  # the proxy's heartbeat
        self.loop.every(self.loop.now, self.poll_ms, self._receive)

    def kill(self) -> None:
        self.alive = False

    def _receive(self) -> Optional[bool]:
        if not self.alive:
            return False
        if self.receives_left is not None:
            if self.receives_left <= 0:
                return False
            self.receives_left -= 1
        for svc in self.services():
            max_attempts = svc.broker.groups[self.group]["retryMaxTimes"] + 1  # GrpcClientSettingsManager
            for h in svc.pop(self.client_id, self.group, self.topic, self.queue_id, self.batch, self.invisible_ms):
                if h.msg.reconsume >= max_attempts:  # PopMessageResultFilterImpl: TO_DLQ, then ackMessage
                    self.loop.after(PROXY_RTT_MS, lambda h=h, svc=svc: (svc.forward_to_dlq(h),
                                                                         svc.ack(h.ck, [h.offset], batch=False)))
                    continue
                self.handles.append(h)
                self.loop.after(PROXY_RTT_MS, lambda h=h: self._consume(h))
        return None

    def _consume(self, h: Handle) -> None:
        if not self.alive:
            return
        duration, outcome = self.behaviour(self, h.msg)
        if outcome == "hang":
            self.outcomes[id(h)] = ("hang", -1)
            return

        def done() -> None:
            if not self.alive:
                return
            self.outcomes[id(h)] = (outcome, self.loop.now)
            if outcome == "ok":
                self._pending.append(h)
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self.loop.after(self.ack_flush_ms, self._flush)

        self.loop.after(max(1, duration), done)

    def _flush(self) -> None:
        """One AckMessage request with every entry done since the last: per checkpoint a ``bAck`` (2+ entries) or an
        ``ack``."""
        self._flush_scheduled = False
        if not self.alive:
            return
        by_ck: dict[int, list[Handle]] = {}
        for h in self._pending:
            by_ck.setdefault(id(h.ck), []).append(h)
        self._pending = []
        services = self.world.__dict__["pop_services"]
        for hs in by_ck.values():
            ck = hs[0].ck
            services[ck.broker_name].ack(ck, sorted(h.offset for h in hs), batch=len(hs) > 1)


def pop_consumer(world: "World", group: str, topic: str, *, start_at: int, behaviour: PopBehaviour,
                 rng: Optional["random.Random"] = None, brokers: Optional[list["Broker"]] = None,
                 **kw: Any) -> PopConsumer:
    """A POP client of ``group`` on ``topic`` starting at ``start_at`` (the group is recorded as a POP group without
    traces in ``world.group_info``). ``rng``: the generator of the client's and its brokers' POP draws (default the
    world's); ``brokers``: the brokers with a POP service the group is on (default every broker of the world)."""
    world.group_info.setdefault(group, {"group": group, "topic": topic, "broadcast": False, "trace": False,
                                        "orderly": False, "fifo_flag": False, "pop": True})
    for b in world.brokers if brokers is None else brokers:
        pop_service(world, b, rng)
    c = PopConsumer(world, group, topic, behaviour=behaviour, rng=rng, brokers=brokers, **kw)
    world.__dict__.setdefault("pop_consumers", []).append(c)
    world.loop.at(start_at, c.start)
    return c
