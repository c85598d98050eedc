"""Snapshots in the landing layout of spec §3: a copy of each broker's store and the clients' offset files.

A snapshot at virtual time t holds, per broker, the config files exactly as the broker had them at t (the
last flush or write, and its ``.bak``), every commitlog segment still retained (full size, the active one
zero-filled past its write position) and every retained consume queue file; and, per broadcast client, its
``offsets.json`` + ``.bak``. Immutable files identical to one already written are hard-linked, not copied.
What each snapshot contains (C_s, Min_s, Max_s, retained commitlog range) is also returned for the truth.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Optional

from jobs.formats import fastjson
from jobs.simulate import stores
from jobs.simulate.clock import snapshot_name

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Broker
    from jobs.simulate.consumer import PushConsumer


@dataclass
class BrokerSnap:
    """What one broker snapshot holds, for the truth."""

    cluster: str
    broker: str
    ts: int
    offsets: dict[tuple[str, str, int], int]  # (topic, group, qid) -> C_s
    bounds: dict[tuple[str, int], tuple[int, int]]  # (topic, qid) -> (Min_s, Max_s)
    commitlog: tuple[int, int]  # retained physical range [min, next)
    retry_max: dict[str, int] = field(default_factory=dict)
    orderly_flag: dict[str, bool] = field(default_factory=dict)  # group -> consumeMessageOrderly


@dataclass
class ClientSnap:
    cluster: str
    client_id: str
    group: str
    ts: int
    offsets: dict[tuple[str, str, int], int]  # (broker, topic, qid) -> C_s


BLOCK = 4096


def _write_mapped(f: BinaryIO, data: bytes) -> None:
    """``data`` as a broker's mapped file holds it on its host: written up to the end of the last 4 KiB block with a
    non-zero byte, extended to its full size without writing the zeros after. ``MappedFile`` maps the file at its
    full size and the JDK extends it for the mapping (``ftruncate``, or ``fallocate`` since 8u162), so the blocks
    the broker has not written yet are holes to ``SEEK_HOLE`` (the exporter reads a queue file to its data, not its
    end: jobs.export.queues.data_extent_end). Same bytes as writing them all; a sync job's copy (S3, ``cp``) is
    whole either way."""
    end = min(len(data), -(-len(data.rstrip(b"\0")) // BLOCK) * BLOCK)
    f.write(memoryview(data)[:end])
    f.truncate(len(data))


class SnapshotWriter:
    """Writes snapshot folders under ``out`` and remembers their contents."""

    def __init__(self, out: str, *, link: bool = True) -> None:
        self.out = out
        self.link = link
        self._written: dict[tuple[Any, ...], str] = {}
        self.broker_snaps: list[BrokerSnap] = []
        self.client_snaps: list[ClientSnap] = []
        self.bytes_written = 0
        self.files_written = 0

    def _put(self, path: str, data: bytes | Callable[[], bytes], cache_key: Optional[tuple[Any, ...]] = None,
             size: Optional[int] = None, mapped: bool = False) -> None:
        """Write ``data`` (or what the callable returns; built only when the file is not linked) to ``path``.
        ``mapped``: a file the broker maps at its full size (commitlog segments, consume queue files), written as the
        broker host holds it: its blocks up to the last one with data, the rest unwritten (:func:`_write_mapped`)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.files_written += 1
        if cache_key is not None and self.link and cache_key in self._written:
            try:
                os.link(self._written[cache_key], path)
                self.bytes_written += size if size is not None else os.path.getsize(path)
                return
            except OSError:
                pass
        if callable(data):
            data = data()
        self.bytes_written += len(data)
        with open(path, "wb") as f:
            if mapped:
                _write_mapped(f, data)
            else:
                f.write(data)
        if cache_key is not None:
            self._written[cache_key] = path

    def _config(self, folder: str, name: str, cur: Optional[str], bak: Optional[str]) -> None:
        if cur is not None:
            self._put(os.path.join(folder, name), cur.encode("utf-8"))
        if bak is not None:
            self._put(os.path.join(folder, name + ".bak"), bak.encode("utf-8"))

    def broker(self, b: "Broker", t: int) -> BrokerSnap:
        root = os.path.join(self.out, f"cluster={b.cluster}", f"broker={b.name}", f"snapshot_ts={snapshot_name(t)}",
                            "store")
        cfg = os.path.join(root, "config")
        store = b.store
        off_cur, off_bak = b.consumer_offset_files(t)
        rocksdb = store.rocksdb is not None and t >= store.since
        # with RocksDB config the broker stops writing these JSON files: they stay as they were at the switch
        json_at = store.since if rocksdb else t
        self._config(cfg, "consumerOffset.json", *(b.consumer_offset_files(json_at) if rocksdb else (off_cur, off_bak)))
        self._config(cfg, "subscriptionGroup.json", *b.groups_file.at(json_at))
        self._config(cfg, "topics.json", *b.topics_file.at(json_at))
        self._config(cfg, "delayOffset.json", *b.delay_offset_files(t))
        if rocksdb:
            table = fastjson.loads(off_cur)["offsetTable"] if off_cur is not None else {}
            stores.write_rocksdb(cfg, str(store.rocksdb), {k: dict(v) for k, v in table.items()}, dict(b.topics),
                                 dict(b.groups), t)
            self.files_written += 1
        cl = b.commitlog
        active = cl.active_start()
        for start in sorted(cl.segments):
            key = None if start == active else ("cl", b.cluster, b.name, start, cl.last_write.get(start))
            self._put(os.path.join(root, "commitlog", f"{start:020d}"), lambda seg=cl.segments[start]: bytes(seg), key,
                      size=cl.segment_size, mapped=True)
        bounds = {}
        in_rocksdb = []
        for (topic, qid), cq in sorted(b.cqs.items()):
            files = cq.file_numbers()
            bounds[(topic, qid)] = (cq.min_offset, cq.max_offset)
            if store.rocksdb_cq and topic not in store.batch_topics:
                in_rocksdb.append(cq)
                continue
            if topic in store.batch_topics:  # queue.type=BatchCQ: the batch consume queue instead
                for start, data in stores.batch_queue_files(cq, cl.min_offset):
                    self._put(os.path.join(root, "batchconsumequeue", topic, str(qid), f"{start:020d}"), data)
                continue
            for f in files:
                key = ("cq", b.cluster, b.name, topic, qid, f) if f < files[-1] else None
                self._put(os.path.join(root, "consumequeue", topic, str(qid), f"{f * cq.file_bytes:020d}"),
                          lambda cq=cq, f=f: cq.file(f), key, size=cq.file_bytes, mapped=True)
        if in_rocksdb:  # storeType=defaultRocksDB: the consume queue is a RocksDB database
            stores.write_rocksdb_cq(os.path.join(root, "consumequeue"), in_rocksdb)
            self.files_written += 1
        if store.tiered:  # the tier serves every offset from tier_min: Min = min(local, tier)
            self._put(os.path.join(cfg, "tieredStoreMetadata.json"),
                      stores.tier_metadata(b.name, bounds, store.tier_min, t))
            bounds = {k: (min(lo, min(store.tier_min, hi)), hi) for k, (lo, hi) in bounds.items()}
        offsets = {}
        if off_cur is not None:
            doc = fastjson.loads(off_cur)
            for k, queues in doc["offsetTable"].items():
                topic, group = k.split("@", 1)
                for qid, off in queues.items():
                    offsets[(topic, group, qid)] = off
        snap = BrokerSnap(b.cluster, b.name, t, offsets, bounds, (cl.min_offset, cl.next_offset),
                          {g: c["retryMaxTimes"] for g, c in b.groups.items()},
                          {g: bool(c["consumeMessageOrderly"]) for g, c in b.groups.items()})
        self.broker_snaps.append(snap)
        return snap

    def client(self, cluster: str, c: "PushConsumer", t: int) -> Optional[ClientSnap]:
        """A broadcast client's offsets.json (+ .bak) as last persisted before t."""
        writes = [w for w in c.offsets_file_writes if w[0] <= t]
        if not writes:
            return None
        folder = os.path.join(self.out, f"cluster={cluster}", "clients", f"snapshot_ts={snapshot_name(t)}",
                              c.client_id, c.group)
        self._config(folder, "offsets.json", writes[-1][1], writes[-2][1] if len(writes) >= 2 else None)
        doc = fastjson.loads(writes[-1][1])
        offsets = {}
        for key, off in doc["offsetTable"].items():
            mq = key.as_dict()
            offsets[(mq["brokerName"], mq["topic"], mq["queueId"])] = off
        snap = ClientSnap(cluster, c.client_id, c.group, t, offsets)
        self.client_snaps.append(snap)
        return snap
