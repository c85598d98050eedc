"""The commitlog records each snapshot of a run saw, broker by broker: what the queue bounds step checks consume
queue entries against (an entry pointing at no record is quarantined)."""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from jobs.ingest.decode import Decoded
from jobs.lake import _delta, layout
from schemas import messages


class KnownRecords:
    """The commitlog records of one broker as each snapshot of the run saw them: for finding CQ entries that point at
    nothing.

    A snapshot sees the records the lake held before the run and those first decoded from it or an earlier snapshot
    of the run, within the byte ranges decoded by then (as the snapshot-by-snapshot ingest did). Offsets are sorted
    once per broker; each snapshot takes its visible part.
    """

    def __init__(self, offsets: np.ndarray, sizes: np.ndarray, seen: np.ndarray,
                 ranges: dict[dt.datetime, list[tuple[int, int]]]) -> None:
        # Sorted (one copy) unless already in order, which the run's records are not when several decode tasks
        # staged them (every broker at 10 M); a record in both keeps its first place (the lake's).
        if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
            order = np.argsort(offsets, kind="stable")
            offsets, sizes, seen = offsets[order], sizes[order], seen[order]
            del order
            keep = np.ones(len(offsets), bool)
            keep[1:] = offsets[1:] != offsets[:-1]
            if not keep.all():
                offsets, sizes, seen = offsets[keep], sizes[keep], seen[keep]
        self.offsets, self.sizes, self.seen = offsets, sizes, seen
        self._ranges = sorted(ranges.items())
        # Records are stored in commitlog order, so each snapshot usually sees a prefix of them (a late folder's
        # records aside): then its part is a view, not a copy of every record of the broker (240 snapshots of
        # bench_export: 0.3 s of the queue bounds).
        self._seen_sorted = len(seen) < 2 or bool((seen[1:] >= seen[:-1]).all())

    @classmethod
    def load(cls, staged: "Decoded", cluster: str, broker: str,
             lake_records: tuple[np.ndarray, np.ndarray] | None,
             staged_records: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> "KnownRecords":
        """The broker's records in the lake before this run (``lake_records``: offsets and sizes, from
        :func:`lake_records`) and the ones the run staged (``staged_records``: offsets, sizes and the first
        snapshot time in microseconds, from :func:`staged_records`)."""
        parts: list[tuple[np.ndarray, ...]] = []
        ranges = staged.ranges.get((cluster, broker), {})
        if lake_records is not None:
            parts.append((lake_records[0], lake_records[1],
                          np.full(len(lake_records[0]), np.iinfo(np.int64).min, np.int64)))
        if staged_records is not None:
            parts.append(staged_records)
        del lake_records, staged_records  # the driver's peak is this broker's records: hold one copy of them
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64), ranges)
        arrays = parts[0] if len(parts) == 1 else tuple(np.concatenate([p[i] for p in parts]) for i in range(3))
        parts.clear()
        return cls(*arrays, ranges)

    def as_of(self, ts: dt.datetime) -> "_SnapshotRecords":
        """What the snapshot at ``ts`` sees."""
        spans = [r for t, rs in self._ranges if t <= ts for r in rs]
        rng = (min(r[0] for r in spans), max(r[1] for r in spans)) if spans else None
        at = int(ts.timestamp() * 1_000_000)
        if self._seen_sorted:
            n = int(np.searchsorted(self.seen, at, side="right"))
            return _SnapshotRecords(self.offsets[:n], self.sizes[:n], rng)
        visible = self.seen <= at
        if visible.all():
            return _SnapshotRecords(self.offsets, self.sizes, rng)
        return _SnapshotRecords(self.offsets[visible], self.sizes[visible], rng)


@dataclass
class _SnapshotRecords:
    offsets: np.ndarray
    sizes: np.ndarray
    rng: tuple[int, int] | None

    def dangling(self, cluster: str, broker: str, cq: Any, start: int = 0) -> list[tuple[int, str]]:
        """The entries of ``cq`` from its ``start``-th on that point at no record (spec: quarantined)."""
        from jobs.formats import consumequeue

        if self.rng is None:
            return []
        return consumequeue.dangling_entries(cq, self.offsets, self.sizes, self.rng, start)

    def covers(self, first: int, last: int) -> bool:
        """Whether every commit offset in ``[first, last]`` is checked (inside the decoded range)."""
        return self.rng is not None and self.rng[0] <= first and last < self.rng[1]

    def meets(self, first: int, last: int) -> bool:
        """Whether some commit offset in ``[first, last]`` is checked."""
        return self.rng is not None and last >= self.rng[0] and first < self.rng[1]

    def digest(self, first: int, last: int) -> str:
        """What says the records that decide whether entries pointing into ``[first, last]`` dangle (the one starting
        at or before ``first`` and those starting up to ``last``, consumequeue.dangling_entries) are still the same:
        their number and the first and last one's offset. Records are only ever added to the lake and a later
        snapshot sees more of them, so the same number is the same records (two binary searches, not a hash of
        the records of every queue of the broker that the span holds)."""
        lo = max(int(np.searchsorted(self.offsets, first, side="right")) - 1, 0)
        hi = int(np.searchsorted(self.offsets, last, side="right"))
        if hi <= lo:
            return "0"
        return f"{hi - lo}:{int(self.offsets[lo])}:{int(self.offsets[hi - 1])}"


class _Spilled:
    """Per broker, arrays a pass over a table gathers, written to a local temporary folder as the pass reads them
    and loaded one broker at a time: the driver holds one broker's records of the run, not every broker's (20 bytes
    a record: 0.2 GiB at 10 M records, with their sorted copy the driver's peak, issue 13)."""

    PREFIX = "rmq-recon-records-"

    def __init__(self, dtypes: tuple[Any, ...]) -> None:
        import tempfile

        _Spilled.sweep(tempfile.gettempdir())
        self.dtypes = tuple(np.dtype(d) for d in dtypes)
        self.folder = tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-")
        self._files: dict[tuple[str, str], list[Any]] = {}
        self._names: dict[tuple[str, str], int] = {}

    @classmethod
    def sweep(cls, root: str) -> None:
        """Remove the folders runs that were killed left (their process is gone)."""
        import shutil

        for name in os.listdir(root):
            if not name.startswith(cls.PREFIX):
                continue
            pid = name[len(cls.PREFIX):].split("-", 1)[0]
            try:
                os.kill(int(pid), 0)
            except (ValueError, ProcessLookupError):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            except PermissionError:
                pass  # another user's live process

    def add(self, key: tuple[str, str], arrays: tuple[np.ndarray, ...]) -> None:
        if key not in self._files:
            self._names[key] = len(self._names)
            self._files[key] = [open(self._path(key, i), "wb") for i in range(len(self.dtypes))]
        for f, a, d in zip(self._files[key], arrays, self.dtypes):
            f.write(np.ascontiguousarray(a, dtype=d).tobytes())

    def _path(self, key: tuple[str, str], i: int) -> str:
        return os.path.join(self.folder, f"{self._names[key]}.{i}")

    def close(self) -> None:
        for fs in self._files.values():
            for f in fs:
                f.close()

    def pop(self, key: tuple[str, str]) -> tuple[np.ndarray, ...] | None:
        """The broker's arrays (None: it had no rows), its files removed."""
        if key not in self._files:
            return None
        out = []
        for i, d in enumerate(self.dtypes):
            path = self._path(key, i)
            out.append(np.fromfile(path, dtype=d))
            os.remove(path)
        del self._files[key]
        return tuple(out)

    def remove(self) -> None:
        import shutil

        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def lake_records(lake: str, staged: "Decoded", brokers: list[tuple[str, str]], spill: _Spilled) -> bool | None:
    """Per broker, into ``spill``, the offsets and sizes of the lake's records (before this run loads any) inside
    the ranges this run's snapshots see: a snapshot checks its CQ entries against those alone (dangling_entries),
    and the lowest range starts a segment, so no record straddles it. The read follows what the run decoded (bounded
    by the broker's retention), not the broker's history. Also whether any of them is inside the run's staged spans
    (:attr:`Decoded.lake_overlap`, returned; None when some staged broker is not among ``brokers``).

    One streamed pass over silver/messages for all brokers: read broker by broker, every data file was opened once
    per broker (a run appends one file spanning every broker), 9 reads of the table each run of the soak.
    """
    import pyarrow.compute as pc

    overlap: bool | None = False if set(staged.spans) <= set(brokers) else None
    wanted = {}
    for key in brokers:
        spans = [r for rs in staged.ranges.get(key, {}).values() for r in rs]
        if spans:
            wanted[key] = (min(r[0] for r in spans), max(r[1] for r in spans))
    if not wanted or not _delta.exists(lake, messages.TABLE):
        return overlap
    # the files are chosen per broker by their statistics (jobs.lake.layout.files_admitting), the rows by the
    # offsets of all brokers together; each batch is then split by broker (a row filter naming the brokers cost more
    # than the read: 3.3 against 1.8 s for 12.5 M of 49 M records of the hour-48 soak lake)
    span = [[("physical_offset", ">=", min(lo for lo, _ in wanted.values())),
             ("physical_offset", "<", max(hi for _, hi in wanted.values()))]]

    def take(key: tuple[str, str], part: pa.RecordBatch) -> tuple[np.ndarray, ...]:
        nonlocal overlap
        lo, hi = wanted[key]
        off = part.column("physical_offset")
        part = part.filter(pc.and_(pc.greater_equal(off, lo), pc.less(off, hi)))
        offsets = part.column("physical_offset").to_numpy().astype(np.int64)
        if overlap is False and key in staged.spans:
            slo, shi = staged.spans[key]
            overlap = bool(np.any((offsets >= slo) & (offsets < shi)))
        return offsets, part.column("size").to_numpy().astype(np.int32)

    _gather_by_broker(_delta.scan_batches(lake, messages.TABLE, ["cluster", "broker", "physical_offset", "size"],
                                          filters=span, dictionary=("cluster", "broker"),
                                          files=layout.files_admitting(lake, messages.TABLE, wanted)),
                      wanted, take, spill)
    return overlap


def _gather_by_broker(batches: Iterable[pa.RecordBatch], wanted: Iterable[tuple[str, str]],
                      take: Callable[[tuple[str, str], pa.RecordBatch], tuple[np.ndarray, ...]],
                      spill: _Spilled) -> None:
    """Per wanted broker, the arrays ``take`` makes of its rows in ``batches``, added to ``spill`` (brokers with no
    row left out)."""
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            for key, part in _of_brokers(batch, wanted):
                arrays = take(key, part)
                if len(arrays[0]):
                    spill.add(key, arrays)
    finally:
        spill.close()


def _of_brokers(batch: pa.RecordBatch, wanted: Iterable[tuple[str, str]]
                ) -> Iterator[tuple[tuple[str, str], pa.RecordBatch]]:
    """The rows of ``batch`` of each wanted (cluster, broker) it holds, as slices of the runs of one broker (a decode
    task's unit is one segment and the lake is written sorted by broker, so a batch holds few runs); a batch in no
    such order is first sorted by broker (stably: offsets keep their order). The key columns are compared as
    dictionary codes: a pyarrow filter on a dictionary column per broker cost 5.8 s a run of the hour-48 soak lake."""
    import pyarrow.compute as pc

    codes, names = [], []
    for name in ("cluster", "broker"):
        col = batch.column(name)
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        codes.append(pc.fill_null(col.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64))
        names.append(col.dictionary.to_pylist())
    if not len(codes[0]):
        return
    width = len(names[1]) + 1
    code = (codes[0] + 1) * width + (codes[1] + 1)  # null codes -1 -> 0: no wanted key has a null part
    cuts = np.flatnonzero(code[1:] != code[:-1]) + 1
    if len(cuts) > 64:  # not sorted by broker: sort once, then slice
        order = np.argsort(code, kind="stable")
        batch, code = batch.take(pa.array(order)), code[order]
        cuts = np.flatnonzero(code[1:] != code[:-1]) + 1
    wanted = set(wanted)
    bounds = np.concatenate(([0], cuts, [len(code)]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        c, b = divmod(int(code[lo]), width)
        if c == 0 or b == 0:
            continue
        key = (names[0][c - 1], names[1][b - 1])
        if key in wanted:
            yield key, batch.slice(lo, hi - lo)


def staged_records(staged: "Decoded", brokers: list[tuple[str, str]], spill: _Spilled) -> None:
    """Per broker, into ``spill``, the offsets, sizes and first snapshot times (microseconds) of the records this
    run staged.

    One streamed pass over the staging folder for all brokers (read broker by broker, each read scanned every staged
    file: 14 reads, 4.2 s of the 10 M messages' first ingest), a file at a time in batches of 128 Ki rows, the keys
    dictionary-encoded: a pyarrow dataset scanner held 0.3 GiB more in the driver at 10 M records (the staged files'
    row groups are 1 M rows), this 0.1 GiB."""
    wanted = [k for k in brokers if k in staged.spans]
    if not staged.messages or not wanted:
        return
    cols = ["cluster", "broker", "physical_offset", "size", "first_snapshot_ts"]

    def take(key: tuple[str, str], part: pa.RecordBatch) -> tuple[np.ndarray, ...]:
        return (part.column("physical_offset").to_numpy().astype(np.int64),
                part.column("size").to_numpy().astype(np.int32),
                part.column("first_snapshot_ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                .to_numpy().astype(np.int64))

    _gather_by_broker(staged.record_batches(cols, 1 << 17, ("cluster", "broker")), wanted, take, spill)
