"""How a simulated broker stores its queues and metadata (spec §4.2, rocketmq5.md §1, §5): the 5.x store types a
snapshot's files show, written with the broker's own layouts.

* ``rocksdb`` ``"v1"`` (``storeType=defaultRocksDB``: ``config/consumerOffsets/``, ``topics/``,
  ``subscriptionGroups/``) or ``"v2"`` (``configManagerVersion=v2``: ``config/rdb/``): the broker writes its offsets,
  topics and groups there from ``since`` on, and its JSON files stay as they were then (stale);
* ``tiered``: ``config/tieredStoreMetadata.json`` with each queue's tier ``minOffset`` (the tier keeps every message
  from ``tier_min``): Min = min(local Min, tier);
* ``batch_topics``: ``queue.type=BatchCQ``: ``store/batchconsumequeue/<topic>/<qid>/`` instead of ``consumequeue``
  (one unit per record: a message sent alone, or an ``INNER_BATCH`` record's messages: :func:`batch_queue_files`);
* ``compaction_topics``: ``cleanup.policy=COMPACTION`` in the topic's attributes;
* ``rocksdb_cq``: ``storeType=defaultRocksDB``: ``store/consumequeue/`` is a RocksDB database (jobs.formats.rocksdb_cq)
  holding the retained units and each queue's ``max`` record; the ``min`` record the broker writes only when asked,
  so the reader corrects Min from the units as the broker does.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jobs.formats import batch_consumequeue as bcq
from jobs.formats import fastjson

# the coverage rows' details (jobs.rules.coverage words them the same way: the truth compares reasons, not words)
FEATURE_DETAIL = {"COMPACTION_TOPIC": "cleanup.policy=COMPACTION", "BATCH_CQ": "queue.type=BatchCQ",
                  "TIERED": "config/tieredStoreMetadata.json", "STALE_JSON_IGNORED": "JSON beside RocksDB"}


@dataclass
class StoreKind:
    """One broker's store types."""

    rocksdb: str | None = None  # "v1" or "v2"
    since: int = 0  # virtual ms from which the RocksDB config is written (the JSON files freeze then)
    tiered: bool = False
    tier_min: int = 0
    batch_topics: set[str] = field(default_factory=set)
    compaction_topics: set[str] = field(default_factory=set)
    rocksdb_cq: bool = False  # storeType=defaultRocksDB: store/consumequeue/ is a RocksDB database

    def features(self, broker: str) -> dict[tuple[str, str, str], str]:
        """(broker, topic, reason) -> detail of the coverage rows this broker gives (spec §4.2)."""
        out = {(broker, t, "COMPACTION_TOPIC"): FEATURE_DETAIL["COMPACTION_TOPIC"] for t in self.compaction_topics}
        out.update({(broker, t, "BATCH_CQ"): FEATURE_DETAIL["BATCH_CQ"] for t in self.batch_topics})
        if self.tiered:
            out[(broker, "", "TIERED")] = FEATURE_DETAIL["TIERED"]
        if self.rocksdb:
            out[(broker, "", "STALE_JSON_IGNORED")] = FEATURE_DETAIL["STALE_JSON_IGNORED"]
        return out

    def attributes(self, topic: str) -> dict[str, str]:
        """The topic's ``TopicConfig.attributes`` (keys as the broker stores them, without the request's ``+``)."""
        out = {}
        if topic in self.batch_topics:
            out["queue.type"] = "BatchCQ"
        if topic in self.compaction_topics:
            out["cleanup.policy"] = "COMPACTION"
        return out


def batch_queue_files(cq: Any, min_phys: int) -> list[tuple[int, bytes]]:
    """A queue's batch consume queue files: (start byte, bytes) of each retained file of ``cq.per_file`` units.

    One unit per record: a record sent alone is one message (msgBaseOffset = its offset, batchSize 1, as
    ``DispatchRequest`` defaults it), an ``INNER_BATCH`` record (Broker.put_batch: its messages share its physical
    offset) all of them (msgBaseOffset = INNER_BASE, batchSize = INNER_NUM). A file whose last unit is below the
    oldest segment's start ``min_phys`` is deleted, the newest never (``BatchConsumeQueue.deleteExpiredFile``)."""
    n = len(cq.phys)
    if not n:
        return []
    phys = np.asarray(cq.phys, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], phys[1:] != phys[:-1])))
    counts = np.diff(np.append(starts, n))
    per_file = cq.per_file
    files = []
    last = (len(starts) - 1) // per_file
    for f in range(last + 1):
        units = starts[f * per_file:(f + 1) * per_file]
        if f < last and phys[units[-1]] < min_phys:
            continue
        data = b"".join(bcq.encode_unit(int(phys[i]), int(cq.size[i]), int(cq.tags[i]),
                                        cq.msgs[i].store_ts if cq.msgs[i] is not None else 0, int(i), int(c))
                        for i, c in zip(units, counts[f * per_file:(f + 1) * per_file]))
        files.append((f * per_file * bcq.BCQ_UNIT_SIZE, data.ljust(per_file * bcq.BCQ_UNIT_SIZE, b"\0")))
    return files


def tier_metadata(broker: str, bounds: dict[tuple[str, int], tuple[int, int]], tier_min: int, now: int) -> bytes:
    """``tieredStoreMetadata.json``: ``queueMetadataTable{topic:{qid:{queue,minOffset,maxOffset,updateTimestamp}}}``."""
    table: dict[str, dict[int, Any]] = {}
    for (topic, qid), (_lo, hi) in sorted(bounds.items()):
        table.setdefault(topic, {})[qid] = {"queue": {"brokerName": broker, "queueId": qid, "topic": topic},
                                            "minOffset": min(tier_min, hi), "maxOffset": hi, "updateTimestamp": now}
    return fastjson.dumps({"queueMetadataTable": table}).encode("utf-8")


def _db(path: str, records: dict[bytes, bytes]) -> None:
    from rocksdict import Options, Rdict

    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    db = Rdict(path, Options(raw_mode=True))
    for k, v in records.items():
        db[k] = v
    db.close()
    try:
        os.unlink(os.path.join(path, "rocksdict-config.json"))  # rocksdict's own, not the broker's
    except FileNotFoundError:
        pass


def _v2_key(table: int, *parts: tuple[str, ...] | str) -> bytes:
    out = b"\x01" + struct.pack(">h", table)
    for i, p in enumerate(parts):
        b = str(p).encode()
        out += (b"\x02" if i == 0 else b"\x01") + struct.pack(">h", len(b)) + b
    return out


def write_rocksdb(config_dir: str, kind: str, offsets: dict[str, dict[int, int]], topics: dict[str, Any],
                  groups: dict[str, Any], now: int) -> None:
    """The broker's RocksDB config at a snapshot (rocketmq5.md §1.2 v1, §1.3 v2), exact key and value layouts."""
    if kind == "v1":
        _db(os.path.join(config_dir, "consumerOffsets"), {
            k.encode(): json.dumps({"offsetTable": {str(q): o for q, o in v.items()}}).encode()
            for k, v in offsets.items()})
        _db(os.path.join(config_dir, "topics"), {n.encode(): json.dumps(c).encode() for n, c in topics.items()})
        _db(os.path.join(config_dir, "subscriptionGroups"),
            {n.encode(): json.dumps(c).encode() for n, c in groups.items()})
        return
    records: dict[bytes, bytes] = {}
    for key, queues in offsets.items():
        topic, group = key.split("@", 1)
        for qid, off in queues.items():
            records[_v2_key(1, group, topic) + b"\x01" + struct.pack(">i", qid)] = struct.pack(">q", off)
    records.update({_v2_key(3, n): b"\x01" + json.dumps(c).encode() for n, c in topics.items()})
    records.update({_v2_key(4, n): b"\x01" + json.dumps(c).encode() for n, c in groups.items()})
    records[b"\x01\x00\x01\x01data_version"] = struct.pack(">qqq", 1, now, 7)
    _db(os.path.join(config_dir, "rdb"), records)


def write_rocksdb_cq(path: str, queues: list[Any]) -> None:
    """The broker's RocksDB consume queue at a snapshot: the retained units of ``queues`` (simulated ConsumeQueues)
    and their ``max`` records (jobs.formats.rocksdb_cq.write_db)."""
    from jobs.formats import rocksdb_cq

    if os.path.exists(path):
        shutil.rmtree(path)
    units: dict[tuple[str, int], list[tuple[int, int, int, int, int]]] = {}
    bounds: dict[tuple[str, int], tuple[Any, ...]] = {}
    for cq in queues:
        first = cq.first_file * cq.per_file
        units[(cq.topic, cq.queue_id)] = [(i, int(cq.phys[i]), int(cq.size[i]), int(cq.tags[i]), 0)
                                          for i in range(first, cq.max_offset)]
        bounds[(cq.topic, cq.queue_id)] = (None, cq.max_offset)
    rocksdb_cq.write_db(path, units, bounds)
    try:
        os.unlink(os.path.join(path, "rocksdict-config.json"))
    except FileNotFoundError:
        pass
