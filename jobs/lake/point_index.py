"""Point look-ups in silver/key_index: sorted runs of key hashes, merged like an LSM tree and searched in the driver
(issue 39: a look-up of k keys touches O(k) pages of a few runs, not every row of the index).

A join of 10,000 key hashes with the index reads every row's hash (0.022 s per million records of history, 0.75 s on
40 M): Parquet's statistics cannot skip row groups for random keys, since each holds a slice of the whole hash range.
So the index's rows are also kept as *segments*: files of flat little-endian arrays sorted by (cluster, key_hash), a run
per cluster (up to :data:`BUILD_RUNS` when built from that many batches; a merge makes one), with a fence (every
:data:`FENCE`-th hash) per 4 KiB page. A look-up maps the segments (``mmap``), finds each wanted hash's page among the
fences and binary-searches that page: one page per key and segment. Segment ``seg-<lo>-<hi>.kix`` holds the rows of the
Delta commits after version ``lo`` up to ``hi``; the chain ``-1 -> ... -> hi`` covers the table at every version up to
``hi``. The ingest appends a segment of the commits since the chain's end (``warm``) and merges a tail of segments into
the one before it once they hold as many rows (``settle``), so a history of n rows lies in O(log n) segments and each
row is rewritten O(log n) times (streamed: a merge holds :data:`MERGE_CHUNK` rows).

Covering *more* rows than a version holds is harmless: a look-up returns positions that ``copies_of`` reads from
silver/messages at its own version, so a row added later, or a copy a compaction wrote again, finds no record there.
So a segment is built from the files the commits added with a data change (a compaction's files hold rows already
covered), and a reader of an older version uses the same chain. Covering *fewer* is not: when a commit's file is no
longer there (vacuumed before any ingest appended its segment), the chain is built again from the current files.

Where: for a local lake, inside it (``<lake>/_lookup/key_index/``, deleted with the lake); for a lake on S3, in a
local cache (``$RMQ_RECON_LOOKUP_CACHE``, else ``~/.cache/rmq-recon/lookup/<lake hash>``). Derived data: written to
a temporary name and renamed, checked (the table's id, the footer) on open, built again when missing or damaged;
segments off the chain (a merge killed before it deleted its inputs) are deleted by the next ``warm``.

Exactly the rows a join on (cluster, key_hash) with the index finds at the chain's version, minus rows with a null
position (which no join on a record's key can match): ``tests/jobs/test_point_index.py``."""
from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from jobs.lake import failpoints

log = logging.getLogger(__name__)

RUN_ROWS = 1 << 21  # rows sorted in memory at once while building from Parquet (~60 MiB)
MERGE_CHUNK = 1 << 21  # rows a merge step holds, over all its inputs
# A segment built from up to this many sorted batches of a cluster keeps them as runs (a look-up searches each: a page
# a key and run); more are merged into one. bench_export's first ingest builds 4 (6.1 M rows in Sail's 4 files): the
# merge, rewriting every row, cost 0.9 of the build's 2.2 CPU-seconds. A later merge of segments makes one run.
BUILD_RUNS = 8
FENCE = 512  # hashes per fence: a 4 KiB page of the hash array
INGEST_MERGE_ROWS = 4 << 20  # the largest merge an ingest makes (about a second); maintain merges the rest
MAX_KEYS = 200_000  # more distinct keys than this: the engine's join
LOOKUP_BATCH = 2048  # keys searched between two releases of the pages they mapped (~16 pages a key at most)
STALE_TMP_S = 3600  # a temporary file older than this was left by a killed build
MAGIC = b"RMQKIX02"
COLUMNS = ("cluster", "key_hash", "broker", "physical_offset", "queue_offset")
_TAIL = struct.Struct("<Q8s")  # footer length, magic
_NAME = re.compile(r"^seg-(-?\d+)-(\d+)\.kix$")


@dataclass(frozen=True)
class Run:
    cluster: str
    hashes: np.ndarray  # int64, sorted
    physical: np.ndarray  # int64
    queue: np.ndarray  # int64
    fences: np.ndarray  # int64: hashes[::fence]
    brokers: np.ndarray  # int32 codes into Segment.brokers
    fence: int


@dataclass(frozen=True)
class Segment:
    mm: Any  # the mapping: its touched pages count in the process's RSS until released (_release)
    path: Path
    lo: int
    hi: int
    table_id: str
    rows: int
    brokers: list[str]
    runs: list[Run]


# ------------------------------------------------------------------------------------------------ where


def cache_dir(lake: str) -> Path:
    """The local folder of a lake's segments."""
    digest = hashlib.blake2b(lake.rstrip("/").encode(), digest_size=8).hexdigest()
    if os.environ.get("RMQ_RECON_LOOKUP_CACHE"):
        return Path(os.environ["RMQ_RECON_LOOKUP_CACHE"]) / digest
    if "://" not in lake or lake.startswith("file://"):
        return Path(lake[len("file://"):] if lake.startswith("file://") else lake) / "_lookup" / "key_index"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rmq-recon" / "lookup" / digest


def _seg_path(cache: Path, lo: int, hi: int) -> Path:
    return cache / f"seg-{lo}-{hi}.kix"


# ------------------------------------------------------------------------------------------------ write


class _Writer:
    """A segment written run by run; each run's length is known when it starts, its chunks arrive in order."""

    def __init__(self, path: Path, table_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.table_id = path, table_id
        self.tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        self.f = open(self.tmp, "wb")  # noqa: SIM115
        self.pos = 0
        self.brokers: dict[str, int] = {}
        self.runs: list[dict[str, Any]] = []

    def codes(self, names: list[str]) -> np.ndarray:
        return np.array([self.brokers.setdefault(b, len(self.brokers)) for b in names], np.int32)

    def start(self, cluster: str, rows: int) -> None:
        nf = -(-rows // FENCE)
        self.run = {"cluster": cluster, "rows": rows, "at": self.pos, "fence": FENCE}
        self.done = 0
        # hashes, physical, queue, fences (int64), brokers (int32), padded to 8 bytes
        self.pos += 24 * rows + 8 * nf + 4 * rows
        self.pos += -self.pos % 8
        self.runs.append(self.run)

    def chunk(self, h: np.ndarray, p: np.ndarray, q: np.ndarray, b: np.ndarray) -> None:
        n, at, i, fence = self.run["rows"], self.run["at"], self.done, self.run["fence"]
        fd = self.f.fileno()
        for col, a in enumerate((h, p, q)):
            os.pwrite(fd, np.ascontiguousarray(a, np.int64).tobytes(), at + col * 8 * n + 8 * i)
        first = -i % fence
        os.pwrite(fd, np.ascontiguousarray(h[first::fence], np.int64).tobytes(), at + 24 * n + 8 * (-(-i // fence)))
        os.pwrite(fd, np.ascontiguousarray(b, np.int32).tobytes(), at + 24 * n + 8 * (-(-n // fence)) + 4 * i)
        self.done += len(h)

    def close(self) -> Path:
        footer = json.dumps({"table_id": self.table_id, "brokers": list(self.brokers), "runs": self.runs}).encode()
        os.pwrite(self.f.fileno(), footer + _TAIL.pack(len(footer), MAGIC), self.pos)
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abandon(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def _sorted_batches(sources: Iterable[Any]) -> Iterable[tuple[str, np.ndarray, np.ndarray, np.ndarray, list[str],
                                                               np.ndarray]]:
    """(cluster, hashes, physical, queue, broker names, broker codes) of each batch of the Parquet ``sources``, sorted
    by hash: the rows with a null cluster, hash, broker or position are left out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for source in sources:
        # the names read as the file's dictionaries: materialising 2 M strings to encode them again cost 4x the read
        for batch in pq.ParquetFile(source, read_dictionary=["cluster", "broker"]).iter_batches(
                batch_size=RUN_ROWS, columns=list(COLUMNS)):
            t = pa.Table.from_batches([batch])
            if any(batch[c].null_count for c in COLUMNS):  # (none in a table the ingest wrote: no copy then)
                valid = None
                for c in COLUMNS:
                    v = pc.is_valid(batch[c])
                    valid = v if valid is None else pc.and_(valid, v)
                t = t.filter(valid)
            if t.num_rows == 0:
                continue
            cl, br = (_codes(t[c]) for c in ("cluster", "broker"))
            ccode = cl.indices.to_numpy(zero_copy_only=False)
            h = t["key_hash"].to_numpy().astype(np.int64, copy=False)
            p = t["physical_offset"].to_numpy().astype(np.int64, copy=False)
            q = t["queue_offset"].to_numpy().astype(np.int64, copy=False)
            b = br.indices.to_numpy(zero_copy_only=False)
            # A Spark cluster writes each file of silver/key_index sorted by (cluster, key_hash) (schemas/key_index
            # CLUSTER_BY): then nothing to sort. Sail 0.7 writes them unsorted (jobs.lake._delta.clustered). (One
            # cluster, the usual lake: a stable sort of the hashes is the same order, 15% sooner than the lexsort.)
            if not _sorted_by(ccode, h):
                order = np.argsort(h, kind="stable") if len(cl.dictionary) == 1 else np.lexsort((h, ccode))
                ccode, h, p, q, b = ccode[order], h[order], p[order], q[order], b[order]
            names = br.dictionary.to_pylist()
            cuts = np.flatnonzero(np.diff(ccode)) + 1
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(ccode)]):
                yield cl.dictionary[int(ccode[lo])].as_py(), h[lo:hi], p[lo:hi], q[lo:hi], names, b[lo:hi]


def _sorted_by(major: np.ndarray, minor: np.ndarray) -> bool:
    """Whether rows are in (major, minor) order."""
    if len(minor) < 2:
        return True
    dm = np.diff(major.astype(np.int64, copy=False))
    return bool((dm >= 0).all() and (minor[1:] >= minor[:-1])[dm == 0].all())


def _codes(col: Any) -> Any:
    """A string column as one dictionary array (codes into names; a name may be listed unused, never twice)."""
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        return col.unify_dictionaries().combine_chunks()
    return col.combine_chunks().dictionary_encode()


def build(cache: Path, lo: int, hi: int, sources: Iterable[Any], table_id: str) -> Path:
    """Write segment (lo, hi] from the Parquet data files ``sources`` (pyarrow input files): sorted in batches of
    :data:`RUN_ROWS`, then merged into one run per cluster when a cluster has more than :data:`BUILD_RUNS`."""
    part = _Writer(_seg_path(cache, lo, hi).with_suffix(".parts"), table_id)
    try:
        for cluster, h, p, q, names, b in _sorted_batches(sources):
            part.start(cluster, len(h))
            part.chunk(h, p, q, part.codes(names)[b])
    except BaseException:
        part.abandon()
        raise
    parts = part.close()
    try:
        seg = _open(parts, table_id)
        if seg is None:
            raise RuntimeError(f"{parts}: a segment just written does not read back; delete {cache} and run again")
        runs: dict[str, int] = {}
        for r in seg.runs:
            runs[r.cluster] = runs.get(r.cluster, 0) + 1
        if max(runs.values(), default=0) <= BUILD_RUNS:  # few batches: kept as sorted runs
            os.replace(parts, _seg_path(cache, lo, hi))
            return _seg_path(cache, lo, hi)
        return _merge([seg], _seg_path(cache, lo, hi), table_id)
    finally:
        parts.unlink(missing_ok=True)


def _merge(segments: list[Segment], dest: Path, table_id: str) -> Path:
    """One segment of the rows of ``segments``, one run per cluster, streamed: each step takes, from every run, the
    hashes up to the smallest of the runs' next :data:`MERGE_CHUNK`-th hash, and sorts them (a stable sort of sorted
    pieces is a merge)."""
    out = _Writer(dest, table_id)
    try:
        by_cluster: dict[str, list[tuple[Run, np.ndarray]]] = {}
        for seg in segments:
            codes = out.codes(seg.brokers)
            for run in seg.runs:
                if len(run.hashes):
                    by_cluster.setdefault(run.cluster, []).append((run, codes))
        for cluster in sorted(by_cluster):
            runs = by_cluster[cluster]
            out.start(cluster, sum(len(r.hashes) for r, _ in runs))
            pos = [0] * len(runs)
            while True:
                live = [i for i, (r, _) in enumerate(runs) if pos[i] < len(r.hashes)]
                if not live:
                    break
                step = max(MERGE_CHUNK // len(live), FENCE)  # rows held stay about MERGE_CHUNK, whatever the fan-in
                bound = min(runs[i][0].hashes[min(pos[i] + step, len(runs[i][0].hashes)) - 1] for i in live)
                pieces = []
                for i in live:
                    r, codes = runs[i]
                    end = pos[i] + int(np.searchsorted(r.hashes[pos[i]:pos[i] + step + 1], bound, "right"))
                    if end == pos[i] + step + 1:  # more hashes equal to the bound than a step: all of them
                        end = int(np.searchsorted(r.hashes, bound, "right"))
                    s = slice(pos[i], end)
                    pieces.append((r.hashes[s], r.physical[s], r.queue[s], codes[r.brokers[s]]))
                    pos[i] = end
                h = np.concatenate([x[0] for x in pieces])
                order = np.argsort(h, kind="stable")
                out.chunk(h[order], *(np.concatenate([x[j] for x in pieces])[order] for j in (1, 2, 3)))
                for seg in segments:  # what this step read (copied by the concatenations)
                    _release(seg)
        return out.close()
    except BaseException:
        out.abandon()
        raise


# ------------------------------------------------------------------------------------------------ read


def _open(path: Path, table_id: str | None) -> Segment | None:
    """The segment at ``path``; None when missing, damaged or of another table (a lake created again)."""
    m = _NAME.match(path.name)
    lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (FileNotFoundError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    try:
        n, magic = _TAIL.unpack_from(mm, len(mm) - _TAIL.size)
        if magic != MAGIC or n > len(mm) - _TAIL.size:
            return None
        meta = json.loads(bytes(mm[len(mm) - _TAIL.size - n:len(mm) - _TAIL.size]))
        if table_id is not None and meta["table_id"] != table_id:
            return None
        runs = []
        for r in meta["runs"]:
            k, at, fence = r["rows"], r["at"], int(r["fence"])
            nf = -(-k // fence)
            if at + 28 * k + 8 * nf > len(mm) - _TAIL.size - n:
                return None
            h, p, q = (np.frombuffer(mm, np.int64, k, at + i * 8 * k) for i in range(3))
            runs.append(Run(r["cluster"], h, p, q, np.frombuffer(mm, np.int64, nf, at + 24 * k),
                            np.frombuffer(mm, np.int32, k, at + 24 * k + 8 * nf), fence))
        return Segment(mm, path, lo, hi, meta["table_id"], sum(len(r.hashes) for r in runs), meta["brokers"], runs)
    except (struct.error, ValueError, KeyError, TypeError):
        return None


def _release(seg: Segment) -> None:
    """Unmap the pages of ``seg`` a search or merge touched (they stay in the page cache). The kernel maps up to 16
    pages around each page fault, so 10,000 keys map nearly every page of a 24 M-row segment: 340 MiB of RSS at
    40 M records, growing with history, if never released."""
    seg.mm.madvise(mmap.MADV_DONTNEED)


def chain(cache: Path, table_id: str | None) -> list[Segment]:
    """The segments that tile the versions from -1 on (at each start the one reaching furthest), readable and of
    ``table_id``; the others are off the chain."""
    spans: dict[int, list[tuple[int, Path]]] = {}
    if cache.is_dir():
        for p in cache.iterdir():
            m = _NAME.match(p.name)
            if m:
                spans.setdefault(int(m.group(1)), []).append((int(m.group(2)), p))
    out, at = [], -1
    while at in spans:
        for hi, p in sorted(spans[at], reverse=True):
            seg = _open(p, table_id)
            if seg is not None:
                out.append(seg)
                at = hi
                break
        else:
            break
    return out


def _first(hashes: np.ndarray, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, right: bool,
           fence: int) -> np.ndarray:
    """Per key, the first row in [lo, hi] whose hash is >= the key (> with ``right``), when the answer lies there:
    halvings of every key's range at once, each touching only the key's own page (hi - lo <= fence)."""
    n = len(hashes)
    for _ in range(fence.bit_length()):
        mid = (lo + hi) // 2
        v = hashes[np.minimum(mid, n - 1)]
        go = ((v <= keys) if right else (v < keys)) & (mid < hi)
        lo = np.where(go, mid + 1, lo)
        hi = np.where(go, hi, mid)
    return lo


def _search(run: Run, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted ``keys``: the first row of each in ``run`` and how many rows hold it. The fences give each key its
    page (fences[b] < key <= fences[b + 1], so the first row >= key is in [b * fence, (b + 1) * fence])."""
    n, fence = len(run.hashes), run.fence
    lo = np.maximum(np.searchsorted(run.fences, keys, "left") - 1, 0) * fence
    first = _first(run.hashes, keys, lo, np.minimum(lo + fence, n), False, fence)
    found = first < n
    found[found] = run.hashes[first[found]] == keys[found]
    count = np.zeros(len(keys), np.int64)
    f = np.flatnonzero(found)
    if len(f):
        # a key's copies are adjacent and few: the end is searched in the page after the first
        a = first[f]
        b = np.minimum(a + fence, n)
        end = _first(run.hashes, keys[f], a, b, True, fence)
        long = (end == b) & (b < n)  # more copies than a page holds (never seen): an unbounded search
        if long.any():
            end[long] = np.searchsorted(run.hashes, keys[f][long], "right")
        count[f] = end - a
    return first, count


class PointIndex:
    """silver/key_index for look-ups: the segments of a lake (``lake``, ``table``: built up to ``version`` when the
    chain ends before it) or of a folder built otherwise (``lake`` None), and the same rows as a DataFrame
    (``frame``) for look-ups too large for the driver."""

    def __init__(self, frame: Any, cache: Path, version: int, *, lake: str | None = None, table: Any = None) -> None:
        self.frame, self.cache, self.version, self.lake, self.table = frame, cache, version, lake, table
        self._segments: list[Segment] | None = None

    @classmethod
    def of_delta(cls, spark: Any, lake: str, table: Any, version: int | None) -> "PointIndex":
        from jobs.lake import _delta

        at = version if version is not None else _delta.version(lake, table)
        return cls(_delta.read(spark, lake, table, at=version), cache_dir(lake), int(at), lake=lake, table=table)

    def segments(self) -> list[Segment] | None:
        """The chain covering ``version``; None when there is none (the engine's join then)."""
        if self._segments is None:
            table_id = _table_id(self.lake, self.table) if self.lake is not None else None
            segs = chain(self.cache, table_id)
            if (not segs or segs[-1].hi < self.version) and self.lake is not None:
                append(self.lake, self.table, merge=False)
                segs = chain(self.cache, table_id)
            self._segments = segs if segs and segs[-1].hi >= self.version else []
        return self._segments or None

    def lookup(self, wanted: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]] | None:
        """The positions stored for the hashes of ``wanted`` (cluster -> int64 hashes): per column of (cluster, broker,
        physical_offset, queue_offset), arrays of the hits; None without a chain covering the version."""
        segs = self.segments()
        if segs is None:
            return None
        want = {c: np.unique(np.asarray(h, np.int64)) for c, h in wanted.items()}
        out: dict[str, list[Any]] = {"cluster": [], "broker": [], "physical_offset": [], "queue_offset": []}
        for seg in segs:
            names = np.array(seg.brokers, dtype=object)
            for run in seg.runs:
                wanted_here = want.get(run.cluster)
                if wanted_here is None or not len(wanted_here) or not len(run.hashes):
                    continue
                for at in range(0, len(wanted_here), LOOKUP_BATCH):
                    keys = wanted_here[at:at + LOOKUP_BATCH]
                    first, count = _search(run, keys)
                    hit = count > 0
                    if hit.any():
                        first, count = first[hit], count[hit]
                        idx = np.repeat(first - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(int(count.sum()))
                        out["cluster"].append(np.full(len(idx), run.cluster, dtype=object))
                        out["broker"].append(names[run.brokers[idx]])
                        out["physical_offset"].append(run.physical[idx].copy())
                        out["queue_offset"].append(run.queue[idx].copy())
                    _release(seg)
        return out

    def hits(self, hashed: Any) -> Any | None:
        """The index rows (cluster, broker, physical_offset, queue_offset) of ``hashed``'s (cluster, key_hash), as a
        DataFrame of ``hashed``'s session; None (use ``frame``) for more than :data:`MAX_KEYS` keys or no chain."""
        import pyarrow as pa
        import pyarrow.compute as pc

        t0 = time.perf_counter()
        got = hashed.select("cluster", "key_hash").limit(MAX_KEYS + 1).toArrow()
        if got.num_rows > MAX_KEYS:
            log.info("key look-up: more than %d keys: a join with silver/key_index", MAX_KEYS)
            return None
        got = got.filter(pc.and_(pc.is_valid(got["cluster"]), pc.is_valid(got["key_hash"])))
        clusters = got["cluster"].combine_chunks().dictionary_encode()
        codes = clusters.indices.to_numpy(zero_copy_only=False)
        h = got["key_hash"].to_numpy().astype(np.int64, copy=False)
        cols = self.lookup({c: h[codes == i] for i, c in enumerate(clusters.dictionary.to_pylist())})
        if cols is None:
            log.info("key look-up: no segments cover silver/key_index version %s: a join with it", self.version)
            return None
        cat = lambda name, typ: pa.array(np.concatenate(cols[name]) if cols[name] else [], typ)  # noqa: E731
        table = pa.table({"cluster": cat("cluster", pa.string()), "broker": cat("broker", pa.string()),
                          "physical_offset": cat("physical_offset", pa.int64()),
                          "queue_offset": cat("queue_offset", pa.int64())})
        log.info("key look-up: %d keys, %d hits in %d segment(s) (%.3f s)", got.num_rows, table.num_rows,
                 len(self._segments or []), time.perf_counter() - t0)
        return hashed.sparkSession.createDataFrame(
            table, "cluster string, broker string, physical_offset long, queue_offset long")


# ------------------------------------------------------------------------------------------------ upkeep


def _table_id(lake: str, table: Any) -> str:
    from jobs.lake import _delta

    return str(_delta.delta_table(lake, table).metadata().id)


def _commit_adds(lake: str, table: Any, lo: int, hi: int) -> list[str] | None:
    """The paths of the files the commits after ``lo`` up to ``hi`` added with new rows (a compaction's, which
    also removes, are left out: their rows are older); None when a commit file is gone."""
    from jobs.lake import storage

    root = table.path(lake)
    out: list[str] = []
    for v in range(lo + 1, hi + 1):
        raw = storage.read_bytes(storage.join(root, "_delta_log", f"{v:020d}.json"))
        if raw is None:
            return None
        actions = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        rewrite = any("remove" in a for a in actions)
        out += [a["add"]["path"] for a in actions
                if "add" in a and not (rewrite and a["add"].get("dataChange") is False)]
    return out


def append(lake: str, table: Any, *, merge: bool = True, max_merge_rows: int | None = None,
           say: Callable[[str], None] = lambda _l: None) -> int:
    """Bring the chain up to the table's current version: a segment of the commits since its end (the whole table
    when there is no chain, or a commit's file is gone), then, with ``merge``, the newest segments merged while the
    tail grows as large as the segment before it (:func:`settle`; with ``max_merge_rows``, merges of no more rows).
    Returns the rows written to new segments (merges included)."""
    from jobs.lake import _delta

    dt_ = _delta.delta_table(lake, table)
    version, table_id = int(dt_.version()), str(dt_.metadata().id)
    cache = cache_dir(lake)
    segs = chain(cache, table_id)
    fs = _delta.arrow_filesystem(table.path(lake))
    written = 0

    def write(lo: int, files: list[str]) -> Segment:
        nonlocal written
        handles = []
        try:
            handles = [fs.open_input_file(rel) for rel in files]
            path = build(cache, lo, version, handles, table_id)
        finally:
            for h in handles:
                h.close()
        seg = _open(path, table_id)
        assert seg is not None, path
        written += seg.rows
        return seg

    end = segs[-1].hi if segs else None
    if end is not None and end > version:  # a chain beyond the table: not this table's history
        segs, end = [], None
    if end is None or end < version:
        adds = _commit_adds(lake, table, end, version) if end is not None else None
        present = None if adds is None else _present(fs, adds)
        if present is None:  # nothing to start from: the whole table as it is now
            say(f"silver/key_index: segments built from the table's files (version {version})")
            segs = [write(-1, _current(dt_))]
        elif present:
            segs.append(write(end, present))
        elif not merge:  # no new rows, a reader: an empty segment (a writer, under the writer lease, may be
            # renaming or merging the last one right now; a reader changes no file it did not write)
            segs.append(write(end, []))
        else:  # no new rows: the last segment covers the new versions as it is
            last = segs[-1]
            dest = _seg_path(cache, last.lo, version)
            os.replace(last.path, dest)
            segs[-1] = _open(dest, table_id)
    if merge:  # the ingest's and maintain's (a reader only fills the chain's tail: it deletes nothing another
        # process may be writing or reading)
        written += settle(cache, segs, table_id, max_merge_rows)
        _prune(cache, {s.path.name for s in segs})
    return written


def settle(cache: Path, segs: list[Segment], table_id: str, max_rows: int | None = None) -> int:
    """Merge segments of the chain ``segs`` (updated in place) until each holds more rows than all after it together
    (a tail that grew as large as the segment before it is merged into it, in one pass; with ``max_rows``, only
    merges of no more rows): each merge at least doubles what a row lies in, so a row is rewritten at most log2 of
    the history's growth times, and the chain holds O(log n) segments. Returns the rows written."""
    written = 0
    while True:
        start, tail = None, 0
        for i in range(len(segs) - 1, 0, -1):
            tail += segs[i].rows
            if tail >= segs[i - 1].rows and (max_rows is None or tail + segs[i - 1].rows <= max_rows):
                start = i - 1
        if start is None:
            return written
        group = segs[start:]
        dest = _merge(group, _seg_path(cache, group[0].lo, group[-1].hi), table_id)
        seg = _open(dest, table_id)
        assert seg is not None, dest
        written += seg.rows
        failpoints.hit("key_segments.merged")  # the merged segment beside its inputs
        for s in group:
            s.path.unlink(missing_ok=True)
        segs[start:] = [seg]


def _current(dt_: Any) -> list[str]:
    """The paths of the table's data files at ``dt_``'s version (relative to the table folder)."""
    import pyarrow as pa

    return pa.table(dt_.get_add_actions(flatten=True)).column("path").to_pylist()


def _present(fs: Any, files: list[str]) -> list[str] | None:
    """``files`` when every one is still there, else None."""
    from pyarrow import fs as pa_fs

    infos = fs.get_file_info(files) if files else []
    return None if any(i.type == pa_fs.FileType.NotFound for i in infos) else files


def _prune(cache: Path, keep: set[str]) -> int:
    """Delete what is not on the chain: segments a killed merge left, temporary files of killed builds (those older
    than STALE_TMP_S: a younger one may be another process's build)."""
    gone, now = 0, time.time()
    if not cache.is_dir():
        return 0
    for p in cache.iterdir():
        if p.name in keep:
            continue
        if (".tmp-" in p.name or p.suffix == ".parts") and now - p.stat().st_mtime < STALE_TMP_S:
            continue
        p.unlink(missing_ok=True)
        gone += 1
    return gone


def warm(lake: str, *, max_merge_rows: int | None = None, say: Callable[[str], None] = lambda _l: None) -> int:
    """The ingest's and maintain's step: silver/key_index's segments brought up to its current version and merged
    (the ingest's merges up to :data:`INGEST_MERGE_ROWS`, so that a run pays about what it added; maintain's
    whatever their size). Returns the rows written; 0 when the lake keeps no index."""
    from jobs.lake import _delta, lookups
    from schemas import key_index

    if not lookups.index_enabled() or not _delta.exists(lake, key_index.TABLE):
        return 0
    return append(lake, key_index.TABLE, max_merge_rows=max_merge_rows, say=say)
