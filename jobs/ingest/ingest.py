"""Ingest job: landing zone (spec §3) -> bronze and silver Delta tables (spec §8).

Reads: every snapshot folder under ``--landing`` (local path or ``s3://``).
Writes: bronze/files, bronze/quarantine, bronze/segments, bronze/trace_records, bronze/cq_files,
silver/consumer_offsets, silver/subscription_groups, silver/topic_configs, silver/delay_offsets, silver/queue_bounds,
silver/messages, silver/deliveries, and last bronze/ingest_runs (the ledger row that marks the run complete).

Incremental and idempotent: config rows are MERGEd on their keys; a commitlog segment already decoded to
its end is not read again and the growing last segment is read from where the previous run stopped
(bronze/segments); messages are inserted only where their key is new (the anti-join's scan pruned to the
brokers and byte ranges decoded), so a run that dies half-way and is run again writes the same rows once. Re-running on the same landing zone
changes no table. The run holds the lake's writer lease (jobs.lake.lease), so a second ingest waits for the first;
silver/deliveries is rebuilt whenever its inputs moved since the last completed run (jobs.lake.ledger), so a run killed
anywhere is repaired by the next one. Bad input is quarantined with its file and position and never stops the rest.

Plan, decode, load (issue 13): the driver lists the snapshots, parses their small JSON configs and plans the
commitlog work units; the engine's tasks decode them (jobs.ingest.decode_tasks, ``mapInArrow``: the local cores on Sail,
the executors on a cluster) into a staging folder below the lake; the loads are set operations on that output, one
commit per table per run. Only problems, segment progress and bronze/files rows come back to the driver, so its
memory does not grow with the data. Consume queues (queue bounds, entries that point at no record) are still read
by the driver, but only the files that changed since the broker's previous snapshot (jobs.ingest.cq_ledger).
:func:`run` is the only function that sees both the session and the table locations.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import os
import threading
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from jobs import progress as progress_lines
from jobs.formats import configs, fastjson, names
from jobs.formats.consumequeue import CQ_STORE_UNIT_SIZE
from jobs.ingest import cq_ledger, landing
from jobs.lake import _delta, _spark, ledger, storage
from jobs.ingest.landing import LandingFile, Snapshot
from jobs.problems import ConfigParseError, Problem, UsageError
from schemas import (
    consumer_offsets,
    cq_files,
    delay_offsets,
    deliveries,
    files,
    messages,
    quarantine,
    queue_bounds,
    segments,
    subscription_groups,
    topic_configs,
    trace_records,
)
from schemas import snapshots as snapshots_table

log = logging.getLogger(__name__)
UTC = dt.timezone.utc
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
CHUNK_BYTES = 64 << 20  # bytes of a segment a decode task reads at a time
# A decode task yields decoded records and trace records in Arrow batches of about these many rows.
TRACE_BATCH_ROWS = 100_000
MESSAGE_BATCH_ROWS = 100_000
# Below the lake: the decode tasks' output until it is loaded (jobs.ingest.decode_tasks).
STAGING = "_staging/ingest"
DELIVERIES_STAGING = "_staging/deliveries"  # the rows silver/deliveries gains or changes, computed once
DELIVERIES_INPUTS_STAGING = "_staging/deliveries_inputs"  # the requests an update derives again, and their keys
ROWS_STAGING = "_staging/rows"  # the small tables' rows of a run, as files the engine reads (_delta.rows_frame)


def task_bytes() -> int:
    """Bytes of commitlog one decode task reads, about (RMQ_RECON_DECODE_TASK_MB, default 128)."""
    return int(float(os.environ.get("RMQ_RECON_DECODE_TASK_MB", "128")) * (1 << 20))


def split_bytes() -> int:
    """A full segment with at least twice this many bytes to read is decoded in pieces of this size to twice it, side
    by side (RMQ_RECON_DECODE_SPLIT_MB, default 256: a broker's 1 GiB segment in 4 pieces; 0: never split)."""
    return int(float(os.environ.get("RMQ_RECON_DECODE_SPLIT_MB", "256")) * (1 << 20))


def min_tasks() -> int:
    """At least this many decode tasks when there are as many segments to read (RMQ_RECON_DECODE_MIN_TASKS,
    default 8): enough for every task slot of a small cluster, and for the slots to finish together."""
    return int(os.environ.get("RMQ_RECON_DECODE_MIN_TASKS", "8"))


_CONFIG_TABLES = {
    "consumer_offsets": consumer_offsets.TABLE,
    "subscription_groups": subscription_groups.TABLE,
    "topics": topic_configs.TABLE,
    "delay_offsets": delay_offsets.TABLE,
    "client_offsets": consumer_offsets.TABLE,
}


@dataclass
class SegmentState:
    """How far one commitlog segment of one broker has been decoded (a row of bronze/segments)."""

    cluster: str
    broker: str
    segment: str
    start_offset: int
    decoded_to: int = 0
    segment_size: int = 0
    complete: bool = False
    snapshot_ts: dt.datetime | None = None


@dataclass
class Extracted:
    """Rows extracted from the landing zone, per target table (small tables only)."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[tuple[str, str, dt.datetime | None, Problem]] = field(default_factory=list)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).append(row)

    def has_problem(self, path: str) -> bool:
        return any(p.source_path == path for *_, p in self.problems)

    def problem(self, cluster: str, broker: str, ts: dt.datetime | None, p: Problem) -> None:
        self.problems.append((cluster, broker, ts, p))

    def mark(self) -> tuple[int, dict[str, int]]:
        """Where the next problem and rows go: for :meth:`splice`."""
        return len(self.problems), {t: len(r) for t, r in self.rows.items()}

    def splice(self, mark: tuple[int, dict[str, int]], other: "Extracted") -> None:
        """``other``'s problems and rows put where :meth:`mark` was taken, before what was added since: the order
        of extracting them in turn, though ``other`` was extracted beside the steps after the mark."""
        self.problems[mark[0]:mark[0]] = other.problems
        for table, rows in other.rows.items():
            at = mark[1].get(table, 0)
            self.rows.setdefault(table, [])[at:at] = rows


# --------------------------------------------------------------------------------------------- extract


def _say_missing(missing: dict[str, list[tuple[str, str]]], say: Callable[[str], None]) -> None:
    """One line per snapshot that lacks files spec §3 expects (reported, never fatal; bronze/snapshots.missing)."""
    for folder, m in missing.items():
        if m:
            say(f"ingest: {folder} lacks " + "; ".join(f"{rel} ({what})" for rel, what in m))


def _reader(landing_root: str, listed: set[str]) -> Callable[[str], bytes | None]:
    """``read(path)`` for configs.load: a landing-relative path -> bytes, or None when missing. Only the files the
    snapshot listed are read (regular files: a link found in the listing is quarantined by name, never followed)."""

    def read(path: str) -> bytes | None:
        return storage.read_bytes(storage.join(landing_root, path)) if path in listed else None

    return read


UNREADABLE_HINT = "not read; fix it, then run ingest --retake"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def extract_configs(snap: Snapshot, landing_root: str, out: Extracted, now: dt.datetime) -> None:
    """Parse the snapshot's fastjson files (with the broker's .bak fallback) into silver rows."""
    read = _reader(landing_root, {f.path for f in snap.files})
    base = {"cluster": snap.cluster, "broker": snap.broker, "snapshot_ts": snap.ts}
    seen_backup_only: set[str] = set()
    targets = [f for f in snap.files if f.kind in _CONFIG_TABLES]
    # A config whose main file is missing but whose .bak exists is still loaded (the broker would too).
    present = {f.path for f in snap.files}
    for f in snap.files:
        if f.kind == "backup":
            main = f.path[: -len(".bak")]
            if main not in present:
                kind = "client_offsets" if snap.is_clients else landing.CONFIG_FILES.get(main.rsplit("/", 1)[-1])
                if kind:
                    seen_backup_only.add(main)
                    targets.append(LandingFile(uri=f.uri[: -len(".bak")], path=main, rel=f.rel[: -len(".bak")],
                                               size=0, kind=kind, client_id=f.client_id, group=f.group))
    from_rocksdb = _rocksdb_configs(snap, read, out, base)
    for f in targets:
        if f.kind in from_rocksdb:
            continue  # the broker keeps this in RocksDB and no longer writes the JSON: it is stale (spec §4.2)
        parsed = configs.load(read, f.path, f.kind)
        for p in parsed.problems:
            out.problem(snap.cluster, snap.broker, snap.ts, p)
        if parsed.missing:
            continue
        table = _CONFIG_TABLES[f.kind].name
        extra = {"source_file": parsed.source_path, "used_backup": parsed.used_backup}
        for row in parsed.rows:
            if f.kind == "client_offsets":
                out.add(table, {**base, **row, "broker": row["broker"], "consumer_group": f.group,
                                "client_id": f.client_id, "is_retry_topic": row["topic"].startswith("%RETRY%"), **extra})
            elif f.kind == "consumer_offsets":
                out.add(table, {**base, **row, "client_id": "", **extra})
            else:
                out.add(table, {**base, **row, **extra})
    for f in snap.files:
        if f.kind in _CONFIG_TABLES or f.kind in ("backup", "other", "rocksdb", "tiered"):
            # Every file is recorded with its digest; bytes are kept for the JSON files (replayable raw layer).
            try:
                data = read(f.path) or b""
            except OSError as exc:
                if not out.has_problem(f.path):  # a config's own load already said so
                    out.problem(snap.cluster, snap.broker, snap.ts, Problem(
                        f.path, 0, f"unreadable ({configs.unreadable(exc)}): {UNREADABLE_HINT}"))
                continue
            is_json = f.kind != "other" or f.path.endswith((".json", ".json.bak"))
            out.add(files.NAME, {**base, "source_path": f.path, "file_kind": f.kind, "size": len(data),
                                 "sha256": _sha(data), "content": data if is_json and f.kind != "rocksdb" else None,
                                 "used_backup": None, "read_from": 0, "read_to": len(data), "ingested_at": now})


def _rocksdb_configs(snap: Snapshot, read: Callable[[str], bytes | None], out: Extracted,
                     base: dict[str, Any]) -> set[str]:
    """Rows from the snapshot's RocksDB config DBs (``store/config/consumerOffsets/``... v1, ``rdb/`` v2), and the
    kinds they cover: the JSON file of such a kind is stale (the broker stopped writing it) and is not read, also
    when the DB cannot be opened (then that kind has no rows in this snapshot, rather than the stale ones)."""
    from jobs.formats import rocksdb_config

    dbs: dict[str, list[LandingFile]] = {}
    for f in snap.of_kind("rocksdb"):
        db = rocksdb_config.db_of(f.rel)
        if db is not None:
            dbs.setdefault(db, []).append(f)
    covered: set[str] = set()
    for db, fs in sorted(dbs.items()):
        folder = f"{snap.folder}/store/config/{db}"
        files = {f.rel[len(f"store/config/{db}/"):]: read(f.path) or b"" for f in fs}
        kinds = set(rocksdb_config.V1.values()) if db == rocksdb_config.V2 else {rocksdb_config.V1[db]}
        covered |= kinds
        rows, problems = rocksdb_config.load(db, files, folder)
        for p in problems:
            out.problem(snap.cluster, snap.broker, snap.ts, p)
        for kind, got in rows.items():
            table = _CONFIG_TABLES[kind].name
            extra = {"source_file": folder, "used_backup": False}
            for row in got:
                out.add(table, {**base, **row, **({"client_id": ""} if kind == "consumer_offsets" else {}), **extra})
    return covered


@dataclass
class CQReads:
    """Consume queue files read and not read (their ledger entry stood in), for the progress line."""

    read: int = 0
    skipped: int = 0

    def add(self, other: "CQReads") -> None:
        self.read += other.read
        self.skipped += other.skipped


def extract_queue_bounds(snap: Snapshot, landing_root: str, out: Extracted, now: dt.datetime,
                         known: "_SnapshotRecords", prior: dict[str, "cq_ledger.Entry"] | None = None,
                         pool: Any = None, read_all: bool = False) -> tuple[dict[str, "cq_ledger.Entry"], CQReads]:
    """Min and Max of every consume queue of the snapshot (spec §4), and CQ entries that point at nothing.

    ``prior``: the CQ file ledger's entries of the broker (jobs.ingest.cq_ledger); a file it holds unchanged is not
    read unless its commit offsets straddle what the snapshot checks (:func:`_stands_in`): the rows and problems
    are those of reading every file. ``pool``: an executor the queues are worked side by side in (in queue order).
    ``read_all``: every file is read (``--retake``); ``prior`` still gives the dangling entries an unchanged file's
    entry holds when this snapshot cannot check all of them, so the entries written equal those of a run without it.

    Returns:
        The ledger entries of the snapshot's files (those of queues that could be read) and how many were read.
    """
    queue_files = snap.of_kind("consumequeue")
    if not queue_files:
        return {}, CQReads()

    commitlogs = snap.of_kind("commitlog")
    oldest = min((f.start for f in commitlogs if f.start is not None), default=None)
    by_queue: dict[tuple[str, int], list[LandingFile]] = {}
    for f in queue_files:
        by_queue.setdefault((f.topic or "", f.queue_id or 0), []).append(f)
    prior = prior or {}

    def one(item: tuple[tuple[str, int], list[LandingFile]]) -> tuple[Extracted, dict[str, Any], CQReads]:
        (topic, qid), fs = item
        mine = Extracted()
        entries, reads = _queue_bounds(snap, topic, qid, sorted(fs, key=lambda f: f.start or 0), mine, now, known,
                                       prior, oldest, read_all)
        return mine, entries, reads

    entries: dict[str, Any] = {}
    reads = CQReads()
    items = sorted(by_queue.items())
    first = len(out.rows.get(queue_bounds.NAME, []))
    for mine, got, n in (pool.map(one, items) if pool is not None else map(one, items)):
        for table, rows in mine.rows.items():
            out.rows.setdefault(table, []).extend(rows)
        out.problems.extend(mine.problems)
        entries.update(got)
        reads.add(n)
    tiered = snap.of_kind("tiered")
    if tiered:
        with_tier(out.rows.get(queue_bounds.NAME, [])[first:], tiered[0], landing_root, snap, out)
    return entries, reads


def with_tier(rows: list[dict[str, Any]], f: LandingFile, landing_root: str, snap: Snapshot, out: "Extracted") -> None:
    """Min of each queue on a broker with tiered storage: min(local Min, the tier's ``minOffset`` of the queue)
    (``TieredMessageStore.getMinOffsetInQueue``): offsets below the local Min are still served from the tier, so
    they are neither EXPIRED nor a reason to move the group (spec §4.2 TIERED). A metadata file that cannot be read
    leaves every bound of the snapshot unknown: the local Min alone would be a guess."""
    tier: dict[tuple[str, int], int] = {}
    try:
        doc = fastjson.loads((storage.read_bytes(storage.join(landing_root, f.path)) or b"").decode("utf-8"),
                             source_path=f.path)
        for topic, queues in (doc.get("queueMetadataTable") or {}).items():
            for qid, meta in (queues or {}).items():
                lo = meta.get("minOffset") if isinstance(meta, dict) else None
                if isinstance(qid, int) and isinstance(lo, int) and not isinstance(lo, bool) and lo >= 0:
                    tier[(str(topic), qid)] = lo
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError) as exc:
        reason = exc.reason if isinstance(exc, ConfigParseError) else type(exc).__name__
        out.problem(snap.cluster, snap.broker, snap.ts, Problem(
            f.path, getattr(exc, "position", 0), f"tiered storage metadata not readable ({reason}): the queues' Min "
            "may be below the local one, so this snapshot's bounds are unknown"))
        for r in rows:
            r["min_offset"] = r["max_offset"] = None
        return
    for r in rows:
        lo = tier.get((r["topic"], r["queue_id"]))
        if lo is not None and r["min_offset"] is not None:
            r["min_offset"] = min(r["min_offset"], lo)


def _stands_in(e: "cq_ledger.Entry", oldest: int | None, known: "_SnapshotRecords") -> bool:
    """Whether an unchanged file's ledger entry gives what reading it would: not when its commit offsets straddle
    ``oldest`` (Min is inside it: the caller passes None when it searches the file for Min instead,
    :func:`jobs.formats.consumequeue.search`),
    nor when they meet the range of records the snapshot checks entries against, unless all of them are inside it
    and the records they span are those the entry's dangling entries were found against."""
    s = e.summary
    if not s.entries:
        return True
    first, last = s.first_commit_offset or 0, s.last_commit_offset or 0
    if oldest is not None and first < oldest <= last:
        return False
    if not known.meets(first, last):
        return True
    return e.records_digest is not None and known.covers(first, last) and known.digest(first, last) == e.records_digest


def _tail_agrees(f: LandingFile, e: "cq_ledger.Entry") -> bool:
    """Whether a file that is not full still ends where its entry says (its last valid entry, then an invalid one):
    40 bytes read. The broker only appends to a queue's last file, which is preallocated at its full size, so a sync
    job that sets the times of the files it copies (instead of keeping them) would give a grown file the
    fingerprint of its earlier copy. An ETag names the bytes: nothing to check then; a full file takes no more."""
    s = e.summary
    if f.etag or s.full:
        return True
    unit = 20  # bytes of a consume queue entry
    try:
        tail = storage.read_bytes(f.uri, max(s.entries - 1, 0) * unit, (s.entries + 1) * unit) or b""
    except OSError:
        return False  # read as a whole: the error is quarantined there
    if s.entries:
        if len(tail) < unit or int.from_bytes(tail[:8], "big", signed=True) != s.last_commit_offset:
            return False
        tail = tail[unit:]
    if len(tail) < unit:
        return False
    return int.from_bytes(tail[:8], "big", signed=True) < 0 or int.from_bytes(tail[8:12], "big", signed=True) <= 0


def _queue_bounds(snap: Snapshot, topic: str, qid: int, fs: list[LandingFile], out: Extracted, now: dt.datetime,
                  known: "_SnapshotRecords", prior: dict[str, "cq_ledger.Entry"], oldest: int | None,
                  read_all: bool = False) -> tuple[dict[str, "cq_ledger.Entry"], CQReads]:
    """One queue of :func:`extract_queue_bounds`: its files rows, bounds row and problems; its files' entries."""
    from jobs.formats import consumequeue

    base = {"cluster": snap.cluster, "broker": snap.broker, "snapshot_ts": snap.ts}
    empty = [f for f in fs if f.size == 0]
    if empty:  # the broker preallocates every file at its full size: 0 bytes is a truncated copy, not an empty queue
        for f in empty:
            out.problem(snap.cluster, snap.broker, snap.ts, Problem(
                f.path, 0, f"consume queue file of {names.shown(topic)}/{qid} is empty (0 bytes; the broker "
                "preallocates each file at its full size): a truncated copy, so the queue's bounds are unknown in "
                "this snapshot"))
        # a row with null bounds: unknown (no row would read as an empty queue, Min = Max = 0: rule 5)
        out.add(queue_bounds.NAME, {**base, "topic": topic, "queue_id": qid, "min_offset": None, "max_offset": None})
        return {}, CQReads()
    stand_in: dict[str, cq_ledger.Entry] = {}
    found: dict[str, tuple[int, int]] = {}  # Min's position in an unchanged file the oldest segment starts inside
    for f in fs:
        e = prior.get(f.rel)
        if read_all or e is None or not e.stands_for(f):
            continue
        s = e.summary
        inside = oldest is not None and s.entries > 0 and (s.first_commit_offset or 0) < oldest \
            <= (s.last_commit_offset or 0)
        if not _stands_in(e, None if inside else oldest, known) or not _tail_agrees(f, e):
            continue
        if inside:  # every queue's oldest file until the broker deletes it: searched, not read (~13 reads of 8 bytes)
            try:
                found[f.rel] = (oldest, consumequeue.search(
                    lambda a, b, f=f: storage.read_bytes(f.uri, a, b) or b"", s.entries, oldest))
            except OSError:
                continue  # read whole below: its error is quarantined there
        stand_in[f.rel] = e
    try:
        raw = {f.rel: storage.read_bytes(f.uri) or b"" for f in fs if f.rel not in stand_in}
    except OSError as exc:
        out.problem(snap.cluster, snap.broker, snap.ts, Problem(
            fs[0].path, 0, f"a file of queue {topic}/{qid} is unreadable ({configs.unreadable(exc)}): the queue's "
            f"bounds are not taken from this snapshot; fix it, then run ingest --retake"))
        return {}, CQReads()
    entries: dict[str, cq_ledger.Entry] = {}
    parts: list[consumequeue.QueueFile] = []
    # per file: its decoded entries as the bounds see them and those that dangle (None: not read), or, not read, the
    # dangling entries its ledger entry holds (if the file is not zero-filled here and meets the checked range)
    checks: list[tuple[LandingFile, consumequeue.CQDecode | None, Iterable[tuple[int, str]]]] = []
    for f in fs:
        start = f.start or 0
        if f.rel in stand_in:
            e = entries[f.rel] = stand_in[f.rel]
            s = e.summary
            parts.append(consumequeue.QueueFile(start // 20, s.entries, s.full, None, s.first_commit_offset,
                                                s.last_commit_offset, found.get(f.rel)))
            meets = s.entries and known.meets(s.first_commit_offset or 0, s.last_commit_offset or 0)
            checks.append((f, None, e.dangling if meets else ()))
            out.add(files.NAME, {**base, "source_path": f.path, "file_kind": "consumequeue", "size": f.size,
                                 "sha256": e.sha256, "content": None, "used_backup": None,
                                 "read_from": 0, "read_to": f.size, "ingested_at": now})
            continue
        # Every valid entry counts, also one pointing past the end of this snapshot's commitlog files: a sync copies
        # store/commitlog before store/consumequeue, and the live broker's maxOffset counts the entries written since
        # (ConsumeQueue.getMaxOffsetInQueue; only a restart's recovery, truncateDirtyLogicFiles, drops such entries,
        # and after it the files hold none).
        data = raw[f.rel]
        before = prior.get(f.rel)
        cq = consumequeue.decode_cq(data, file_start_byte=start)
        plain = not cq.problems  # the bytes are the entries as read
        sha, prefix, grown = _sha_grown(data, cq.count if plain else None, before if plain else None)
        summary = consumequeue.summarize(data, cq)
        if len(data) != f.size:  # it changed since the listing: its fingerprint does not name these bytes
            summary = dataclasses.replace(summary, problems=True)
        if grown and not summary.problems and _findings_hold(before, known):
            # the entries the earlier copy had are these bytes, checked against these records: only the new ones
            n0 = before.summary.entries
            dangling = list(before.dangling) + known.dangling(snap.cluster, snap.broker, cq, n0)
        else:
            dangling = known.dangling(snap.cluster, snap.broker, cq)
        entries[f.rel] = _entry(f, sha, summary, dangling, known,
                                before if before is not None and before.same_file(f) else None, prefix)
        parts.append(consumequeue.QueueFile.of(cq, len(data)))
        checks.append((f, cq, dangling))
        out.add(files.NAME, {**base, "source_path": f.path, "file_kind": "consumequeue", "size": len(data),
                             "sha256": sha, "content": None, "used_backup": None,
                             "read_from": 0, "read_to": len(data), "ingested_at": now})
    mn, mx = consumequeue.bounds(parts, oldest)
    out.add(queue_bounds.NAME, {**base, "topic": topic, "queue_id": qid, "min_offset": mn, "max_offset": mx})
    for f, cq, dangling in checks:
        for p in cq.problems if cq is not None else ():  # a file not read has none (its ledger entry says so)
            out.problem(snap.cluster, snap.broker, snap.ts, Problem(f.path, p.position, p.reason))
        for pos, reason in dangling:
            out.problem(snap.cluster, snap.broker, snap.ts, Problem(f.path, pos, reason))
    return entries, CQReads(len(raw), len(stand_in))


def _sha_grown(data: bytes, entries: int | None, before: "cq_ledger.Entry | None") -> tuple[str, str | None, bool]:
    """The sha256 of a consume queue file's bytes and of its first ``entries`` entries (None: not asked), and whether
    the copy ``before`` was read from, earlier in this run, held these bytes' first ``before.summary.entries``
    entries (the hash of its entries, kept by the run, is that of these bytes' first ones): the broker appends to a
    queue's last file, so a grown copy's earlier entries need not be checked again. One pass over the bytes, the
    hash read off at each of the two lengths.

    An entry of the ledger table has no such hash: a later run checks only the entries pointing into the records it
    decoded (the old ones point below them)."""
    unit = CQ_STORE_UNIT_SIZE
    n0 = before.summary.entries * unit if before is not None and before.prefix_sha256 is not None else 0
    mine = None if entries is None else entries * unit
    if n0 > len(data) or (mine is not None and mine < n0):
        n0 = 0  # not a grown copy of it
    view, h, at, seen = memoryview(data), hashlib.sha256(), 0, {}
    for cut in sorted({c for c in (n0 or None, mine) if c is not None}):
        h.update(view[at:cut])
        seen[cut], at = h.hexdigest(), cut
    h.update(view[at:])
    grown = bool(n0) and before is not None and seen[n0] == before.prefix_sha256
    return h.hexdigest(), None if mine is None else seen[mine], grown


def _findings_hold(before: "cq_ledger.Entry", known: "_SnapshotRecords") -> bool:
    """Whether ``before``'s dangling entries are what checking its entries against this snapshot's records gives:
    all of them are inside the checked range and the records they span are those they were found against."""
    first, last = before.summary.first_commit_offset or 0, before.summary.last_commit_offset or 0
    return known.covers(first, last) and known.digest(first, last) == before.records_digest


def _entry(f: LandingFile, sha: str, summary: Any, dangling: list[tuple[int, str]] | None,
           known: "_SnapshotRecords", before: "cq_ledger.Entry | None", prefix: str | None = None
           ) -> "cq_ledger.Entry":
    """The ledger entry of a file just read. Its dangling entries are kept when every entry was checked (``dangling``
    of the file as it is, all inside the decoded range), with a digest of the records they were checked against;
    else those of its unchanged earlier copy, still tied to their own records. ``prefix``: the sha256 of its
    entries' bytes (:func:`_sha_grown`)."""
    first, last = summary.first_commit_offset, summary.last_commit_offset
    if dangling is not None and not summary.problems and summary.entries and known.covers(first, last):
        return cq_ledger.Entry(f.size, f.mtime, f.etag, sha, summary, known.digest(first, last), tuple(dangling),
                               prefix)
    if before is not None:
        return cq_ledger.Entry(f.size, f.mtime, f.etag, sha, summary, before.records_digest, before.dangling)
    return cq_ledger.Entry(f.size, f.mtime, f.etag, sha, summary)


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
        visible = self.seen <= int(ts.timestamp() * 1_000_000)
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
    # the scan prunes by the offsets of all brokers together; each batch is then split by broker (a filter naming
    # the brokers cost more than the read: 3.3 against 1.8 s for 12.5 M of 49 M records of the hour-48 soak lake)
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
                                          filters=span, dictionary=("cluster", "broker")), wanted, take, spill)
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
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from jobs.ingest import decode_tasks

    wanted = [k for k in brokers if k in staged.spans]
    if not staged.messages or not wanted:
        return
    cols = ["kind", "cluster", "broker", "physical_offset", "size", "first_snapshot_ts"]
    dataset = pads.dataset(staged.staging, format="parquet")

    def batches() -> Iterator[pa.RecordBatch]:
        for fragment in dataset.get_fragments():
            with dataset.filesystem.open_input_file(fragment.path) as f:
                for b in pq.ParquetFile(f, read_dictionary=["kind", "cluster", "broker"]).iter_batches(
                        batch_size=1 << 17, columns=cols, use_threads=False):
                    yield b.filter(pc.equal(b.column("kind"), decode_tasks.MESSAGE))

    def take(key: tuple[str, str], part: pa.RecordBatch) -> tuple[np.ndarray, ...]:
        return (part.column("physical_offset").to_numpy().astype(np.int64),
                part.column("size").to_numpy().astype(np.int32),
                part.column("first_snapshot_ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                .to_numpy().astype(np.int64))

    _gather_by_broker(batches(), wanted, take, spill)


def extract_all_queue_bounds(snaps: list[Snapshot], landing_root: str, lake: str, staged: "Decoded", out: Extracted,
                             now: dt.datetime, ledger: "cq_ledger.CQLedger | None" = None,
                             read_all: bool = False, lake_read: Callable[[], None] | None = None) -> CQReads:
    """:func:`extract_queue_bounds` of every broker snapshot, a broker's in time order: each passes its files' CQ
    ledger entries on to the next (``ledger`` is updated in place; None or ``read_all``: every file is read, as
    :func:`extract_queue_bounds` says). On S3 a snapshot's queues are worked side by side on the driver's threads
    (the reads wait on the network), their rows and problems added in queue order; a local landing zone's in one
    thread. ``lake_read`` is called once silver/messages has been read (the records it held before this run): from
    then on the run may load into it."""
    from concurrent.futures import ThreadPoolExecutor

    ledger = ledger if ledger is not None else cq_ledger.CQLedger()
    by_broker: dict[tuple[str, str], list[Snapshot]] = {}
    for snap in snaps:
        if not snap.is_clients:
            by_broker.setdefault((snap.cluster, snap.broker), []).append(snap)
    with ExitStack() as spills:
        held = _Spilled((np.int64, np.int32))  # offsets, sizes
        spills.callback(held.remove)
        overlap = lake_records(lake, staged, list(by_broker), held)
        if overlap is not None:
            staged.lake_overlap = overlap
        if lake_read is not None:
            lake_read()
        fresh = _Spilled((np.int64, np.int32, np.int64))  # offsets, sizes, first snapshot times
        spills.callback(fresh.remove)
        staged_records(staged, list(by_broker), fresh)
        pa.default_memory_pool().release_unused()  # the Parquet reader's buffers: not held through the bounds
        # A local file is read in microseconds: threads would only pass the interpreter lock to and fro (scale 8,
        # 4,925 files: 4 threads 1.57 s and 1.9 CPU-s, one 0.95 s and 0.95 CPU-s). S3 reads wait on the network.
        threads = (ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) if storage.is_s3(landing_root)
                   else nullcontext())
        with threads as pool:
            return _queue_bounds_by_broker(by_broker, landing_root, staged, out, now, ledger, read_all, held, fresh,
                                           pool)


def _queue_bounds_by_broker(by_broker: dict[tuple[str, str], list[Snapshot]], landing_root: str, staged: "Decoded",
                            out: Extracted, now: dt.datetime, ledger: "cq_ledger.CQLedger", read_all: bool,
                            held: _Spilled, fresh: _Spilled, pool: Any) -> CQReads:
    """:func:`extract_all_queue_bounds` of the brokers one by one, each with its own records loaded."""
    reads = CQReads()
    order = [snap for group in by_broker.values() for snap in sorted(group, key=lambda s: s.ts)]
    local = not storage.is_s3(landing_root)

    def prefetch(i: int) -> None:
        """The kernel reads ahead the local files snapshot ``i`` will read (those the ledger does not stand in for,
        as known now), while this one is worked: a cold page cache cost 2.6 against 1.0 s at scale 8."""
        if local and i < len(order):
            snap, prior = order[i], ledger.of(order[i].cluster, order[i].broker)
            storage.prefetch(f.uri for f in snap.of_kind("consumequeue")
                             if read_all or (e := prior.get(f.rel)) is None or not e.stands_for(f))

    i = 0
    prefetch(0)
    for (cluster, broker), group in by_broker.items():
        known = KnownRecords.load(staged, cluster, broker, held.pop((cluster, broker)), fresh.pop((cluster, broker)))
        for snap in sorted(group, key=lambda s: s.ts):
            i += 1
            prefetch(i)
            entries, n = extract_queue_bounds(snap, landing_root, out, now, known.as_of(snap.ts),
                                              ledger.of(cluster, broker), pool, read_all)
            if snap.of_kind("consumequeue"):
                ledger.replace(cluster, broker, entries)
            reads.add(n)
        del known
    return reads


class _Background:
    """A function run on a daemon thread (a signal still stops the run at once: the main thread waits in short
    slices, and the thread does not hold the process at exit)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn,), name="rmq-recon-background", daemon=True).start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again by result()
            self._error = exc
        finally:
            self._done.set()

    def wait_for(self, event: threading.Event) -> None:
        """Until ``event`` is set, or the function has ended (its error raised here)."""
        while not event.wait(0.2):
            if self._done.is_set():
                self.result()
                return

    def result(self) -> Any:
        while not self._done.wait(0.2):
            pass
        if self._error is not None:
            raise self._error
        return self._value


def _segment_state_key(cluster: str, broker: str, segment: str) -> tuple[str, str, str]:
    return (cluster, broker, segment)


@dataclass
class Decoded:
    """What the engine's decode tasks left in the staging folder, and what the driver took from their progress."""

    staging: str
    messages: int = 0
    trace: int = 0
    # (cluster, broker) -> snapshot ts -> the record ranges known after that snapshot's copies were read
    ranges: dict[tuple[str, str], dict[dt.datetime, list[tuple[int, int]]]] = field(default_factory=dict)
    # (cluster, broker) -> (lowest, highest) physical offset of the bytes that gave records
    spans: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # whether silver/messages held a record inside ``spans`` before the run loaded any (None: not known); the
    # queue-bounds step reads them anyway (lake_records reads a range holding each span): the load does not again
    lake_overlap: bool | None = None

    def read(self, spark: Any, table: Any, kind: str) -> Any:
        """The staged rows of ``kind`` with the columns of ``table``."""
        from pyspark.sql import functions as F

        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in table.schema.fields)
        return (spark.read.schema(f"kind STRING, {cols}").parquet(self.staging).where(F.col("kind") == kind)
                .select(*table.columns))


def staging_folder(lake: str) -> str:
    """Where the decode tasks write their output (below the lake; one writer at a time holds the lease)."""
    return f"{lake.rstrip('/')}/{STAGING}"


def decode_commitlogs(spark: Any, lake: str, snaps: list[Snapshot], state: dict[tuple[str, str, str], SegmentState],
                      out: Extracted, now: dt.datetime, seen_paths: frozenset[str] = frozenset()) -> Decoded:
    """Decode what the snapshots add to the commitlogs: planned here, decoded by the engine (jobs.ingest.decode_tasks).

    The decoded messages and trace records stay in the staging folder for the loads; the problems, the bronze/files
    rows of the segments and their new ledger state (``state`` is updated in place) come back here.
    """
    from jobs.ingest import decode_tasks

    units = decode_tasks.plan_units(
        [s for s in snaps if not s.is_clients], state, seen_paths,
        lambda snap, p: out.problem(snap.cluster, snap.broker, snap.ts, p),
        chunk_bytes=CHUNK_BYTES, batch_rows=MESSAGE_BATCH_ROWS, trace_batch_rows=TRACE_BATCH_ROWS)
    staged = Decoded(staging_folder(lake))
    storage.delete_tree(staged.staging)
    batches: list[pa.RecordBatch] = []
    for u in units:  # segments with nothing new to read are settled here, by the same code, without a task
        if decode_tasks.reads_nothing(u):
            batches.extend(decode_tasks.decode_unit(u))
    todo = [u for u in units if not decode_tasks.reads_nothing(u)]
    if todo:
        work, split = decode_tasks.split_units(todo, split_bytes())
        small = _decode_pass(spark, work, staged, len(todo))
        merged = _merge_pieces(small, split)
        if merged is None:
            log.warning("ingest: the pieces of a split segment did not chain record to record (damaged records "
                        "across a cut, or zeros); decoding every segment whole")
            small = _decode_pass(spark, todo, staged, len(todo))
        else:
            small = merged
        batches.extend(small)
    _apply_progress(batches, state, out, now, staged)
    return staged


def _decode_pass(spark: Any, work: list[dict[str, Any]], staged: Decoded, segments: int) -> list[pa.RecordBatch]:
    """Decode ``work`` in the engine's tasks into the staging folder (replacing what it held); the problem and
    progress rows, which the driver reads back."""
    import json

    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from jobs.ingest import decode_tasks

    tasks = decode_tasks.pack(work, task_bytes(), min_tasks())
    log.info("ingest: %d segment(s) to decode in %d task(s)%s", segments, len(tasks),
             f" ({len(work) - segments} more pieces of split segments)" if len(work) > segments else "")
    frame = spark.createDataFrame([(i, json.dumps(t)) for i, t in enumerate(tasks)], "task BIGINT, units STRING")
    (frame.repartition(len(tasks)).mapInArrow(decode_tasks.decode_tasks, decode_tasks.output_ddl())
     .write.mode("overwrite").parquet(staged.staging))
    # One folder, not one per kind: Spark sorts a task's rows by the partition columns before a partitioned
    # write, which on a small executor cost more than the decode.
    # The engine counts the kinds and picks out the problem and progress rows, in one query: reading them here,
    # even streamed a row group at a time, held ~0.35 GiB in the driver at 10 M records (1 M-row row groups).
    small_cols = ["kind", "unit", "seq", "cluster", "broker", "snapshot_ts", "source_path", "position", "reason",
                  "info"]
    staged_rows = spark.read.schema(decode_tasks.output_ddl()).parquet(staged.staging)
    got = (staged_rows.where(F.col("kind").isin(decode_tasks.PROBLEM, decode_tasks.PROGRESS)).select(*small_cols)
           .withColumn("rows", F.lit(None).cast("bigint"))  # null: a problem or progress row; else a kind's count
           .unionByName(staged_rows.groupBy("kind").agg(F.count(F.lit(1)).alias("rows")), allowMissingColumns=True)
           .toArrow())
    tally = got.filter(pc.is_valid(got.column("rows")))
    counts = dict(zip(tally.column("kind").to_pylist(), tally.column("rows").to_pylist()))
    rows = got.filter(pc.is_null(got.column("rows"))).select(small_cols)
    rows = rows.cast(pa.schema([decode_tasks.OUTPUT_ARROW.field(c) for c in small_cols]))
    small: list[pa.RecordBatch] = rows.combine_chunks().to_batches()
    staged.messages, staged.trace = counts.get(decode_tasks.MESSAGE, 0), counts.get(decode_tasks.TRACE, 0)
    return small


def _merge_pieces(small: list[pa.RecordBatch], split: dict[int, dict[str, Any]]) -> list[pa.RecordBatch] | None:
    """``small`` with the progress rows of each split unit's pieces merged into the unit's one row
    (:func:`jobs.ingest.decode_tasks.merge_pieces`); None when the pieces of one do not chain."""
    import json

    from jobs.ingest import decode_tasks

    if not split:
        return small
    pieces: dict[int, list[dict[str, Any]]] = {}
    kept: list[pa.RecordBatch] = []
    for b in small:
        unit, kind, info = b.column("unit").to_pylist(), b.column("kind").to_pylist(), b.column("info").to_pylist()
        piece_rows = [i for i in range(b.num_rows) if kind[i] == decode_tasks.PROGRESS and unit[i] in split]
        for i in piece_rows:
            pieces.setdefault(unit[i], []).append(json.loads(info[i]))
        if piece_rows:
            keep = np.ones(b.num_rows, dtype=bool)
            keep[piece_rows] = False
            b = b.filter(pa.array(keep))
        kept.append(b)
    for uid, unit in split.items():
        info = decode_tasks.merge_pieces(unit, pieces.get(uid, []))
        if info is None:
            return None
        kept.append(decode_tasks.progress_batch(uid, unit["cluster"], unit["broker"], info))
    return kept


def _apply_progress(batches: list[pa.RecordBatch], state: dict[tuple[str, str, str], SegmentState],
                    out: Extracted, now: dt.datetime, staged: Decoded) -> None:
    """Problems (in the order found), the segments' new state, their files rows and record ranges, per unit."""
    import json

    from jobs.ingest import decode_tasks

    problems: list[tuple[int, int, dict[str, Any]]] = []
    progress: list[tuple[int, str, str, dict[str, Any]]] = []
    for b in batches:
        cols = b.to_pydict()
        for i, kind in enumerate(cols["kind"]):
            if kind == decode_tasks.PROBLEM:
                problems.append((cols["unit"][i], cols["seq"][i], {k: cols[k][i] for k in (
                    "cluster", "broker", "snapshot_ts", "source_path", "position", "reason")}))
            elif kind == decode_tasks.PROGRESS:
                progress.append((cols["unit"][i], cols["cluster"][i], cols["broker"][i], json.loads(cols["info"][i])))
    for _, _, p in sorted(problems, key=lambda x: (x[0], x[1])):
        out.problem(p["cluster"], p["broker"], p["snapshot_ts"], Problem(p["source_path"], p["position"], p["reason"]))
    for _, cluster, broker, info in sorted(progress, key=lambda x: x[0]):
        s = info["state"]
        ts = dt.datetime.fromisoformat(s["snapshot_ts"]) if s["snapshot_ts"] else None
        state[_segment_state_key(cluster, broker, info["segment"])] = SegmentState(
            cluster, broker, info["segment"], s["start_offset"], s["decoded_to"], s["segment_size"], s["complete"], ts)
        for f in info["files"]:
            out.add(files.NAME, {"cluster": cluster, "broker": broker, "snapshot_ts": dt.datetime.fromisoformat(f["ts"]),
                                 "source_path": f["path"], "file_kind": "commitlog", "size": f["size"], "content": None,
                                 "used_backup": None, "ingested_at": now, "sha256": f["sha256"],
                                 "read_from": f["read_from"], "read_to": f["read_to"]})
        by_ts = staged.ranges.setdefault((cluster, broker), {})
        for ts_s, lo, hi in info["ranges"]:
            by_ts.setdefault(dt.datetime.fromisoformat(ts_s), []).append((lo, hi))
        for _, lo, hi in info["decoded"]:
            old = staged.spans.get((cluster, broker))
            staged.spans[(cluster, broker)] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)


def extract_exports(snap: Snapshot, out: Extracted) -> list[pa.Table]:
    """Tabular exports (Parquet or JSON lines with the silver/messages columns) as an alternative input."""
    import io

    import pandas as pd
    import pyarrow.parquet as pq

    tables = []
    for f in snap.of_kind("export"):
        data = storage.read_bytes(f.uri) or b""
        try:
            if f.path.endswith(".parquet"):
                t = pq.read_table(io.BytesIO(data))
            else:
                t = pa.Table.from_pandas(pd.read_json(io.BytesIO(data), lines=True), preserve_index=False)
            tables.append(_conform_messages(t, snap))
        except Exception as exc:  # noqa: BLE001 - any unreadable export is quarantined, never fatal
            out.problem(snap.cluster, snap.broker, snap.ts, Problem(
                f.path, 0, f"tabular export unreadable ({type(exc).__name__}: {exc}); expected Parquet or JSON lines "
                f"with the silver/messages columns"))
    return tables


def _conform_messages(t: pa.Table, snap: Snapshot) -> pa.Table:
    """Cast an export to the silver/messages columns; cluster/broker default to the snapshot's."""
    import pandas as pd

    df = t.to_pandas()
    missing = {"physical_offset", "topic", "queue_id", "queue_offset"} - set(df.columns)
    if missing:
        raise ValueError(f"missing required columns {sorted(missing)}; present: {sorted(df.columns)}")
    df["cluster"] = df.get("cluster", snap.cluster)
    df["broker"] = df.get("broker", snap.broker)
    df["first_snapshot_ts"] = snap.ts
    for c in messages.TABLE.columns:
        if c not in df.columns:
            df[c] = None
    for c in ("store_ts", "born_ts", "first_snapshot_ts"):
        df[c] = pd.to_datetime(df[c], utc=True)
    df["properties"] = [_property_pairs(p) for p in df["properties"]]
    # The declared schema, not pandas' guess: an all-null or JSON-decoded column must still be a string map.
    return pa.Table.from_pandas(df[messages.TABLE.columns], schema=_delta._arrow_schema(messages.TABLE),
                                preserve_index=False)


def _property_pairs(value: Any) -> list[tuple[str, str]] | None:
    """A properties cell of an export (a dict from JSON, (key, value) pairs from a Parquet map) as pairs."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    items = value.items() if isinstance(value, dict) else value
    return [(str(k), None if v is None else str(v)) for k, v in items]


# ------------------------------------------------------------------------------------------------ load


def rows_folder(lake: str) -> str:
    """Where a run's small-table rows wait for their MERGE (:func:`jobs.lake._delta.rows_frame`)."""
    return f"{lake.rstrip('/')}/{ROWS_STAGING}"


def _spark_frame(spark: Any, lake: str, rows: list[dict[str, Any]], table: Any) -> Any:
    return _delta.rows_frame(spark, rows, table, rows_folder(lake))


def _props_as_entries(tbl: pa.Table) -> pa.Table:
    """Arrow maps name their entries differently across writers; hand Spark a list of (key, value) structs."""
    col = tbl.column("properties").combine_chunks()
    if isinstance(col.type, pa.MapType):
        entries = pa.StructArray.from_arrays([col.keys, col.items], names=["key", "value"])
        lst = pa.ListArray.from_arrays(col.offsets, entries, mask=col.is_null())
        tbl = tbl.set_column(tbl.column_names.index("properties"), "properties", lst)
    return tbl


def messages_frame(spark: Any, tbl: pa.Table) -> Any:
    """A Spark frame with the silver/messages columns and types from decoded (or exported) records."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(_props_as_entries(tbl.select(messages.TABLE.columns)))
    cols = []
    for c in messages.TABLE.columns:
        if c == "properties":
            cols.append(F.map_from_entries(F.col("properties")).alias(c))
        else:
            cols.append(F.col(c).cast(messages.TABLE.schema[c].dataType).alias(c))
    return df.select(*cols)


def load_decoded(spark: Any, lake: str, staged: Decoded) -> int:
    """Insert the staged messages whose key is new: one anti-join and one commit for the whole run.

    The anti-join reads only the target rows of the brokers and physical ranges decoded, so a retry is harmless and
    costs what it reads. Returns the number of decoded records (as before: decoded, not necessarily new).
    """
    if not staged.messages:
        return 0
    df = staged.read(spark, messages.TABLE, "message")
    dnf = [[("cluster", "=", c), ("broker", "=", b), ("physical_offset", ">=", lo), ("physical_offset", "<", hi)]
           for (c, b), (lo, hi) in sorted(staged.spans.items())]
    _delta.insert_new(spark, df, lake, messages.TABLE, target_filter=_spans_filter(staged.spans),
                      rows=staged.messages, target_dnf=dnf, target_rows=staged.lake_overlap)
    return staged.messages


def _spans_filter(spans: dict[tuple[str, str], tuple[int, int]]) -> str:
    """SQL on ``t``: the rows of the brokers and physical ranges decoded (records and trace records alike)."""
    q = lambda s: s.replace("'", "''")  # noqa: E731
    return " OR ".join(
        f"(t.cluster = '{q(c)}' AND t.broker = '{q(b)}' AND t.physical_offset >= {lo} AND t.physical_offset < {hi})"
        for (c, b), (lo, hi) in sorted(spans.items())) or "false"


def load_trace(spark: Any, lake: str, staged: Decoded) -> int:
    """MERGE the staged trace records (insert-only on their key, so re-runs never duplicate); one commit."""
    if not staged.trace:
        return 0
    df = staged.read(spark, trace_records.TABLE, "trace")
    if not _delta.exists(lake, trace_records.TABLE):  # every staged key is new (a record is decoded once a run)
        _delta.insert_new(spark, df, lake, trace_records.TABLE, target_filter="true")
        return staged.trace
    return _delta.merge(spark, df.dropDuplicates(list(trace_records.TABLE.key)), lake, trace_records.TABLE,
                        insert_only=True, target_filter=_spans_filter(staged.spans))


def load_small(spark: Any, lake: str, ex: Extracted, now: dt.datetime) -> dict[str, int]:
    """MERGE the config-derived rows and quarantine rows; returns rows new or changed per table."""
    counts: dict[str, int] = {}
    order = [files.TABLE, consumer_offsets.TABLE, subscription_groups.TABLE, topic_configs.TABLE,
             delay_offsets.TABLE, queue_bounds.TABLE]
    for table in order:
        rows = ex.rows.get(table.name, [])
        if not rows:
            continue
        rows = _dedupe(rows, table.key)
        counts[table.qualified] = _delta.merge(spark, _spark_frame(spark, lake, rows, table), lake, table,
                                               insert_only=table is files.TABLE, target_filter=_snapshots_filter(rows))
    qrows = _dedupe([
        {"cluster": c, "broker": b, "snapshot_ts": ts, "source_path": p.source_path, "position": p.position,
         "reason": p.reason, "detected_at": now}
        for c, b, ts, p in ex.problems
    ], quarantine.TABLE.key)
    if qrows:
        counts[quarantine.TABLE.qualified] = _delta.merge(spark, _spark_frame(spark, lake, qrows, quarantine.TABLE),
                                                          lake, quarantine.TABLE, insert_only=True)
    return counts


def _snapshots_filter(rows: list[dict[str, Any]]) -> str | None:
    """SQL on ``t``: the rows of the snapshot times ``rows`` hold, which are the only ones that can share a key with
    them (the key of every table load_small writes holds the snapshot time, or the file's path, which holds it too);
    the table's files written by earlier runs hold other times, so their statistics prune the MERGE's reads (the
    small tables' MERGEs read every earlier snapshot's rows: 0.5 s at hour 4 of the soak, 1.9 s at hour 48).
    None (no pruning) when a row has none."""
    stamps = [r.get("snapshot_ts") for r in rows]
    if not stamps or any(t is None for t in stamps):
        return None
    lo, hi = (t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") for t in (min(stamps), max(stamps)))
    return f"t.snapshot_ts >= TIMESTAMP '{lo}+00:00' AND t.snapshot_ts <= TIMESTAMP '{hi}+00:00'"


def _dedupe(rows: list[dict[str, Any]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    """Last row wins per key (a MERGE source must not hold a key twice)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        seen[tuple(r.get(k) for k in key)] = r
    return list(seen.values())


def load_segments_state(lake: str) -> dict[tuple[str, str, str], SegmentState]:
    if not _delta.exists(lake, segments.TABLE):
        return {}
    df = _delta.read_pandas(lake, segments.TABLE)
    out = {}
    for r in df.to_dict("records"):
        st = SegmentState(r["cluster"], r["broker"], r["segment"], int(r["start_offset"]), int(r["decoded_to"]),
                          int(r["segment_size"]), bool(r["complete"]),
                          None if r["snapshot_ts"] is None or r["snapshot_ts"] != r["snapshot_ts"]
                          else r["snapshot_ts"].to_pydatetime())
        out[_segment_state_key(st.cluster, st.broker, st.segment)] = st
    return out


def save_segments_state(spark: Any, lake: str, state: dict[tuple[str, str, str], SegmentState],
                        now: dt.datetime) -> int:
    rows = [{"cluster": s.cluster, "broker": s.broker, "segment": s.segment, "start_offset": s.start_offset,
             "decoded_to": s.decoded_to, "segment_size": s.segment_size, "complete": s.complete,
             "snapshot_ts": s.snapshot_ts, "updated_at": now} for s in state.values()]
    if not rows:
        return 0
    return _delta.merge(spark, _spark_frame(spark, lake, rows, segments.TABLE), lake, segments.TABLE)


def build_deliveries(spark: Any, lake: str, since: dict[str, int] | None = None) -> int:
    """Bring silver/deliveries up to date with the trace records, messages and broadcast clients the lake holds.

    A delivery's row depends only on the trace records of its (cluster, request_id), the original copies of their
    messages and its group's broadcast client ids (jobs.rules.deliveries). So with ``since`` (the table versions the
    last completed ingest left) only the requests touched by what was added since are derived again and merged:
    new trace records, new original copies of traced keys, and groups with a new client id. Without it (no
    completed ingest, or Parquet tables, which have no versions) every request is.
    """
    from pyspark.sql import functions as F

    from jobs.rules import deliveries as deliveries_job

    if not _delta.exists(lake, trace_records.TABLE):
        return 0
    trace = _delta.read(spark, lake, trace_records.TABLE)
    msgs = _delta.read(spark, lake, messages.TABLE)
    offs = _delta.read(spark, lake, consumer_offsets.TABLE)
    client_ids = offs.where("client_id <> ''").select("cluster", "consumer_group", "client_id").distinct()
    new_trace = new_msgs = None
    if since is not None and _delta.exists(lake, deliveries.TABLE):
        new_trace = _delta.added_since(spark, lake, trace_records.TABLE, since.get(trace_records.TABLE.qualified))
        new_msgs = _delta.added_since(spark, lake, messages.TABLE, since.get(messages.TABLE.qualified))
    if new_trace is not None and new_msgs is not None:
        at = since.get(consumer_offsets.TABLE.qualified) if since else None
        old_clients = (_delta.read(spark, lake, consumer_offsets.TABLE, at=at) if at is not None
                       else spark.createDataFrame([], consumer_offsets.TABLE.schema))
        new_groups = client_ids.join(old_clients.where("client_id <> ''").select(
            "cluster", "consumer_group", "client_id"), ["cluster", "consumer_group", "client_id"], "left_anti") \
            .select("cluster", F.col("consumer_group").alias("group")).distinct()
        new_keys = new_msgs.where(F.col("uniq_key").isNotNull()).select(
            "cluster", F.col("uniq_key").alias("msg_id")).distinct()
        requests = (
            new_trace.select("cluster", "request_id")
            .unionByName(trace.join(new_keys, ["cluster", "msg_id"], "left_semi").select("cluster", "request_id"))
            .unionByName(trace.join(new_groups, ["cluster", "group"], "left_semi").select("cluster", "request_id"))
            .where(F.col("request_id").isNotNull()).distinct()
        )
    else:
        requests = None  # every request
    # The requests, their trace records and their keys are computed once, small, before silver/messages is read:
    # the engine builds a join's hash table on its left input, so the keys go left and the table's 7 columns are
    # only streamed past them (the update had computed the requests again inside the scan of every message; the
    # first build, joining every message whole, spent 39 s and 2.9 GiB at 10 M messages).
    inputs = f"{lake.rstrip('/')}/{DELIVERIES_INPUTS_STAGING}"
    small = _spark.materializer(spark, inputs)
    try:
        if requests is not None:
            requests = small(requests, "requests")
            trace = small(requests.join(trace, ["cluster", "request_id"], "inner")
                          .select(*trace_records.TABLE.columns), "trace")
        keys = small(trace.where(F.col("msg_id").isNotNull())
                     .select("cluster", F.col("msg_id").alias("uniq_key")).distinct(), "keys")
        msgs = keys.join(msgs.select(*deliveries_job.MESSAGE_COLUMNS), ["cluster", "uniq_key"], "inner")
        df = deliveries_job.deliveries(trace, msgs, client_ids)
        return _delta.merge(spark, df, lake, deliveries.TABLE, stage=f"{lake.rstrip('/')}/{DELIVERIES_STAGING}")
    finally:
        storage.delete_tree(inputs)


# ------------------------------------------------------------------------------------------------- run

# Every table ingest writes: the versions the ingest ledger records and a reconcile reads at.
LEDGER_TABLES = [files.TABLE, quarantine.TABLE, segments.TABLE, snapshots_table.TABLE, trace_records.TABLE,
                 cq_files.TABLE, consumer_offsets.TABLE,
                 subscription_groups.TABLE, topic_configs.TABLE, delay_offsets.TABLE, queue_bounds.TABLE,
                 messages.TABLE, deliveries.TABLE]
# What silver/deliveries is derived from (deliveries.deliveries: trace records, the original copies of their
# messages, the broadcast clients' ids).
DELIVERIES_INPUTS = [trace_records.TABLE, messages.TABLE, consumer_offsets.TABLE]


def _new_layout_problems(lake: str, ex: Extracted) -> bool:
    """Whether a path off the landing layout is not quarantined yet (a no-op run must still record it)."""
    paths = sorted({p.source_path for _, _, _, p in ex.problems})
    if not paths:
        return False
    if not _delta.exists(lake, quarantine.TABLE):
        return True
    got = _delta.read_pandas_columns(lake, quarantine.TABLE, ["source_path"], filters=[("source_path", "in", paths)])
    return bool(set(paths) - set(got["source_path"]))


def deliveries_stale(lake: str, previous: dict[str, Any] | None) -> bool:
    """Whether silver/deliveries must be rebuilt: trace records exist and the table is missing, or its inputs moved
    since the newest completed ingest (which left it up to date with them), or no ingest completed before."""
    if not _delta.exists(lake, trace_records.TABLE):
        return False
    if not _delta.exists(lake, deliveries.TABLE) or previous is None:
        return True
    recorded = previous["table_versions"]
    return any(_delta.version(lake, t) != recorded.get(t.qualified) for t in DELIVERIES_INPUTS)



def _since(t0: float) -> str:
    """Seconds since ``t0`` and the process's peak RSS so far (the embedded engine included): for progress lines."""
    import resource

    return f"{time.time() - t0:.1f} s, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"


def check_inputs(landing_uri: str, lake: str) -> None:
    """Refuse, before any engine starts, a landing zone that is not there and a lake that is a file (spec §6)."""
    if not storage.is_s3(lake) and os.path.isfile(lake):
        raise UsageError(f"--lake {lake}: is a file; give a folder (created if missing) or an s3:// URI")
    if not storage.is_s3(landing_uri) and os.path.isfile(landing_uri):
        raise UsageError(f"--landing {landing_uri}: is a file; give the landing zone's root folder or s3:// URI")
    if not storage.exists(landing_uri):
        raise UsageError(f"--landing {landing_uri}: no such folder or prefix; give the landing zone's root (the sync "
                         "job's destination)")
    if landing.looks_like_a_lake(landing_uri):
        raise UsageError(f"--landing {landing_uri}: is a lake (bronze/, silver/ or gold/ Delta tables), not a landing "
                         "zone; did you swap --landing and --lake?")
    if storage.exists(lake) and landing.looks_like_a_landing_zone(lake):
        raise UsageError(f"--lake {lake}: is a landing zone (cluster=<c>/... snapshot folders), not a lake; did you "
                         "swap --landing and --lake?")




LATE_WINDOW_ENV = "RMQ_RECON_LATE_WINDOW_H"


def late_window_h() -> float:
    """Hours of snapshot time a folder already taken is still listed for late files (RMQ_RECON_LATE_WINDOW_H, 2)."""
    raw = os.environ.get(LATE_WINDOW_ENV, "2")
    try:
        hours = float(raw)
    except ValueError:
        hours = float("nan")
    if not hours >= 0:
        raise UsageError(f"{LATE_WINDOW_ENV}={raw!r}: not a number of hours >= 0 (how long, in snapshot time, a "
                         "folder already taken is listed again for files that arrive late)")
    return hours


def lower_first_held(spark: Any, lake: str, late: list[Snapshot]) -> int:
    """Give the records each of ``late`` holds its time as ``first_snapshot_ts`` (and its copy as a message's
    ``segment``) where theirs is later.

    A snapshot folder that lands after a newer one of its broker holds records the lake already took from the newer
    one, stamped with that newer time; the run's decode reads nothing of them again (the segment ledger is past
    them). Which records a copy holds is what decoding it gives (commitlog files are preallocated: a copy's size says
    nothing), so the late folders' segments are decoded again, from their start, by the same tasks. Messages (trace
    messages included) are lowered, then the trace records they carry; silver/deliveries follows, being derived
    again for the rows rewritten. Rare (a failed upload retried): it costs a decode of those folders' segments.

    Returns:
        The number of messages and trace records whose time was lowered.
    """
    from pyspark.sql import functions as F

    from jobs.ingest import decode_tasks
    from jobs.lake import failpoints

    if not _delta.exists(lake, messages.TABLE):
        return 0
    units = decode_tasks.plan_units(sorted(late, key=lambda s: (s.cluster, s.broker, s.ts)), {}, frozenset(),
                                    lambda snap, p: None, chunk_bytes=CHUNK_BYTES, batch_rows=MESSAGE_BATCH_ROWS,
                                    trace_batch_rows=TRACE_BATCH_ROWS)
    if not units:
        return 0
    folder = f"{rows_folder(lake)}/late-first-held"
    _decode_pass(spark, units, Decoded(f"{folder}/decoded"), len(units))
    held = (spark.read.schema(decode_tasks.output_ddl()).parquet(f"{folder}/decoded")
            .where(F.col("kind") == decode_tasks.MESSAGE)
            .select(*messages.TABLE.key, F.col("first_snapshot_ts").alias("_ts"), F.col("segment").alias("_path")))
    # From the decode alone, not from the lake's times: a run killed between the two MERGEs lowers the trace records
    # when run again, though the messages are lowered already. Computed once, read by both.
    firsts = _spark.materialize(spark, held.groupBy(*messages.TABLE.key).agg(
        F.min(F.struct("_ts", "_path")).alias("_first")).select(*messages.TABLE.key, "_first._ts", "_first._path"),
        f"{folder}/firsts")
    # The lake's rows are read, and compared by the MERGE, in the brokers' ranges the late copies hold, not whole
    # (trace records are keyed by the physical offset of the trace message that carries them).
    spans = {(c, b): (int(lo), int(hi) + 1) for c, b, lo, hi in firsts.groupBy("cluster", "broker").agg(
        F.min("physical_offset"), F.max("physical_offset")).collect()}
    in_spans = _spans_filter(spans)
    n = 0
    for table in (messages, trace_records):
        if not _delta.exists(lake, table.TABLE):
            continue
        rows = (_delta.read(spark, lake, table.TABLE).alias("t").where(in_spans)
                .join(firsts, ["cluster", "broker", "physical_offset"], "inner")
                .where(F.col("first_snapshot_ts") > F.col("_ts")).withColumn("first_snapshot_ts", F.col("_ts")))
        if "segment" in table.TABLE.columns:  # the copy that first held the message
            rows = rows.withColumn("segment", F.col("_path"))
        n += _delta.merge(spark, rows.select(*table.TABLE.columns), lake, table.TABLE, target_filter=in_spans)
        if table is messages:
            failpoints.hit("ingest.between_late_merges")
    return n


def seen_commitlog_paths(lake: str, snaps: list[Snapshot]) -> frozenset[str]:
    """The commitlog files of ``snaps`` that bronze/files already holds (a re-read that finds nothing new is not a new
    file version). Read for this run's paths only, from the data files whose snapshot times admit them: bronze/files
    gains a row per segment copy of every snapshot (a broker keeping 144 segments, 5 M rows a year)."""
    paths = [f.path for s in snaps if not s.is_clients for f in s.of_kind("commitlog")]
    if not paths or not _delta.exists(lake, files.TABLE):
        return frozenset()
    first = min(s.ts for s in snaps if not s.is_clients)
    return frozenset(_delta.read_pandas_columns(
        lake, files.TABLE, ["source_path"],
        filters=[("file_kind", "=", "commitlog"), ("snapshot_ts", ">=", first), ("source_path", "in", paths)],
    )["source_path"])


def sealed_rule(taken: ledger.TakenSnapshots, window_h: float) -> Callable[[str], bool]:
    """Which snapshot folders a run need not list: taken already, and a snapshot of the same broker (or clients
    folder) at least ``window_h`` hours newer was taken too. The sync job writes a broker's snapshots in order, so
    files no longer arrive in a folder that old; a run then lists what is new, not the whole landing zone (a
    folder's files, 4,500 at 1 M messages an hour, cost 20 us each to list and classify). ``--retake`` lists all.
    """
    window = dt.timedelta(hours=window_h)

    def sealed(folder: str) -> bool:
        key = landing.folder_key(folder)
        if key is None or key not in taken:
            return False
        newest = taken.newest(key[0], key[1])
        try:
            return newest is not None and newest - landing.parse_snapshot_ts(key[2]) >= window
        except ValueError:
            return False

    return sealed


def settle_default() -> float:
    """Seconds a snapshot folder without the marker must stay unchanged before it is taken (RMQ_RECON_SNAPSHOT_SETTLE_S)."""
    return float(os.environ.get("RMQ_RECON_SNAPSHOT_SETTLE_S", "0"))


def landed_anything(summary: dict[str, Any]) -> bool:
    """Whether a run's summary says it moved a lake table (a scheduled run that found nothing new did not: the
    snapshot DAG then publishes no Asset event, so the reconcile DAG is not started for nothing)."""
    versions = summary.get("table_versions") or {}
    return bool(versions.get("after")) and versions.get("before") != versions.get("after")


def require_marker_default() -> bool:
    """Take only snapshot folders with the sync job's marker (:func:`jobs.lake.engine_config.require_marker_default`)."""
    from jobs.lake import engine_config

    return engine_config.require_marker_default()


def run(landing_uri: str, lake: str, *, snapshot_glob: str | None = None,
        progress: Callable[[str], None] | None = None, now: dt.datetime | None = None,
        settle_s: float | None = None, require_marker: bool | None = None, retake: bool = False) -> dict[str, Any]:
    """Ingest the new snapshots of ``landing_uri`` into ``lake``. Idempotent: a second run changes nothing.

    A snapshot folder is taken once it is complete (``Snapshot.completed_by``) and its listing differs from the
    one the snapshot ledger (bronze/snapshots) recorded: new folders, and folders whose files arrived late. With
    nothing to take and nothing to repair, the run costs a listing and a few ledger reads: no engine starts.

    Args:
        landing_uri: the landing zone root (local folder or ``s3://bucket/prefix``).
        lake: the lake root (local folder or ``s3://``).
        snapshot_glob: only snapshot folders matching this fnmatch pattern (relative path), for backfills.
        progress: called with one line per step (default: the module logger).
        now: the ingestion time recorded in bronze rows (default: the wall clock, for provenance only).
        settle_s: a folder without the marker is complete when no file changed for this long (default
            :func:`settle_default`).
        require_marker: take only folders with the marker (default :func:`require_marker_default`).
        retake: take every complete folder again, whatever the snapshot ledger says (an investigation; the loads
            are idempotent, so this changes nothing unless the landing zone did).

    Returns:
        Counts of snapshots, files, rows new or changed per table, quarantined problems and seconds taken.
    """
    import fnmatch

    from jobs.lake import failpoints, lease

    say = progress_lines.reporter(progress, log)
    t0 = time.time()
    started = dt.datetime.now(UTC).replace(microsecond=0)
    now = now or started
    check_inputs(landing_uri, lake)
    settle_s = settle_default() if settle_s is None else settle_s
    require_marker = require_marker_default() if require_marker is None else require_marker
    sealed: list[str] = []
    found, layout_problems, problem_cluster = landing.discover(
        landing_uri, None if retake else sealed_rule(ledger.taken_snapshots(lake), late_window_h()), sealed)
    if not found and not sealed and not layout_problems:
        raise UsageError(f"--landing {landing_uri}: no snapshot folder (expected cluster=<c>/broker=<b>/snapshot_ts="
                         "<YYYYMMDDTHHMMSSZ>/store/... or cluster=<c>/clients/snapshot_ts=...); point it at the sync "
                         "job's destination")
    if snapshot_glob:
        found = [s for s in found if fnmatch.fnmatch(s.folder, snapshot_glob)]
        if not found:
            raise UsageError(f"--snapshots {snapshot_glob!r}: matches no snapshot folder under {landing_uri}; the "
                             "pattern is matched against cluster=<c>/broker=<b>/snapshot_ts=<ts>")
    ex = Extracted()
    for p in layout_problems:
        ex.problem(problem_cluster.get(p.source_path, ""), "", None, p)
    n_messages = 0
    n_trace = 0
    # One writer at a time (jobs.lake.lease); everything that reads the lake's state is read under the lease.
    with lease.hold(lake, "writer", purpose=f"ingest of {landing_uri}", say=say) as held, ExitStack() as stack:
        taken = ledger.taken_snapshots(lake)
        clock = time.time()
        snaps, completed_by, waiting = [], {}, []
        for snap in found:
            by = snap.completed_by(clock, settle_s, require_marker)
            if by is None:
                waiting.append(snap.folder)
            elif retake or taken.get(ledger.snapshot_key(snap.cluster, snap.broker, snap.ts)) != snap.listing_digest():
                snaps.append(snap)
                completed_by[snap.folder] = by
        # Folders a sync job delivered after a newer one of the same broker (a failed upload retried): the records
        # they hold were first held by them, not by the newer folder that landed first (as-of runs read this).
        late = [s for s in snaps if not s.is_clients and (newest := taken.newest(s.cluster, s.broker)) is not None
                and s.ts < newest and taken.get(ledger.snapshot_key(s.cluster, s.broker, s.ts)) != s.listing_digest()]
        say(f"ingest: {len(snaps)} new or changed snapshot(s) of {len(found) + len(sealed)} under {landing_uri}"
            + (f"; {len(waiting)} not complete yet (no {landing.MARKER}"
               + ("" if require_marker else f", changed less than {settle_s:g} s ago") + ")" if waiting else ""))
        empty = [s.folder for s in snaps if all(f.kind in ("other", "marker") for f in s.files)]
        if snaps and len(empty) == len(snaps):  # success is never reported on nothing (spec §6)
            raise UsageError(f"--landing {landing_uri}: the {len(snaps)} new snapshot folder(s) hold no RocketMQ "
                             f"file (e.g. {empty[0]}: no store/config/*.json, store/commitlog, store/consumequeue "
                             "or clients' offsets.json); nothing ingested: check the sync job's source and target")
        previous = ledger.last_ingest(lake)
        if (not snaps and previous is not None and not _new_layout_problems(lake, ex)
                and ledger.versions(lake, LEDGER_TABLES) == previous["table_versions"]):
            # Nothing new and the last run completed: the listing was the whole cost.
            return {"run_id": previous["run_id"], "landing": landing_uri, "lake": lake, "snapshots": 0,
                    "snapshots_seen": len(found) + len(sealed), "snapshots_waiting": waiting, "files": 0, "changed_rows": {},
                    "table_versions": {"before": previous["table_versions"], "after": previous["table_versions"]},
                    "quarantined": 0, "seconds": round(time.time() - t0, 2)}
        spark = stack.enter_context(_spark.session())
        recovered = _delta.recover_parquet_staging(spark, lake, LEDGER_TABLES)
        if recovered:
            say(f"ingest: finished the rewrites of {', '.join(recovered)} that a killed run left")
        storage.delete_tree(rows_folder(lake))  # what a killed run left
        state = load_segments_state(lake)
        seen_paths = seen_commitlog_paths(lake, snaps)
        for i, snap in enumerate(snaps, 1):
            say(f"ingest: [{i}/{len(snaps)}] {snap.folder} ({len(snap.files)} files)")
            extract_configs(snap, landing_uri, ex, now)
        missing = {snap.folder: landing.missing_files(snap) for snap in snaps}
        _say_missing(missing, say)
        t_decode = time.time()
        staged = decode_commitlogs(spark, lake, snaps, state, ex, now, seen_paths)
        say(f"ingest: decoded {staged.messages} records and {staged.trace} trace records in "
            f"{_since(t_decode)}")
        cqs = cq_ledger.CQLedger.load(lake)
        # The queue bounds are the driver's work (consume queues read and checked), the loads the engine's: they
        # run side by side once the bounds have read what silver/messages held before this run.
        mark, qx = ex.mark(), Extracted()
        lake_read = threading.Event()
        bounds = _Background(lambda: extract_all_queue_bounds(snaps, landing_uri, lake, staged, qx, now, cqs,
                                                              read_all=retake, lake_read=lake_read.set))
        bounds.wait_for(lake_read)
        n_messages = load_decoded(spark, lake, staged)
        say(f"ingest: silver/messages loaded ({_since(t_decode)} since the decode began)")
        failpoints.hit("ingest.after_snapshot")
        for snap in snaps:
            for t in extract_exports(snap, ex):
                _delta.merge(spark, messages_frame(spark, t), lake, messages.TABLE, insert_only=True)
                n_messages += t.num_rows
        n_trace = load_trace(spark, lake, staged)
        say(f"ingest: bronze/trace_records loaded ({_since(t_decode)} since the decode began)")
        reads = bounds.result()
        ex.splice(mark, qx)
        say(f"ingest: queue bounds of {len(snaps)} snapshot(s) ({reads.read} consume queue file(s) read, "
            f"{reads.skipped} unchanged not read; beside the loads; {_since(t_decode)} since the decode began)")
        storage.delete_tree(staged.staging)
        if late:
            lowered = lower_first_held(spark, lake, late)
            say(f"ingest: {len(late)} snapshot folder(s) older than their broker's newest taken "
                f"({', '.join(s.folder for s in late[:3])}{', ...' if len(late) > 3 else ''}): "
                f"{lowered} record(s) now first held at their time")
        failpoints.hit("ingest.after_trace")
        counts = load_small(spark, lake, ex, now)
        counts[cq_files.TABLE.qualified] = cq_ledger.save(spark, lake, cqs, rows_folder(lake))
        say(f"ingest: small tables loaded ({_since(t_decode)} since the decode began)")
        failpoints.hit("ingest.after_configs")
        counts[segments.TABLE.qualified] = save_segments_state(spark, lake, state, now)
        storage.delete_tree(rows_folder(lake))
        failpoints.hit("ingest.after_segments")
        # Derived tables are rebuilt from what the lake holds whenever their inputs moved since the last completed
        # run, not only when this run loaded something: rows a killed run loaded are taken in here.
        if deliveries_stale(lake, previous):
            say("ingest: bringing silver/deliveries up to date")
            counts[deliveries.TABLE.qualified] = build_deliveries(
                spark, lake, previous["table_versions"] if previous else None)
            say(f"ingest: silver/deliveries up to date ({_since(t_decode)} since the decode began)")
            failpoints.hit("ingest.after_deliveries")
        counts[messages.TABLE.qualified] = n_messages
        counts[trace_records.TABLE.qualified] = n_trace
        counts[snapshots_table.TABLE.qualified] = ledger.record_snapshots(spark, lake, [
            {"cluster": sn.cluster, "broker": sn.broker, "snapshot_ts": sn.ts, "folder": sn.folder,
             "files": len(sn.files), "bytes": sum(f.size for f in sn.files), "listing_digest": sn.listing_digest(),
             "completed_by": completed_by[sn.folder], "missing": ", ".join(rel for rel, _ in missing[sn.folder]),
             "ingested_at": now} for sn in snaps])
        after = ledger.versions(lake, LEDGER_TABLES)
        held.check()
        before = previous["table_versions"] if previous else {}
        run_id = previous["run_id"] if previous else None
        if previous is None or after != before:
            run_id = ledger.new_run_id("ingest", started)
            ledger.record_ingest(spark, lake, {
                "run_id": run_id, "started_at": started,
                "completed_at": dt.datetime.now(UTC).replace(microsecond=0), "landing": landing_uri,
                "snapshots": len(snaps), "files": sum(len(s.files) for s in snaps), "quarantined": len(ex.problems),
                "changed_rows": {k: int(v) for k, v in counts.items()}, "table_versions": after})
    summary = {
        # the ledger row of this run (the previous one when nothing changed) and the versions it moved
        "run_id": run_id,
        "table_versions": {"before": before, "after": after},
        "landing": landing_uri,
        "lake": lake,
        "snapshots": len(snaps),
        "snapshots_seen": len(found) + len(sealed),
        "snapshots_waiting": waiting,
        "files": sum(len(s.files) for s in snaps),
        "changed_rows": counts,
        "quarantined": len(ex.problems),
        "missing_files": {folder: [rel for rel, _ in m] for folder, m in missing.items() if m},
        "seconds": round(time.time() - t0, 2),
    }
    say(f"ingest: done in {summary['seconds']} s; {len(ex.problems)} problem(s) quarantined")
    return summary
