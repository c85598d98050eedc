"""RocketMQ commitlog segments: encode (for the simulator and benchmarks) and decode (formats §6).

Decoding is vectorised: one tight loop walks the TOTALSIZE chain (the only sequential dependency), then
every fixed field of every record is gathered at once with numpy, and variable-length fields (topic,
properties) are cut out of the buffer with one fancy-index gather each and handed to Arrow without a
Python object per record. Mirrors ``MessageDecoder.decode`` / ``CommitLog.checkMessageAndReturnSize``.

Bad records (bad magic, a size that runs past the segment, a physical offset that does not match the
record's position) are reported with segment and byte position; decoding resumes at the next position
where a valid record starts, so corruption loses only the corrupted records.
"""
from __future__ import annotations

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
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at every position (one gather)."""
    idx = pos[:, None] + np.arange(width)
    raw = np.ascontiguousarray(buf[idx])
    dtype = {1: ">i1", 2: ">i2", 4: ">i4", 8: ">i8"}[width]
    return raw.view(dtype).reshape(-1).astype(np.int64)


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


_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _hex(values: np.ndarray, digits: int) -> np.ndarray:
    """Uppercase hex of unsigned integers, ``digits`` characters each -> (n, digits) uint8."""
    v = values.astype(np.uint64)
    shifts = np.arange(digits - 1, -1, -1, dtype=np.uint64) * np.uint64(4)
    return _HEX[((v[:, None] >> shifts) & np.uint64(0xF)).astype(np.int64)]


def _walk(buf: np.ndarray, segment_start: int, segment: str, begin: int, final: bool
          ) -> tuple[list[int], int, bool, list[Problem]]:
    """Follow the TOTALSIZE chain: record positions, where decoding stopped, end-of-file seen, problems."""
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
    table = _decode_records(buf, np.asarray(positions, dtype=np.int64), segment_start, segment, body_topics, problems)
    return SegmentDecode(table, end, complete, problems)


def _decode_records(buf: np.ndarray, pos: np.ndarray, segment_start: int, segment: str,
                    body_topics: frozenset[str], problems: list[Problem]) -> pa.Table:
    n = len(pos)
    if n == 0:
        return SCHEMA.empty_table()
    size = _be(buf, pos, 4)
    magic = _be(buf, pos + 4, 4)
    queue_id = _be(buf, pos + 12, 4)
    queue_offset = _be(buf, pos + 20, 8)
    phys = _be(buf, pos + 28, 8)
    sys_flag = _be(buf, pos + 36, 4)
    born_ts = _be(buf, pos + 40, 8)
    bh_len = np.where(sys_flag & BORNHOST_V6, 20, 8)
    sh_len = np.where(sys_flag & STOREHOST_V6, 20, 8)
    born_host_pos = pos + 48
    store_ts_pos = born_host_pos + bh_len
    store_ts = _be(buf, store_ts_pos, 8)
    store_host_pos = store_ts_pos + 8
    reconsume_pos = store_host_pos + sh_len
    reconsume = _be(buf, reconsume_pos, 4)
    body_len_pos = reconsume_pos + 12
    body_len = _be(buf, body_len_pos, 4)
    body_pos = body_len_pos + 4
    topic_len_pos = body_pos + body_len
    v2 = magic == MAGIC_V2
    topic_len = np.where(v2, _be(buf, topic_len_pos, 2), _be(buf, topic_len_pos, 1) & 0xFF)
    topic_pos = topic_len_pos + np.where(v2, 2, 1)
    props_len_pos = topic_pos + topic_len
    props_len = _be(buf, props_len_pos, 2) & 0xFFFF
    props_pos = props_len_pos + 2

    # A record whose fields do not add up to its size is corrupt even though its header looked fine.
    consistent = (props_pos + props_len - pos) == size
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

    topic = _strings(*_gather(buf, topic_pos, topic_len))
    props, uniq, keys, tags = _properties(buf, props_pos, props_len)
    born_host = _hosts(buf, born_host_pos, bh_len)
    store_host = _hosts(buf, store_host_pos, sh_len)
    msg_id = _offset_msg_ids(buf, store_host_pos, sh_len, phys)
    body = _bodies(buf, topic, body_topics, body_pos, body_len, sys_flag, pos, segment, problems)
    ts = pa.timestamp("ms", tz="UTC")
    return pa.Table.from_arrays([
        pa.array(phys, pa.int64()), topic, pa.array(queue_id.astype(np.int32)), pa.array(queue_offset, pa.int64()),
        pa.array(store_ts, ts), pa.array(born_ts, ts), uniq, keys, tags, pa.array(reconsume.astype(np.int32)),
        props, pa.array(size.astype(np.int32)), pa.array(sys_flag.astype(np.int32)), born_host, store_host, msg_id,
        pa.array(np.full(n, segment, dtype=object), pa.string()), body,
    ], schema=SCHEMA)


def _properties(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
                ) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """Split every ``name\\x01value\\x02`` blob at once; returns the map column and UNIQ_KEY, KEYS, TAGS."""
    n = len(starts)
    data, rec_off = _gather(buf, starts, lengths)
    p2 = np.flatnonzero(data == 2)
    # a blob that does not end in \x02 (older writers) still ends its last pair at the end of the blob
    ends_bad = (lengths > 0) & (data[np.maximum(rec_off[1:] - 1, 0)] != 2) if len(data) else np.zeros(n, bool)
    if ends_bad.any():
        p2 = np.sort(np.concatenate([p2, rec_off[1:][ends_bad]]))
    pair_end = p2
    # a pair starts right after the previous \x02, or at the start of its record's blob
    prev = np.concatenate([[-1], pair_end[:-1]]) + 1
    rec_of_end = np.searchsorted(rec_off, pair_end, side="right") - 1
    pair_start = np.maximum(prev, rec_off[rec_of_end])
    nonempty = pair_end > pair_start
    pair_start, pair_end, rec = pair_start[nonempty], pair_end[nonempty], rec_of_end[nonempty]
    p1 = np.flatnonzero(data == 1)
    sep = p1[np.minimum(np.searchsorted(p1, pair_start), max(len(p1) - 1, 0))] if len(p1) else np.full(len(pair_start), -1)
    has_sep = (sep >= pair_start) & (sep < pair_end) if len(p1) else np.zeros(len(pair_start), bool)
    pair_start, pair_end, rec, sep = pair_start[has_sep], pair_end[has_sep], rec[has_sep], sep[has_sep]
    keys = _strings(*_gather(data, pair_start, sep - pair_start))
    values = _strings(*_gather(data, sep + 1, pair_end - sep - 1))
    counts = np.bincount(rec, minlength=n)
    map_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_off[1:])
    props = pa.MapArray.from_arrays(pa.array(map_off), keys, values)
    pair_index = np.arange(len(rec))

    def column(name: str) -> pa.Array:
        hit = pc.equal(keys, name).to_numpy(zero_copy_only=False)
        idx = np.full(n, -1, dtype=np.int64)
        idx[rec[hit]] = pair_index[hit]
        return values.take(pa.array(idx, mask=idx < 0))

    return props, column("UNIQ_KEY"), column("KEYS"), column("TAGS")


def _hosts(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """``ip:port`` strings; formatted once per distinct host."""
    n = len(starts)
    v4 = lengths == 8
    out = np.empty(n, dtype=object)
    if v4.any():
        s = starts[v4]
        ip = (_be(buf, s, 4) & 0xFFFFFFFF).astype(np.uint64)
        port = (_be(buf, s + 4, 4) & 0xFFFFFFFF).astype(np.uint64)
        key = (ip << np.uint64(32)) | port
        uniq, inv = np.unique(key, return_inverse=True)
        text = np.array([f"{socket.inet_ntoa(struct.pack('>I', int(k) >> 32))}:{struct.unpack('>i', struct.pack('>I', int(k) & 0xFFFFFFFF))[0]}" for k in uniq],
                        dtype=object)
        out[v4] = text[inv]
    for i in np.flatnonzero(~v4):
        s = int(starts[i])
        out[i] = f"{socket.inet_ntop(socket.AF_INET6, bytes(buf[s:s + 16]))}:{struct.unpack('>i', bytes(buf[s + 16:s + 20]))[0]}"
    return pa.array(out, pa.string())


def _offset_msg_ids(buf: np.ndarray, store_host_pos: np.ndarray, sh_len: np.ndarray, phys: np.ndarray) -> pa.Array:
    """``MessageDecoder.createMessageId``: hex of store IP + port + physical offset (32 or 56 characters)."""
    n = len(phys)
    v4 = sh_len == 8
    if v4.all():
        chars = np.concatenate([_hex(_be(buf, store_host_pos, 4) & 0xFFFFFFFF, 8),
                                _hex(_be(buf, store_host_pos + 4, 4) & 0xFFFFFFFF, 8), _hex(phys, 16)], axis=1)
        return pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 32),
                                           pa.py_buffer(np.ascontiguousarray(chars).reshape(-1)))
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
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    pos = begin
    while True:
        hi = min(size, pos + chunk_bytes)
        final = hi >= size
        chunk = mm[pos:hi]
        res = decode_segment(chunk, segment_start=start + pos, segment=name, final=final, body_topics=body_topics)
        for i, p in enumerate(res.problems):
            res.problems[i] = Problem(p.source_path, p.position + pos, p.reason.replace(
                f"at byte {p.position}", f"at byte {p.position + pos}"))
        res.end += pos
        stop = res.complete or final or res.end == pos or res.end < hi and not res.table.num_rows and not res.problems
        yield res
        if res.complete or final:
            return
        if res.end == pos:  # nothing fit in a whole chunk: a record larger than the chunk
            chunk_bytes *= 2
            continue
        pos = res.end
        if stop and res.end < hi:
            return
