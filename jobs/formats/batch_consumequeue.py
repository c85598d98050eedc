"""RocketMQ 5 batch consume queue files (``queue.type=BatchCQ``, ``store/batchconsumequeue/<topic>/<qid>/``), and the
``INNER_BATCH`` commitlog bodies whose offsets they index (rocketmq5.md §5, reconciliation §4.2 ``BATCH_CQ``).

A 46-byte unit (``BatchConsumeQueue.CQ_STORE_UNIT_SIZE``) indexes one commitlog record that holds the queue offsets
``msgBaseOffset .. msgBaseOffset + batchSize - 1``: an ``INNER_BATCH`` record (``INNER_BASE`` / ``INNER_NUM``
properties, ``CommitLog.setBatchSizeIfNeeded``) or a plain message (``DispatchRequest`` defaults: msgBaseOffset =
its queue offset, batchSize = 1). Files are named by their start byte like consume queue files, but the name says
nothing about queue offsets: those come from the units' msgBaseOffset.

The bounds follow the broker (``BatchConsumeQueue.recover``, ``reviseMaxOffsetInQueue``, ``correctMinOffset``,
``MappedFileQueue.deleteExpiredFileByOffset``): see :func:`queue_bounds`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from jobs.problems import Problem

BCQ_UNIT_SIZE = 46
DEFAULT_FILE_SIZE = 300_000 * BCQ_UNIT_SIZE  # MessageStoreConfig.mapperFileSizeBatchConsumeQueue
INVALID_POS = -1  # BatchConsumeQueue.INVALID_POS: the compactedOffset every normal write stores
_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("store_ts", ">i8"), ("base", ">i8"),
                  ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])
_UNIT_STRUCT = struct.Struct(">qiqqqhii")
assert _UNIT.itemsize == _UNIT_STRUCT.size == BCQ_UNIT_SIZE

# MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR (the same as jobs.formats.commitlog's)
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_INNER_HEAD = struct.Struct(">iiiii")  # total, magic, bodyCRC, flag, bodyLen


@dataclass
class BCQDecode:
    """The valid units of one batch consume queue file, one array element per unit (not per queue offset: see
    :func:`offsets_of`)."""

    commit_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    store_ts: np.ndarray
    msg_base_offset: np.ndarray
    batch_size: np.ndarray
    file_start_byte: int
    capacity: int  # units the file's bytes hold
    problems: list[Problem] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.commit_offset)

    @property
    def full(self) -> bool:
        """Every unit valid: the queue goes on in the next file (``BatchConsumeQueue.recover``)."""
        return self.capacity > 0 and self.count == self.capacity

    @property
    def end_offset(self) -> int | None:
        """The queue offset after the file's last unit (None: no unit)."""
        return int(self.msg_base_offset[-1]) + int(self.batch_size[-1]) if self.count else None


def encode_unit(physical_offset: int, size: int, tags_code: int, store_ts_ms: int, msg_base_offset: int,
                batch_size: int) -> bytes:
    """One unit as ``BatchConsumeQueue.putBatchMessagePositionInfo`` writes it: compactedOffset = ``INVALID_POS``
    (-1; only the compaction store's ``SparseConsumeQueue`` rewrites it), reserved = 0."""
    return _UNIT_STRUCT.pack(physical_offset, size, tags_code, store_ts_ms, msg_base_offset, batch_size,
                             INVALID_POS, 0)


def decode_bcq(data: bytes | memoryview | np.ndarray, *, file_start_byte: int, source_path: str = "") -> BCQDecode:
    """Units up to the first invalid one, as ``BatchConsumeQueue.recover`` reads a file: a unit is valid when
    phyOffset >= 0, size > 0, msgBaseOffset >= 0 and batchSize > 0, so the zero-filled preallocated tail ends it.

    Problems (the units are still returned): a size that is not a multiple of 46 (trailing bytes ignored), and units
    whose msgBaseOffset is not the previous unit's msgBaseOffset + batchSize (the broker's binary search by offset,
    ``getBatchMsgIndexBuffer``, assumes they follow on)."""
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    problems: list[Problem] = []
    whole = len(raw) // BCQ_UNIT_SIZE * BCQ_UNIT_SIZE
    if whole != len(raw):
        problems.append(Problem(source_path, whole, f"file size {len(raw)} is not a multiple of {BCQ_UNIT_SIZE}: "
                                f"trailing {len(raw) - whole} bytes ignored"))
    units = raw[:whole].view(_UNIT)
    bad = np.flatnonzero((units["offset"] < 0) | (units["size"] <= 0) | (units["base"] < 0) | (units["batch"] <= 0))
    n = int(bad[0]) if len(bad) else len(units)
    u = units[:n]
    base = u["base"].astype(np.int64)
    batch = u["batch"].astype(np.int64)
    gaps = np.flatnonzero(base[1:] != base[:-1] + batch[:-1]) + 1
    if len(gaps):
        i = int(gaps[0])
        problems.append(Problem(source_path, i * BCQ_UNIT_SIZE,
                                f"{len(gaps)} units do not follow the previous unit's offsets; the first, unit {i}, "
                                f"has msgBaseOffset {int(base[i])} after {int(base[i - 1] + batch[i - 1])}"))
    return BCQDecode(u["offset"].astype(np.int64), u["size"].astype(np.int64), u["tags"].astype(np.int64),
                     u["store_ts"].astype(np.int64), base, batch, file_start_byte, len(units), problems)


def offsets_of(decoded: BCQDecode) -> tuple[np.ndarray, np.ndarray]:
    """(queue offsets, physical offsets), one row per queue offset: a unit of batchSize N gives its msgBaseOffset
    .. msgBaseOffset + N - 1, all at the unit's commitlog offset (the one ``INNER_BATCH`` record holding them,
    ``MessageDecoder.decodeMessage(MessageExt, List)``: inner message i has queue offset base + i)."""
    batch = decoded.batch_size.astype(np.int64)
    total = int(batch.sum())
    starts = np.cumsum(batch) - batch  # row of each unit's first offset
    within = np.arange(total, dtype=np.int64) - np.repeat(starts, batch)
    return np.repeat(decoded.msg_base_offset, batch) + within, np.repeat(decoded.commit_offset, batch)


def queue_bounds(files: Sequence[tuple[int, bytes]], oldest_commitlog_start: int | None) -> tuple[int, int] | None:
    """(Min, Max) of one queue from its files (start byte, bytes), as the broker reports them.

    - Which units count (``recover``): files in name order, each after a full one; the first file that is not full
      ends the queue (the broker truncates the files after it, ``MappedFileQueue.truncateDirtyFiles``). Empty
      (0-byte) files are left out (``MappedFileQueue.doLoad`` deletes one). Unlike the broker, which checks only
      the last 3 files, every file is checked.
    - Max (``reviseMaxOffsetInQueue``): msgBaseOffset + batchSize of the last valid unit.
    - Min (``reviseMinOffsetInQueue``): msgBaseOffset of the first unit; with a commitlog
      (``deleteExpiredFileByOffset`` then ``correctMinOffset``) files whose last unit points below
      ``oldest_commitlog_start`` are dropped (never the last), and in the first file left Min becomes
      msgBaseOffset + batchSize of its last unit that points below, i.e. the first unit whose message is retained.
      Every unit below the oldest segment: Min = Max (empty queue). ``None``: no commitlog, all retained.
    - No valid unit: (0, 0). The store itself says Min -1, Max 0 there (``reviseMinOffsetInQueue`` with no unit);
      admin tools show 0 (``AdminBrokerProcessor.getTopicStatsInfo`` clamps a negative Min to 0).
    - No files at all: None (no batch consume queue data: the caller decides NO_CONSUME_QUEUE or empty, §4.2).
    """
    if not files:
        return None
    used: list[BCQDecode] = []
    for start, data in sorted(files, key=lambda f: f[0]):
        if not len(data):
            continue
        d = decode_bcq(data, file_start_byte=start)
        used.append(d)
        if not d.full:
            break
    nonempty = [d for d in used if d.count]
    if not nonempty:
        return 0, 0
    max_offset = nonempty[-1].end_offset
    assert max_offset is not None
    if oldest_commitlog_start is None:
        return int(nonempty[0].msg_base_offset[0]), max_offset
    for d in nonempty:
        below = d.commit_offset < oldest_commitlog_start
        if d is not nonempty[-1] and bool(below[-1]):
            continue  # deleteExpiredFileByOffset: the file's last unit points below the oldest segment
        k = int(np.argmin(below)) if not below.all() else d.count  # units at the front that point below
        return (int(d.msg_base_offset[k - 1] + d.batch_size[k - 1]) if k else int(d.msg_base_offset[0])), max_offset
    return max_offset, max_offset  # not reached: the last non-empty file always returns


def _properties_from_string(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: pairs end at ``\\x02`` (or the end), the name at the pair's first
    ``\\x01``; a pair with an empty name or value, or without ``\\x01``, is skipped; a later name wins."""
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        k = pair.find(NAME_VALUE_SEPARATOR)
        if 0 < k < len(pair) - 1:
            out[pair[:k]] = pair[k + 1:]
    return out


def _properties_to_string(properties: dict[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``: ``name\\x01value\\x02`` per pair, null values skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items() if v is not None)


def inner_messages(body: bytes) -> list[dict[str, Any]]:
    """The inner messages of an ``INNER_BATCH`` record's body (``MessageDecoder.decodeMessages``): each is
    ``[int total][int magic][int bodyCRC][int flag][int bodyLen][body][short propLen][props]``, big-endian.

    The broker stores the producer's ``MessageBatch.encode`` bytes unchanged (``SendMessageProcessor`` puts an
    inner batch with ``asyncPutMessage``, one record), and ``MessageDecoder.encodeMessage`` writes magic 0 and
    bodyCRC 0: neither is checked, both are returned as read. Returns dicts with ``flag``, ``body``, ``properties``
    (``string2messageProperties``), ``magic``, ``body_crc``; inner message i is queue offset INNER_BASE + i.

    Raises ValueError (naming the inner message and its byte) when the fields run past the body, a length is
    negative, or ``total`` disagrees with the fields (``countInnerMsgNum`` walks by ``total``, ``decodeMessages``
    by the fields: the broker's INNER_NUM and the consumer's messages would differ)."""
    out: list[dict[str, Any]] = []
    pos, n = 0, len(body)
    while pos < n:
        where = f"inner message {len(out)} at byte {pos} of {n}"
        if pos + _INNER_HEAD.size > n:
            raise ValueError(f"{where}: {n - pos} bytes left, a header needs {_INNER_HEAD.size}")
        total, magic, crc, flag, body_len = _INNER_HEAD.unpack_from(body, pos)
        at = pos + _INNER_HEAD.size
        if body_len < 0 or at + body_len + 2 > n:
            raise ValueError(f"{where}: body length {body_len} runs past the end")
        payload = bytes(body[at:at + body_len])
        at += body_len
        (prop_len,) = struct.unpack_from(">h", body, at)
        at += 2
        if prop_len < 0 or at + prop_len > n:
            raise ValueError(f"{where}: properties length {prop_len} runs past the end")
        props = _properties_from_string(bytes(body[at:at + prop_len]).decode("utf-8", "replace"))
        at += prop_len
        if total != at - pos:
            raise ValueError(f"{where}: total size {total} but its fields take {at - pos} bytes")
        out.append({"flag": flag, "body": payload, "properties": props, "magic": magic, "body_crc": crc})
        pos = at
    return out


def encode_inner_batch(messages: list[tuple[bytes, dict[str, str]]]) -> bytes:
    """An ``INNER_BATCH`` body as the producer writes it (``MessageDecoder.encodeMessages`` / ``encodeMessage``):
    flag 0 (``Message`` default), magic 0, bodyCRC 0. Properties over 32767 bytes raise ValueError (the Java code
    casts the length to a short)."""
    parts = []
    for i, (payload, properties) in enumerate(messages):
        props = _properties_to_string(properties).encode("utf-8")
        if len(props) > 32767:
            raise ValueError(f"inner message {i}: properties of {len(props)} bytes exceed Short.MAX_VALUE")
        total = _INNER_HEAD.size + len(payload) + 2 + len(props)
        parts.append(_INNER_HEAD.pack(total, 0, 0, 0, len(payload)) + payload + struct.pack(">h", len(props)) + props)
    return b"".join(parts)
