"""RocketMQ consume queue files: 20-byte entries ``[commitlog offset][size][tags code]`` (formats §6).

The queue bounds of spec §4 come from here: Max is the index after the last valid entry (preallocated space
is zero-filled, so decoding stops at the first entry with offset < 0 or size <= 0), Min is the first entry
whose message is still in a retained commitlog segment, as the broker's ``correctMinOffset`` computes it.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from jobs.problems import Problem

CQ_STORE_UNIT_SIZE = 20
DEFAULT_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE
_ENTRY = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
# Entries up to this many bytes (3,276) are searched in one read, not 8 bytes a step: one request, not a dozen (a GET
# each for a store copy on S3). More are searched a step at a time: a real broker's 300,000-entry file, and an export's
# file, whose bytes a read puts together from its pieces (one read of 128 KiB cost more than the steps, stop 73)
SEARCH_READ_BYTES = 64 << 10


@dataclass
class CQDecode:
    """The valid entries of one consume queue file."""

    commit_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    first_index: int
    file_start_byte: int
    problems: list[Problem] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.commit_offset)

    @property
    def end_index(self) -> int:
        return self.first_index + self.count


def encode_cq_entry(physical_offset: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">qiq", physical_offset, size, tags_code)


def decode_cq(data: bytes | memoryview | np.ndarray, *, file_start_byte: int, source_path: str = "") -> CQDecode:
    """Entries up to the first invalid one (zero-filled preallocation); any file size."""
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    problems: list[Problem] = []
    whole = len(raw) // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE
    if whole != len(raw):
        problems.append(Problem(source_path, whole, f"file size {len(raw)} is not a multiple of 20: "
                                f"trailing {len(raw) - whole} bytes ignored"))
    entries = raw[:whole].view(_ENTRY)
    bad = np.flatnonzero((entries["offset"] < 0) | (entries["size"] <= 0))
    n = int(bad[0]) if len(bad) else len(entries)
    e = entries[:n]
    return CQDecode(e["offset"].astype(np.int64), e["size"].astype(np.int64), e["tags"].astype(np.int64),
                    file_start_byte // CQ_STORE_UNIT_SIZE, file_start_byte, problems)


@dataclass(frozen=True)
class CQSummary:
    """What the queue bounds and the quarantine need of one file's valid entries, without its bytes (the CQ file
    ledger, schemas/cq_files). ``problems``: the size is not a multiple of 20 or the commit offsets are out of order
    (the summary cannot stand in for the entries then)."""

    entries: int
    full: bool
    first_commit_offset: int | None
    last_commit_offset: int | None
    problems: bool


def summarize(data: bytes, decoded: CQDecode | None = None) -> CQSummary:
    """The :class:`CQSummary` of one file's bytes (``decoded``: their :func:`decode_cq`, when already at hand)."""
    d = decoded if decoded is not None else decode_cq(data, file_start_byte=0)
    return CQSummary(d.count, d.count == len(data) // CQ_STORE_UNIT_SIZE, *ends(d))


def ends(d: CQDecode) -> tuple[int | None, int | None, bool]:
    """The first and last commit offsets of decoded entries (None: none) and whether they have problems (a problem
    of their own, or commit offsets out of order)."""
    ordered = d.count < 2 or bool((d.commit_offset[1:] >= d.commit_offset[:-1]).all())
    return (int(d.commit_offset[0]) if d.count else None, int(d.commit_offset[-1]) if d.count else None,
            bool(d.problems) or not ordered)


@dataclass(frozen=True)
class QueueFile:
    """One file of a queue as the bounds see it: its decoded entries, or (a file not read) its summary's numbers."""

    first_index: int
    count: int
    full: bool  # count == the file's capacity: the queue goes on in the next file
    commit_offsets: np.ndarray | None = None  # None: not read; first/last stand in
    first_commit_offset: int | None = None
    last_commit_offset: int | None = None
    found: tuple[int, int] | None = None  # (commit offset, its position): a search made without reading the file

    @classmethod
    def of(cls, d: CQDecode, size: int) -> "QueueFile":
        return cls(d.first_index, d.count, d.count >= size // CQ_STORE_UNIT_SIZE, d.commit_offset)

    def position(self, commit_offset: int) -> int:
        """Index in the file of the first entry whose commit offset is >= ``commit_offset`` (``count`` if none)."""
        if self.commit_offsets is not None:
            return int(np.searchsorted(self.commit_offsets, commit_offset, side="left"))
        if not self.count or commit_offset <= (self.first_commit_offset or 0):
            return 0
        if commit_offset > (self.last_commit_offset or 0):
            return self.count
        if self.found is not None and self.found[0] == commit_offset:
            return self.found[1]
        raise ValueError(f"commit offset {commit_offset} falls inside a file that was not read: read it")



def search(read: Callable[[int, int], bytes], count: int, commit_offset: int) -> int:
    """:meth:`QueueFile.position` in a file of ``count`` valid entries in commit-offset order whose first entry points
    below ``commit_offset`` and whose last at or past it, by reading 8 bytes an entry (``read(start, end)``: a byte
    range of the file), about log2(count) of them; entries that fit :data:`SEARCH_READ_BYTES` in one read."""
    if count * CQ_STORE_UNIT_SIZE <= SEARCH_READ_BYTES:
        raw = read(0, count * CQ_STORE_UNIT_SIZE)
        if len(raw) < count * CQ_STORE_UNIT_SIZE:
            raise OSError(f"entries 0-{count - 1}: {len(raw)} of {count * CQ_STORE_UNIT_SIZE} bytes read")
        return int(np.searchsorted(np.frombuffer(raw, _ENTRY)["offset"], commit_offset, side="left"))
    lo, hi = 0, count - 1  # entry lo points below, entry hi at or past
    while hi - lo > 1:
        mid = (lo + hi) // 2
        at = mid * CQ_STORE_UNIT_SIZE
        raw = read(at, at + 8)
        if len(raw) < 8:
            raise OSError(f"entry {mid}: {len(raw)} of 8 bytes read")
        if int.from_bytes(raw, "big", signed=True) >= commit_offset:
            hi = mid
        else:
            lo = mid
    return hi


def bounds(files: Sequence[QueueFile], oldest_commitlog_start: int | None) -> tuple[int, int]:
    """(Min, Max) of one queue from its files in start order; see :func:`queue_bounds`."""
    if not files:
        return 0, 0
    # Entries end at the first invalid one: a file that is not full ends the queue.
    used: list[QueueFile] = []
    for f in files:
        used.append(f)
        if not f.full:
            break
    max_offset = used[-1].first_index + used[-1].count
    for f in used:
        if not f.count:
            continue
        if oldest_commitlog_start is None:
            return f.first_index, max_offset
        k = f.position(oldest_commitlog_start)
        if k < f.count:
            return f.first_index + k, max_offset
    return max_offset, max_offset


def queue_bounds(files: Sequence[tuple[int, bytes]], oldest_commitlog_start: int | None) -> tuple[int, int]:
    """(Min, Max) of one queue from its files (start byte, bytes), spec §4 and docs/semantics.md rule 6.

    Max = index after the last valid entry; Min = index of the first valid entry whose commitlog offset is
    >= the start of the oldest commitlog segment, or the first valid entry without commitlog segments.
    A queue whose entries all point below the oldest segment is empty: Min = Max.
    """
    return bounds([QueueFile.of(decode_cq(data, file_start_byte=start), len(data)) for start, data in sorted(files)],
                  oldest_commitlog_start)


def read_queue_files(directory: str) -> list[tuple[int, bytes]]:
    """All files of one ``consumequeue/<topic>/<queueId>`` folder as (start byte, bytes)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if name.isdigit():
            with open(os.path.join(directory, name), "rb") as f:
                out.append((int(name), f.read()))
    return out


def dangling_entries(cq: CQDecode, record_offsets: np.ndarray, record_sizes: np.ndarray,
                     commitlog_range: tuple[int, int], start: int = 0) -> list[tuple[int, str]]:
    """Entries that point into a decoded record but not at its start, or at a record of another size.
    ``record_offsets``: sorted and unique. ``start``: the entries before it are not checked.

    Returns (byte position in the CQ file, reason) for each, for the quarantine.
    """
    lo, hi = commitlog_range
    offsets = cq.commit_offset[start:]
    inside = np.flatnonzero((offsets >= lo) & (offsets < hi)) + start
    if not len(inside):
        return []
    offs = cq.commit_offset[inside]
    # one binary search per entry (record offsets are unique): the record starting at it, else the one before it
    k = np.searchsorted(record_offsets, offs)
    k_clip = np.minimum(k, max(len(record_offsets) - 1, 0))
    found = (len(record_offsets) > 0) & (record_offsets[k_clip] == offs) if len(record_offsets) else np.zeros(len(offs), bool)
    if len(record_offsets) and found.all() and bool((record_sizes[k_clip] == cq.size[inside]).all()):
        return []  # every entry at a record of its size: the usual file, checked without the steps below
    # An entry that points between records (bytes that were not decoded: a damaged or unreadable stretch, already
    # quarantined with its own position) is not reported again; one that points into a record's bytes is.
    prev = np.where(found, k, k - 1)
    prev_clip = np.maximum(prev, 0)
    in_record = (prev >= 0) & (offs < record_offsets[prev_clip] + record_sizes[prev_clip]) if len(record_offsets) \
        else np.zeros(len(offs), bool)
    out = []
    for j in np.flatnonzero(~found & in_record):
        i = int(inside[j])
        out.append((i * CQ_STORE_UNIT_SIZE, f"entry {cq.first_index + i} points at commitlog offset "
                    f"{int(cq.commit_offset[i])}, where no message starts; entry ignored"))
    same = found.copy()
    same[found] = record_sizes[k_clip[found]] == cq.size[inside[found]]
    for j in np.flatnonzero(found & ~same):
        i = int(inside[j])
        out.append((i * CQ_STORE_UNIT_SIZE, f"entry {cq.first_index + i} says size {int(cq.size[i])} but the message "
                    f"at commitlog offset {int(cq.commit_offset[i])} has size {int(record_sizes[k_clip[j]])}"))
    return sorted(out)


def plain_appends(bodies: Sequence[bytes], after: Sequence[int | None], record_offsets: np.ndarray,
                  record_sizes: np.ndarray, commitlog_range: tuple[int, int] | None
                  ) -> list[tuple[int, int | None, int | None] | None]:
    """Of each of ``bodies`` (entries appended to a queue file whose last earlier entry points at ``after``, None:
    no earlier entry): (valid entries, first and last commit offset) when they are plain, that is whole entries in
    commit-offset order from ``after`` on, none of which :func:`dangling_entries` could report (each entry inside
    ``commitlog_range`` is at a record of its size; None: nothing is checked); None when not plain (the caller then
    decodes and checks it alone, to say what is wrong).

    The checks of every body at once: a scheduled run's files each gained a few entries, and the same steps file by
    file cost about 50 µs each in numpy calls (bench_export: 28,844 grown files, 1.4 s of the queue bounds)."""
    out: list[tuple[int, int | None, int | None] | None] = [None] * len(bodies)
    whole = [i for i, b in enumerate(bodies) if len(b) % CQ_STORE_UNIT_SIZE == 0]
    if not whole:
        return out
    lens = np.array([len(bodies[i]) // CQ_STORE_UNIT_SIZE for i in whole], np.int64)
    e = np.frombuffer(b"".join([bodies[i] for i in whole]), _ENTRY)
    off, size = e["offset"].astype(np.int64), e["size"].astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    ends = starts + lens
    # entries end at the first invalid one (zero-filled preallocation): each body's first at or after its start
    bad = np.flatnonzero((off < 0) | (size <= 0))
    k = np.searchsorted(bad, starts)
    first_bad = np.where(k < len(bad), bad[np.minimum(k, max(len(bad) - 1, 0))] if len(bad) else 0, len(off))
    count = np.minimum(first_bad, ends) - starts
    mark = np.zeros(len(off) + 1, np.int64)
    np.add.at(mark, starts, 1)
    np.add.at(mark, starts + count, -1)
    valid = np.cumsum(mark[:-1]) > 0
    body = np.repeat(np.arange(len(whole)), lens)
    failed = np.zeros(len(whole), bool)
    if len(off) > 1:  # out of order inside one body
        down = (off[1:] < off[:-1]) & valid[1:] & valid[:-1] & (body[1:] == body[:-1])
        failed[body[1:][down]] = True
    if commitlog_range is not None:
        lo, hi = commitlog_range
        inside = np.flatnonzero(valid & (off >= lo) & (off < hi))
        if len(inside):
            if len(record_offsets):
                at = np.minimum(np.searchsorted(record_offsets, off[inside]), len(record_offsets) - 1)
                ok = (record_offsets[at] == off[inside]) & (record_sizes[at] == size[inside])
            else:
                ok = np.zeros(len(inside), bool)
            failed[body[inside[~ok]]] = True
    n_ = count.tolist()
    firsts = off[np.minimum(starts, max(len(off) - 1, 0))].tolist() if len(off) else [0] * len(whole)
    lasts = off[np.maximum(starts + count - 1, 0)].tolist() if len(off) else [0] * len(whole)
    for i, n, bad_, first, last in zip(whole, n_, failed.tolist(), firsts, lasts):
        if bad_ or (n and after[i] is not None and after[i] > first):
            continue
        out[i] = (n, first, last) if n else (0, None, None)
    return out


class ConsumeQueueWriter:
    """Appends entries to one queue's files (named by start byte, preallocated zero-filled)."""

    def __init__(self, directory: str, file_size: int = DEFAULT_FILE_SIZE) -> None:
        if file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError("file_size must be a multiple of 20")
        self.directory = directory
        self.file_size = file_size
        self.next_index = 0
        os.makedirs(directory, exist_ok=True)

    def append(self, physical_offset: int, size: int, tags_code: int) -> int:
        byte = self.next_index * CQ_STORE_UNIT_SIZE
        start = byte - byte % self.file_size
        path = os.path.join(self.directory, f"{start:020d}")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.truncate(self.file_size)
        with open(path, "r+b") as f:
            f.seek(byte - start)
            f.write(encode_cq_entry(physical_offset, size, tags_code))
        self.next_index += 1
        return self.next_index - 1
