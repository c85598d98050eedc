"""The vectorised happy path of ``mixed`` at large scales: healthy, untraced traffic written in blocks.

The event loop costs ~75 µs of CPU and ~3.5 KB of memory per message, so 10 million messages take hours. Bulk
topics carry no trace and live on their own brokers: each is consumed by one clustering group (a consumer that
joins 5 s after the start and never fails; one group in five shuts down gracefully after 30-80 min and stays away,
so its backlog grows and retention expires it), so their consumption has a closed form. A
record stored at tau is consumed by tau + CONSUME_MS; its ack offset reaches the broker at the client's next
``persistConsumerOffset`` (every 5 s from 10 s after start) and the broker's file at its next flush, the same
rules the event-loop consumers follow. Records are the bytes ``Broker.put`` would write (one template per topic
from ``encode_message``, variable fields patched with numpy) and go through the same commitlog roll-over and
consume queues; ``OffsetTable.lazy`` answers the group offsets at any time. Producers send every TICK_MS in a
burst (one store timestamp per block keeps the commitlog's store times monotone).
"""
from __future__ import annotations

import bisect
import random
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import numpy as np

from jobs.formats.commitlog_encode import encode_message, tags_hash
from jobs.formats.msgid import make_uniq_key
from jobs.simulate import java
from jobs.simulate.clock import SECOND, month_start_ms

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Broker
    from jobs.simulate.engine import World

TICK_MS = 10 * SECOND
CONSUME_MS = 50
PERSIST_MS = 5 * SECOND
QUEUES = 4
TAGS = "TagA"
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian bytes of each value, one row per value."""
    a = np.ascontiguousarray(values.astype(dtype))
    return a.view(np.uint8).reshape(len(values), a.itemsize)


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    return ((values[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)) % 10 + 48).astype(np.uint8)


def _hex(values: np.ndarray, width: int) -> np.ndarray:
    return _HEX[(values[:, None] >> (4 * np.arange(width - 1, -1, -1, dtype=np.int64))) & 15]


@dataclass
class BulkTopic:
    """One bulk topic, its producer JVM and its consumer group; per queue, the block times and cumulative counts."""

    index: int
    name: str
    group: str
    broker: "Broker"
    ip: str
    pid: int
    classloader_hash: int
    port: int
    template: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    keys_at: int = 0
    uniq_at: int = 0
    sent: int = 0  # messages sent so far (KEYS and body number them)
    stop_at: Optional[int] = None  # the consumer's graceful shutdown (persistConsumerOffset, then gone)
    times: list[list[int]] = field(default_factory=lambda: [[] for _ in range(QUEUES)])
    counts: list[list[int]] = field(default_factory=lambda: [[] for _ in range(QUEUES)])  # cumulative

    BODY_AT = 88  # 4+4+4+4+4+8+8+4 header, born ts 8, born host 8, store ts 8, store host 8, reconsume 4, prepared 8, body len 4

    def build_template(self) -> None:
        # the UNIQ_KEY's first 20 hex digits (ip, pid, classloader hash) are fixed per producer; the rest is patched
        props = java.ordered({"TAGS": TAGS, "KEYS": f"b{self.index:04d}-{0:010d}", "WAIT": "true",
                              "UNIQ_KEY": make_uniq_key(self.ip, self.pid, self.classloader_hash, 0, 0)})
        rec = encode_message(topic=self.name, queue_id=0, queue_offset=0, physical_offset=0,
                             body=b"payload-%010d" % 0, properties=props, born_ts_ms=0, store_ts_ms=0,
                             born_host=(self.ip, self.port), store_host=self.broker.addr)
        self.template = np.frombuffer(rec, dtype=np.uint8).copy()
        self.keys_at = rec.index(b"KEYS\x01") + 5 + len(f"b{self.index:04d}-")
        self.uniq_at = rec.index(b"UNIQ_KEY\x01") + 9
        assert rec[self.BODY_AT:self.BODY_AT + 8] == b"payload-"

    def encode(self, qid: int, first_offset: int, k: int, now: int) -> np.ndarray:
        """``k`` records for queue ``qid`` stored at ``now`` (physical offsets patched by the caller)."""
        rows = np.repeat(self.template[None, :], k, axis=0)
        seq = self.sent + np.arange(k, dtype=np.int64)
        self.sent += k
        born = now - 1 - seq % 3
        rows[:, 12:16] = _be(np.full(k, qid), ">i4")
        rows[:, 20:28] = _be(first_offset + np.arange(k, dtype=np.int64), ">i8")
        rows[:, 40:48] = _be(born, ">i8")
        rows[:, 56:64] = _be(np.full(k, now), ">i8")
        rows[:, self.BODY_AT + 8:self.BODY_AT + 18] = _digits(seq, 10)
        rows[:, self.keys_at:self.keys_at + 10] = _digits(seq, 10)
        # MessageClientIDSetter: ip, pid, classloader hash, then ms since month start (4 bytes) + counter (2)
        tail = (((born - month_start_ms(now)) & 0xFFFFFFFF) << 16) | ((seq + 1) & 0xFFFF)
        rows[:, self.uniq_at + 20:self.uniq_at + 32] = _hex(tail, 12)
        crc = np.fromiter((zlib.crc32(r) & 0x7FFFFFFF for r in rows[:, self.BODY_AT:self.BODY_AT + 18]),
                          dtype=np.int64, count=k)
        rows[:, 8:12] = _be(crc, ">i4")
        return rows


class BulkFleet:
    """Bulk topics spread over ``brokers``, ``messages`` in all (Poisson counts per queue and tick, seeded)."""

    def __init__(self, w: "World", brokers: list["Broker"], n_topics: int, messages: int, *, start: int, end: int,
                 group_start: int, seed: int) -> None:
        self.w = w
        self.rng = np.random.default_rng(seed)
        ids = random.Random(seed)
        self.first_persist = group_start + 10 * SECOND
        n_ticks = (end - start) // TICK_MS + 1
        self.lam = messages / (n_topics * QUEUES * n_ticks)
        self.tags_code = tags_hash(TAGS)
        self.by_broker: dict[str, list[BulkTopic]] = {b.name: [] for b in brokers}
        self.topics: dict[tuple[str, str], BulkTopic] = {}
        for i in range(n_topics):
            b = brokers[i % len(brokers)]
            t = BulkTopic(i, f"Bulk{i:04d}", f"GID_bulk_{i:04d}", b, f"10.2.{i // 250}.{i % 250 + 2}",
                          1000 + ids.randrange(30000), ids.randrange(1 << 31), 40000 + ids.randrange(20000))
            if i % 5 == 1:
                t.stop_at = group_start + 30 * 60 * SECOND + ids.randrange(50 * 60) * SECOND
            b.create_topic(t.name, QUEUES)
            t.build_template()
            self.by_broker[b.name].append(t)
            self.topics[(b.name, t.name)] = t
            w.group_info[t.group] = {"group": t.group, "topic": t.name, "broadcast": False, "trace": False}
        for b in brokers:
            b.offsets.lazy.append(lambda when, b=b: self.offsets_at(b, when))
            w.loop.every(start, TICK_MS, lambda b=b: self._tick(b), until_ms=end)
        w.at(group_start, self._groups_start)
        self.messages = 0  # records written so far

    def _groups_start(self) -> None:
        """The consumers' first heartbeat: subscription group and ``%RETRY%G`` on the topic's broker."""
        for t in self.topics.values():
            t.broker.ensure_group(t.group)
            t.broker.ensure_retry_topic(t.group)

    def _tick(self, b: "Broker") -> None:
        now = self.w.loop.now
        blocks = []
        for t in self.by_broker[b.name]:
            for q, k in enumerate(self.rng.poisson(self.lam, QUEUES)):
                if k:
                    cq = b.cq(t.name, q)
                    blocks.append((t, q, cq, int(k), t.encode(q, cq.max_offset, int(k), now)))
        if not blocks:
            return
        size = blocks[0][4].shape[1]
        assert all(blk[4].shape[1] == size for blk in blocks), "bulk records must share one size"
        rows = np.concatenate([blk[4] for blk in blocks])
        phys = b.commitlog.reserve_block(size, len(rows), now)
        rows[:, 28:36] = _be(phys, ">i8")
        b.commitlog.write_block(phys, rows.ravel(), np.full(len(rows), size, dtype=np.int64), now)
        i = 0
        for t, q, cq, k, _ in blocks:
            cq.phys.extend(phys[i:i + k].tolist())
            cq.size.extend([size] * k)
            cq.tags.extend([self.tags_code] * k)
            cq.msgs.extend([None] * k)
            i += k
            t.times[q].append(now)
            t.counts[q].append(cq.max_offset)
        self.messages += len(rows)

    def offsets_at(self, b: "Broker", when: int) -> dict[tuple[str, str, int], int]:
        """The bulk groups' offsets in ``b``'s table after every commit at or before ``when``."""
        if when < self.first_persist:
            return {}  # (a consumer stopping before its first persist is not generated: stops are after 30 min)
        persisted = self.first_persist + (when - self.first_persist) // PERSIST_MS * PERSIST_MS
        out = {}
        for t in self.by_broker[b.name]:
            last = persisted if t.stop_at is None or t.stop_at > persisted else t.stop_at
            for q in range(QUEUES):
                n = bisect.bisect_right(t.times[q], last - CONSUME_MS)
                if n:
                    out[(t.name, t.group, q)] = t.counts[q][n - 1]
        return out

    def stored_at(self, broker: str, topic: str, qid: int, offset: int) -> Optional[tuple[int, int]]:
        """(physical offset, store time) of a bulk record, or None when (broker, topic) is not bulk."""
        t = self.topics.get((broker, topic))
        if t is None or qid >= QUEUES:
            return None
        counts = t.counts[qid]
        i = bisect.bisect_right(counts, offset)
        if i >= len(counts):
            return None
        return t.broker.cqs[(topic, qid)].phys[offset], t.times[qid][i]
