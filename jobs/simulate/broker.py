"""One simulated broker: commitlog, consume queues, retention, config files, delay levels, retry and DLQ.

Each piece mirrors a broker class: :class:`CommitLog` (``CommitLog.doAppend``: rolling segments with the blank
end-of-file marker), :class:`ConsumeQueue` (``ConsumeQueue``: 20-byte entries, ``correctMinOffset``),
:meth:`Broker.clean` (``CleanCommitLogService`` / ``CleanConsumeQueueService``), :class:`OffsetTable`
(``ConsumerOffsetManager`` with its 5 s flush), :meth:`Broker.send_back` (``consumerSendMsgBack``),
:meth:`Broker.deliver_delayed` (``ScheduleMessageService.DeliverDelayedMessageTimerTask``) and
:meth:`Broker.pull` (``DefaultMessageStore.getMessage`` status and offset correction).
Every stored record is also kept in the simulator's own record log (:class:`Stored`), the source of the truth.
"""
from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from jobs.formats import fastjson
from jobs.formats.commitlog import BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH
from jobs.formats.commitlog_encode import encode_message, tags_hash
from jobs.simulate import java
from jobs.simulate.clock import HOUR, SECOND, EventLoop, to_datetime

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# MessageStoreConfig.messageDelayLevel, levels 1..18 in ms
DELAY_LEVELS_MS = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]
DELAY_LEVELS_MS = [s * SECOND for s in DELAY_LEVELS_MS]
CQ_UNIT = 20


def retry_topic(group: str) -> str:
    return "%RETRY%" + group


def dlq_topic(group: str) -> str:
    return "%DLQ%" + group


# TopicValidator.SYSTEM_TOPIC_SET besides the rmq_sys_ topics (rocketmq5.md, the list at the top)
RESERVED_TOPICS = frozenset({SCHEDULE_TOPIC, "BenchmarkTest", "TBW102", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC",
                             "TRANS_CHECK_MAX_TIME_TOPIC", "CHECKPOINT_TOPIC"})


def is_system_topic(topic: str) -> bool:
    """docs/semantics.md rule 7: retry, DLQ, schedule, trace, discarded transactions and RocketMQ's other own topics
    are not originals."""
    return topic.startswith(("%RETRY%", "%DLQ%")) or topic in RESERVED_TOPICS or topic.lower().startswith("rmq_sys_")


@dataclass
class Stored:
    """One record of the simulator's own log: what was written where, with every property."""

    broker: str
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int
    store_ts: int
    born_ts: int
    props: dict[str, str]
    reconsume: int
    body: bytes
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    inner: bool = False  # an inner message of an INNER_BATCH record (Broker.put_batch)

    @property
    def uniq(self) -> str:
        return self.props.get("UNIQ_KEY", "")

    @property
    def keys(self) -> Optional[str]:
        return self.props.get("KEYS")

    @property
    def tags(self) -> Optional[str]:
        return self.props.get("TAGS")

    def offset_msg_id(self) -> str:
        ip, port = self.store_host
        return (bytes(int(x) for x in ip.split(".")) + port.to_bytes(4, "big") + self.phys.to_bytes(8, "big")).hex().upper()


class CommitLog:
    """Segments of ``segment_size`` bytes, preallocated zero-filled; ``CommitLog.doAppend`` roll-over."""

    def __init__(self, segment_size: int) -> None:
        self.segment_size = segment_size
        self.segments: dict[int, bytearray] = {}
        self.last_write: dict[int, int] = {}
        self.next_offset = 0

    @property
    def min_offset(self) -> int:
        return min(self.segments) if self.segments else 0

    def _segment(self, start: int) -> bytearray:
        if start not in self.segments:
            self.segments[start] = bytearray(self.segment_size)
        return self.segments[start]

    def reserve(self, size: int, now: int) -> int:
        """The physical offset a record of ``size`` bytes goes to (writing the blank marker when it does not fit)."""
        if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            raise ValueError(f"a {size}-byte record does not fit a {self.segment_size}-byte segment")
        start = self.next_offset - self.next_offset % self.segment_size
        pos = self.next_offset - start
        remaining = self.segment_size - pos
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            seg = self._segment(start)
            seg[pos:pos + 8] = remaining.to_bytes(4, "big") + (BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big")
            self.last_write[start] = now
            self.next_offset = start + self.segment_size
        return self.next_offset

    def reserve_block(self, size: int, n: int, now: int) -> np.ndarray:
        """Offsets for ``n`` records of ``size`` bytes written back to back, rolling over as ``reserve`` does."""
        out = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            phys = self.reserve(size, now)
            remaining = self.segment_size - phys % self.segment_size
            k = min((remaining - END_FILE_MIN_BLANK_LENGTH) // size, n - i)
            out[i:i + k] = phys + size * np.arange(k, dtype=np.int64)
            self.next_offset = phys + size * k
            i += k
        return out

    def write(self, phys: int, record: bytes, now: int) -> None:
        start = phys - phys % self.segment_size
        pos = phys - start
        self._segment(start)[pos:pos + len(record)] = record
        self.last_write[start] = now
        self.next_offset = phys + len(record)

    def write_block(self, phys: np.ndarray, data: np.ndarray, sizes: np.ndarray, now: int) -> None:
        """Bulk path: records already encoded back to back in ``data``, each starting at ``phys[i]``."""
        cum = np.concatenate([[0], np.cumsum(sizes)])
        seg_of = phys // self.segment_size
        for s in np.unique(seg_of):
            idx = np.flatnonzero(seg_of == s)
            a, b = int(cum[idx[0]]), int(cum[idx[-1] + 1])
            start = int(s) * self.segment_size
            pos = int(phys[idx[0]]) - start
            self._segment(start)[pos:pos + (b - a)] = data[a:b].tobytes()
            self.last_write[start] = now
        self.next_offset = int(phys[-1] + sizes[-1])

    def active_start(self) -> int:
        return max(self.segments) if self.segments else 0


class ConsumeQueue:
    """One queue's 20-byte entries (``ConsumeQueue``); files of ``entries_per_file`` entries."""

    def __init__(self, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.per_file = entries_per_file
        self.phys: list[int] = []
        self.size: list[int] = []
        self.tags: list[int] = []
        self.msgs: list[Optional[Stored]] = []  # None for bulk records (looked up in the bulk index)
        self.first_file = 0  # index of the first retained file
        self.min_offset = 0  # correctMinOffset

    @property
    def max_offset(self) -> int:
        return len(self.phys)

    def append(self, phys: int, size: int, tags_code: int, msg: Optional[Stored]) -> int:
        self.phys.append(phys)
        self.size.append(size)
        self.tags.append(tags_code)
        self.msgs.append(msg)
        return len(self.phys) - 1

    def clean(self, min_phys: int) -> None:
        """``deleteExpiredFile`` + ``correctMinOffset``: drop whole files whose last entry is below ``min_phys``."""
        n = len(self.phys)
        last_file = (n - 1) // self.per_file if n else 0
        while self.first_file < last_file:
            last_entry = (self.first_file + 1) * self.per_file - 1
            if self.phys[last_entry] < min_phys:
                self.first_file += 1
            else:
                break
        i = max(self.min_offset, self.first_file * self.per_file)
        while i < n and self.phys[i] < min_phys:
            i += 1
        self.min_offset = i

    @property
    def file_bytes(self) -> int:
        return self.per_file * CQ_UNIT

    def file_numbers(self) -> list[int]:
        """The retained files (file f starts at byte f * file_bytes)."""
        n = len(self.phys)
        return list(range(self.first_file, (n - 1) // self.per_file + 1)) if n else []

    def file(self, f: int) -> bytes:
        """File ``f``'s bytes, preallocated to full size (zeros after the last entry)."""
        lo, hi = f * self.per_file, min((f + 1) * self.per_file, len(self.phys))
        arr = np.zeros(self.per_file, dtype=[("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
        arr["o"][: hi - lo] = self.phys[lo:hi]
        arr["s"][: hi - lo] = self.size[lo:hi]
        arr["t"][: hi - lo] = self.tags[lo:hi]
        return arr.tobytes()


class OffsetTable:
    """``ConsumerOffsetManager.offsetTable`` with the history needed to rebuild any flush (every 5 s).

    The history keeps every commit as four array columns (time, (topic, group) id, queue id, offset): about 24
    bytes a commit instead of a ~120-byte tuple. ``mixed`` at scale s commits ~465k * s^2 times (every consumer
    persists every assigned queue every 5 s), which made the tuples most of the simulator's memory at scale.
    """

    def __init__(self) -> None:
        self.current: dict[tuple[str, str], dict[int, int]] = {}
        self.times = array("q")  # commit times, ascending
        self._key_ids = array("i")  # index into _keys
        self._qids = array("i")
        self._offsets = array("q")
        self._keys: list[tuple[str, str]] = []  # (topic, group) in first-commit order
        self._key_index: dict[tuple[str, str], int] = {}
        self.commits = 0
        self.version_times: list[int] = []  # dataVersion.nextVersion() every 500 commits (5.x)
        self.lazy: list[Callable[[int], dict[tuple[str, str, int], int]]] = []  # bulk groups
        # state_at replays history incrementally: snapshots ask for increasing times, so each commit is applied
        # once (instead of once per snapshot, which made snapshots quadratic in the commit count).
        self._applied = 0
        self._state: dict[tuple[str, str], dict[int, int]] = {}

    def commit(self, now: int, topic: str, group: str, qid: int, offset: int) -> None:
        """``commitOffset``: stored as sent, no clamping (formats §1.3)."""
        key = (topic, group)
        queues = self.current.get(key)
        if queues is None:
            queues = self.current[key] = {}
            self._key_index[key] = len(self._keys)
            self._keys.append(key)
        queues[qid] = offset
        self.times.append(now)
        self._key_ids.append(self._key_index[key])
        self._qids.append(qid)
        self._offsets.append(offset)
        self.commits += 1
        if self.commits % 500 == 0:
            self.version_times.append(now)

    @property
    def history(self) -> list[tuple[int, str, str, int, int]]:
        """Every commit as (time, topic, group, qid, offset), in commit order."""
        keys = self._keys
        return [(t, *keys[k], q, o) for t, k, q, o in zip(self.times, self._key_ids, self._qids, self._offsets)]

    def read(self, topic: str, group: str, qid: int) -> int:
        """``queryOffset``: -1 when not found."""
        return self.current.get((topic, group), {}).get(qid, -1)

    def _apply(self, state: dict[tuple[str, str], dict[int, int]], lo: int, hi: int) -> None:
        keys = self._keys
        for k, qid, off in zip(self._key_ids[lo:hi], self._qids[lo:hi], self._offsets[lo:hi]):
            key = keys[k]
            q = state.get(key)
            if q is None:
                q = state[key] = {}
            q[qid] = off

    def state_at(self, t: int) -> dict[tuple[str, str], dict[int, int]]:
        """The offset table after every commit at or before ``t`` (keys in first-commit order)."""
        n = bisect.bisect_right(self.times, t)
        if n >= self._applied:
            self._apply(self._state, self._applied, n)
            self._applied = n
            out = {k: dict(v) for k, v in self._state.items()}
        else:  # an earlier time than already applied: rebuild from the start
            out = {}
            self._apply(out, 0, n)
        for fn in self.lazy:
            for (topic, group, qid), off in fn(t).items():
                out.setdefault((topic, group), {})[qid] = off
        return out


@dataclass
class BrokerConfig:
    segment_size: int = 256 * 1024
    cq_entries_per_file: int = 1000
    file_reserved_ms: int = 72 * HOUR
    delete_when_hour: int = 4
    delete_batch_max: int = 10


@dataclass
class ConfigFile:
    """A config file written on every change (``ConfigManager.persist``, 5.1+: old content copied to .bak)."""

    writes: list[tuple[int, str]] = field(default_factory=list)

    def at(self, t: int) -> tuple[Optional[str], Optional[str]]:
        i = bisect.bisect_right([w[0] for w in self.writes], t)
        cur = self.writes[i - 1][1] if i >= 1 else None
        bak = self.writes[i - 2][1] if i >= 2 else None
        return cur, bak


def data_version(counter: int, ts: int) -> dict[str, int]:
    """5.x ``DataVersion`` (alphabetical: counter, stateVersion, timestamp)."""
    return {"counter": counter, "stateVersion": 0, "timestamp": ts}


class Broker:
    """A master broker of ``cluster``; the store and config files a snapshot copies."""

    def __init__(self, loop: EventLoop, cluster: str, name: str, ip: str, cfg: BrokerConfig,
                 on_store: Callable[[Stored], None]) -> None:
        self.loop = loop
        self.cluster = cluster
        self.name = name
        self.ip = ip
        self.addr = (ip, 10911)
        self.cfg = cfg
        self.start_ms = loop.now
        self.commitlog = CommitLog(cfg.segment_size)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.offsets = OffsetTable()
        self.topics: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.topics_file = ConfigFile()
        self.groups_file = ConfigFile()
        self.topics_version = 0
        self.groups_version = 0
        self.delay_offsets: dict[int, int] = {}
        self.delay_history: list[tuple[int, dict[int, int], int]] = []
        self.delay_updates = 0
        self.arrival_listeners: dict[tuple[str, int], list[Callable[[], None]]] = {}
        self.on_store = on_store
        self.bulk_index: dict[tuple[str, int], Any] = {}
        from jobs.simulate.stores import StoreKind

        self.store = StoreKind()  # a 4.x store; World.add_broker sets another before the user topics exist
        for topic, queues, perm in (("TBW102", 8, 7), (SCHEDULE_TOPIC, 18, 6), (TRACE_TOPIC, 1, 6),
                                    ("OFFSET_MOVED_EVENT", 1, 6), ("SELF_TEST_TOPIC", 1, 6)):
            self.create_topic(topic, queues, perm, persist=False)
        self._persist_topics()
        # CleanCommitLogService every 10 s; it deletes only in hour deleteWhen (or on disk pressure: not simulated)
        loop.every(loop.now + 10 * SECOND, 10 * SECOND, self.clean)

    # ------------------------------------------------------------------ metadata (TopicConfigManager, SubscriptionGroupManager)

    def create_topic(self, topic: str, queues: int, perm: int = 6, *, persist: bool = True) -> None:
        if topic in self.topics:
            return
        self.topics[topic] = {"attributes": self.store.attributes(topic), "order": False, "perm": perm, "readQueueNums": queues,
                              "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0,
                              "writeQueueNums": queues}
        if persist:
            self._persist_topics()

    def _persist_topics(self) -> None:
        self.topics_version += 1
        table = java.ordered(self.topics, initial=1024, concurrent=True)
        doc = {"dataVersion": data_version(self.topics_version, self.loop.now), "topicConfigTable": table}
        self.topics_file.writes.append((self.loop.now, fastjson.dumps(doc)))

    def ensure_group(self, group: str, *, retry_max_times: int = 16, orderly: bool = False) -> None:
        """Auto-create on the first heartbeat (``findSubscriptionGroupConfig``), plus the retry topic; ``orderly``:
        an operator created it as a 5.x FIFO group (``consumeMessageOrderly``)."""
        if group not in self.groups:
            self.groups[group] = {"attributes": {}, "brokerId": 0, "consumeBroadcastEnable": True,
                                  "consumeEnable": True, "consumeFromMinEnable": True,
                                  "consumeMessageOrderly": orderly, "consumeTimeoutMinute": 15, "groupName": group,
                                  "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
                                  "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": retry_max_times,
                                  "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1}
            self.groups_version += 1
            table = java.ordered(self.groups, initial=1024, concurrent=True)
            doc = {"dataVersion": data_version(self.groups_version, self.loop.now), "forbiddenTable": {},
                   "subscriptionGroupTable": table}
            self.groups_file.writes.append((self.loop.now, fastjson.dumps(doc)))

    def ensure_retry_topic(self, group: str) -> None:
        """``ClientManageProcessor.heartBeat`` creates ``%RETRY%G`` with retryQueueNums queues, perm 6."""
        self.create_topic(retry_topic(group), 1, 6)

    # ------------------------------------------------------------------ store

    def cq(self, topic: str, qid: int) -> ConsumeQueue:
        key = (topic, qid)
        if key not in self.cqs:
            self.cqs[key] = ConsumeQueue(topic, qid, self.cfg.cq_entries_per_file)
        return self.cqs[key]

    def _append_record(self, fields: dict[str, Any], now: int) -> tuple[int, bytes]:
        """Encodes a record at the commitlog's next physical offset (PHYSICALOFFSET is bytes 28-36) and writes it."""
        probe = encode_message(physical_offset=0, **fields)
        phys = self.commitlog.reserve(len(probe), now)
        record = probe[:28] + phys.to_bytes(8, "big") + probe[36:]
        self.commitlog.write(phys, record, now)
        return phys, record

    def put(self, *, topic: str, queue_id: int, props: dict[str, str], body: bytes, born_ts: int,
            born_host: tuple[str, int], reconsume: int = 0, tags_code: Optional[int] = None) -> Stored:
        """``CommitLog.asyncPutMessage`` + dispatch to the consume queue; returns the record as stored."""
        now = self.loop.now
        cq = self.cq(topic, queue_id)
        qoff = cq.max_offset
        ordered_props = java.ordered(props)
        fields = dict(topic=topic, queue_id=queue_id, queue_offset=qoff, body=body, properties=ordered_props,
                      born_ts_ms=born_ts, store_ts_ms=now, born_host=born_host, store_host=self.addr,
                      reconsume_times=reconsume)
        phys, record = self._append_record(fields, now)
        msg = Stored(self.name, topic, queue_id, qoff, phys, len(record), now, born_ts, ordered_props, reconsume,
                     body, born_host, self.addr)
        code = tags_hash(props.get("TAGS")) if tags_code is None else tags_code
        cq.append(phys, len(record), code, msg)
        self.on_store(msg)
        for fn in self.arrival_listeners.pop((topic, queue_id), []):
            fn()
        return msg

    def put_batch(self, *, topic: str, queue_id: int, messages: list[dict[str, Any]], batch_uniq_key: str,
                  born_ts: int, born_host: tuple[str, int]) -> list[Stored]:
        """``SendMessageProcessor.sendBatchMessage`` on a ``queue.type=BatchCQ`` topic, for a batch with its own
        UNIQ_KEY: ONE record (sysFlag INNER_BATCH | NEED_UNWRAP, INNER_NUM, INNER_BASE = its queue offset) whose
        body holds the ``messages`` (``{"body", "uniq_key", "keys", "tags"}``); the queue advances by their number
        and one batch consume queue unit indexes them (rocketmq5.md §5). Returns the inner messages as a consumer
        receives them (``MessageDecoder.decodeMessage``: queue offset base + i, their own properties, the record's
        physical offset, times and hosts), which are what the record log keeps."""
        from jobs.formats import inner_batch

        if topic not in self.store.batch_topics:
            raise ValueError(f"{topic} is not a BatchCQ topic on {self.name}: a batch would be split into records")
        now = self.loop.now
        cq = self.cq(topic, queue_id)
        qoff = cq.max_offset
        fields = inner_batch.inner_batch_fields(
            messages, topic=topic, queue_id=queue_id, queue_base=qoff, batch_uniq_key=batch_uniq_key,
            born_ts_ms=born_ts, store_ts_ms=now, born_host=born_host, store_host=self.addr, cluster=self.cluster)
        phys, record = self._append_record(fields, now)
        out = []
        for i, m in enumerate(messages):
            props = {name: str(m[k]) for name, k in (("TAGS", "tags"), ("KEYS", "keys")) if m.get(k) is not None}
            props.update(WAIT="true", UNIQ_KEY=str(m["uniq_key"]))
            msg = Stored(self.name, topic, queue_id, qoff + i, phys, len(record), now, born_ts, props, 0, m["body"],
                         born_host, self.addr, inner=True)
            cq.append(phys, len(record), 0, msg)  # the record has no TAGS: its unit's tagsCode is 0
            self.on_store(msg)
            out.append(msg)
        for fn in self.arrival_listeners.pop((topic, queue_id), []):
            fn()
        return out

    def when_arrives(self, topic: str, qid: int, fn: Callable[[], None]) -> None:
        """Long polling: ``PullRequestHoldService`` wakes held pulls on ``notifyMessageArriving``."""
        self.arrival_listeners.setdefault((topic, qid), []).append(fn)

    def bounds(self, topic: str, qid: int) -> tuple[int, int]:
        cq = self.cqs.get((topic, qid))
        return (cq.min_offset, cq.max_offset) if cq else (0, 0)

    def pull(self, topic: str, qid: int, offset: int, max_n: int) -> tuple[str, int, list[Stored]]:
        """``getMessage``: (status, nextBeginOffset, messages) with the offset corrections of formats §4."""
        cq = self.cqs.get((topic, qid))
        if cq is None or cq.max_offset == 0:
            return ("OFFSET_MOVED" if offset != 0 else "NO_NEW_MSG"), 0, []
        lo, hi = cq.min_offset, cq.max_offset
        if offset < lo:
            return "OFFSET_MOVED", lo, []
        if offset == hi:
            return "NO_NEW_MSG", offset, []
        if offset > hi:
            return "OFFSET_MOVED", hi, []
        end = min(hi, offset + max_n)
        # a batch record's messages share its physical offset: the store answers whole records, from the one
        # holding ``offset`` (BatchConsumeQueue.iterateFrom) and the client unwraps every message of each, so a pull
        # from inside a batch gets its earlier messages again (PullAPIWrapper.processPullResult)
        while offset > lo and cq.phys[offset - 1] == cq.phys[offset]:
            offset -= 1
        while end < hi and cq.phys[end] == cq.phys[end - 1]:
            end += 1
        return "FOUND", end, [m for m in cq.msgs[offset:end]]  # type: ignore[misc]

    def search_offset(self, topic: str, qid: int, ts: int) -> int:
        """``getOffsetInQueueByTime``: the first offset whose store time >= ts (max when none)."""
        cq = self.cqs.get((topic, qid))
        if cq is None:
            return 0
        lo = cq.min_offset
        times = [m.store_ts for m in cq.msgs[lo:]]  # type: ignore[union-attr]
        return lo + bisect.bisect_left(times, ts)

    # ------------------------------------------------------------------ retry, schedule, DLQ

    def send_back(self, msg: Stored, group: str, max_reconsume: int = 16, delay_level: int = 0) -> Stored:
        """``consumerSendMsgBack`` (RPC path): DLQ when reconsumeTimes >= max, else schedule at 3 + times."""
        if msg.inner:
            # the broker looks the message up by its commitlog offset: the whole batch, stored again under the
            # batch's id with INNER_BATCH kept (AbstractSendMessageProcessor.consumerSendMsgBack); not simulated
            raise NotImplementedError("a failed inner message of a batch is sent back as the whole batch: the "
                                      "simulator's BatchCQ consumers do not fail")
        props = dict(msg.props)
        props.setdefault("RETRY_TOPIC", msg.topic)
        props["WAIT"] = "false"
        props.setdefault("ORIGIN_MESSAGE_ID", msg.offset_msg_id())
        times = msg.reconsume
        if times >= max_reconsume or delay_level < 0:
            topic = dlq_topic(group)
            self.create_topic(topic, 1, 6)
            props["DELAY"] = "0"
            return self.put(topic=topic, queue_id=0, props=props, body=msg.body, born_ts=msg.born_ts,
                            born_host=msg.born_host, reconsume=times + 1)
        level = min(3 + times if delay_level == 0 else delay_level, 18)
        props["DELAY"] = str(level)
        return self.schedule(props, msg, level, retry_topic(group), 0, times + 1)

    def schedule(self, props: dict[str, str], msg: Stored, level: int, real_topic: str, real_qid: int,
                 reconsume: int) -> Stored:
        """``HookUtils.transformDelayLevelMessage``: topic -> SCHEDULE_TOPIC_XXXX, queue level-1, REAL_*."""
        props["REAL_TOPIC"] = real_topic
        props["REAL_QID"] = str(real_qid)
        deliver_at = self.loop.now + DELAY_LEVELS_MS[level - 1]
        stored = self.put(topic=SCHEDULE_TOPIC, queue_id=level - 1, props=props, body=msg.body,
                          born_ts=msg.born_ts, born_host=msg.born_host, reconsume=reconsume, tags_code=deliver_at)
        self.loop.at(deliver_at, lambda: self.deliver_delayed(stored, level))
        return stored

    def deliver_delayed(self, sched: Stored, level: int) -> None:
        """``messageTimeUp``: real topic and queue restored, DELAY cleared, REAL_* kept, WAIT=false."""
        props = dict(sched.props)
        props.pop("DELAY", None)
        props["WAIT"] = "false"
        self.put(topic=props["REAL_TOPIC"], queue_id=int(props["REAL_QID"]), props=props, body=sched.body,
                 born_ts=sched.born_ts, born_host=sched.born_host, reconsume=sched.reconsume)
        self.delay_offsets[level] = sched.queue_offset + 1
        self.delay_updates += 1
        self.delay_history.append((self.loop.now, dict(self.delay_offsets), self.delay_updates // 200))

    # ------------------------------------------------------------------ retention

    def clean(self) -> None:
        """``CleanCommitLogService.deleteExpiredFiles`` at hour ``deleteWhen``, then the consume queues."""
        if to_datetime(self.loop.now).hour != self.cfg.delete_when_hour:
            return
        cl = self.commitlog
        active = cl.active_start()
        deleted = 0
        for start in sorted(cl.segments):
            if start == active or deleted >= self.cfg.delete_batch_max:
                break
            if self.loop.now < cl.last_write[start] + self.cfg.file_reserved_ms:
                break
            del cl.segments[start]
            deleted += 1
        if deleted:
            min_phys = cl.min_offset
            for cq in self.cqs.values():
                cq.clean(min_phys)

    # ------------------------------------------------------------------ config files at a time

    def consumer_offset_files(self, t: int) -> tuple[Optional[str], Optional[str]]:
        """consumerOffset.json and .bak as of ``t``: flushed every 5 s, first run 10 s after start."""
        first = self.start_ms + 10 * SECOND
        if t < first:
            return None, None
        last = first + (t - first) // (5 * SECOND) * (5 * SECOND)
        bak = self._offsets_json(last - 5 * SECOND) if last - 5 * SECOND >= first else None  # earlier one first
        cur = self._offsets_json(last)
        return cur, bak

    def _offsets_json(self, t: int) -> str:
        state = self.offsets.state_at(t)
        table = {}
        for key in java.iteration_order([f"{tp}@{g}" for tp, g in state], initial=512, concurrent=True):
            tp, g = key.split("@", 1)
            queues = state[(tp, g)]
            table[key] = {q: queues[q] for q in java.iteration_order(list(queues), initial=32, concurrent=True)}
        k = bisect.bisect_right(self.offsets.version_times, t)
        vts = self.offsets.version_times[k - 1] if k else self.start_ms
        return fastjson.dumps({"dataVersion": data_version(k, vts), "offsetTable": table})

    def delay_offset_files(self, t: int) -> tuple[Optional[str], Optional[str]]:
        """delayOffset.json and .bak: flushed every 10 s (``flushDelayOffsetInterval``), first after 10 s."""
        first = self.start_ms + 10 * SECOND
        if t < first:
            return None, None
        last = first + (t - first) // (10 * SECOND) * (10 * SECOND)

        def at(ts: int) -> str:
            i = bisect.bisect_right([h[0] for h in self.delay_history], ts)
            table, counter = (self.delay_history[i - 1][1], self.delay_history[i - 1][2]) if i else ({}, 0)
            table = {lv: table[lv] for lv in java.iteration_order(list(table), initial=32, concurrent=True)}
            return fastjson.dumps({"dataVersion": data_version(counter, self.start_ms), "offsetTable": table})

        return at(last), (at(last - 10 * SECOND) if last - 10 * SECOND >= first else None)
