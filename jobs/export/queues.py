"""Consume queue files in the export layout: each export ships only the bytes a queue file gained since the last one.

A queue file is preallocated at its full size and filled by appending 20-byte entries, so an export packs, per file,
the bytes from where the last export stopped to the file's last non-zero byte into one object of its folder
(``store-export/queues.bin``). The manifest lists every queue file of the store as *pieces* (the folder holding
them, offset and length in its pack, position in the file) with its size and modification time; the ingest reads
the pieces back as the file, zero-filled to its size (:func:`jobs.ingest.landing.read_file`), so it sees the bytes a
store copy holds.

RocketMQ rewrites a queue file's entries only at its tail (recovery's ``ConsumeQueue.truncateDirtyLogicFiles`` moves
the write position back over the entries past the recovered commitlog): before appending, the exporter compares the
last :data:`CHECKED_TAIL` bytes it shipped with the file's, and ships the whole file again when they differ, when the
file shrank or changed size, after :func:`max_pieces` pieces, and once its oldest piece is older than the reship age
(``--reship-after``, default :data:`RESHIP_AFTER_S`): a broker's export folders are read back that long, so the
landing zone must keep them at least that long.
"""
from __future__ import annotations

import datetime as dt
import errno
import functools
import hashlib
import os
from pathlib import Path
from typing import Any, BinaryIO

import zlib

import numpy as np

from jobs.export import layout
from jobs.formats.consumequeue import CQ_STORE_UNIT_SIZE

# Bytes before the shipped end compared on the host before appending (819 entries). A rewrite is a suffix (truncated
# back, then appended again): it changes or zeroes the last entries shipped unless it wrote the same bytes again. 64 KiB
# until stop 59: hashing it twice a file and run was a fifth of a bulk broker's steady export. An entry in the state
# names the window its digest covers (``tail_bytes``; none: 64 KiB), so a state written before is checked as it was.
CHECKED_TAIL = 16 << 10
LEGACY_TAIL = 64 << 10
# The window's digest is its CRC-32 (``tail_crc32``): 4 us for 16 KiB against 10 us for SHA-256, twice a file and run.
# It guards against the broker's own rewrites, not against anyone forging bytes: a changed window escapes it with a
# chance of 2^-32 per rewrite (and never when the change is a burst of 32 bits or less). An entry written before stop
# 69 names its window's SHA-256 (``tail_sha``) and is checked by it.
MAX_PIECES = 32
# The pieces the host state holds in all (about 180 bytes of memory each, and 90 of JSON in the state and the manifest):
# a broker with many queue files ships each whole again after fewer pieces, so that the exporter's memory does not
# grow with them. 9,792 queue files each gaining an entry a run held 313,000 pieces at 32 a file and peaked at 324 MiB
# (target < 300); 1,224 files keep 32 (stop 69).
PIECES_BUDGET = 100_000
MIN_PIECES = 4
RESHIP_AFTER_S = 24 * 3600


def max_pieces(files: int) -> int:
    """Pieces a queue file may have before it ships whole again, in a store of ``files`` queue files: its share of
    :data:`PIECES_BUDGET`, from :data:`MIN_PIECES` to :data:`MAX_PIECES`."""
    return max(MIN_PIECES, min(MAX_PIECES, PIECES_BUDGET // max(files, 1)))


def data_extent_end(fd: int, lo: int, size: int) -> int:
    """One past the last byte of ``[lo, size)`` that lies in a data extent (``lo`` when none does), by seeking only.
    Holes are what a sparse file has not written, and also a file's allocated but unwritten blocks (``fallocate``:
    the JDK extends a file it maps that way since 8u162, ``FileDispatcherImpl.allocate0``; ext4 and xfs report them
    as holes, while ``st_blocks`` counts them, so a broker's preallocated queue files look dense by their size on
    disk). A filesystem without ``SEEK_DATA`` gives ``size``: every byte is read."""
    end, pos = lo, lo
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or past pos
                break
            return size
        if pos >= size:
            break
        pos = end = min(os.lseek(fd, pos, os.SEEK_HOLE), size)
    return end


def _last_nonzero(buf: bytes | memoryview) -> int:
    """One past the last non-zero byte of ``buf`` (0 when all are zero). Compared 8 bytes at a time, from the end: the
    last 4 KiB first (a queue file's data ends within a block of its read end, or at it), then the rest: 15 us for a
    117 KiB file half full, against 118 us for ``bytes.rstrip``."""
    n8 = len(buf) // 8 * 8
    tail = bytes(buf[n8:]).rstrip(b"\0")
    if tail:
        return n8 + len(tail)
    words = np.frombuffer(buf, np.uint64, count=n8 // 8)
    for lo in (max(0, len(words) - 512), 0):
        nz = words[lo:] != 0
        if nz.any():
            i = lo + len(nz) - 1 - int(nz[::-1].argmax())
            return i * 8 + len(bytes(buf[i * 8:i * 8 + 8]).rstrip(b"\0"))
        words = words[:lo]
    return 0


def _written_past(fd: int, end: int) -> bool:
    """Whether a byte after ``end`` (where the last export found the data to end) up to the end of the entry after
    it is not zero. The same modification time does not say a queue file is unchanged: the broker writes it through
    a mapping, and Linux stamps a mapped file only when a clean page is first written (``page_mkwrite``), so entries
    added to a page still dirty from an earlier write leave the time as it was. RocketMQ flushes a queue's pages
    when two are due and all of them every 60 s (``FlushConsumeQueueService``: ``flushConsumeQueueLeastPages`` 2,
    ``flushConsumeQueueThoroughInterval``): an entry written just after an export, into the page that export read,
    can keep its file's time. Judged by the time alone (until stop 68), such an entry waited for the file's next
    write into a clean page, or for the file's reship (``--reship-after``), and the lake's queue ended short of it."""
    hi = -(-end // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE + CQ_STORE_UNIT_SIZE
    return bool(os.pread(fd, hi - end, end).strip(b"\0"))


def _sha(buf: bytes | memoryview) -> str:
    return hashlib.sha256(buf).hexdigest()


def _tail_changed(prev: dict[str, Any], buf: memoryview) -> bool:
    """Whether the window the state's entry covers differs from ``buf``, by the digest the entry names."""
    if "tail_crc32" in prev:
        return zlib.crc32(buf) != prev["tail_crc32"]
    return _sha(buf) != prev["tail_sha"]


class Packer:
    """The queue files of one export: their manifest entries, the new state, and the pack (written as it goes)."""

    def __init__(self, out: Path, ts: dt.datetime, prior: dict[str, dict[str, Any]], reship_after_s: float,
                 max_pieces: int = MAX_PIECES) -> None:
        self.path = out / layout.PACK
        self.max_pieces = max_pieces
        self.ts = ts
        self.tag = ts.strftime("%Y%m%dT%H%M%SZ")
        self.prior = prior
        self.reship_after_s = reship_after_s
        self.state: dict[str, dict[str, Any]] = {}
        self.files: list[dict[str, Any]] = []
        self.shipped = 0
        self.read = 0
        self._pack: BinaryIO | None = None
        self._buf = bytearray()

    def add(self, path: str | Path, rel: str) -> None:
        """One queue file of the store (gone since the listing: left out, as a copy would)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            st = os.fstat(fd)
            size, mtime_ns = st.st_size, st.st_mtime_ns
            prev = self.prior.get(rel)
            entry = None
            if prev is not None and self._keeps(prev, size):
                same = prev["mtime_ns"] == mtime_ns and not _written_past(fd, prev["end"])
                entry = prev if same else self._appended(fd, prev, mtime_ns)
            if entry is None:  # new, changed in size, rewritten at its tail, or due to ship whole
                entry = {"size": size, "mtime_ns": mtime_ns, "since": self.tag, "pieces": [], "end": 0}
                entry.update(self._read_on(fd, 0, 0, data_extent_end(fd, 0, size), entry["pieces"]))
            if "id" not in entry:  # new, shipped whole, or kept from a state written before stop 69
                entry = dict(entry, id=piece_id(entry))
            if os.fstat(fd).st_mtime_ns != mtime_ns:  # written while read: its stamp must not vouch for these bytes
                entry = dict(entry, mtime_ns=-1)
        finally:
            os.close(fd)
        self.state[rel] = entry
        self.files.append({"rel": rel, "size": entry["size"], "mtime": entry["mtime_ns"] / 1e9,
                           "id": entry["id"], "pieces": entry["pieces"]})

    def _appended(self, fd: int, prev: dict[str, Any], mtime_ns: int) -> dict[str, Any] | None:
        """The entry of a file that grew past ``prev["end"]``; None when the bytes shipped before its end changed."""
        end = data_extent_end(fd, prev["end"], prev["size"])
        pieces = list(prev["pieces"])
        window = prev.get("tail_bytes", LEGACY_TAIL)
        got = self._read_on(fd, prev["end"], max(0, prev["end"] - window), end, pieces, prev)
        if got is None:
            return None
        entry = {k: v for k, v in prev.items() if k != "tail_sha"}
        entry.update(got, mtime_ns=mtime_ns, pieces=pieces)
        entry["id"] = extend_id(prev.get("id") or piece_id(prev), pieces[len(prev["pieces"]):])
        return entry

    def _read_on(self, fd: int, lo: int, tail_lo: int, hi: int, pieces: list[list[Any]],
                 prev: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Read ``[tail_lo, hi)`` once: check its part before ``lo`` against the digest of ``prev`` (the state's
        entry), pack what it holds past ``lo`` up to its last non-zero byte (a piece appended to ``pieces``); the new
        end and tail digest."""
        buf = self._pread(fd, tail_lo, hi)
        self.read += len(buf)
        if prev is not None and _tail_changed(prev, buf[:lo - tail_lo]):
            return None
        end = max(tail_lo + _last_nonzero(buf), lo)
        if end > lo:
            pieces.append(self._pack_bytes(buf[lo - tail_lo:end - tail_lo], lo))
        # (the read began at most CHECKED_TAIL before ``lo``, or at 0: the window is whole or starts at 0)
        tail = buf[max(tail_lo, end - CHECKED_TAIL) - tail_lo:end - tail_lo]
        return {"end": end, "tail_crc32": zlib.crc32(tail), "tail_bytes": CHECKED_TAIL}

    def _pread(self, fd: int, lo: int, hi: int) -> memoryview:
        """``[lo, hi)`` of the file in the packer's buffer, reused from file to file: a new bytes object for each read
        costs its allocation's page faults again (about half of reading a 117 KiB file from the page cache)."""
        n = max(0, hi - lo)
        if len(self._buf) < n:
            self._buf = bytearray(max(n, 2 * len(self._buf)))
        view = memoryview(self._buf)[:n]
        return view[:os.preadv(fd, [view], lo)] if n else view

    def _keeps(self, prev: dict[str, Any], size: int) -> bool:
        """Whether the file's pieces so far can be appended to (else it ships whole)."""
        age = (self.ts - _folder_time(prev["since"])).total_seconds()
        return prev["size"] == size and len(prev["pieces"]) < self.max_pieces and age < self.reship_after_s

    def _pack_bytes(self, data: memoryview, lo: int) -> list[Any]:
        """Append a file's bytes from ``lo`` to the pack; the piece: [folder time, offset in the pack, length, lo]."""
        if self._pack is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._pack = open(self.path, "wb")
        at = self.shipped
        self._pack.write(data)
        self.shipped += len(data)
        return [self.tag, at, len(data), lo]

    def close(self) -> None:
        if self._pack is not None:
            self._pack.close()
            self._pack = None


@functools.lru_cache(maxsize=256)
def _folder_time(tag: str) -> dt.datetime:
    return dt.datetime.strptime(tag, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)


def piece_id(entry: dict[str, Any]) -> str:
    """What names the file's bytes: equal ids, equal bytes (the pieces are immutable objects). The ingest's queue file
    ledger compares it as a store copy's ETag. A chain over the pieces, so that a file's id grows with its pieces: an
    entry keeps its id (``id``) and a run hashes only the pieces it adds, not all of them again (up to 32, 10 us a
    file and run, stop 69). An entry written before has no ``id``: computed from its pieces, the same chain."""
    return extend_id("pieces-" + hashlib.sha256(f"size {entry['size']}".encode()).hexdigest()[:32], entry["pieces"])


def extend_id(prior: str, added: list[list[Any]]) -> str:
    """The id of a file whose pieces are those of the file ``prior`` names, then ``added`` (:func:`piece_id`): the
    ingest tells with it that a copy's first pieces are those of a copy an earlier run read."""
    for p in added:
        prior = "pieces-" + hashlib.sha256(f"{prior}|{p!r}".encode()).hexdigest()[:32]
    return prior
