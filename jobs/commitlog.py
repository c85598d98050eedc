"""RocketMQ commitlog segments: encode (for the simulator and benchmarks) and decode (formats §6).

Decoding is vectorised: the TOTALSIZE chain (the only sequential dependency) is followed in many stretches at
once (each starts at a record found by its magic code and physical offset, and must land exactly on the next
one), then every fixed field of every record is gathered at once with numpy through overlapping big-endian views,
and variable-length fields (topic, properties) are cut out of the buffer by Arrow (string views cast to strings,
properties split at their separators without copying), with no Python object per record. Records are decoded in
batches of ``_BATCH`` so that the working arrays stay in the CPU caches. Mirrors ``MessageDecoder.decode`` /
``CommitLog.checkMessageAndReturnSize``; anything unusual falls back to the record-by-record walk.

Bad records (bad magic, a size that runs past the segment, a physical offset that does not match the
record's position) are reported with segment and byte position; decoding resumes at the next position
where a valid record starts, so corruption loses only the corrupted records.
"""
from __future__ import annotations

import mmap
import os
import socket
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.problems import Problem

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

COMPRESSED = 0x1
MULTI_TAGS = 0x2
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
COMPRESSION_SHIFT = 8
COMPRESSION_MASK = 0x7 << COMPRESSION_SHIFT
COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_ZLIB = 1, 2, 3

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_MIN_RECORD = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2  # smallest v1 IPv4 record
_HEAD = struct.Struct(">ii")
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

SCHEMA = pa.schema([
    ("physical_offset", pa.int64()), ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("store_ts", pa.timestamp("ms", tz="UTC")), ("born_ts", pa.timestamp("ms", tz="UTC")),
    ("uniq_key", pa.string()), ("keys", pa.string()), ("tags", pa.string()), ("reconsume_times", pa.int32()),
    ("properties", pa.map_(pa.string(), pa.string())), ("size", pa.int32()), ("sys_flag", pa.int32()),
    ("born_host", pa.string()), ("store_host", pa.string()), ("offset_msg_id", pa.string()),
    ("segment", pa.string()), ("body", pa.binary()),
])


# ------------------------------------------------------------------------------------------- encoding


def _host_bytes(host: tuple[str, int]) -> bytes:
    ip, port = host
    if ":" in ip:
        return socket.inet_pton(socket.AF_INET6, ip) + struct.pack(">i", port)
    return socket.inet_aton(ip) + struct.pack(">i", port)


def properties_to_string(properties: dict[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``: ``name\\x01value\\x02`` per pair, null values skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items() if v is not None)


def encode_message(*, topic: str, queue_id: int, queue_offset: int, physical_offset: int, body: bytes,
                   properties: dict[str, str], born_ts_ms: int, store_ts_ms: int, born_host: tuple[str, int],
                   store_host: tuple[str, int], sys_flag: int = 0, reconsume_times: int = 0, flag: int = 0,
                   prepared_transaction_offset: int = 0, magic: int | None = None) -> bytes:
    """One commitlog record exactly as ``MessageExtEncoder`` lays it out (big-endian)."""
    if ":" in born_host[0]:
        sys_flag |= BORNHOST_V6
    if ":" in store_host[0]:
        sys_flag |= STOREHOST_V6
    topic_b = topic.encode("utf-8")
    if magic is None:
        magic = MAGIC_V2 if len(topic_b) > 127 else MAGIC_V1
    props_b = properties_to_string(properties).encode("utf-8")
    if len(props_b) > 32767:
        raise ValueError(f"properties of {len(props_b)} bytes exceed Short.MAX_VALUE")
    topic_len = struct.pack(">h", len(topic_b)) if magic == MAGIC_V2 else struct.pack(">b", len(topic_b))
    tail = (
        struct.pack(">q", born_ts_ms) + _host_bytes(born_host)
        + struct.pack(">q", store_ts_ms) + _host_bytes(store_host)
        + struct.pack(">iq", reconsume_times, prepared_transaction_offset)
        + struct.pack(">i", len(body)) + body
        + topic_len + topic_b
        + struct.pack(">h", len(props_b)) + props_b
    )
    crc = zlib.crc32(body) & 0x7FFFFFFF if body else 0
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + len(tail)
    head = struct.pack(">iiiiiqqi", total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag)
    return head + tail


def encode_blank(remaining: int) -> bytes:
    """The end-of-file marker: ``[remaining][BLANK_MAGIC]`` (the rest of the file stays zero)."""
    return struct.pack(">ii", remaining, BLANK_MAGIC)


def compress_body(body: bytes, kind: int) -> bytes:
    if kind == COMPRESSION_ZLIB:
        return zlib.compress(body)
    if kind == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(body)
    if kind == COMPRESSION_LZ4:
        import lz4.frame  # type: ignore[import-not-found]

        return lz4.frame.compress(body)
    raise ValueError(f"unknown compression type {kind}")


def tags_hash(tags: str | None) -> int:
    """``String.hashCode()`` of the tags (the consume queue's tags code); 0 without tags."""
    if not tags:
        return 0
    h = 0
    for ch in tags.encode("utf-16-be").decode("utf-16-be"):
        for unit in (ord(ch),) if ord(ch) < 0x10000 else divmod(ord(ch) - 0x10000, 0x400):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class CommitLogWriter:
    """Appends records to segment files named by start offset, rolling over like ``CommitLog.doAppend``.

    Files are created full size and zero-filled (RocketMQ preallocates mapped files); when a record does not
    fit with 8 bytes to spare, the blank end-of-file marker is written and the record goes to the next file.
    """

    def __init__(self, directory: str, segment_size: int = 1 << 30) -> None:
        self.directory = directory
        self.segment_size = segment_size
        os.makedirs(directory, exist_ok=True)
        self.next_offset = 0
        self._file: "os.PathLike[str] | None" = None
        self._fh = None  # type: ignore[var-annotated]
        self._seg_start = -1

    def _open(self, start: int) -> None:
        self.close()
        path = os.path.join(self.directory, f"{start:020d}")
        self._fh = open(path, "r+b" if os.path.exists(path) else "w+b")
        self._fh.truncate(self.segment_size)
        self._seg_start = start

    def append(self, **fields: object) -> tuple[int, int]:
        """Encode and append one message; returns (physical offset, size)."""
        probe = encode_message(physical_offset=0, **fields)  # type: ignore[arg-type]
        size = len(probe)
        if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            raise ValueError(f"message of {size} bytes does not fit a {self.segment_size}-byte segment")
        seg_start = self.next_offset - self.next_offset % self.segment_size
        if self._seg_start != seg_start:
            self._open(seg_start)
        pos = self.next_offset - seg_start
        remaining = self.segment_size - pos
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            assert self._fh is not None
            self._fh.seek(pos)
            self._fh.write(encode_blank(remaining))
            self.next_offset = seg_start + self.segment_size
            self._open(self.next_offset)
            pos = 0
        record = probe[:28] + struct.pack(">q", self.next_offset) + probe[36:]
        assert self._fh is not None
        self._fh.seek(pos)
        self._fh.write(record)
        phys = self.next_offset
        self.next_offset += size
        return phys, size

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self._seg_start = -1


# ------------------------------------------------------------------------------------------- decoding


@dataclass
class SegmentDecode:
    """What one decode call found: the records, where to resume, whether the segment is finished."""

    table: pa.Table
    end: int
    complete: bool
    problems: list[Problem] = field(default_factory=list)


def _as_array(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(data, np.ndarray):
        # a plain ndarray view (an np.memmap subclass would route every fancy index through memmap.__getitem__)
        return np.asarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def _at(buf: np.ndarray, dtype: str) -> np.ndarray:
    """Overlapping view: element ``i`` is the ``dtype`` value stored at byte ``i`` of ``buf`` (any alignment).

    ``_at(buf, ">i8")[pos]`` reads a big-endian long at every position with one gather and no index matrix.
    """
    dt = np.dtype(dtype)
    n = len(buf) - dt.itemsize + 1
    if n <= 0:
        return np.zeros(0, dt)
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    return np.ndarray((n,), dt, buffer=buf, strides=(1,))


_BE = {1: ">i1", 2: ">i2", 4: ">i4", 8: ">i8"}


def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at every position (one gather)."""
    return _at(buf, _BE[width])[pos].astype(np.int64)


# string_view layout (Arrow columnar format), 16 bytes per string: int32 length, then the bytes inline (length
# <= 12, zero-padded) or a 4-byte prefix, int32 buffer index and int32 offset into the buffer.
# _VIEW_MASK[min(length, 13)] keeps, of the 16 bytes that start 4 bytes before a string, what its view holds.
_VIEW_MASK = np.zeros((14, 4), dtype=np.uint32)
for _k in range(14):
    _keep = (b"\xff" * min(_k, 12)).ljust(12, b"\0") if _k <= 12 else b"\xff" * 4 + b"\0" * 8
    _VIEW_MASK[_k, 1:] = np.frombuffer(_keep, dtype="<u4")
del _k, _keep
_VIEW_MASK_16 = _VIEW_MASK.view("V16").reshape(-1)  # one 16-byte item per class: 1-D gathers are fast


def _views(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """string_view structs, (n, 4) uint32, for the ranges ``buf[start:start+len]`` (offsets < 2 GiB)."""
    n = len(buf)
    edge = (starts < 4) | (starts + 12 > n)
    at = np.where(edge, 4, starts - 4) if n >= 16 else np.zeros(len(starts), np.int64)
    if n >= 16:
        views = _at(buf, "V16")[at].view(np.uint32).reshape(-1, 4)
    else:
        views = np.zeros((len(starts), 4), np.uint32)
    for i in np.flatnonzero(edge):  # ranges within 4 bytes of the start or 12 bytes of the end of the buffer
        s = int(starts[i])
        views[i] = np.frombuffer(bytes(4) + bytes(buf[s:min(n, s + 12)]).ljust(12, b"\0"), dtype="<u4")
    cls = np.minimum(lengths, 13)
    views.view(np.uint64).reshape(-1, 2)[...] &= _VIEW_MASK_16[cls].view(np.uint64).reshape(-1, 2)
    views[:, 0] = lengths
    views[:, 3] += np.where(cls == 13, starts, 0).astype(np.uint32)
    return views


def _slices(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType = pa.string()) -> pa.Array:
    """``buf[start:start+len]`` for every range as one string array; Arrow does the copying (view -> string cast)."""
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    starts = starts.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    if len(buf) >= (1 << 31):  # view offsets are int32; chunks are far smaller than this
        arr = _strings(*_gather(buf, starts, lengths))
        return arr if kind == pa.string() else arr.cast(kind)
    views = _views(buf, starts, lengths)
    view_type = pa.string_view() if kind == pa.string() else pa.binary_view()
    return pa.Array.from_buffers(view_type, n, [None, pa.py_buffer(views), pa.py_buffer(buf)]).cast(kind)


def _gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the byte ranges [start, start+len) -> (data, offsets with len+1 entries)."""
    lengths = lengths.astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets
    idx = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return buf[idx], offsets


def _strings(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    n = len(offsets) - 1
    if len(data) >= (1 << 31):
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data)))


def _constant_strings(value: str, n: int) -> pa.Array:
    raw = value.encode("utf-8")
    return pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)),
                                       pa.py_buffer(raw * n))


# two uppercase hex characters per byte value, as the uint16 whose little-endian bytes spell them
_HEX2 = np.array([ord(f"{b:02X}"[0]) | (ord(f"{b:02X}"[1]) << 8) for b in range(256)], dtype=np.uint16)


def _walk(buf: np.ndarray, segment_start: int, segment: str, begin: int, final: bool
          ) -> tuple[np.ndarray, int, bool, list[Problem]]:
    """Follow the TOTALSIZE chain: record positions, where decoding stopped, end-of-file seen, problems.

    The chain is followed from many points of the buffer at once (:func:`_walk_chains`) when the buffer is large
    and its records are intact; the record-by-record loop does the rest and everything unusual, so the result is
    the same as walking record by record from ``begin``.
    """
    fast = _walk_chains(buf, segment_start, begin)
    if fast is None:
        positions, end, complete, problems = _walk_records(buf, segment_start, segment, begin, final)
        return np.asarray(positions, dtype=np.int64), end, complete, problems
    head, resume = fast
    positions, end, complete, problems = _walk_records(buf, segment_start, segment, resume, final)
    return np.concatenate([head, np.asarray(positions, dtype=np.int64)]), end, complete, problems


_SYNC_STEP = 32 << 10  # one chain per 32 KiB
_SYNC_WINDOW = 2 << 10  # a chain starts at the first record found in the 2 KiB at its step
_MAX_CHAIN_STEPS = 512
_MAGIC_PREFIX = struct.pack(">i", MAGIC_V1)[:3]  # v1 and v2 differ in the last byte only


def _walk_chains(buf: np.ndarray, segment_start: int, begin: int) -> tuple[np.ndarray, int] | None:
    """Positions of the records in ``[begin, S)`` found by walking many stretches of the chain in lock step.

    Every ``_SYNC_STEP`` bytes, the first record start (magic code, and a physical offset field equal to its
    position) in a small window starts a stretch; each stretch is followed, all at once with numpy, until it lands
    exactly on the start of the next. The stretches then are the chain from ``begin`` (a false start inside a body
    would not be landed on). Returns the positions and ``S``, the last stretch start, from which the record loop
    goes on; ``None`` (walk record by record) when the buffer is small or anything is not a valid record.
    """
    n = len(buf)
    if n - begin < 4 * _SYNC_STEP:
        return None
    at4, at8 = _at(buf, ">i4"), _at(buf, ">i8")
    first = begin + _SYNC_STEP
    k = (n - _SYNC_WINDOW - 64 - first) // _SYNC_STEP
    if k < 1:
        return None
    # the first _SYNC_WINDOW bytes after each step, as rows of a strided view (no copy)
    win = np.lib.stride_tricks.as_strided(buf[first:], shape=(k, _SYNC_WINDOW), strides=(_SYNC_STEP, 1))
    flat = np.flatnonzero(win[:, 4:] == _MAGIC_PREFIX[0])
    row, col = np.divmod(flat, _SYNC_WINDOW - 4)
    cand = first + row * _SYNC_STEP + col  # where a record would start if the magic code is at +4
    magic = at4[cand + 4]
    valid = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (at8[cand + 28] == cand + segment_start)
    row, cand = row[valid], cand[valid]
    keep = np.ones(len(row), dtype=bool)
    keep[1:] = row[1:] != row[:-1]  # the first record start of each window (np.nonzero is row-major)
    s = np.concatenate([[begin], cand[keep]]).astype(np.int64)
    if len(s) < 2:
        return None
    pos, stop = s[:-1], s[1:]
    parts = []
    for _ in range(_MAX_CHAIN_STEPS):
        size = at4[pos].astype(np.int64)
        magic = at4[pos + 4]
        nxt = pos + size
        ok = (((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (size >= _MIN_RECORD) & (nxt <= stop)
              & (at8[pos + 28] == pos + segment_start))
        if not ok.all():
            return None
        parts.append(pos)
        more = nxt < stop
        pos, stop = nxt[more], stop[more]
        if not len(pos):
            return np.sort(np.concatenate(parts)), int(s[-1])
    return None


def _walk_records(buf: np.ndarray, segment_start: int, segment: str, begin: int, final: bool
                  ) -> tuple[list[int], int, bool, list[Problem]]:
    """Follow the TOTALSIZE chain record by record (the reference walk; reports every problem)."""
    mv = memoryview(buf)
    n = len(buf)
    pos = begin
    positions: list[int] = []
    problems: list[Problem] = []
    unpack = _HEAD.unpack_from
    phys_at = struct.Struct(">q").unpack_from
    while pos + 8 <= n:
        size, magic = unpack(mv, pos)
        if size == 0 and magic == 0:
            return positions, pos, False, problems  # preallocated, not written yet
        if magic == BLANK_MAGIC:
            return positions, pos, True, problems
        if magic in (MAGIC_V1, MAGIC_V2) and _MIN_RECORD <= size:
            if pos + size <= n:
                if pos + 36 <= n and phys_at(mv, pos + 28)[0] == segment_start + pos:
                    positions.append(pos)
                    pos += size
                    continue
                reason = (f"record at byte {pos}: physical offset field {phys_at(mv, pos + 28)[0]} does not match "
                          f"its position {segment_start + pos}")
            elif not final:
                return positions, pos, False, problems  # continues in the next chunk
            else:
                reason = f"record at byte {pos}: size {size} runs past the end of the segment ({n} bytes)"
        else:
            reason = f"record at byte {pos}: bad magic code {magic & 0xFFFFFFFF:#010x} (size field {size})"
        problems.append(Problem(segment, pos, reason + "; skipped to the next valid record"))
        nxt = _resync(buf, segment_start, pos + 1)
        if nxt is None:
            return positions, n if final else pos, False, problems
        pos = nxt
    return positions, pos, False, problems


_MAGIC_BYTES = [struct.pack(">i", MAGIC_V1), struct.pack(">i", MAGIC_V2), struct.pack(">i", BLANK_MAGIC)]


def _resync(buf: np.ndarray, segment_start: int, start: int) -> int | None:
    """The next position >= start where a record plausibly begins (magic at +4, matching physical offset)."""
    raw = buf.tobytes() if not isinstance(buf, np.memmap) else bytes(buf)
    best: int | None = None
    for mb in _MAGIC_BYTES:
        i = raw.find(mb, start + 4)
        while i != -1:
            p = i - 4
            if mb == _MAGIC_BYTES[2]:
                best = p if best is None else min(best, p)
                break
            if p + 36 <= len(raw) and struct.unpack_from(">q", raw, p + 28)[0] == segment_start + p:
                best = p if best is None else min(best, p)
                break
            i = raw.find(mb, i + 1)
    return best


def decode_segment(data: bytes | memoryview | np.ndarray, *, segment_start: int, segment: str, begin: int = 0,
                   final: bool = True, body_topics: frozenset[str] = frozenset({TRACE_TOPIC})) -> SegmentDecode:
    """Decode the records of one commitlog segment (or a chunk of it) from byte ``begin``.

    Args:
        data: the segment bytes (or a chunk that starts at physical offset ``segment_start``).
        segment_start: physical offset of ``data[0]``.
        segment: the name reported in problems (the landing path of the segment).
        begin: byte position in ``data`` to start at (where the previous run stopped).
        final: whether ``data`` ends where the file ends; if not, a record cut at the end is left for the next chunk.
        body_topics: topics whose bodies are kept (decompressed); other bodies are dropped.

    Returns:
        records, ``end`` (the byte position to resume from), ``complete`` (end-of-file marker reached), problems.
    """
    buf = _as_array(data)
    positions, end, complete, problems = _walk(buf, segment_start, segment, begin, final)
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) <= _BATCH:
        body_problems: list[Problem] = []
        table = _decode_records(buf, positions, segment_start, segment, body_topics, problems, body_problems)
        return SegmentDecode(table, end, complete, problems + body_problems)
    # In batches: their working arrays stay small enough for the CPU caches (the table is one chunk per batch).
    body_problems = []
    table = pa.concat_tables([
        _decode_records(buf, positions[i:i + _BATCH], segment_start, segment, body_topics, problems, body_problems)
        for i in range(0, len(positions), _BATCH)])
    return SegmentDecode(table, end, complete, problems + body_problems)


_BATCH = 1 << 14  # records decoded together


_HEADER_V4 = np.dtype([
    ("size", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"), ("queue_offset", ">i8"),
    ("phys", ">i8"), ("sys_flag", ">i4"), ("born_ts", ">i8"), ("born_host", ">u8"), ("store_ts", ">i8"),
    ("store_host", ">u8"), ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4"),
])  # 88 bytes: the layout up to the body when both hosts are IPv4


def _decode_records(buf: np.ndarray, pos: np.ndarray, segment_start: int, segment: str,
                    body_topics: frozenset[str], problems: list[Problem], body_problems: list[Problem]) -> pa.Table:
    n = len(pos)
    if n == 0:
        return SCHEMA.empty_table()
    i4, i8 = _at(buf, ">i4"), _at(buf, ">i8")
    # every fixed field up to the body length, for an IPv4 record, in one gather (a record is at least 97 bytes)
    head = _at(buf, f"V{_HEADER_V4.itemsize}")[pos].view(_HEADER_V4)
    size = head["size"].astype(np.int64)
    magic = head["magic"].astype(np.int64)
    queue_id = head["queue_id"].astype(np.int32)
    queue_offset = head["queue_offset"].astype(np.int64)
    phys = head["phys"].astype(np.int64)
    sys_flag = head["sys_flag"].astype(np.int64)
    born_ts = head["born_ts"].astype(np.int64)
    born_host_pos = pos + 48
    if not (sys_flag & (BORNHOST_V6 | STOREHOST_V6)).any():
        bh_len = sh_len = np.full(n, 8, dtype=np.int64)
        store_ts = head["store_ts"].astype(np.int64)
        store_host_pos = pos + 64
        reconsume = head["reconsume"].astype(np.int32)
        body_len = head["body_len"].astype(np.int64)
        body_pos = pos + _HEADER_V4.itemsize
    else:
        bh_len = np.where(sys_flag & BORNHOST_V6, 20, 8)
        sh_len = np.where(sys_flag & STOREHOST_V6, 20, 8)
        store_ts_pos = born_host_pos + bh_len
        store_ts = i8[store_ts_pos].astype(np.int64)
        store_host_pos = store_ts_pos + 8
        reconsume_pos = store_host_pos + sh_len
        reconsume = i4[reconsume_pos].astype(np.int32)
        body_len_pos = reconsume_pos + 12
        body_len = i4[body_len_pos].astype(np.int64)
        body_pos = body_len_pos + 4
    # a corrupt body length may point anywhere: read what is in the buffer; the size check below rejects it
    last = len(buf) - 2
    topic_len_pos = np.clip(body_pos + body_len, 0, last)
    v2 = magic == MAGIC_V2
    if v2.any():
        topic_len = np.where(v2, _be(buf, topic_len_pos, 2), buf[topic_len_pos].astype(np.int64))
        topic_pos = topic_len_pos + np.where(v2, 2, 1)
    else:
        topic_len = buf[topic_len_pos].astype(np.int64)
        topic_pos = topic_len_pos + 1
    props_len_pos = np.clip(topic_pos + topic_len, 0, last)
    props_len = _at(buf, ">u2")[props_len_pos].astype(np.int64)
    props_pos = props_len_pos + 2

    # A record whose fields do not add up to its size is corrupt even though its header looked fine.
    consistent = ((props_pos + props_len - pos) == size) & (body_len >= 0) & (topic_len >= 0)
    if not consistent.all():
        for p in pos[~consistent]:
            problems.append(Problem(segment, int(p), f"record at byte {int(p)}: field lengths do not add up to its "
                                    "size; record skipped"))
        keep = consistent
        pos, size, magic, queue_id, queue_offset, phys, sys_flag, born_ts, store_ts, reconsume = (
            a[keep] for a in (pos, size, magic, queue_id, queue_offset, phys, sys_flag, born_ts, store_ts, reconsume))
        bh_len, sh_len, born_host_pos, store_host_pos, body_pos, body_len, topic_pos, topic_len, props_pos, props_len = (
            a[keep] for a in (bh_len, sh_len, born_host_pos, store_host_pos, body_pos, body_len, topic_pos, topic_len,
                              props_pos, props_len))
        n = len(pos)
        if n == 0:
            return SCHEMA.empty_table()

    topic = _slices(buf, topic_pos, topic_len)
    props, uniq, keys, tags = _properties(buf, props_pos, props_len)
    born_host = _hosts(buf, born_host_pos, bh_len)
    store_host = _hosts(buf, store_host_pos, sh_len)
    msg_id = _offset_msg_ids(buf, store_host_pos, sh_len, phys)
    body = _bodies(buf, topic, body_topics, body_pos, body_len, sys_flag, pos, segment, body_problems)
    ts = pa.timestamp("ms", tz="UTC")
    return pa.Table.from_arrays([
        pa.array(phys, pa.int64()), topic, pa.array(queue_id), pa.array(queue_offset, pa.int64()),
        pa.array(store_ts, ts), pa.array(born_ts, ts), uniq, keys, tags, pa.array(reconsume),
        props, pa.array(size.astype(np.int32)), pa.array(sys_flag.astype(np.int32)), born_host, store_host, msg_id,
        _constant_strings(segment, n), body,
    ], schema=SCHEMA)


_NAMED_COLUMNS = pa.array(["UNIQ_KEY", "KEYS", "TAGS"], pa.string())


def _properties(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
                ) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """Split every ``name\\x01value\\x02`` blob at once; returns the map column and UNIQ_KEY, KEYS, TAGS."""
    n = len(starts)
    blob = _slices(buf, starts, lengths, pa.binary())
    rec_off = np.frombuffer(blob.buffers()[1], np.int32, n + 1, offset=blob.offset * 4).astype(np.int64)
    base = rec_off[0]
    data = np.frombuffer(blob.buffers()[2], np.uint8, int(rec_off[-1]))[base:] if rec_off[-1] else np.zeros(0, np.uint8)
    rec_off -= base
    # separators: one pass for both kinds
    hits = np.flatnonzero(data <= 2)
    hit_byte = data[hits]
    # a blob that does not end in \x02 (older writers) still ends its last pair at the end of the blob
    ends_bad = (lengths > 0) & (data[np.maximum(rec_off[1:] - 1, 0)] != 2) if len(data) else np.zeros(n, bool)
    if len(hits) % 2 == 0 and not ends_bad.any() and (hit_byte[0::2] == 1).all() and (hit_byte[1::2] == 2).all():
        # The usual case, separators alternate: the blobs are name \x01 value \x02 name \x01 value \x02 ... end to
        # end, so cutting them at every separator gives name, \x01, value, \x02, ... as one string array that shares
        # the blobs' buffer (no copy); names and values are every fourth string of it.
        cuts = np.empty(2 * len(hits) + 1, dtype=np.int32)
        cuts[0] = 0
        cuts[1::2] = hits
        cuts[2::2] = hits + 1
        blob_data = blob.buffers()[2].slice(int(base)) if len(data) else pa.py_buffer(b"")
        tokens = pa.StringArray.from_buffers(2 * len(hits), pa.py_buffer(cuts), blob_data)
        keys = tokens.take(pa.array(np.arange(0, 2 * len(hits), 4, dtype=np.int32)))
        values = tokens.take(pa.array(np.arange(2, 2 * len(hits), 4, dtype=np.int32)))
        map_off = np.searchsorted(hits[1::2], rec_off).astype(np.int32)  # record r's pairs end in its blob
    else:
        pair_start, pair_end, rec, sep = _pairs(data, rec_off, hits[hit_byte == 1], hits[hit_byte == 2], ends_bad)
        map_off = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(rec, minlength=n), out=map_off[1:])
        keys = _slices(data, pair_start, sep - pair_start)
        values = _slices(data, sep + 1, pair_end - sep - 1)
    props = pa.MapArray.from_arrays(pa.array(map_off), keys, values)

    # UNIQ_KEY, KEYS and TAGS: the value of the last pair with that name in each record, else null
    code = pc.fill_null(pc.index_in(keys, value_set=_NAMED_COLUMNS), -1).to_numpy()
    named = np.flatnonzero(code >= 0)
    named_rec = np.repeat(np.arange(n, dtype=np.int32), np.diff(map_off))[named]
    named_code = code[named]

    def column(which: int) -> pa.Array:
        sel = named_code == which
        idx = np.full(n, -1, dtype=np.int64)
        idx[named_rec[sel]] = named[sel]  # a name given twice: the last pair wins
        return values.take(pa.array(idx, mask=idx < 0))

    return props, column(0), column(1), column(2)


def _pairs(data: np.ndarray, rec_off: np.ndarray, p1: np.ndarray, p2: np.ndarray, ends_bad: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of blobs in any shape: (start, end, record, position of the name/value separator)."""
    n = len(rec_off) - 1
    # the \x02 of record r are those in [rec_off[r], rec_off[r+1])
    rec = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.searchsorted(p2, rec_off)))
    pair_end = p2
    if ends_bad.any():
        extra = np.flatnonzero(ends_bad)
        ends = np.concatenate([p2, rec_off[1:][extra]])
        owner = np.concatenate([rec, extra])
        # an end of blob r at rec_off[r+1] sorts before a \x02 that is the first byte of blob r+1
        order = np.argsort(ends * 2 + np.concatenate([np.ones(len(p2), np.int64), np.zeros(len(extra), np.int64)]),
                           kind="stable")
        pair_end, rec = ends[order], owner[order]
    # a pair starts right after the previous \x02, or at the start of its record's blob
    first = np.ones(len(rec), dtype=bool)
    first[1:] = rec[1:] != rec[:-1]
    prev_end = np.empty(len(pair_end), dtype=np.int64)
    if len(pair_end):
        prev_end[0] = -1
        prev_end[1:] = pair_end[:-1]
    pair_start = np.where(first, rec_off[rec], prev_end + 1)
    nonempty = pair_end > pair_start
    if not nonempty.all():
        pair_start, pair_end, rec = pair_start[nonempty], pair_end[nonempty], rec[nonempty]
    # the name ends at the first \x01 of the pair; usually there is exactly one per pair
    if len(p1) == len(pair_start) and ((p1 >= pair_start) & (p1 < pair_end)).all():
        sep = p1
    else:
        if len(p1):
            sep = p1[np.minimum(np.searchsorted(p1, pair_start), len(p1) - 1)]
            has_sep = (sep >= pair_start) & (sep < pair_end)
        else:
            sep, has_sep = np.full(len(pair_start), -1), np.zeros(len(pair_start), bool)
        pair_start, pair_end, rec, sep = pair_start[has_sep], pair_end[has_sep], rec[has_sep], sep[has_sep]
    return pair_start, pair_end, rec, sep


def _host_text(ip: int, port: int) -> str:
    return f"{socket.inet_ntoa(struct.pack('>I', ip))}:{struct.unpack('>i', struct.pack('>I', port))[0]}"


def _hosts(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """``ip:port`` strings; formatted once per distinct host."""
    n = len(starts)
    v4 = lengths == 8
    if v4.all():
        key = _at(buf, ">u8")[starts]  # IPv4 address then port, as one number
        if (key == key[0]).all():
            text = _host_text(int(key[0]) >> 32, int(key[0]) & 0xFFFFFFFF)
            return _constant_strings(text, n)
        enc = pc.dictionary_encode(pa.array(key.astype(np.uint64)))  # hashing: no sort
        texts = pa.array([_host_text(k >> 32, k & 0xFFFFFFFF) for k in enc.dictionary.to_pylist()], pa.string())
        return texts.take(enc.indices)
    out = np.empty(n, dtype=object)
    if v4.any():
        s = starts[v4]
        key = _at(buf, ">u8")[s]
        uniq, inv = np.unique(key, return_inverse=True)
        text = np.array([_host_text(int(k) >> 32, int(k) & 0xFFFFFFFF) for k in uniq], dtype=object)
        out[v4] = text[inv.reshape(-1)]
    for i in np.flatnonzero(~v4):
        s = int(starts[i])
        out[i] = f"{socket.inet_ntop(socket.AF_INET6, bytes(buf[s:s + 16]))}:{struct.unpack('>i', bytes(buf[s + 16:s + 20]))[0]}"
    return pa.array(out, pa.string())


def _offset_msg_ids(buf: np.ndarray, store_host_pos: np.ndarray, sh_len: np.ndarray, phys: np.ndarray) -> pa.Array:
    """``MessageDecoder.createMessageId``: hex of store IP + port + physical offset (32 or 56 characters)."""
    n = len(phys)
    v4 = sh_len == 8
    if v4.all():
        chars = np.empty((n, 16), dtype=np.uint16)  # two characters per byte: (n, 32) characters
        host = _at(buf, ">u8")[store_host_pos]
        if (host == host[0]).all():
            chars[:, :8] = _HEX2[host[:1].view(np.uint8)]
        else:
            chars[:, :8] = _HEX2[host.view(np.uint8).reshape(n, 8)]
        chars[:, 8:] = _HEX2[phys.astype(">i8").view(np.uint8).reshape(n, 8)]
        return pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 32),
                                           pa.py_buffer(chars))
    out = []
    for i in range(n):
        s, w = int(store_host_pos[i]), int(sh_len[i])
        out.append(bytes(buf[s:s + w]).hex().upper() + f"{int(phys[i]) & 0xFFFFFFFFFFFFFFFF:016X}")
    return pa.array(out, pa.string())


def _bodies(buf: np.ndarray, topic: pa.Array, body_topics: frozenset[str], body_pos: np.ndarray, body_len: np.ndarray,
            sys_flag: np.ndarray, pos: np.ndarray, segment: str, problems: list[Problem]) -> pa.Array:
    n = len(body_pos)
    if not body_topics:
        return pa.nulls(n, pa.binary())
    wanted = pc.is_in(topic, value_set=pa.array(sorted(body_topics), pa.string())).to_numpy(zero_copy_only=False)
    out: list[bytes | None] = [None] * n
    for i in np.flatnonzero(wanted):
        s, ln = int(body_pos[i]), int(body_len[i])
        body = bytes(buf[s:s + ln])
        flag = int(sys_flag[i])
        if flag & COMPRESSED:
            try:
                body = decompress_body(body, (flag & COMPRESSION_MASK) >> COMPRESSION_SHIFT)
            except Exception as exc:  # noqa: BLE001 - an undecodable body is quarantined, not fatal
                problems.append(Problem(segment, int(pos[i]), f"record at byte {int(pos[i])}: compressed body cannot "
                                        f"be decompressed ({type(exc).__name__}); body dropped"))
                body = None  # type: ignore[assignment]
        out[i] = body
    return pa.array(out, pa.binary())


def decompress_body(body: bytes, kind: int) -> bytes:
    """Bodies flagged COMPRESSED: the type is in sysFlag bits 8-10 (0 means the 4.x default, zlib)."""
    if kind in (0, COMPRESSION_ZLIB):
        return zlib.decompress(body)
    if kind == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().decompress(body, max_output_size=64 << 20)
    if kind == COMPRESSION_LZ4:
        import lz4.frame  # type: ignore[import-not-found]

        return lz4.frame.decompress(body)
    raise ValueError(f"unknown compression type {kind}")


def _map_chunk(path: str, lo: int, hi: int) -> np.ndarray:
    """Bytes [lo, hi) of a file, memory-mapped on their own (and pre-faulted): once the array is dropped the pages
    leave the process, so decoding a segment chunk by chunk never holds more than one chunk of it."""
    if hi <= lo:
        return np.zeros(0, np.uint8)
    base = lo - lo % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), hi - base, offset=base, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                       prot=mmap.PROT_READ)
    return np.frombuffer(mm, dtype=np.uint8)[lo - base:]


def _unwritten(path: str, pos: int) -> bool:
    """Whether the 8 bytes at ``pos`` are zero (a size and magic code never written)."""
    with open(path, "rb") as fh:
        fh.seek(pos)
        return fh.read(8) == bytes(8)


def decode_file(path: str, *, segment_start: int | None = None, segment: str | None = None, begin: int = 0,
                chunk_bytes: int = 64 << 20, body_topics: frozenset[str] = frozenset({TRACE_TOPIC})
                ) -> Iterator[SegmentDecode]:
    """Decode a segment file in bounded chunks of a memory map (peak memory does not grow with file size).

    Each yielded result covers whole records; ``end`` is relative to the file. The last one says whether
    the end-of-file marker was reached.
    """
    start = int(os.path.basename(path)) if segment_start is None else segment_start
    name = segment or path
    size = os.path.getsize(path)
    if size == 0:
        yield SegmentDecode(SCHEMA.empty_table(), 0, False, [])
        return
    pos = begin
    while True:
        hi = min(size, pos + chunk_bytes)
        final = hi >= size
        chunk = _map_chunk(path, pos, hi)
        res = decode_segment(chunk, segment_start=start + pos, segment=name, final=final, body_topics=body_topics)
        del chunk  # nothing decoded refers to the mapping: it is unmapped here
        for i, p in enumerate(res.problems):
            res.problems[i] = Problem(p.source_path, p.position + pos, p.reason.replace(
                f"at byte {p.position}", f"at byte {p.position + pos}"))
        res.end += pos
        stop = res.complete or final or res.end == pos or res.end < hi and not res.table.num_rows and not res.problems
        yield res
        if res.complete or final:
            return
        if res.end == pos:
            if not res.problems and _unwritten(path, pos):
                return  # preallocated space the broker has not written yet: the segment is decoded to its end
            chunk_bytes *= 2  # nothing fit in a whole chunk: a record larger than the chunk
            continue
        pos = res.end
        if stop and res.end < hi:
            return
