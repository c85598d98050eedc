"""RocketMQ 5.x RocksDB consume queue (``storeType=defaultRocksDB``, rocketmq5.md §1.4; reconciliation.md §4.2): the
queue bounds (and entries) of a broker whose ``store/consumequeue/`` folder is a RocksDB database (``CURRENT``,
``MANIFEST-*``, ``OPTIONS-*``, ``*.sst``, ``*.log``, ``LOCK``) instead of ``<topic>/<qid>/<file>``.

Checked against apache/rocketmq master (8fc57f1, 2025-09), ``store/.../queue/`` and ``store/.../rocksdb/``:

- The DB directory is ``StorePathConfigHelper.getStorePathConsumeQueue`` = ``<storeRoot>/consumequeue``
  (``RocksDBConsumeQueueStore`` constructor); with ``rocksdbCQDoubleWriteEnable`` (``CombineConsumeQueueStore``) the
  file consume queue lives in the same folder and the broker *answers* from ``combineCQPreferCQType`` (default: the
  file queue). A later ``consumequeue_r/`` (upstream PR #10174) has the same layout: the caller passes either folder.
- Two column families (``ConsumeQueueRocksDBStorage.postLoad``): ``default`` (``RocksDB.DEFAULT_COLUMN_FAMILY``, the
  CQ units) and ``offset`` (``OFFSET_COLUMN_FAMILY``, the bounds). Bytewise comparator, no prefix extractor; merge
  operator ``StringAppendOperator`` (never used: puts only); the ``default`` CF runs a compaction filter
  (``ConsumeQueueCompactionFilterFactory`` / ``RemoveConsumeQueueCompactionFilter``) that drops units whose commitlog
  offset is below the commitlog's min, so old units vanish lazily, at compaction.
- Every integer is big-endian (``java.nio.ByteBuffer`` default); separators are ``AbstractRocksDBStorage.CTRL_1`` =
  0x01; the topic is UTF-8 preceded by its byte length as a 4-byte int.
- ``RocksDBConsumeQueueTable.buildCQKeyByteBuffer0``: ``[int topicLen][01][topic][01][int queueId][01][long cqOffset]``
  -> ``buildCQValueByteBuffer0``: 28 B ``[long commitLogOffset][int msgSize][long tagsCode][long storeTimestamp]``.
- ``RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0``: ``[int topicLen][01][topic][01]["max"|"min"][01]
  [int queueId]`` -> ``buildOffsetValueByteBuffer0``: 16 B ``[long phyOffset][long cqOffset]``.
- ``max`` is written on every dispatch (``RocksDBConsumeQueueStore.putMessagePosition0`` walks the batch backwards,
  ``updateTempTopicQueueMaxOffset`` keeps the first = highest entry per queue,
  ``RocksDBConsumeQueueOffsetTable.putMaxPhyAndCqOffset``): it is the **last** cqOffset written and that unit's
  commitlog offset. ``RocksDBConsumeQueueStore.getMaxOffsetInQueue`` = ``getMaxCqOffset + 1`` ("NEXT slot index"),
  0 when there is no ``max`` record.
- ``min`` is never written on dispatch: only by ``updateCqOffset(..., max=false)`` from ``correctMinCqOffset``, called
  lazily by ``getMinCqOffset`` (= ``RocksDBConsumeQueueStore.getMinOffsetInQueue``; ``RocksDBConsumeQueue
  .correctMinOffset`` is a no-op). ``getMinCqOffset(minPhy)`` with ``minPhy`` = ``DefaultMessageStore
  .getMinPhyOffset`` (the commitlog's min offset): ``isMinOffsetOk`` - a stored ``min`` whose phyOffset >= minPhy is
  the answer; otherwise (no record: cqOffset 0, or a stale one) ``correctMinCqOffset``: no ``max`` record -> 0;
  ``max.phyOffset < minPhy`` -> ``max.cqOffset + 1`` (all expired, Min = Max); else
  ``RocksDBConsumeQueueTable.binarySearchInCQ(low = old min, high = max.cqOffset, minPhy, min=true)`` over the
  ``default`` CF (a missing unit counts as below) -> the first unit with commitLogOffset >= minPhy; not found -> the
  old cqOffset (this call; the broker then stores ``max`` as the min for the next one).
- ``appendMaxPhyOffset``: key ``CHECKPOINT_TOPIC`` (``TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC``), ``max``, queue
  0 in the ``offset`` CF, 8-byte value = the max commitlog offset + size dispatched (``getMaxPhyOffset``); the
  broker's ``forEach`` skips it by its value length.
- Topic deletion (``destroyCQ``/``destroyOffset``) removes both records and the units: a deleted queue is absent.

Opened like the RocksDB config DBs (:mod:`jobs.formats.rocksdb_config`): from a temporary copy, read-only, never in
place (rocksdict writes ``rocksdict-config.json`` into the folder even read-only). A DB has no byte positions: a
:class:`Problem`'s position is the record's index in its column family's key order.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import tempfile
from typing import Any, Iterable, Iterator

from jobs.formats import names
from jobs.problems import Problem, excerpt

DEFAULT_CF = "default"  # RocksDB.DEFAULT_COLUMN_FAMILY: CQ units
OFFSET_CF = "offset"  # ConsumeQueueRocksDBStorage.OFFSET_COLUMN_FAMILY: max/min per queue
CTRL_1 = 0x01  # AbstractRocksDBStorage.CTRL_1
MAX_TAG, MIN_TAG = b"max", b"min"  # RocksDBConsumeQueueOffsetTable.MAX_BYTES / MIN_BYTES
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
CQ_UNIT_SIZE = 28  # RocksDBConsumeQueueTable.CQ_UNIT_SIZE
OFFSET_VALUE_LENGTH = 16  # RocksDBConsumeQueueOffsetTable.OFFSET_VALUE_LENGTH
OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES = 4 + 1 + 1 + 3 + 1 + 4
CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES = 4 + 1 + 1 + 4 + 1 + 8
_UNIT = struct.Struct(">qiqq")
_OFFSET_VALUE = struct.Struct(">qq")

Queue = tuple[str, int]
# One CQ unit: (cqOffset, commitLogOffset, size, tagsCode, storeTimestamp)
Unit = tuple[int, int, int, int, int]


def looks_like_rocksdb(names_: Iterable[str]) -> bool:
    """Whether a consumequeue folder (its files' names relative to it) is a RocksDB consume queue: ``CURRENT`` at its
    top level. A file consume queue holds only ``<topic>/<qid>/<file>`` (a topic named CURRENT is a folder)."""
    return any(n.removeprefix("./") == "CURRENT" for n in names_)


# --- keys and values -------------------------------------------------------------------------------------------

def offset_key(topic: str, queue_id: int, max_: bool) -> bytes:
    """``RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0``."""
    t = topic.encode("utf-8")
    return (struct.pack(">i", len(t)) + bytes([CTRL_1]) + t + bytes([CTRL_1]) + (MAX_TAG if max_ else MIN_TAG)
            + bytes([CTRL_1]) + struct.pack(">i", queue_id))


def cq_key(topic: str, queue_id: int, cq_offset: int) -> bytes:
    """``RocksDBConsumeQueueTable.buildCQKeyByteBuffer0``."""
    t = topic.encode("utf-8")
    return (struct.pack(">i", len(t)) + bytes([CTRL_1]) + t + bytes([CTRL_1]) + struct.pack(">i", queue_id)
            + bytes([CTRL_1]) + struct.pack(">q", cq_offset))


def _topic(key: bytes, fixed: int) -> tuple[str, int]:
    """The topic of a key whose other fields take ``fixed`` bytes, and where they start after it."""
    if len(key) <= fixed:
        raise ValueError(f"{len(key)} bytes, too short")
    (n,) = struct.unpack_from(">i", key, 0)
    if n <= 0 or len(key) != fixed + n:
        raise ValueError(f"topic length {n} does not fit a {len(key)}-byte key")
    if key[4] != CTRL_1 or key[5 + n] != CTRL_1:
        raise ValueError("no 0x01 separator around the topic")
    return key[5: 5 + n].decode("utf-8"), 6 + n


def parse_offset_key(key: bytes) -> tuple[str, bool, int]:
    """(topic, is max, queueId) of an ``offset`` CF key; ValueError if it is not one."""
    topic, at = _topic(key, OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES)
    tag = key[at: at + 3]
    if tag not in (MAX_TAG, MIN_TAG):
        raise ValueError(f"tag {excerpt(tag)} is neither 'max' nor 'min'")
    if key[at + 3] != CTRL_1:
        raise ValueError("no 0x01 separator before the queue id")
    (qid,) = struct.unpack_from(">i", key, at + 4)
    return topic, tag == MAX_TAG, qid


def parse_cq_key(key: bytes) -> tuple[str, int, int]:
    """(topic, queueId, cqOffset) of a ``default`` CF key; ValueError if it is not one."""
    topic, at = _topic(key, CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES)
    if key[at + 4] != CTRL_1:
        raise ValueError("no 0x01 separator before the cq offset")
    (qid,) = struct.unpack_from(">i", key, at)
    (cq,) = struct.unpack_from(">q", key, at + 5)
    return topic, qid, cq


# --- opening ---------------------------------------------------------------------------------------------------

def _open(files: dict[str, bytes]) -> tuple[Any, str]:
    """A read-only rocksdict DB with both column families, opened from a temporary copy of the DB's own files (the
    top-level names of ``files``: a double-write folder also holds ``<topic>/<qid>/<file>``, not copied). The caller
    closes it and removes the folder. Raises (rocksdict's errors, ValueError) when it is not a consume queue DB."""
    from rocksdict import AccessType, Options, Rdict

    tmp = tempfile.mkdtemp(prefix="rmq-recon-rocksdb-cq-")
    try:
        for name, data in files.items():
            name = name.removeprefix("./")
            if "/" in name or name in ("", ".", ".."):
                continue
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        cfs = Rdict.list_cf(tmp)
        if OFFSET_CF not in cfs:
            raise ValueError(f"no '{OFFSET_CF}' column family (column families: {sorted(cfs)[:8]})")
        column_families = {cf: Options(raw_mode=True) for cf in cfs if cf != DEFAULT_CF}
        db = Rdict(tmp, Options(raw_mode=True), column_families=column_families,
                   access_type=AccessType.read_only())
        return db, tmp
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _unopenable(where: str, exc: BaseException) -> Problem:
    why = re.sub(r"\S*rmq-recon-rocksdb-cq-[^/\s]*", "<copy>", str(exc))[:120]  # not our temp folder's name
    return Problem(where, 0, f"RocksDB consume queue cannot be opened ({type(exc).__name__}: {why}): its queue "
                             "bounds are unknown in this snapshot")


def _queue_shown(topic: str, qid: int) -> str:
    return f"'{names.shown(topic)}' queue {qid}"


# --- bounds ----------------------------------------------------------------------------------------------------

def _unit_phy(db: Any, topic: str, qid: int, cq: int) -> int | None:
    """The commitLogOffset of unit ``cq`` (``getCQInKV(...).getLong(PHY_OFFSET_OFFSET)``), None if absent."""
    value = db.get(cq_key(topic, qid, cq))
    if value is None:
        return None
    if len(value) < 8:
        raise ValueError(f"unit {cq} is {len(value)} bytes, not {CQ_UNIT_SIZE}")
    return struct.unpack_from(">q", value, 0)[0]


def _binary_search_min(db: Any, topic: str, qid: int, high: int, low: int, target_phy: int) -> int:
    """``RocksDBConsumeQueueTable.binarySearchInCQ(topic, queueId, high, low, targetPhyOffset, min=true)``: the
    cqOffset of the first unit whose commitLogOffset >= target (a missing unit counts as below), -1 if none."""
    result = -1
    while high >= low:
        mid = low + ((high - low) >> 1)
        phy = _unit_phy(db, topic, qid, mid)
        if phy is None:
            low = mid + 1
            continue
        if phy == target_phy:
            result = mid
            break
        if phy > target_phy:
            high = mid - 1
            result = mid
        else:
            low = mid + 1
    return result


def _min_cq(db: Any, topic: str, qid: int, min_rec: tuple[int, int] | None, max_rec: tuple[int, int] | None,
            min_phy: int) -> int:
    """``RocksDBConsumeQueueOffsetTable.getMinCqOffset`` (``isMinOffsetOk`` then ``correctMinCqOffset``), the first
    call after a restart (the heap holds what the ``offset`` CF holds)."""
    if min_rec is not None and min_rec[0] >= min_phy:
        return min_rec[1]
    cq = min_rec[1] if min_rec is not None else 0
    if max_rec is None:
        return 0  # updateCqOffset(topic, queueId, minPhyOffset, 0L, false)
    max_phy, max_cq = max_rec
    if max_phy < min_phy:
        return max_cq + 1  # every unit expired
    found = _binary_search_min(db, topic, qid, max_cq, cq, min_phy)
    return found if found != -1 else cq


def read_bounds(files: dict[str, bytes], where: str, min_phy_offset: int | None = None
                ) -> tuple[dict[Queue, tuple[int, int]], list[Problem]]:
    """(topic, queueId) -> (Min, Max) of every queue of the ``offset`` column family, as the broker's
    ``getMinOffsetInQueue`` / ``getMaxOffsetInQueue`` would answer (module docstring): Max = stored ``max`` cqOffset
    + 1 (0 without one); Min = the stored ``min`` when its commitlog offset >= ``min_phy_offset``, else corrected the
    broker's way from the ``default`` CF units (binary search for the first unit at or above ``min_phy_offset``).

    ``files``: the consumequeue folder's files (name -> bytes; only top-level names are the DB's). ``min_phy_offset``:
    the commitlog's min offset (``DefaultMessageStore.getMinPhyOffset``: the first retained commitlog file's start) if
    the caller knows it; None is taken as 0: a stored ``min`` is the answer and a queue without one gets its first
    unit present (the compaction filter drops expired units only at compaction, so that Min may be low).

    ``CHECKPOINT_TOPIC`` is skipped. A damaged record (key not of the layout, value not 16 bytes, a negative offset,
    a name RocketMQ does not allow, Min > Max) is a Problem at its index and its queue is left out (unknown: the broker
    itself would fail on it); the rest is read. A DB that cannot be opened gives ``({}, [Problem])``.
    """
    try:
        db, tmp = _open(files)
    except Exception as exc:  # noqa: BLE001 - rocksdict raises its own errors for a DB it cannot open
        return {}, [_unopenable(where, exc)]
    problems: list[Problem] = []
    maxes: dict[Queue, tuple[int, int]] = {}
    mins: dict[Queue, tuple[int, int]] = {}
    bad: set[Queue] = set()
    index: dict[Queue, int] = {}  # a queue's first record, for the position of a problem found later
    try:
        offsets = db.get_column_family(OFFSET_CF)
        for i, (key, value) in enumerate(offsets.items()):
            try:
                topic, is_max, qid = parse_offset_key(key)
            except (ValueError, UnicodeDecodeError, struct.error, IndexError) as exc:
                problems.append(Problem(where, i, f"offset record {i} (key {excerpt(key)}) is not a consume queue "
                                                  f"offset key ({exc}): skipped"))
                continue
            if topic == CHECKPOINT_TOPIC:
                continue  # the max dispatched commitlog offset (8 bytes), not a queue
            tag = "max" if is_max else "min"
            why = names.topic_problem(topic)
            if why:
                problems.append(Problem(where, i, f"offset record {i} ({tag}): topic '{names.shown(topic)}' {why}: "
                                                  "skipped"))
                continue
            q = (topic, qid)
            index.setdefault(q, i)
            if len(value) != OFFSET_VALUE_LENGTH:
                bad.add(q)
                problems.append(Problem(where, i, f"offset record {i} ({tag} of {_queue_shown(topic, qid)}) is "
                                                  f"{len(value)} bytes, not {OFFSET_VALUE_LENGTH}: the queue's "
                                                  "bounds are unknown"))
                continue
            phy, cq = _OFFSET_VALUE.unpack(value)
            if phy < 0 or cq < 0 or qid < 0:
                bad.add(q)
                problems.append(Problem(where, i, f"offset record {i} ({tag} of {_queue_shown(topic, qid)}) holds "
                                                  f"a negative offset (commitlog {phy}, queue {cq}): the queue's "
                                                  "bounds are unknown"))
                continue
            (maxes if is_max else mins)[q] = (phy, cq)
        out: dict[Queue, tuple[int, int]] = {}
        min_phy = min_phy_offset if min_phy_offset is not None else 0
        for q in sorted((maxes.keys() | mins.keys()) - bad):
            topic, qid = q
            max_rec = maxes.get(q)
            hi = max_rec[1] + 1 if max_rec is not None else 0
            try:
                lo = _min_cq(db, topic, qid, mins.get(q), max_rec, min_phy)
            except (ValueError, struct.error) as exc:
                problems.append(Problem(where, index[q], f"{_queue_shown(topic, qid)}: the min cannot be corrected "
                                                         f"from its units ({exc}): the queue's bounds are unknown"))
                continue
            if lo > hi:
                problems.append(Problem(where, index[q], f"{_queue_shown(topic, qid)}: min {lo} is above max {hi}: "
                                                         "the queue's bounds are unknown"))
                continue
            out[q] = (lo, hi)
        return out, problems
    except Exception as exc:  # noqa: BLE001 - a read error mid-way (corrupt SST) leaves the bounds unknown
        return {}, problems + [_unopenable(where, exc)]
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


# --- entries ---------------------------------------------------------------------------------------------------

def _scan(db: Any, prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    it = db.iter()
    if prefix is None:
        it.seek_to_first()
    else:
        it.seek(prefix)
    while it.valid():
        key = it.key()
        if prefix is not None and not key.startswith(prefix):
            return
        yield key, it.value()
        it.next()


def read_units(files: dict[str, bytes], where: str, queues: Iterable[Queue] | None = None
               ) -> tuple[dict[Queue, list[Unit]], list[Problem]]:
    """The CQ units of the ``default`` column family: (topic, queueId) -> [(cqOffset, commitLogOffset, size,
    tagsCode, storeTimestamp), ...] in cqOffset order, for ``queues`` (a prefix seek each) or every queue. A unit
    that is not the 28-byte layout is a Problem at its index (in the scan) and skipped. Units below the commitlog
    min may still be present (dropped only at compaction): cut them with :func:`read_bounds`' Min."""
    try:
        db, tmp = _open(files)
    except Exception as exc:  # noqa: BLE001
        return {}, [_unopenable(where, exc)]
    out: dict[Queue, list[Unit]] = {}
    problems: list[Problem] = []
    try:
        prefixes: list[bytes | None]
        if queues is None:
            prefixes = [None]
        else:
            prefixes = [cq_key(t, q, 0)[:-8] for t, q in sorted(set(queues))]
        i = 0
        for prefix in prefixes:
            for key, value in _scan(db, prefix):
                try:
                    topic, qid, cq = parse_cq_key(key)
                    if len(value) != CQ_UNIT_SIZE:
                        raise ValueError(f"value is {len(value)} bytes, not {CQ_UNIT_SIZE}")
                    phy, size, tags, ts = _UNIT.unpack(value)
                    out.setdefault((topic, qid), []).append((cq, phy, size, tags, ts))
                except (ValueError, UnicodeDecodeError, struct.error, IndexError) as exc:
                    problems.append(Problem(where, i, f"unit record {i} (key {excerpt(key)}) cannot be read "
                                                      f"({exc}): skipped"))
                i += 1
        return out, problems
    except Exception as exc:  # noqa: BLE001
        return {}, problems + [_unopenable(where, exc)]
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


# --- writing (tests, simulator) --------------------------------------------------------------------------------

def write_db(path: str, units: dict[Queue, list[Unit]], bounds: dict[Queue, tuple],
             max_phy_offset: int | None = None) -> None:
    """Write a RocksDB consume queue folder at ``path`` as the broker leaves it (module docstring), then delete
    rocksdict's own ``rocksdict-config.json``.

    ``units``: (topic, queueId) -> [(cqOffset, commitLogOffset, size, tagsCode, storeTimestamp), ...], the ``default``
    CF (units a compaction has dropped are simply not given).
    ``bounds``: (topic, queueId) -> ``(Min, Max)`` or ``(Min, Max, minPhy, maxPhy)``, the answers the broker gives:
    Max > 0 writes ``max`` = (phy of unit Max-1, Max-1); Max = 0 writes none (never dispatched). Min not None writes
    ``min`` = (phy of unit Min, Min) (a broker that has answered getMinOffsetInQueue); None writes none. ``minPhy`` /
    ``maxPhy`` give the record's commitlog offset when that unit is not in ``units`` (compacted away; after a full
    expiry the broker stores Min = Max with the commitlog min), else ValueError.
    ``max_phy_offset``: the ``CHECKPOINT_TOPIC`` value; default max(commitLogOffset + size) of the units (none
    written when there are no units and it is not given).
    """
    from rocksdict import DBCompressionType, Options, Rdict

    os.makedirs(path, exist_ok=True)
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_compression_type(DBCompressionType.lz4())  # rocksdbCompressionType default
    opts.set_bottommost_compression_type(DBCompressionType.zstd())  # bottomMostCompressionTypeForConsumeQueueStore
    db = Rdict(path, opts)
    try:
        offset_opts = Options(raw_mode=True)
        offset_opts.set_compression_type(DBCompressionType.none())  # createOffsetCFOptions
        offsets = db.create_column_family(OFFSET_CF, offset_opts)
        phys: dict[Queue, dict[int, int]] = {}
        for (topic, qid), queue_units in units.items():
            for cq, phy, size, tags, ts in queue_units:
                db[cq_key(topic, qid, cq)] = _UNIT.pack(phy, size, tags, ts)
                phys.setdefault((topic, qid), {})[cq] = phy
        for (topic, qid), b in bounds.items():
            lo, hi = b[0], b[1]
            min_phy, max_phy = (b[2], b[3]) if len(b) == 4 else (None, None)
            known = phys.get((topic, qid), {})
            if hi > 0:
                phy = max_phy if max_phy is not None else known.get(hi - 1)
                if phy is None:
                    raise ValueError(f"{topic}:{qid}: no unit {hi - 1} for the max record: give maxPhy")
                offsets[offset_key(topic, qid, True)] = _OFFSET_VALUE.pack(phy, hi - 1)
            if lo is not None:
                phy = min_phy if min_phy is not None else known.get(lo)
                if phy is None:
                    raise ValueError(f"{topic}:{qid}: no unit {lo} for the min record: give minPhy")
                offsets[offset_key(topic, qid, False)] = _OFFSET_VALUE.pack(phy, lo)
        if max_phy_offset is None and units:
            max_phy_offset = max((u[1] + u[2] for us in units.values() for u in us), default=None)
        if max_phy_offset is not None:
            offsets[offset_key(CHECKPOINT_TOPIC, 0, True)] = struct.pack(">q", max_phy_offset)
    finally:
        db.close()
    try:
        os.unlink(os.path.join(path, "rocksdict-config.json"))  # rocksdict's own, not the broker's
    except FileNotFoundError:
        pass
