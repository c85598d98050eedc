"""RocketMQ commitlog segments: the record layout and its decoder (formats §6).

Decoding runs in numba-compiled kernels (compiled on first use and cached in ``__pycache__``), with no Python
object per record: the TOTALSIZE chain (the only sequential dependency) is followed in many stretches side by
side, then one pass over the records reads every fixed field, cuts out the topic and splits the properties
into pairs and UNIQ_KEY / KEYS / TAGS, and small kernels format hosts and offsetMsgIds. The kernels write Arrow
layouts (bytes + offsets) that become the table's columns without another copy. Records are decoded in batches
of ``_BATCH`` (string offsets are int32). Mirrors ``MessageDecoder.decode`` /
``CommitLog.checkMessageAndReturnSize``; anything unusual goes through the record-by-record walk.

Bad records (bad magic, a size that runs past the segment, a physical offset that does not match the
record's position, field lengths that do not add up to the size) are reported with segment and byte position;
decoding resumes at the next position where a valid record starts, so corruption loses only the corrupted
records.

The constants of the layout (magic codes, flags, separators) are declared here once; the encoder the simulator,
the fault corpus and the benchmarks write stores with, :mod:`jobs.formats.commitlog_encode`, imports them.
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
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from jobs.problems import Problem

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

COMPRESSED = 0x1
INNER_BATCH = 0x80  # MessageSysFlag.INNER_BATCH_FLAG: the body is a batch of inner messages
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


# ------------------------------------------------------------------------------------------- decoding


@dataclass
class SegmentDecode:
    """What one decode call found: the records, where to resume, whether the segment is finished."""

    table: pa.Table
    end: int
    complete: bool
    problems: list[Problem] = field(default_factory=list)
    cut: bool = False  # stopped at damage with no valid record after it: the next copy is read from ``end``


def _as_array(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """The bytes as one read-only, contiguous uint8 array: the single array type the kernels are compiled for."""
    if isinstance(data, np.ndarray):
        # a plain ndarray (not an np.memmap subclass), viewed as bytes
        buf = np.ascontiguousarray(np.asarray(data).reshape(-1)).view(np.uint8)
    else:
        buf = np.frombuffer(data, dtype=np.uint8)
    if buf.flags.writeable:
        buf = buf.view()
        buf.flags.writeable = False
    return buf


# ---- kernels. The byte-level loops are numba-compiled (on first use, or loaded from the cache in __pycache__):
# following the size chain, reading each record's fields, splitting properties and formatting hosts and message
# ids are per-record branches and sequential scans that numpy could only express as many passes over the data.
# Python keeps the rare paths (problem reports, IPv6 hosts, bodies) and builds the Arrow columns on the kernels'
# output buffers without copying them.
#
# The kernels read the buffer through the raw loads below (no negative-index wrap-around, unaligned big-endian
# loads in one instruction); every read stays inside the buffer by the same length checks the Java reader makes.


def _address(context, builder, array_type, array, index):  # type: ignore[no-untyped-def]
    return builder.gep(context.make_array(array_type)(context, builder, array).data, [index])


def _load_intrinsic(bits: int, big_endian: bool):  # type: ignore[no-untyped-def]
    @intrinsic
    def load(typingctx, array, index):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            ptr = builder.bitcast(_address(context, builder, signature.args[0], *args), ir.IntType(bits).as_pointer())
            value = builder.load(ptr, align=1)
            if not big_endian:
                return builder.zext(value, ir.IntType(64)) if bits < 64 else value
            if bits > 8:
                value = builder.bswap(value)
            return builder.sext(value, ir.IntType(64)) if bits < 64 else value
        return (types.int64 if big_endian else types.uint64)(array, index), codegen
    return load


_u8 = _load_intrinsic(8, False)  # buf[i]
_be16, _be32, _be64 = (_load_intrinsic(bits, True) for bits in (16, 32, 64))  # Java short / int / long at buf[i]
_le64 = _load_intrinsic(64, False)  # 8 bytes as one word (for scanning and copying)


@intrinsic
def _store64(typingctx, array, index, value):  # type: ignore[no-untyped-def]
    """Store the word ``value`` as 8 bytes at ``array[index]`` (any alignment)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = builder.bitcast(_address(context, builder, signature.args[0], args[0], args[1]),
                              ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()
    return types.void(array, index, types.uint64), codegen


@intrinsic
def _trailing_zeros(typingctx, value):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))
    return types.uint64(types.uint64), codegen


@intrinsic
def _bswap(typingctx, value):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bswap(args[0])
    return types.uint64(types.uint64), codegen


@intrinsic
def _prefetch(typingctx, array, index):  # type: ignore[no-untyped-def]
    """Ask for the cache line of ``array[index]`` ahead of use (``llvm.prefetch``; never faults)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        ptr = builder.bitcast(_address(context, builder, signature.args[0], *args), i8p)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, keep in all cache levels, data
        return context.get_dummy_value()
    return types.void(array, index), codegen


_kernel = njit(cache=True, nogil=True)
_inline = njit(cache=True, nogil=True, inline="always")


@_inline
def _copy(dst: np.ndarray, d: int, src: np.ndarray, s: int, n: int) -> None:
    """``dst[d:d+n] = src[s:s+n]`` a word at a time; may write up to 7 bytes of garbage past ``d+n`` (the output
    buffers have room for it, and the next string overwrites it)."""
    if s + n + 8 <= len(src) and d + n + 8 <= len(dst):
        for k in range(0, n, 8):
            _store64(dst, d + k, _le64(src, s + k))
    else:
        for k in range(n):
            dst[d + k] = _u8(src, s + k)


@_kernel
def _grown(a: np.ndarray, need: int) -> np.ndarray:
    """A copy of ``a`` with room for at least ``need`` items (twice as many as it has, or more).

    Output buffers grow with what is written instead of being sized for the worst case: big short-lived
    allocations make glibc raise its mmap threshold and fragment the heap, and RSS would creep up with the
    size of the segment.
    """
    grown = np.empty(max(need, 2 * len(a)), a.dtype)
    grown[:len(a)] = a
    return grown


_LOW3 = np.uint64(0x0303030303030303)
_HIGH = np.uint64(0x8080808080808080)


@_inline
def _next_separator(buf: np.ndarray, q: int, end: int) -> int:
    """The first position in ``[q, end)`` holding a byte <= 2 (a property separator, or NUL), else ``end``;
    8 bytes at a time."""
    while q + 8 <= end:
        w = _le64(buf, q)
        hit = (w - _LOW3) & ~w & _HIGH  # lowest set bit: the first byte < 3
        if hit:
            return q + np.int64(_trailing_zeros(hit) >> np.uint64(3))
        q += 8
    while q < end and _u8(buf, q) > 2:
        q += 1
    return q


@_inline
def _put_decimal(out: np.ndarray, o: int, v: int) -> int:
    if v < 0:
        out[o] = 45  # '-'
        o += 1
        v = -v
    digits = 1
    t = v
    while t >= 10:
        t //= 10
        digits += 1
    for k in range(digits - 1, -1, -1):
        out[o + k] = 48 + v % 10
        v //= 10
    return o + digits


_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)


@_inline
def _hex8(v: int) -> np.uint64:
    """The low 32 bits of ``v`` as 8 uppercase hex digits, packed as one word in string order."""
    x = np.uint64(v) & np.uint64(0xFFFFFFFF)
    x = ((x << np.uint64(16)) | x) & np.uint64(0x0000FFFF0000FFFF)  # one nibble per byte, in three steps
    x = ((x << np.uint64(8)) | x) & np.uint64(0x00FF00FF00FF00FF)
    x = ((x << np.uint64(4)) | x) & _NIBBLES
    letters = ((x + np.uint64(0x0606060606060606)) >> np.uint64(4)) & np.uint64(0x0101010101010101)  # digit >= 10
    return _bswap(x + np.uint64(0x3030303030303030) + letters * np.uint64(7))


# why _chain stopped
_UNWRITTEN, _END_MARKER, _BUFFER_END, _BAD_MAGIC, _PAST_END, _BAD_PHYS = range(6)


@_kernel
def _chain(buf: np.ndarray, segment_start: int, pos: int, out: np.ndarray, count: int) -> tuple[int, int, int]:
    """Follow TOTALSIZE from ``pos`` while records are valid, appending their positions to ``out[count:]``.

    Returns where it stopped, the new count and why (``CommitLog.checkMessageAndReturnSize``'s checks).
    """
    n = len(buf)
    while pos + 8 <= n:
        size = _be32(buf, pos)
        magic = _be32(buf, pos + 4)
        if size == 0 and magic == 0:
            return pos, count, _UNWRITTEN
        if magic == BLANK_MAGIC:
            return pos, count, _END_MARKER
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < _MIN_RECORD:
            return pos, count, _BAD_MAGIC
        if pos + size > n:
            return pos, count, _PAST_END
        if _be64(buf, pos + 28) != segment_start + pos:
            return pos, count, _BAD_PHYS
        out[count] = pos
        count += 1
        pos += size
    return pos, count, _BUFFER_END


_SYNC_STEP = 32 << 10  # a stretch of the chain starts every 32 KiB ...
_SYNC_WINDOW = 2 << 10  # ... at the first record start in the 2 KiB there
_SIDE_BY_SIDE = 16  # stretches walked together


@_kernel
def _chains(buf: np.ndarray, segment_start: int, begin: int, out: np.ndarray) -> tuple[int, int]:
    """The chain from ``begin``, walked in many stretches side by side: one record at a time it is a chain of
    dependent cache misses; 16 stretches at once keep 16 misses in flight.

    Every ``_SYNC_STEP`` bytes, the first record start (a magic code, and a physical offset field equal to its
    position) in a small window starts a stretch; each must land exactly on the start of the next, so the
    stretches are the chain from ``begin`` (a false start inside a body would never be landed on). Returns the
    number of positions written to ``out`` and where the last stretch starts (the record-by-record walk goes on
    from there), or (-1, begin) when the buffer is small or anything is not a valid record.
    """
    n = len(buf)
    first = begin + _SYNC_STEP
    k = (n - _SYNC_WINDOW - 64 - first) // _SYNC_STEP
    if n - begin < 4 * _SYNC_STEP or k < 1:
        return -1, begin
    starts = np.empty(k + 1, np.int64)
    starts[0] = begin
    m = 1
    for r in range(k):
        w = first + r * _SYNC_STEP
        for c in range(w, w + _SYNC_WINDOW - 4):
            if _u8(buf, c + 4) == 0xDA:
                magic = _be32(buf, c + 4)
                if (magic == MAGIC_V1 or magic == MAGIC_V2) and _be64(buf, c + 28) == segment_start + c:
                    starts[m] = c
                    m += 1
                    break
    if m < 2:
        return -1, begin
    # stretch j has at most (its length / smallest record) records: it writes them from slot (start - begin) // min
    cur = starts[:m - 1].copy()
    count = np.zeros(m - 1, np.int64)
    for g in range(0, m - 1, _SIDE_BY_SIDE):
        moving = True
        while moving:
            moving = False
            for j in range(g, min(g + _SIDE_BY_SIDE, m - 1)):
                p = cur[j]
                if p == starts[j + 1]:
                    continue
                size = _be32(buf, p)
                magic = _be32(buf, p + 4)
                if ((magic != MAGIC_V1 and magic != MAGIC_V2) or size < _MIN_RECORD or p + size > starts[j + 1]
                        or _be64(buf, p + 28) != segment_start + p):
                    return -1, begin
                out[(starts[j] - begin) // _MIN_RECORD + count[j]] = p
                count[j] += 1
                cur[j] = p + size
                moving = True
    total = 0
    for j in range(m - 1):  # close the gaps between the stretches' slots
        base = (starts[j] - begin) // _MIN_RECORD
        for x in range(count[j]):
            out[total] = out[base + x]
            total += 1
    return total, starts[m - 1]


def _crc_tables() -> np.ndarray:
    """CRC-32 (zlib's polynomial) tables for slicing by 8: eight bytes per step instead of one."""
    t = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        t[k] = (t[k - 1] >> 8) ^ t[0][t[k - 1] & 0xFF]
    return t


_CRC_TABLES = _crc_tables()


@_kernel
def _crc_mismatch(buf: np.ndarray, pos: np.ndarray, body_at: np.ndarray, body_len: np.ndarray,
                  t: np.ndarray) -> np.ndarray:
    """Per record: whether CRC32 of its body (``UtilAll.crc32``: the low 31 bits) differs from its BODYCRC field,
    the broker's own check when it recovers a commitlog (``checkCRCOnRecover``)."""
    n = len(pos)
    bad = np.zeros(n, np.bool_)
    for i in range(n):
        s = body_at[i]
        e = s + body_len[i]
        if e <= s:
            continue
        c = np.uint32(0xFFFFFFFF)
        k = s
        while k + 8 <= e:
            one = c ^ (np.uint32(buf[k]) | (np.uint32(buf[k + 1]) << 8) | (np.uint32(buf[k + 2]) << 16)
                       | (np.uint32(buf[k + 3]) << 24))
            two = (np.uint32(buf[k + 4]) | (np.uint32(buf[k + 5]) << 8) | (np.uint32(buf[k + 6]) << 16)
                   | (np.uint32(buf[k + 7]) << 24))
            c = (t[7, one & 0xFF] ^ t[6, (one >> 8) & 0xFF] ^ t[5, (one >> 16) & 0xFF] ^ t[4, one >> 24]
                 ^ t[3, two & 0xFF] ^ t[2, (two >> 8) & 0xFF] ^ t[1, (two >> 16) & 0xFF] ^ t[0, two >> 24])
            k += 8
        while k < e:
            c = t[0, (c ^ buf[k]) & 0xFF] ^ (c >> np.uint32(8))
            k += 1
        crc = np.int64(~c & np.uint32(0x7FFFFFFF))
        bad[i] = crc != np.int64(_be32(buf, pos[i] + 8))
    return bad


@_kernel
def _resync(buf: np.ndarray, segment_start: int, start: int) -> int:
    """The first position >= start where a record plausibly begins (a magic code at +4 and, for a message, a
    physical offset field that matches), or -1."""
    n = len(buf)
    for p in range(start, n - 7):
        b = _u8(buf, p + 4)
        if b != 0xDA and b != 0xCB:  # the first byte of every magic code
            continue
        magic = _be32(buf, p + 4)
        if magic == BLANK_MAGIC:
            return p
        if (magic == MAGIC_V1 or magic == MAGIC_V2) and p + 36 <= n and _be64(buf, p + 28) == segment_start + p:
            return p
    return -1


def first_record_at(data: bytes | memoryview, segment_start: int) -> int:
    """The first position in ``data`` (which starts at physical offset ``segment_start``) where a record plausibly
    begins (:func:`_resync`), or -1: where a piece of a split segment starts decoding (jobs.ingest.decode_tasks)."""
    return int(_resync(_as_array(data), segment_start, 0))


_CUT = Problem("", -1, "")  # _walk's last problem when nothing valid followed the damage


def _walk(buf: np.ndarray, segment_start: int, segment: str, begin: int, final: bool
          ) -> tuple[np.ndarray, int, bool, list[Problem]]:
    """Follow the TOTALSIZE chain: record positions, where decoding stopped, end-of-file seen, problems.

    Same result as walking record by record from ``begin``: the stretches (:func:`_chains`) cover the intact
    bulk of a big buffer, the record-by-record loop the rest and everything unusual.
    """
    n = len(buf)
    if begin < 0:
        raise ValueError(f"begin must be a position in the buffer, not {begin}")
    out = np.empty(max(n - begin, 0) // _MIN_RECORD + 1, dtype=np.int64)  # records never overlap
    count, pos = _chains(buf, segment_start, begin, out)
    if count < 0:
        count, pos = 0, begin
    problems: list[Problem] = []
    while True:
        pos, count, why = _chain(buf, segment_start, pos, out, count)
        if why in (_UNWRITTEN, _BUFFER_END):  # preallocated and not written yet / the end of the buffer
            return out[:count], pos, False, problems
        if why == _END_MARKER:
            return out[:count], pos, True, problems
        size, magic = _HEAD.unpack(bytes(buf[pos:pos + 8]))
        if why == _BAD_PHYS:
            phys = struct.unpack(">q", bytes(buf[pos + 28:pos + 36]))[0]
            reason = (f"record at byte {pos}: physical offset field {phys} does not match its position "
                      f"{segment_start + pos}")
        elif why == _PAST_END:
            if not final:
                return out[:count], pos, False, problems  # continues in the next chunk
            reason = f"record at byte {pos}: size {size} runs past the end of the segment ({n} bytes)"
        else:
            if count:
                # The record before ends here, but no record starts here: if one starts inside the record before,
                # that record's size field is what is damaged; it alone is lost.
                prev = int(out[count - 1])
                inner = int(_resync(buf, segment_start, prev + 1))
                if prev < inner < pos:
                    prev_size = _HEAD.unpack(bytes(buf[prev:prev + 8]))[0]
                    problems.append(Problem(segment, prev, f"record at byte {prev}: size field {prev_size} runs over "
                                            f"the next record at byte {inner}; record skipped"))
                    count -= 1
                    pos = inner
                    continue
            reason = f"record at byte {pos}: bad magic code {magic & 0xFFFFFFFF:#010x} (size field {size})"
        nxt = int(_resync(buf, segment_start, pos + 1))
        if nxt < 0:
            # Nothing valid follows: a copy cut short or damaged at its end (a sync that copied part of the file).
            # Decoding resumes here with the next copy of the segment, which may hold these bytes intact: ending at
            # the copy's end instead lost the records it held there (and blamed the intact copy for the cut).
            problems.append(Problem(segment, pos, reason + "; no valid record after it in this copy: the segment's "
                                    "next copy is read from here"))
            return out[:count], pos, False, problems + [_CUT]
        problems.append(Problem(segment, pos, reason + "; skipped to the next valid record"))
        pos = nxt


@_kernel
def _pick(data: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strings ``index`` of the string array (``data``, ``offsets``); index -1 gives an empty string."""
    n = len(index)
    out_offsets = np.empty(n + 1, np.int32)
    out_offsets[0] = 0
    for i in range(n):
        j = index[i]
        out_offsets[i + 1] = out_offsets[i] + (offsets[j + 1] - offsets[j] if j >= 0 else 0)
    out = np.empty(out_offsets[n] + 8, np.uint8)
    for i in range(n):
        j = index[i]
        if j >= 0:
            _copy(out, out_offsets[i], data, offsets[j], offsets[j + 1] - offsets[j])
    return out[:out_offsets[n]], out_offsets


@_kernel
def _host_texts(keys: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a.b.c.d:port`` for each IPv4 address + int port (given as the long they make; ``inet_ntoa`` and Java's
    signed int); empty where ``skip`` (IPv6 hosts, done by the caller).

    A host met before is copied from where it was first written (a small direct-mapped cache of (host, text
    offset, text length)), so the few hosts of a log are formatted once per batch.
    """
    n = len(keys)
    out = np.empty(n * 27 + 32, np.uint8)  # 255.255.255.255:-2147483648, and room for a 32-byte copy
    offsets = np.empty(n + 1, np.int32)
    offsets[0] = 0
    seen = np.full((64, 3), -1, np.int64)
    o = 0
    for i in range(n):
        key = keys[i]
        slot = ((key * -7046029254386353131) >> 58) & 63
        if skip[i]:
            pass
        elif seen[slot, 1] >= 0 and seen[slot, 0] == key:
            for w in range(0, 32, 8):
                _store64(out, o + w, _le64(out, seen[slot, 1] + w))
            o += seen[slot, 2]
        else:
            start = o
            for b in range(4):
                o = _put_decimal(out, o, (key >> (56 - 8 * b)) & 255)
                out[o] = 46 if b < 3 else 58  # '.' ':'
                o += 1
            o = _put_decimal(out, o, (key << 32) >> 32)
            seen[slot, 0] = key
            seen[slot, 1] = start
            seen[slot, 2] = o - start
        offsets[i + 1] = o
    return out[:o], offsets


@_kernel
def _msg_ids(buf: np.ndarray, store_key: np.ndarray, store_at: np.ndarray, v6: np.ndarray, phys: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """``MessageDecoder.createMessageId``: uppercase hex of the store host's bytes (IP + port) and the physical
    offset: 32 characters for IPv4, 56 for IPv6."""
    n = len(phys)
    offsets = np.empty(n + 1, np.int32)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + (56 if v6[i] else 32)
    out = np.empty(offsets[n], np.uint8)
    for i in range(n):
        o = offsets[i]
        if v6[i]:
            for x in range(20):
                b = np.int64(_u8(buf, store_at[i] + x))
                out[o + 2 * x] = (b >> 4) + 48 if b >> 4 < 10 else (b >> 4) + 55
                out[o + 2 * x + 1] = (b & 15) + 48 if b & 15 < 10 else (b & 15) + 55
            o += 40
        else:
            _store64(out, o, _hex8(store_key[i] >> 32))
            _store64(out, o + 8, _hex8(store_key[i]))
            o += 16
        _store64(out, o, _hex8(phys[i] >> 32))
        _store64(out, o + 8, _hex8(phys[i]))
    return out, offsets


@_kernel
def _topics_in(topic: np.ndarray, topic_off: np.ndarray, wanted: np.ndarray, wanted_off: np.ndarray,
               prefix: np.ndarray) -> np.ndarray:
    """Whether each topic is one of the ``wanted`` ones (both as string bytes + offsets), or starts with one whose
    ``prefix`` flag is set."""
    n = len(topic_off) - 1
    out = np.zeros(n, np.bool_)
    for i in range(n):
        a, length = topic_off[i], topic_off[i + 1] - topic_off[i]
        for w in range(len(wanted_off) - 1):
            b = wanted_off[w]
            wl = wanted_off[w + 1] - b
            if wl == length or (prefix[w] and wl <= length):
                x = 0
                while x < wl and topic[a + x] == wanted[b + x]:
                    x += 1
                if x == wl:
                    out[i] = True
                    break
    return out


_AHEAD = 8  # records prefetched ahead of the one being decoded
# the property names with columns of their own, as Java would read their bytes as a long / an int
_UNIQ_KEY, _KEYS, _TAGS = (int.from_bytes(name, "big", signed=True) for name in (b"UNIQ_KEY", b"KEYS", b"TAGS"))


@_kernel
def _decode_kernel(buf: np.ndarray, pos: np.ndarray) -> tuple:  # type: ignore[type-arg]
    """Decode the records at ``pos`` (``MessageDecoder.decode``) in one pass over their bytes.

    Returns ``ok`` per record (False: its field lengths do not add up to its size, so it is left out) and, for
    the others, the fixed fields, where the body and store host are, the hosts' first 8 bytes (an IPv4 host's
    address and port) and, as Arrow string layouts (bytes + int32 offsets), the topic and the properties:
    ``name\\x01value\\x02`` pairs; a pair ends at ``\\x02`` or at the end of the blob (older writers leave the last
    ``\\x02`` out), its name at its first ``\\x01``, and a pair without ``\\x01`` is skipped. ``named`` gives, per
    record, the pair of the last UNIQ_KEY, KEYS and TAGS (-1: none).

    One pass with no per-field loops: the bytes of records a few ahead are prefetched while the current one is
    decoded, and properties are scanned 8 bytes at a time.

    Lengths read from a corrupt record may point anywhere: as in the reader, positions are clipped to the buffer
    before reading; a topic that would run past the buffer makes the record corrupt.
    """
    n = len(pos)
    nb = len(buf)
    last = nb - 2
    ok = np.empty(n, np.bool_)
    kept = np.empty(n, np.int64)
    size = np.empty(n, np.int32)
    queue_id = np.empty(n, np.int32)
    queue_offset = np.empty(n, np.int64)
    phys = np.empty(n, np.int64)
    sys_flag = np.empty(n, np.int32)
    born_ts = np.empty(n, np.int64)
    store_ts = np.empty(n, np.int64)
    reconsume = np.empty(n, np.int32)
    body_at = np.empty(n, np.int64)
    body_len = np.empty(n, np.int64)
    # string columns: sized for typical records, doubled when full (see _grown)
    topic = np.empty(n * 24 + 8, np.uint8)
    topic_off = np.empty(n + 1, np.int32)
    map_off = np.empty(n + 1, np.int32)
    key = np.empty(n * 48 + 8, np.uint8)
    key_off = np.empty(n * 8 + 1, np.int32)
    val = np.empty(n * 96 + 8, np.uint8)
    val_off = np.empty(n * 8 + 1, np.int32)
    named = np.full((3, n), -1, np.int32)  # the pairs that give UNIQ_KEY, KEYS, TAGS
    born_key = np.empty(n, np.int64)  # IPv4 hosts: address and port as one long
    store_key = np.empty(n, np.int64)
    store_at = np.empty(n, np.int64)
    topic_off[0] = map_off[0] = key_off[0] = val_off[0] = 0
    j = 0  # records kept
    k = 0  # pairs
    for i in range(n):
        if i + _AHEAD + 1 < n:  # the header of a record ahead, and its tail (topic, properties) before the next one
            ahead, after = pos[i + _AHEAD], pos[i + _AHEAD + 1]
            _prefetch(buf, ahead)
            _prefetch(buf, ahead + 64)
            for back in range(1, 320, 64):
                if after - back > ahead + 64:
                    _prefetch(buf, after - back)
        p = pos[i]
        sz = _be32(buf, p)
        flag = _be32(buf, p + 36)
        st = p + 48 + (20 if flag & BORNHOST_V6 else 8)  # store timestamp, then store host
        rc = st + 8 + (20 if flag & STOREHOST_V6 else 8)  # reconsume times
        if rc + 16 > nb:  # IPv6 host flags on a record too short for them, at the very end of the buffer
            ok[i] = False
            continue
        bl = _be32(buf, rc + 12)
        t = min(max(rc + 16 + bl, 0), last)
        if _be32(buf, p + 4) == MAGIC_V2:
            tl = _be16(buf, t)
            t += 2
        else:
            tl = np.int64(_u8(buf, t))
            t += 1
        pr = min(max(t + tl, 0), last)
        pl = _be16(buf, pr) & 0xFFFF
        pr += 2
        ok[i] = pr + pl - p == sz and bl >= 0 and tl >= 0 and t + tl <= nb
        if not ok[i]:
            continue
        kept[j] = p
        size[j] = sz
        queue_id[j] = _be32(buf, p + 12)
        queue_offset[j] = _be64(buf, p + 20)
        phys[j] = _be64(buf, p + 28)
        sys_flag[j] = flag
        born_ts[j] = _be64(buf, p + 40)
        store_ts[j] = _be64(buf, st)
        reconsume[j] = _be32(buf, rc)
        body_at[j] = rc + 16
        body_len[j] = bl
        if topic_off[j] + tl + 8 > len(topic):
            topic = _grown(topic, topic_off[j] + tl + 8)
        _copy(topic, topic_off[j], buf, t, tl)
        topic_off[j + 1] = topic_off[j] + tl
        # properties: this record's pairs take at most pl bytes and pl // 2 + 1 pairs
        if key_off[k] + pl + 8 > len(key):
            key = _grown(key, key_off[k] + pl + 8)
        if val_off[k] + pl + 8 > len(val):
            val = _grown(val, val_off[k] + pl + 8)
        if k + pl // 2 + 2 > len(key_off):
            key_off = _grown(key_off, k + pl // 2 + 2)
            val_off = _grown(val_off, k + pl // 2 + 2)
        q = pr
        end = pr + pl
        while q < end:
            start = q
            sep = -1
            while True:  # to the \x02 that ends the pair (or the end), noting the first \x01
                q = _next_separator(buf, q, end)
                if q >= end or _u8(buf, q) == 2:
                    break
                if sep < 0 and _u8(buf, q) == 1:
                    sep = q
                q += 1
            if start < sep < q - 1:  # string2messageProperties keeps a pair only with a name and a value
                nl = sep - start
                vl = q - sep - 1
                _copy(key, key_off[k], buf, start, nl)
                _copy(val, val_off[k], buf, sep + 1, vl)
                key_off[k + 1] = key_off[k] + nl
                val_off[k + 1] = val_off[k] + vl
                if nl == 8 and _be64(buf, start) == _UNIQ_KEY:  # a name given twice: the last pair wins
                    named[0, j] = k
                elif nl == 4 and _be32(buf, start) == _KEYS:
                    named[1, j] = k
                elif nl == 4 and _be32(buf, start) == _TAGS:
                    named[2, j] = k
                k += 1
            q += 1  # past the \x02
        map_off[j + 1] = k
        born_key[j] = _be64(buf, p + 48)
        store_key[j] = _be64(buf, st + 8)
        store_at[j] = st + 8
        j += 1
    return (ok, kept[:j], size[:j], queue_id[:j], queue_offset[:j], phys[:j], sys_flag[:j], born_ts[:j],
            store_ts[:j], reconsume[:j], body_at[:j], body_len[:j],
            topic[:topic_off[j]], topic_off[:j + 1], map_off[:j + 1],
            key[:key_off[k]], key_off[:k + 1], val[:val_off[k]], val_off[:k + 1],
            named[:, :j], born_key[:j], store_key[:j], store_at[:j])


# ------------------------------------------------------------------------------------------- records


def _strings(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None = None,
             check: bool = True) -> pa.StringArray:
    """A string array on the kernels' buffers (no copy); ``valid`` marks the non-null slots; ``check``: see
    :func:`_utf8` (not needed for the texts the kernels write themselves: hosts, message ids)."""
    n = len(offsets) - 1
    if valid is None or valid.all():
        arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    else:
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap, n - int(valid.sum()))
    return _utf8(arr) if check else arr


def _utf8(arr: pa.StringArray) -> pa.StringArray:
    """``arr`` if every value is UTF-8; else its values read as the broker reads them (``new String(bytes, UTF_8)``:
    each malformed sequence becomes U+FFFD). Topics and properties are not covered by the record's CRC, so damaged
    bytes reach here; unchecked, one such value failed the whole load (the Parquet writer refuses it)."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace")
                         for v in arr.view(pa.binary()).to_pylist()], pa.string())


def _constant_strings(value: str, n: int) -> pa.Array:
    raw = value.encode("utf-8")
    return pa.StringArray.from_buffers(n, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)),
                                       pa.py_buffer(raw * n))


def decode_segment(data: bytes | memoryview | np.ndarray, *, segment_start: int, segment: str, begin: int = 0,
                   final: bool = True, body_topics: frozenset[str] = frozenset({TRACE_TOPIC})) -> SegmentDecode:
    """Decode the records of one commitlog segment (or a chunk of it) from byte ``begin``.

    Args:
        data: the segment bytes (or a chunk that starts at physical offset ``segment_start``).
        segment_start: physical offset of ``data[0]``.
        segment: the name reported in problems (the landing path of the segment).
        begin: byte position in ``data`` to start at (where the previous run stopped).
        final: whether ``data`` ends where the file ends; if not, a record cut at the end is left for the next chunk.
        body_topics: topics whose bodies are kept (decompressed), a name ending in ``*`` a prefix; other bodies
            are dropped.

    Returns:
        records, ``end`` (the byte position to resume from), ``complete`` (end-of-file marker reached), problems.
    """
    buf = _as_array(data)
    positions, end, complete, problems = _walk(buf, segment_start, segment, begin, final)
    cut = bool(problems) and problems[-1] is _CUT
    if cut:
        problems = problems[:-1]
    body_problems: list[Problem] = []
    tables = []
    for i in range(0, max(len(positions), 1), _BATCH):  # string offsets are int32: batches stay far below 2 GiB
        tables.append(_decode_records(buf, positions[i:i + _BATCH], segment, body_topics, problems, body_problems))
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return SegmentDecode(table, end, complete, problems + body_problems, cut)


_BATCH = 1 << 15  # records decoded together (their properties are < 64 KiB each: under 2 GiB of strings)
_TS = pa.timestamp("ms", tz="UTC")


def _decode_records(buf: np.ndarray, pos_all: np.ndarray, segment: str, body_topics: frozenset[str],
                    problems: list[Problem], body_problems: list[Problem]) -> pa.Table:
    """The table of the records at ``pos_all``; problems for those whose fields do not add up."""
    if len(pos_all) == 0:
        return SCHEMA.empty_table()
    (ok, pos, size, queue_id, queue_offset, phys, sys_flag, born_ts, store_ts, reconsume, body_at, body_len,
     topic, topic_off, map_off, key, key_off, val, val_off, named, born_key, store_key, store_at
     ) = _decode_kernel(buf, pos_all)
    if not ok.all():  # a record whose fields do not add up to its size is corrupt though its header looked fine
        for p in pos_all[~ok].tolist():
            problems.append(Problem(segment, p, f"record at byte {p}: field lengths do not add up to its size; "
                                    "record skipped"))
    n = len(pos)
    if n == 0:
        return SCHEMA.empty_table()
    topic_col = _strings(topic, topic_off)
    raw_values = _strings(val, val_off, check=False)
    values = _utf8(raw_values)
    props = pa.MapArray.from_arrays(pa.array(map_off), _strings(key, key_off), values)
    # whole property values: valid when every value is
    uniq, keys, tags = (_strings(*_pick(val, val_off, pair), valid=pair >= 0, check=values is not raw_values)
                        for pair in named)
    born_v6, store_v6 = (sys_flag & BORNHOST_V6) != 0, (sys_flag & STOREHOST_V6) != 0
    born_host = _strings(*_host_texts(born_key, born_v6), check=False)
    store_host = _strings(*_host_texts(store_key, store_v6), check=False)
    msg_id = _strings(*_msg_ids(buf, store_key, store_at, store_v6, phys), check=False)
    if born_v6.any() or store_v6.any():
        born_host = _with_ipv6(buf, born_host, pos + 48, born_v6)
        store_host = _with_ipv6(buf, store_host, store_at, store_v6)
    crc_bad = _crc_mismatch(buf, pos, body_at, body_len, _CRC_TABLES)
    for i in np.flatnonzero(crc_bad).tolist():
        p, s, ln = int(pos[i]), int(body_at[i]), int(body_len[i])
        crc, stored = zlib.crc32(bytes(buf[s:s + ln])) & 0x7FFFFFFF, _HEAD.unpack(bytes(buf[p + 4:p + 12]))[1]
        body_problems.append(Problem(segment, p, f"record at byte {p}: body CRC {crc} does not match the stored "
                                     f"{stored} (body or CRC damaged in this copy); header kept, body not used"))
    body = _bodies(buf, (topic, topic_off), body_topics, body_at, body_len, sys_flag, pos, segment, body_problems,
                   crc_bad)
    return pa.Table.from_arrays([
        pa.array(phys), topic_col, pa.array(queue_id), pa.array(queue_offset), pa.array(store_ts, _TS),
        pa.array(born_ts, _TS), uniq, keys, tags, pa.array(reconsume), props, pa.array(size), pa.array(sys_flag),
        born_host, store_host, msg_id, _constant_strings(segment, n), body,
    ], schema=SCHEMA)


def _with_ipv6(buf: np.ndarray, hosts: pa.Array, starts: np.ndarray, v6: np.ndarray) -> pa.Array:
    """The host column with its IPv6 slots (left empty by _host_texts) filled in: ``inet_ntop`` + signed int port."""
    out = hosts.to_pylist()
    for i in np.flatnonzero(v6):
        s = int(starts[i])
        out[i] = (f"{socket.inet_ntop(socket.AF_INET6, bytes(buf[s:s + 16]))}:"
                  f"{struct.unpack('>i', bytes(buf[s + 16:s + 20]))[0]}")
    return pa.array(out, pa.string())


def _bodies(buf: np.ndarray, topic: tuple[np.ndarray, np.ndarray], body_topics: frozenset[str], body_pos: np.ndarray,
            body_len: np.ndarray, sys_flag: np.ndarray, pos: np.ndarray, segment: str, problems: list[Problem],
            crc_bad: np.ndarray) -> pa.Array:
    """The bodies of the records whose topic (bytes, offsets) is one of ``body_topics``, and of every ``INNER_BATCH``
    record (its inner messages are the messages a consumer sees: jobs.formats.inner_batch), decompressed; else null.

    A body whose CRC32 does not match the record's BODYCRC (``crc_bad``) is dropped.
    """
    n = len(body_pos)
    inner = (sys_flag.astype(np.int64) & INNER_BATCH) != 0
    if not body_topics and not inner.any():
        return pa.nulls(n, pa.binary())
    # a name ending in "*" is a prefix (rmq_sys_REVIVE_LOG_*: the revive topic is named by the broker's cluster)
    names = [t.rstrip("*").encode("utf-8") for t in sorted(body_topics)]
    wanted = (_topics_in(*topic, np.frombuffer(b"".join(names), np.uint8),
                         np.cumsum([0] + [len(t) for t in names]).astype(np.int64),
                         np.array([t.endswith("*") for t in sorted(body_topics)], np.bool_))
              if body_topics else np.zeros(n, np.bool_)) | inner
    keep = wanted & ~crc_bad  # a body whose CRC does not match is reported by the caller and not trusted
    plain = keep & ((sys_flag & COMPRESSED) == 0)
    # the plain bodies gathered in one numpy pass (one Python object per body was most of this function's time)
    lens = np.where(plain, body_len, 0).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    gather = np.repeat(body_pos.astype(np.int64) - offsets[:-1], lens) + np.arange(offsets[-1], dtype=np.int64)
    valid = pa.py_buffer(np.packbits(keep, bitorder="little").tobytes())
    out = pa.Array.from_buffers(pa.binary(), n, [valid, pa.py_buffer(offsets.astype(np.int32).tobytes()),
                                                 pa.py_buffer(buf[gather].tobytes())])
    packed = np.flatnonzero(keep & ~plain)
    if not len(packed):
        return out
    bodies: list[bytes | None] = out.to_pylist()
    for i in packed.tolist():
        flag = int(sys_flag[i])
        s, ln = int(body_pos[i]), int(body_len[i])
        try:
            bodies[i] = decompress_body(bytes(buf[s:s + ln]), (flag & COMPRESSION_MASK) >> COMPRESSION_SHIFT)
        except Exception as exc:  # noqa: BLE001 - an undecodable body is quarantined, not fatal
            problems.append(Problem(segment, int(pos[i]), f"record at byte {int(pos[i])}: compressed body cannot "
                                    f"be decompressed ({type(exc).__name__}); body dropped"))
            bodies[i] = None
    return pa.array(bodies, pa.binary())


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
