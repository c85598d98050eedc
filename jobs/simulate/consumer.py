"""Clients: producers and push consumers (clustering and broadcast), one object per process.

:class:`PushConsumer` mirrors ``DefaultMQPushConsumerImpl``: a ``ProcessQueue`` per assigned queue
(:class:`ProcessQueue`, whose ``remove`` is ``ProcessQueue.removeMessage``), pulls of ``pullBatchSize`` 32 with
the commit piggybacked (``PullAPIWrapper``), long polling (``PullRequestHoldService``, 15 s), a consume pool of
20 threads (``ConsumeMessageConcurrentlyService``), send-back of failures (``sendMessageBack``), offset persist
every 5 s (``MQClientInstance.persistAllConsumerOffset``), rebalancing (``RebalanceImpl`` with
``AllocateMessageQueueAveragely``), crashes that lose unpersisted progress, and broadcast consumers with a
local ``offsets.json`` (``LocalFileOffsetStore``) that drop failed messages.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from jobs.formats import fastjson
from jobs.simulate import java
from jobs.simulate.broker import Stored, retry_topic
from jobs.simulate.clock import SECOND, EventLoop
from jobs.simulate.trace import REGION, TraceDispatcher, UniqIdGenerator

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Broker

PULL_BATCH = 32
THREADS = 20
LONG_POLL_MS = 15 * SECOND
PERSIST_MS = 5 * SECOND
REBALANCE_MS = 20 * SECOND
CONSUME_TIMEOUT_MS = 15 * 60 * SECOND
PULL_RTT_MS = 2

# Outcome of one consumption: (duration ms, "ok" | "fail" | "hang")
Behaviour = Callable[["PushConsumer", Stored], tuple[int, str]]


def default_behaviour(c: "PushConsumer", msg: Stored) -> tuple[int, str]:
    return 5 + c.rng.randrange(40), "ok"


class Client:
    """One JVM: an IP, a pid, its UNIQ id generator and (optionally) its trace dispatcher."""

    def __init__(self, loop: EventLoop, ip: str, brokers: list["Broker"], *, trace: bool,
                 trace_log: list[dict[str, Any]], rng: Optional[random.Random] = None) -> None:
        self.loop = loop
        self.ip = ip
        # rng: a generator of its own keeps the world's draws as they were (mixed's POP part); default the world's
        self.rng = rng if rng is not None else loop.rng
        self.pid = 1000 + self.rng.randrange(30000)
        self.uniq = UniqIdGenerator(ip, self.pid, self.rng.randrange(1 << 31))
        self.port = 40000 + self.rng.randrange(20000)
        self.brokers = brokers
        self.alive = True
        self.tracer = TraceDispatcher(loop, ip, self.port, self.uniq, brokers, trace_log, rng=self.rng) if trace \
            else None


class Producer(Client):
    """``DefaultMQProducer``: TAGS, KEYS, WAIT=true then UNIQ_KEY (``Message``, ``MessageClientIDSetter``)."""

    def __init__(self, loop: EventLoop, ip: str, brokers: list["Broker"], *, group: str = "PID_sim",
                 trace: bool = False, trace_log: Optional[list[dict[str, Any]]] = None,
                 rng: Optional[random.Random] = None) -> None:
        super().__init__(loop, ip, brokers, trace=trace, trace_log=trace_log if trace_log is not None else [],
                         rng=rng)
        self.group = group

    def send(self, broker: "Broker", topic: str, qid: int, *, keys: Optional[str], tags: Optional[str],
             body: bytes) -> Stored:
        props: dict[str, str] = {}
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys
        props["WAIT"] = "true"
        born = self.loop.now - 1 - self.rng.randrange(3)
        props["UNIQ_KEY"] = self.uniq.next(born)
        msg = broker.put(topic=topic, queue_id=qid, props=props, body=body, born_ts=born, born_host=(self.ip, self.port))
        if self.tracer is not None:
            self.tracer.add({"type": "Pub", "timestamp_ms": born, "region_id": REGION, "group": self.group,
                             "topic": topic, "msg_id": msg.uniq, "tags": tags, "keys": keys,
                             "store_host": f"{broker.ip}:{broker.addr[1]}", "body_length": len(body),
                             "cost_time_ms": self.loop.now - born, "msg_type": 0,
                             "offset_msg_id": msg.offset_msg_id(), "success": True})
        return msg


    def send_batch(self, broker: "Broker", topic: str, qid: int, messages: list[dict[str, Any]]) -> list[Stored]:
        """``DefaultMQProducer.send(Collection)`` to a BatchCQ topic: every message gets its UNIQ_KEY
        (``{"keys", "tags", "body"}`` each), then the batch its own; stored as one ``INNER_BATCH`` record
        (Broker.put_batch). Not traced (a traced producer would record one Pub per message)."""
        born = self.loop.now - 1 - self.rng.randrange(3)
        inner = [dict(m, uniq_key=self.uniq.next(born)) for m in messages]
        return broker.put_batch(topic=topic, queue_id=qid, messages=inner, batch_uniq_key=self.uniq.next(born),
                                born_ts=born, born_host=(self.ip, self.port))


TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_CHECK_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANSACTION_CHECK_MAX = 15  # transactionCheckMax
TRANSACTION_CHECK_INTERVAL_MS = 30 * SECOND  # transactionCheckInterval


def send_unresolved_transaction(p: "Producer", broker: "Broker", topic: str, qid: int, *, keys: Optional[str],
                                tags: Optional[str], body: bytes) -> str:
    """A transactional send whose producer never answers the checks (it died, its local transaction hangs): the
    half message (``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, ``REAL_TOPIC``/``REAL_QID``, ``TRAN_MSG``, ``PGROUP``) is
    checked ``transactionCheckMax`` times, then moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` with every property
    (``resolveDiscardMsg``). Returns the UNIQ_KEY."""
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    props.update(TRAN_MSG="true", PGROUP=p.group, WAIT="true")
    born = p.loop.now
    props["UNIQ_KEY"] = p.uniq.next(born)
    half = dict(props, REAL_TOPIC=topic, REAL_QID=str(qid))
    broker.put(topic=TRANS_HALF_TOPIC, queue_id=0, props=half, body=body, born_ts=born, born_host=(p.ip, p.port))

    def discard() -> None:
        broker.put(topic=TRANS_CHECK_TOPIC, queue_id=0, props=dict(half, TRANSACTION_CHECK_TIMES=str(
            TRANSACTION_CHECK_MAX)), body=body, born_ts=born, born_host=(p.ip, p.port))

    p.loop.after(TRANSACTION_CHECK_MAX * TRANSACTION_CHECK_INTERVAL_MS, discard)
    return props["UNIQ_KEY"]


@dataclass(frozen=True, order=True)
class MQ:
    """``MessageQueue`` (compareTo: topic, brokerName, queueId)."""

    topic: str
    broker: str
    queue_id: int


def _mq_order(item: tuple[MQ, int]) -> tuple[str, str, int]:
    mq = item[0]
    return mq.topic, mq.broker, mq.queue_id


class ProcessQueue:
    """``ProcessQueue``: in-flight messages by offset; ``remove`` returns the offset to commit."""

    def __init__(self, mq: MQ, owner: str, start: int) -> None:
        self.mq = mq
        self.owner = owner
        self.msgs: dict[int, Stored] = {}
        self._heap: list[int] = []
        self.queue_offset_max = -1
        self.dropped = False
        self.next_offset = start
        self.pull_token = 0
        self.timeline: dict[int, list[Optional[int]]] = {}  # offset -> [pulled at, left at]
        self.started: dict[int, int] = {}  # offset -> CONSUME_START_TIME

    def put(self, msgs: list[Stored], now: int) -> None:
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                heapq.heappush(self._heap, m.queue_offset)
                self.queue_offset_max = m.queue_offset
                self.timeline.setdefault(m.queue_offset, [now, None])

    def first_key(self) -> Optional[int]:
        while self._heap and self._heap[0] not in self.msgs:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def remove(self, msg: Stored, now: int) -> int:
        """``removeMessage``: -1 when already empty; else firstKey, or queueOffsetMax + 1 when now empty."""
        if not self.msgs:
            return -1
        if self.msgs.pop(msg.queue_offset, None) is not None:
            self.timeline[msg.queue_offset][1] = now
        first = self.first_key()
        return first if first is not None else self.queue_offset_max + 1

    def span(self) -> int:
        first = self.first_key()
        return 0 if first is None else self.queue_offset_max - first


@dataclass
class Delivery:
    """One consumption as the simulator saw it (the trace records are its observable part)."""

    group: str
    client_id: str
    ip: str
    mq: MQ
    msg: Stored
    start: int
    end: Optional[int] = None
    success: Optional[bool] = None


class GroupRegistry:
    """The broker-side view of a group's live consumers (``ConsumerManager``) that drives rebalancing."""

    def __init__(self, loop: EventLoop, group: str) -> None:
        self.loop = loop
        self.group = group
        self.members: list["PushConsumer"] = []

    def join(self, c: "PushConsumer") -> None:
        self.members.append(c)
        self.notify(exclude=c)

    def leave(self, c: "PushConsumer") -> None:
        if c in self.members:
            self.members.remove(c)
        self.notify()

    def notify(self, exclude: Optional["PushConsumer"] = None) -> None:
        """``notifyConsumerIdsChanged``: every member rebalances shortly after."""
        for m in list(self.members):
            if m is not exclude:
                self.loop.after(200 + m.rng.randrange(1500), m.rebalance)

    def client_ids(self) -> list[str]:
        return sorted(m.client_id for m in self.members if m.alive)


def allocate_averagely(mq_all: list[MQ], cid_all: list[str], cid: str) -> list[MQ]:
    """``AllocateMessageQueueAveragely.allocate``."""
    if cid not in cid_all or not mq_all:
        return []
    index = cid_all.index(cid)
    mod = len(mq_all) % len(cid_all)
    if len(mq_all) <= len(cid_all):
        average = 1
    elif mod > 0 and index < mod:
        average = len(mq_all) // len(cid_all) + 1
    else:
        average = len(mq_all) // len(cid_all)
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    rng = min(average, len(mq_all) - start)
    return [mq_all[(start + i) % len(mq_all)] for i in range(max(rng, 0))]


class PushConsumer(Client):
    """A ``DefaultMQPushConsumer`` process: clustering (broker offsets) or broadcasting (local offsets.json)."""

    def __init__(self, loop: EventLoop, ip: str, brokers: list["Broker"], registry: GroupRegistry, topic: str, *,
                 broadcast: bool = False, trace: bool = True, behaviour: Behaviour = default_behaviour,
                 trace_log: list[dict[str, Any]], deliveries: list[Delivery], from_first: bool = False,
                 instance: Optional[str] = None, fifo_flag: bool = False, rng: Optional[random.Random] = None
                 ) -> None:
        super().__init__(loop, ip, brokers, trace=trace, trace_log=trace_log, rng=rng)
        self.group = registry.group
        self.registry = registry
        self.topic = topic
        self.broadcast = broadcast
        self.behaviour = behaviour
        self.from_first = from_first
        self.fifo_flag = fifo_flag
        # clientId = IP@instanceName; clustering rewrites DEFAULT to pid#nanoTime (DefaultMQPushConsumerImpl.start)
        name = instance or ("DEFAULT" if broadcast else f"{self.pid}#{self.rng.randrange(10**12, 10**13)}")
        self.client_id = f"{ip}@{name}"
        self.broker_by_name = {b.name: b for b in brokers}
        self.pqs: dict[MQ, ProcessQueue] = {}
        self.local_offsets: dict[MQ, int] = {}
        self.all_pqs: list[ProcessQueue] = []
        self.deliveries = deliveries
        self.busy = 0
        self.waiting: list[tuple[ProcessQueue, Stored]] = []
        self.offsets_file_writes: list[tuple[int, str]] = []  # broadcast: offsets.json contents over time
        self.started_at: Optional[int] = None
        self.stopped_at: Optional[int] = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.started_at = self.loop.now
        for b in self.brokers:
            b.ensure_group(self.group, orderly=self.fifo_flag)
            if not self.broadcast:
                b.ensure_retry_topic(self.group)
        self.registry.join(self)
        self.rebalance()
        self.loop.every(self.loop.now + 10 * SECOND, PERSIST_MS, self._persist_tick)
        self.loop.every(self.loop.now + REBALANCE_MS, REBALANCE_MS, self._rebalance_tick)
        if not self.broadcast:
            self.loop.every(self.loop.now + CONSUME_TIMEOUT_MS, CONSUME_TIMEOUT_MS, self._clean_expired)

    def kill(self) -> None:
        """``kill -9``: no persist; in-memory progress and buffered trace records are lost."""
        if not self.alive:
            return
        self.alive = False
        self.stopped_at = self.loop.now
        if self.tracer:
            self.tracer.kill()
        for pq in self.pqs.values():
            pq.dropped = True
        self.registry.leave(self)

    def shutdown(self) -> None:
        """Graceful shutdown: ``persistConsumerOffset`` then unregister."""
        if not self.alive:
            return
        self._persist_all()
        if self.tracer:
            self.tracer.flush()
        self.alive = False
        self.stopped_at = self.loop.now
        for pq in self.pqs.values():
            pq.dropped = True
        self.registry.leave(self)

    def _persist_tick(self) -> Optional[bool]:
        if not self.alive:
            return False
        self._persist_all()
        return None

    def _clean_expired(self) -> Optional[bool]:
        """``ProcessQueue.cleanExpiredMsg``: head messages consuming for > consumeTimeout are sent back at level 3."""
        if not self.alive:
            return False
        now = self.loop.now
        for pq in list(self.pqs.values()):
            for _ in range(16):
                first = pq.first_key()
                if first is None or pq.dropped:
                    break
                started = pq.started.get(first)
                if started is None or now - started <= CONSUME_TIMEOUT_MS:
                    break
                msg = pq.msgs[first]
                self._broker(pq.mq).send_back(msg, self.group, delay_level=3)
                pq.remove(msg, now)
        return None

    def _rebalance_tick(self) -> Optional[bool]:
        if not self.alive:
            return False
        self.rebalance()
        return None

    # ---------------------------------------------------------------- offsets

    def _broker(self, mq: MQ) -> "Broker":
        return self.broker_by_name[mq.broker]

    def _commit(self, mq: MQ, offset: int) -> None:
        self._broker(mq).offsets.commit(self.loop.now, mq.topic, self.group, mq.queue_id, offset)

    def _persist_all(self) -> None:
        """``persistAll``: clustering -> UPDATE_CONSUMER_OFFSET per assigned queue; broadcast -> offsets.json."""
        if self.broadcast:
            table = {}
            for mq in sorted(self.local_offsets):
                key = fastjson.ObjectKey.of(brokerName=mq.broker, queueId=mq.queue_id, topic=mq.topic)
                table[key] = self.local_offsets[mq]
            table = java.ordered(table, concurrent=True, key_of=lambda k: (k.as_dict()["brokerName"],
                                                                          k.as_dict()["queueId"],
                                                                          k.as_dict()["topic"]))
            self.offsets_file_writes.append((self.loop.now, fastjson.dumps({"offsetTable": table})))
            return
        # MQ order (topic, broker, queue_id) with tuple keys: the dataclass comparisons were a hot spot
        for mq, off in sorted(self.local_offsets.items(), key=_mq_order):
            if mq in self.pqs:
                self._commit(mq, off)

    def _update_offset(self, mq: MQ, offset: int, increase_only: bool = True) -> None:
        cur = self.local_offsets.get(mq)
        if cur is None or not increase_only or offset > cur:
            self.local_offsets[mq] = offset

    def _read_offset(self, mq: MQ) -> int:
        if self.broadcast:
            return self.local_offsets.get(mq, -1)
        off = self._broker(mq).offsets.read(mq.topic, self.group, mq.queue_id)
        if off >= 0:
            self.local_offsets[mq] = off  # readOffset(READ_FROM_STORE) updates the local table
        return off

    # ---------------------------------------------------------------- rebalance

    def _mq_all(self, topic: str) -> list[MQ]:
        out = []
        for b in self.brokers:
            cfg = b.topics.get(topic)
            if cfg:
                out += [MQ(topic, b.name, q) for q in range(cfg["readQueueNums"])]
        return sorted(out)

    def rebalance(self) -> None:
        """``RebalanceImpl.rebalanceByTopic`` for the topic and, clustering, ``%RETRY%G``."""
        if not self.alive:
            return
        topics = [self.topic] if self.broadcast else [self.topic, retry_topic(self.group)]
        wanted: set[MQ] = set()
        for t in topics:
            mq_all = self._mq_all(t)
            wanted |= set(mq_all if self.broadcast else allocate_averagely(mq_all, self.registry.client_ids(),
                                                                             self.client_id))
        for mq in sorted(set(self.pqs) - wanted):
            pq = self.pqs.pop(mq)
            pq.dropped = True
            # removeUnnecessaryMessageQueue: persist(mq) then removeOffset(mq)
            if not self.broadcast and mq in self.local_offsets:
                self._commit(mq, self.local_offsets[mq])
            self.local_offsets.pop(mq, None)
        for mq in sorted(wanted - set(self.pqs)):
            self._start_queue(mq)

    def _start_queue(self, mq: MQ) -> None:
        """``computePullFromWhere`` (CONSUME_FROM_LAST_OFFSET, or FIRST_OFFSET when asked)."""
        off = self._read_offset(mq)
        if off < 0:
            if mq.topic.startswith("%RETRY%") or self.from_first:
                off = 0
            else:
                off = self._broker(mq).bounds(mq.topic, mq.queue_id)[1]
        pq = ProcessQueue(mq, self.client_id, off)
        self.pqs[mq] = pq
        self.all_pqs.append(pq)
        self._pull(pq)

    # ---------------------------------------------------------------- pulling

    def _pull(self, pq: ProcessQueue) -> None:
        if not self.alive or pq.dropped:
            return
        pq.pull_token += 1
        if len(pq.msgs) > 1000 or pq.span() > 2000:  # pullThresholdForQueue, consumeConcurrentlyMaxSpan
            self.loop.after(50, lambda: self._pull(pq))
            return
        broker = self._broker(pq.mq)
        local = self.local_offsets.get(pq.mq, 0)
        if not self.broadcast and local > 0:  # commitOffset piggybacked on the pull (PullSysFlag)
            self._commit(pq.mq, local)
        status, nxt, msgs = broker.pull(pq.mq.topic, pq.mq.queue_id, pq.next_offset, PULL_BATCH)
        if status == "FOUND":
            pq.put(msgs, self.loop.now)
            pq.next_offset = nxt
            for m in msgs:
                self._submit(pq, m)
            self.loop.after(PULL_RTT_MS, lambda: self._pull(pq))
        elif status == "NO_NEW_MSG":
            if not pq.msgs:  # correctTagsOffset
                self._update_offset(pq.mq, nxt)
            pq.next_offset = nxt
            token = pq.pull_token

            def wake() -> None:
                if pq.pull_token == token:
                    self.loop.after(PULL_RTT_MS, lambda: self._pull(pq))

            broker.when_arrives(pq.mq.topic, pq.mq.queue_id, wake)
            self.loop.after(LONG_POLL_MS, wake)
        else:  # OFFSET_ILLEGAL: updateAndFreeze + persist + remove the queue, the next rebalance re-adds it
            self._update_offset(pq.mq, nxt, increase_only=False)
            if not self.broadcast:
                self._commit(pq.mq, nxt)
            pq.dropped = True
            self.pqs.pop(pq.mq, None)
            self.loop.after(PULL_RTT_MS, self.rebalance)

    # ---------------------------------------------------------------- consuming

    def _submit(self, pq: ProcessQueue, msg: Stored) -> None:
        self.waiting.append((pq, msg))
        self._dispatch()

    def _dispatch(self) -> None:
        while self.busy < THREADS and self.waiting and self.alive:
            pq, msg = self.waiting.pop(0)
            if pq.dropped:  # ConsumeRequest.run: a dropped queue is not consumed
                continue
            self.busy += 1
            self._consume(pq, msg)

    def _trace_before(self, now: int, request_id: str, msg: Stored, retry_times: int) -> None:
        """The SubBefore record of a delivery (``ConsumeMessageTraceHookImpl.consumeMessageBefore``)."""
        if self.tracer:
            self.tracer.add({"type": "SubBefore", "timestamp_ms": now, "region_id": REGION, "group": self.group,
                             "request_id": request_id, "msg_id": msg.uniq, "retry_times": retry_times,
                             "keys": msg.keys})

    def _trace_after(self, start: int, end: int, request_id: str, msg: Stored, ok: bool) -> None:
        """Its SubAfter record (``consumeMessageAfter``): context code 0 success, 4 failure."""
        if self.tracer:
            self.tracer.add({"type": "SubAfter", "request_id": request_id, "msg_id": msg.uniq,
                             "cost_time_ms": end - start, "success": ok, "keys": msg.keys,
                             "context_code": 0 if ok else 4, "timestamp_ms": end, "group": self.group})

    def _consume(self, pq: ProcessQueue, msg: Stored) -> None:
        now = self.loop.now
        pq.started[msg.queue_offset] = now
        duration, outcome = self.behaviour(self, msg)
        request_id = self.uniq.next(now)
        d = Delivery(self.group, "" if not self.broadcast else self.client_id, self.ip, pq.mq, msg, now)
        self.deliveries.append(d)
        self._trace_before(now, request_id, msg, msg.reconsume)
        if outcome == "hang":
            return  # the thread never returns

        def done() -> None:
            if not self.alive:
                return
            end = self.loop.now
            ok = outcome == "ok"
            d.end, d.success = end, ok
            self._trace_after(now, end, request_id, msg, ok)
            if not ok and not self.broadcast and not pq.dropped:
                self._broker(pq.mq).send_back(msg, self.group)
            off = pq.remove(msg, end)
            if off >= 0 and not pq.dropped:
                self._update_offset(pq.mq, off)
            self.busy -= 1
            self._dispatch()

        self.loop.after(max(1, duration), done)


ORDERLY_MAX_RECONSUME = 2**31 - 1  # maxReconsumeTimes -1 on an orderly consumer: Integer.MAX_VALUE
SUSPEND_MS = 1 * SECOND  # suspendCurrentQueueTimeMillis


class OrderlyPushConsumer(PushConsumer):
    """A 4.x ``DefaultMQPushConsumer`` with a ``MessageListenerOrderly`` (``ConsumeMessageOrderlyService``).

    Each queue consumes one message at a time, in offset order. A failure (SUSPEND_CURRENT_QUEUE_A_MOMENT) keeps the
    message at the head: it is consumed again locally after ``suspendCurrentQueueTimeMillis`` with its reconsume
    times raised in memory (``checkReconsumeTimes``), no ``%RETRY%`` copy, the offset frozen; a 4.x client's maximum
    is Integer.MAX_VALUE, so it never reaches the DLQ. Each attempt is traced (SubBefore retryTimes = the in-memory
    count). Expired messages are not cleaned (``cleanExpiredMsg`` returns at once for orderly consumers).
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.consuming: set[int] = set()  # id() of the ProcessQueues with a message being consumed
        self.reconsume: dict[tuple[int, int], int] = {}  # (id(ProcessQueue), offset) -> reconsume times in memory

    def _clean_expired(self) -> Optional[bool]:
        return None if self.alive else False

    def _submit(self, pq: ProcessQueue, msg: Stored) -> None:
        self._next(pq)

    def _next(self, pq: ProcessQueue) -> None:
        if not self.alive or pq.dropped or id(pq) in self.consuming:
            return
        first = pq.first_key()
        if first is None:
            return
        self.consuming.add(id(pq))
        self._consume_head(pq, pq.msgs[first])

    def _consume_head(self, pq: ProcessQueue, msg: Stored) -> None:
        now = self.loop.now
        pq.started[msg.queue_offset] = now
        times = self.reconsume.get((id(pq), msg.queue_offset), msg.reconsume)
        duration, outcome = self.behaviour(self, msg)
        request_id = self.uniq.next(now)
        d = Delivery(self.group, "", self.ip, pq.mq, msg, now)
        self.deliveries.append(d)
        self._trace_before(now, request_id, msg, times)
        if outcome == "hang":
            return  # the queue's consume thread never returns: the queue is blocked

        def done() -> None:
            if not self.alive:
                return
            end = self.loop.now
            ok = outcome == "ok"
            d.end, d.success = end, ok
            self._trace_after(now, end, request_id, msg, ok)
            if pq.dropped:
                self.consuming.discard(id(pq))
                return
            if ok:
                self.reconsume.pop((id(pq), msg.queue_offset), None)
                off = pq.remove(msg, end)  # ProcessQueue.commit: the consumed offset + 1
                if off >= 0:
                    self._update_offset(pq.mq, off, increase_only=False)
                self.consuming.discard(id(pq))
                self._next(pq)
                return
            self.reconsume[(id(pq), msg.queue_offset)] = times + 1  # checkReconsumeTimes below Integer.MAX_VALUE

            def again() -> None:
                self.consuming.discard(id(pq))
                self._next(pq)

            self.loop.after(SUSPEND_MS, again)

        self.loop.after(max(1, duration), done)
