"""The landing zone of spec §3: which snapshots exist and which file of a RocketMQ store each path is.

Paths mirror RocketMQ's own directories, so a copy of a real store dropped under
``cluster=<c>/broker=<b>/snapshot_ts=<YYYYMMDDTHHMMSSZ>/store/`` is recognised as is.
"""
from __future__ import annotations

import bisect
import datetime as dt
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from jobs.export import layout as export_layout
from jobs.formats import names
from jobs.lake import storage
from jobs.problems import Problem

SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
# The file a sync job writes last into a snapshot folder, to say the folder is complete (optional; see
# Snapshot.completed_by).
MARKER = "_SUCCESS"
_SNAPSHOT_DIR = re.compile(
    r"^cluster=(?P<cluster>[^/]+)/(?:broker=(?P<broker>[^/]+)|(?P<clients>clients))/snapshot_ts=(?P<ts>[^/]*)/(?P<rest>.+)$"
)
_SEGMENT = re.compile(r"^[0-9]{20}$")  # ASCII digits: \d takes any script's, which int() reads and Java does not
_LONG_MAX = (1 << 63) - 1  # a file's name is its start offset, a Java long (UtilAll.offset2FileName)


def _segment_name(name: str) -> bool:
    return bool(_SEGMENT.match(name)) and int(name) <= _LONG_MAX


def _queue_id(name: str) -> bool:
    """A consume queue folder: a queue id, a Java int (any other folder is not a queue's)."""
    return name.isascii() and name.isdigit() and int(name) < (1 << 31)
# Tiered storage's metadata (5.1+, config/tieredStoreMetadata.json): where a broker has it, offsets below the local
# Min are still served from the tier (rocketmq5.md §5).
TIERED_METADATA = "tieredStoreMetadata.json"
CONFIG_FILES = {
    "consumerOffset.json": "consumer_offsets",
    "lmqConsumerOffset.json": "consumer_offsets",
    "subscriptionGroup.json": "subscription_groups",
    "topics.json": "topics",
    "delayOffset.json": "delay_offsets",
    "consumerOrderInfo.json": "order_info",
}
FileKind = Literal[
    "consumer_offsets", "subscription_groups", "topics", "delay_offsets", "client_offsets", "order_info",
    "commitlog", "consumequeue", "batch_consumequeue", "rocksdb_cq", "export", "backup", "rocksdb", "tiered", "marker",
    "export_manifest", "export_part", "export_messages", "export_pack", "other",
]
EXPORT_MANIFEST = export_layout.MANIFEST


# The files spec §3 expects in a broker store snapshot, each with what stays unknown without it ("every file is
# optional; missing files are reported, never fatal").
EXPECTED_STORE_FILES = (
    ("store/config/consumerOffset.json", "the broker's committed offsets at this time are unknown"),
    ("store/config/subscriptionGroup.json", "its groups' retryMaxTimes comes from another snapshot, else 16"),
    ("store/config/topics.json", "its topic configs at this time are unknown"),
    ("store/config/delayOffset.json", "its delay-level offsets at this time are unknown"),
)


def missing_files(snap: "Snapshot") -> list[tuple[str, str]]:
    """What spec §3 expects in the snapshot and it lacks (reported, never fatal), as (path in the folder, what stays
    unknown): a config file with neither itself nor its ``.bak``, no commitlog segment, no consume queue; the clients
    folder without any ``offsets.json``. A folder that holds only exported messages (``export/``) is not a store
    copy: not judged."""
    have = {f.rel for f in snap.files}
    if snap.is_clients:
        if not any(f.kind == "client_offsets" or f.rel.endswith("/offsets.json.bak") for f in snap.files):
            return [("<clientId>/<group>/offsets.json", "broadcast consumers' offsets at this time are unknown")]
        return []
    if not any(f.rel.startswith("store/") for f in snap.files) and any(f.kind == "export" for f in snap.files):
        return []
    # a config the broker keeps in RocksDB (5.x, store/config/<db>/) is there, not missing (jobs.formats.rocksdb_config)
    dbs = {f.rel.split("/")[2] for f in snap.files if f.kind == "rocksdb"}
    in_db = {"store/config/consumerOffset.json": {"consumerOffsets", "rdb"}, "store/config/topics.json": {"topics", "rdb"},
             "store/config/subscriptionGroup.json": {"subscriptionGroups", "rdb"}}
    out = [(rel, meaning) for rel, meaning in EXPECTED_STORE_FILES
           if rel not in have and f"{rel}.bak" not in have and not in_db.get(rel, set()) & dbs]
    if not snap.segment_starts():
        out.append(("store/commitlog/", "no message is read from it, and Min is each queue's first valid entry "
                                        "(spec §4)"))
    if not (snap.of_kind("consumequeue") or snap.of_kind("rocksdb_cq") or snap.of_kind("batch_consumequeue")):
        out.append(("store/consumequeue/", "its queue bounds are unknown (Min/Max outputs use the broker's latest "
                                           "snapshot with bounds)"))
    return out


@dataclass(frozen=True)
class LandingFile:
    """One file of a snapshot, classified."""

    uri: str
    path: str  # relative to the landing root: the ``source_path`` recorded in the lake
    rel: str  # relative to the snapshot folder
    size: int
    kind: str
    topic: str | None = None  # consumequeue files
    queue_id: int | None = None
    start: int | None = None  # commitlog / consumequeue: the start offset in the file name
    client_id: str | None = None  # clients' offsets.json
    group: str | None = None
    mtime: float = 0.0  # modification time (epoch s): when the sync job last wrote it
    etag: str = ""  # the S3 listing's ETag ("" for local files)
    # An export's consume queue file (jobs.export.queues): no object of its own but pieces of the broker's export
    # packs, (the export's snapshot_ts, offset in its pack, length, position in the file); zeros elsewhere. None: the
    # object at ``uri``.
    pieces: tuple[tuple[str, int, int, int], ...] | None = None
    packs: str = ""  # an export's: the broker's landing folder, which holds the exports whose packs hold the pieces

    @functools.cached_property
    def piece_starts(self) -> list[int] | None:
        """The pieces' positions in the file when they come in file order without overlapping (an export's, as its host
        writes them), so that a read finds its pieces by bisection (:func:`read_file`: a search for Min reads 8 bytes a
        step, 120,000 reads in bench_export's queue checks, and each looked at every piece of its file). None: not an
        export's, or not so."""
        if self.pieces is None:
            return None
        starts = [pos for _, _, _, pos in self.pieces]
        in_order = all(pos + max(n, 0) <= nxt for (_, _, n, pos), nxt in zip(self.pieces, starts[1:]))
        return starts if in_order else None

    def fingerprint(self) -> tuple[int, str] | tuple[int, float]:
        """What says the file is unchanged from an earlier copy: (size, ETag) when the store gives one (an upload
        of the same bytes keeps it; its time does not), else (size, mtime) (``rsync``/``cp -p`` keep both)."""
        return (self.size, self.etag) if self.etag else (self.size, self.mtime)


@dataclass
class Snapshot:
    """A broker store (or the clients' offset files) as one sync job left it at ``ts``."""

    cluster: str
    broker: str  # "" for the clients folder
    ts: dt.datetime
    folder: str
    files: list[LandingFile] = field(default_factory=list)
    # the export layout's manifest (jobs.export.layout), read when the run takes the folder (:func:`read_manifest`)
    manifest: dict | None = None

    @property
    def is_clients(self) -> bool:
        return self.broker == ""

    @property
    def is_export(self) -> bool:
        """Written by ``rmq-recon export``: decoded records instead of commitlog segments."""
        return any(f.kind in ("export_manifest", "export_part", "export_messages") for f in self.files)

    def segment_starts(self) -> list[int]:
        """The start offsets of the broker's commitlog segments at this snapshot: the copy's files, or an export's
        host listing (its manifest)."""
        if self.is_export:
            return [int(s["start"]) for s in export_layout.segments_of(self.manifest or {})]
        return [f.start for f in self.of_kind("commitlog") if f.start is not None]

    def oldest_segment_start(self) -> int | None:
        """The oldest commitlog segment's start: what the broker's Min is measured against (formats §2)."""
        return min(self.segment_starts(), default=None)

    def of_kind(self, kind: str) -> list[LandingFile]:
        return [f for f in self.files if f.kind == kind]

    @property
    def has_marker(self) -> bool:
        return any(f.kind == "marker" for f in self.files)

    @property
    def newest_mtime(self) -> float:
        return max((f.mtime for f in self.files), default=0.0)

    def listing_digest(self) -> str:
        """A digest of the folder's listing (paths and sizes): it changes when a file arrives, grows or goes."""
        import hashlib

        h = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.rel):
            h.update(f"{f.rel}\0{f.size}\n".encode())
        return h.hexdigest()

    def completed_by(self, now: float, settle_s: float, require_marker: bool) -> str | None:
        """``"marker"`` or ``"settle"`` when the snapshot is complete, else None (the sync job may still be writing).

        Complete: the sync job's marker file (:data:`MARKER`) is in the folder, or, unless the marker is required,
        no file of the folder changed for ``settle_s`` seconds.
        """
        if self.is_export:  # an export's marker comes after its manifest; without both it is still being written
            return "marker" if self.has_marker and any(f.kind == "export_manifest" for f in self.files) else None
        if self.has_marker:
            return "marker"
        if not require_marker and now - self.newest_mtime >= settle_s:
            return "settle"
        return None


_FOLDER = re.compile(r"^cluster=(?P<cluster>[^/]+)/(?:broker=(?P<broker>[^/]+)|clients)/snapshot_ts=(?P<ts>[^/]+)$")


def folder_key(folder: str) -> tuple[str, str, str] | None:
    """(cluster, broker or "" for clients, snapshot_ts text) of a snapshot folder's path, None for any other path."""
    m = _FOLDER.match(folder)
    return None if m is None else (m["cluster"], m["broker"] or "", m["ts"])


_SNAPSHOT_TS = re.compile(r"[0-9]{8}T[0-9]{6}Z")
# Snapshot times a landing zone can hold: after RocketMQ existed, and not ahead of the clock by more than a day (a
# host's skew). 99991231T235959Z parses, and then broke every reconcile's arithmetic on times.
EARLIEST_SNAPSHOT = dt.datetime(2010, 1, 1, tzinfo=dt.timezone.utc)
FUTURE_SLACK = dt.timedelta(days=1)


def parse_snapshot_ts(text: str) -> dt.datetime:
    """``YYYYMMDDTHHMMSSZ`` (UTC) -> an aware datetime; ValueError when malformed.

    Exactly that spelling: ``strptime`` also takes ``20260105T0200Z`` and ``2026015T020000Z``, which would make two
    folders of one time (two ledger keys, one set of offsets silently kept)."""
    if _SNAPSHOT_TS.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not YYYYMMDDTHHMMSSZ")
    return dt.datetime.strptime(text, SNAPSHOT_FORMAT).replace(tzinfo=dt.timezone.utc)


def implausible_ts(ts: dt.datetime, now: dt.datetime | None = None) -> str | None:
    """Why a snapshot time cannot be real (before 2010, or more than a day ahead of the clock), or None."""
    now = now or dt.datetime.now(dt.timezone.utc)
    if ts < EARLIEST_SNAPSHOT:
        return f"is before {EARLIEST_SNAPSHOT:%Y-%m-%d}"
    if ts > now + FUTURE_SLACK:
        return f"is more than a day after this host's clock ({now:%Y-%m-%dT%H:%M:%SZ})"
    return None


def format_snapshot_ts(ts: dt.datetime) -> str:
    return ts.astimezone(dt.timezone.utc).strftime(SNAPSHOT_FORMAT)


def classify(rel: str, *, clients: bool) -> dict[str, object]:
    """What a path inside a snapshot folder is (RocketMQ's own store layout, formats §1, §2, §6)."""
    parts = rel.split("/")
    name = parts[-1]
    if rel == MARKER:
        return {"kind": "marker"}
    if clients:
        # <clientId>/<group>/offsets.json (.bak)
        if len(parts) == 3 and name in ("offsets.json", "offsets.json.bak"):
            kind = "client_offsets" if name == "offsets.json" else "backup"
            return {"kind": kind, "client_id": parts[0], "group": parts[1]}
        return {"kind": "other"}
    if len(parts) >= 2 and parts[0] == "store" and parts[1] == "config":
        if len(parts) >= 4 and parts[2] in ("consumerOffsets", "topics", "subscriptionGroups", "rdb", "rocksdb"):
            return {"kind": "rocksdb"}  # RocketMQ 5.x config in RocksDB (jobs.formats.rocksdb_config)
        if len(parts) == 3:
            if name in CONFIG_FILES:
                return {"kind": CONFIG_FILES[name]}
            if name == TIERED_METADATA:
                return {"kind": "tiered"}
            if name.endswith(".bak") and name[: -len(".bak")] in CONFIG_FILES:
                return {"kind": "backup"}
        return {"kind": "other"}
    if len(parts) == 3 and parts[:2] == ["store", "commitlog"] and _segment_name(name):
        return {"kind": "commitlog", "start": int(name)}
    if len(parts) == 5 and parts[:2] == ["store", "consumequeue"] and _segment_name(name) and _queue_id(parts[3]):
        return {"kind": "consumequeue", "topic": parts[2], "queue_id": int(parts[3]), "start": int(name)}
    if len(parts) == 3 and parts[:2] == ["store", "consumequeue"]:
        # the consume queue in RocksDB (5.x storeType=defaultRocksDB): CURRENT, MANIFEST-*, *.sst... at its top
        return {"kind": "rocksdb_cq"}
    if len(parts) == 5 and parts[:2] == ["store", "batchconsumequeue"] and _segment_name(name) and _queue_id(parts[3]):
        # queue.type=BatchCQ (5.x): 46-byte units (jobs.formats.batch_consumequeue)
        return {"kind": "batch_consumequeue", "topic": parts[2], "queue_id": int(parts[3]), "start": int(name)}
    if rel == EXPORT_MANIFEST:  # the export layout (rmq-recon export, jobs.export.layout)
        return {"kind": "export_manifest"}
    if rel == export_layout.PACK:
        return {"kind": "export_pack"}
    if export_layout.is_part(rel):
        return {"kind": "export_part"}
    if export_layout.is_messages(rel):
        return {"kind": "export_messages"}
    if len(parts) >= 2 and parts[0] == "export" and name.endswith((".parquet", ".jsonl", ".json")):
        return {"kind": "export"}
    return {"kind": "other"}


_FILE_KINDS = {"consumer_offsets", "subscription_groups", "topics", "delay_offsets", "client_offsets", "order_info",
               "commitlog", "tiered",
               "consumequeue", "batch_consumequeue", "backup", "marker"}


def misplaced(rel: str, *, clients: bool) -> str | None:
    """Why a path inside a snapshot folder breaks RocketMQ's store layout (quarantined, not read), or None."""
    parts = rel.split("/")
    for k in range(1, len(parts)):
        folder = "/".join(parts[:k])
        if classify(folder, clients=clients)["kind"] in _FILE_KINDS:
            return f"'{folder}' is a folder where RocketMQ writes a file: file ignored"
    if clients:
        return None
    if len(parts) == 3 and parts[:2] == ["store", "commitlog"] and not _SEGMENT.match(parts[2]):
        return "commitlog file name is not 20 digits (the segment's start offset): not read"
    if len(parts) == 5 and parts[:2] == ["store", "consumequeue"] and not _SEGMENT.match(parts[4]):
        return "consume queue file name is not 20 digits (the file's start byte): not read"
    if (len(parts) == 3 and parts[:2] == ["store", "commitlog"] or len(parts) == 5 and parts[:2] == [
            "store", "consumequeue"]) and not _segment_name(parts[-1]):  # (store/consumequeue/CURRENT: RocksDB)
        return "file name is beyond a Java long (2^63-1), so no start offset: not read"
    return None


def _bad_folder_name(cluster: str, broker: str) -> str | None:
    """Why a snapshot's cluster or broker folder name cannot be RocketMQ's (``..`` would put a corrected
    consumerOffset.json outside its folder), or None."""
    why = names.label_problem(cluster)
    if why:
        return f"cluster folder name 'cluster={names.shown(cluster)}' {why}"
    why = names.label_problem(broker) if broker else None
    return f"broker folder name 'broker={names.shown(broker)}' {why}" if why else None


def bad_name_in(rel: str, *, clients: bool) -> str | None:
    """Why a name a path inside a snapshot carries (a consume queue's topic, a client id and group) cannot be one
    RocketMQ writes, or None: such a file is quarantined and never reaches the reports."""
    parts = rel.split("/")
    if clients:
        if len(parts) == 3:
            why = names.label_problem(parts[0])
            if why:
                return f"client id folder '{names.shown(parts[0])}' {why}: not read"
            why = names.group_problem(parts[1])
            if why:
                return f"group folder '{names.shown(parts[1])}' {why}: not read"
        return None
    if len(parts) == 5 and parts[:2] == ["store", "consumequeue"]:
        why = names.topic_problem(parts[2])
        if why:
            return f"consume queue topic folder '{names.shown(parts[2])}' {why}: not read"
    return None


def listing(landing: str, sealed: Callable[[str], bool] | None = None,
            skipped: list[str] | None = None) -> list[storage.FileInfo]:
    """Every file of the landing zone, but those of the snapshot folders ``sealed`` names (the folder's path,
    ``cluster=<c>/<broker=<b>|clients>/snapshot_ts=<ts>``), which are not listed at all: appended to ``skipped``.

    The levels above the snapshot folders are listed one at a time (a handful of entries); top-level ``_*`` and
    ``.*`` folders (``_truth``, hidden ones) are not listed, as :func:`discover` ignores their files.
    """
    if sealed is None:
        return storage.list_files(landing)
    out: list[storage.FileInfo] = []

    def visit(uri: str, depth: int) -> None:
        files, dirs = storage.list_level(uri)
        out.extend(files)
        for d in dirs:
            rel = storage.relative(d, landing)
            if depth == 0 and rel[:1] in ("_", "."):
                continue
            if depth < 2:
                visit(d, depth + 1)
            elif sealed(rel):
                if skipped is not None:
                    skipped.append(rel)
            else:
                out.extend(storage.list_files(d))

    visit(landing, 0)
    return sorted(out, key=lambda f: f.uri)


def discover(landing: str, sealed: Callable[[str], bool] | None = None,
             skipped: list[str] | None = None) -> tuple[list[Snapshot], list[Problem], dict[str, str]]:
    """List the landing zone (:func:`listing`) and group its files into snapshots.

    Returns:
        (snapshots sorted by cluster, broker, time; problems for paths that break the layout — a malformed
        ``snapshot_ts`` folder quarantines that folder's files and nothing else; cluster of each problem path).
    """
    snapshots: dict[tuple[str, str, str], Snapshot] = {}
    problems: list[Problem] = []
    problem_cluster: dict[str, str] = {}
    bad_folders: set[str] = set()
    parsed: dict[str, dt.datetime] = {}
    now = dt.datetime.now(dt.timezone.utc)
    for info in listing(landing, sealed, skipped):
        path = storage.relative(info.uri, landing)
        if path.startswith("_truth/") or path.startswith("_") or "/." in "/" + path and path.split("/")[0].startswith("."):
            continue
        m = _SNAPSHOT_DIR.match(path)
        if not m:
            problems.append(Problem(path, 0, "path does not follow the landing layout "
                                    "cluster=<c>/broker=<b>|clients/snapshot_ts=<YYYYMMDDTHHMMSSZ>/...; file ignored"))
            problem_cluster[path] = path.split("/")[0].removeprefix("cluster=") if path.startswith("cluster=") else ""
            continue
        cluster, broker = m["cluster"], m["broker"] or ""
        folder = path[: len(path) - len(m["rest"]) - 1]
        bad_name = _bad_folder_name(cluster, broker)
        if bad_name:
            problems.append(Problem(path, 0, f"{bad_name}: this snapshot is skipped"))
            problem_cluster[path] = names.shown(cluster)
            bad_folders.add(folder)
            continue
        try:
            ts = parsed[m["ts"]] if m["ts"] in parsed else parsed.setdefault(m["ts"], parse_snapshot_ts(m["ts"]))
        except ValueError:
            problems.append(Problem(path, 0, f"malformed snapshot folder 'snapshot_ts={names.shown(m['ts'])}': "
                                    "expected snapshot_ts=YYYYMMDDTHHMMSSZ (UTC); this snapshot is skipped"))
            problem_cluster[path] = cluster
            bad_folders.add(folder)
            continue
        odd = implausible_ts(ts, now)
        if odd:
            problems.append(Problem(path, 0, f"snapshot folder 'snapshot_ts={m['ts']}' {odd}: not a time a snapshot "
                                    "was taken; this snapshot is skipped"))
            problem_cluster[path] = cluster
            bad_folders.add(folder)
            continue
        key = (cluster, broker, m["ts"])
        wrong = (None if info.regular else "not a regular file (a symbolic link, a device or a pipe): not read; the "
                 "sync job must copy the file, not link it") or misplaced(m["rest"], clients=m["clients"] is not None) \
            or bad_name_in(m["rest"], clients=m["clients"] is not None)
        snap = snapshots.setdefault(key, Snapshot(cluster, broker, ts, folder))
        if wrong:
            problems.append(Problem(path, 0, wrong))
            problem_cluster[path] = cluster
            continue
        c = classify(m["rest"], clients=m["clients"] is not None)
        snap.files.append(LandingFile(uri=info.uri, path=path, rel=m["rest"], size=info.size, mtime=info.mtime,
                                      etag=info.etag, **c))  # type: ignore[arg-type]
    ordered = sorted(snapshots.values(), key=lambda s: (s.cluster, s.broker, s.ts))
    return ordered, problems, problem_cluster


def _top_folders(root: str) -> list[str]:
    try:
        return [d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_level(root)[1]]
    except (OSError, storage.StorageError):
        return []


def looks_like_a_lake(root: str) -> bool:
    """Whether ``root`` holds the lake's layers (a Delta table under bronze/, silver/ or gold/)."""
    return any(storage.exists(storage.join(root, layer, table, "_delta_log"))
               for layer, table in (("bronze", "files"), ("bronze", "snapshots"), ("silver", "messages"),
                                    ("silver", "consumer_offsets"), ("gold", "reconcile_runs")))


def looks_like_a_landing_zone(root: str) -> bool:
    """Whether ``root`` holds snapshot folders (``cluster=<c>/``) and no lake layer."""
    top = _top_folders(root)
    return any(t.startswith("cluster=") for t in top) and not any(t in ("bronze", "silver", "gold") for t in top)


def _queue_files(snap: Snapshot, manifest_uri: str, queues: list[Any]) -> list[LandingFile]:
    """The consume queue files an export's manifest lists (:func:`jobs.export.layout.read_manifest`'s entries), each
    as its pieces (:mod:`jobs.export.queues`): a piece names the broker's export folder whose pack holds it by its
    snapshot time (:func:`pack_uri`). The pieces are kept as the manifest gives them: turning each of bench_export's
    374,000 into its pack's URI was 0.44 s of the ingest, before its engine started."""
    broker_dir = manifest_uri[: -len(f"{snap.folder.rsplit('/', 1)[-1]}/{EXPORT_MANIFEST}")]
    folder_uri = manifest_uri[: -len(EXPORT_MANIFEST)]
    return [LandingFile(uri=f"{folder_uri}{q.rel}", path=f"{snap.folder}/{q.rel}", rel=q.rel, size=q.size,
                        mtime=q.mtime, etag=q.id, pieces=q.pieces, packs=broker_dir,
                        **classify(q.rel, clients=False))  # type: ignore[arg-type]
            for q in queues]


def pack_uri(f: LandingFile, tag: str) -> str:
    """The pack holding the pieces of ``f`` that its broker's export at ``tag`` (``snapshot_ts``) shipped."""
    return f"{f.packs}snapshot_ts={tag}/{export_layout.PACK}"


class PackWindows:
    """Recently read windows of export packs, so that the pieces of a snapshot's queue files (packed in file order, read
    in queue order) cost one read per :data:`WINDOW` bytes of a pack, not one per piece: a bulk broker's snapshot reads
    up to 24 pieces of each of its 204 active files (bench_export). At most :data:`SLOTS` windows are held; the ingest
    clears them at the start of each queue bounds step (a pack is never rewritten once its folder is complete)."""

    WINDOW = 1 << 20
    SLOTS = 32

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._windows: dict[str, tuple[int, bytes]] = {}

    def clear(self) -> None:
        with self._lock:
            self._windows.clear()

    def read(self, uri: str, lo: int, hi: int) -> bytes | None:
        if hi - lo > self.WINDOW:
            return storage.read_bytes(uri, lo, hi)
        with self._lock:
            w = self._windows.get(uri)
        if w is None or not (w[0] <= lo and hi <= w[0] + len(w[1])):
            data = storage.read_bytes(uri, lo, lo + self.WINDOW)
            if data is None:
                return None
            w = (lo, data)
            with self._lock:
                self._windows.pop(uri, None)
                if len(self._windows) >= self.SLOTS:
                    self._windows.pop(next(iter(self._windows)))
                self._windows[uri] = w
        return w[1][lo - w[0]:hi - w[0]]


PACKS = PackWindows()


def read_file(f: LandingFile, start: int = 0, end: int | None = None) -> bytes | None:
    """The bytes ``[start, end)`` of a landing file (:func:`jobs.lake.storage.read_bytes`): an export's consume queue
    file is put together from its pieces.

    Raises:
        OSError: a piece is missing (the folder holding it was deleted: the landing zone keeps a broker's export
            folders for less than ``rmq-recon export --reship-after``) or shorter than the manifest says.
    """
    if f.pieces is None:
        return storage.read_bytes(f.uri, start, end)
    end = f.size if end is None else min(end, f.size)
    if end <= start:
        return b""
    buf = bytearray(end - start)
    starts = f.piece_starts
    first = max(bisect.bisect_right(starts, start) - 1, 0) if starts is not None else 0
    for tag, at, n, pos in f.pieces[first:]:
        if starts is not None and pos >= end:
            break
        if n <= 0 or pos + n <= start or pos >= end:  # (most pieces, when the bounds read a grown file's new ones)
            continue
        lo, hi = max(pos, start), min(pos + n, end)
        uri = pack_uri(f, tag)
        data = PACKS.read(uri, at + lo - pos, at + hi - pos)
        if data is None or len(data) != hi - lo:
            raise OSError(f"{uri}: {'missing' if data is None else 'shorter than its manifest says'} (a piece of "
                          f"{f.path}); keep a broker's export folders longer than the exporter's --reship-after")
        buf[lo - start:hi - start] = data
    return bytes(buf)


def read_manifests(snaps: list[Snapshot], problem: Callable[[Snapshot, Problem], None]) -> list[Snapshot]:
    """``snaps`` with each export folder's manifest read (``Snapshot.manifest``); an export whose manifest is
    unreadable or names parts the folder lacks is quarantined and left out (the next run tries it again), and the
    problems its host found in the store's listing are recorded."""
    kept = []
    for snap in snaps:
        if not snap.is_export:
            kept.append(snap)
            continue
        f = next((f for f in snap.files if f.kind == "export_manifest"), None)
        try:
            if f is None:
                raise ValueError("no manifest")
            doc = export_layout.read_manifest(storage.read_bytes(f.uri) or b"")
            if doc.get("layout") not in export_layout.LAYOUTS:
                raise ValueError(f"layout {doc.get('layout')!r}, expected one of {', '.join(export_layout.LAYOUTS)} "
                                 "(an export newer than this ingest: upgrade rmq-recon where the ingest runs)")
            if (doc.get("cluster"), doc.get("broker")) != (snap.cluster, snap.broker):
                raise ValueError(f"written for cluster={doc.get('cluster')}/broker={doc.get('broker')}")
            have = {x.rel for x in snap.files if x.kind in ("export_part", "export_messages")}
            named = [n for p in doc.get("parts", []) for n in (p["name"], (p.get("messages") or {}).get("name")) if n]
            lacking = [n for n in named if n not in have]
            if lacking:
                raise ValueError(f"names {len(lacking)} part(s) the folder lacks (e.g. {lacking[0]})")
            extra = sorted(have - set(named))
            if extra:
                raise ValueError(f"the folder holds {len(extra)} part(s) it does not name (e.g. {extra[0]})")
            queue_files = _queue_files(snap, f.uri, doc.get("queues", []))
        except (ValueError, TypeError, KeyError, OSError) as exc:
            where = f.path if f is not None else f"{snap.folder}/{EXPORT_MANIFEST}"
            problem(snap, Problem(where, 0, f"export manifest unusable ({exc}): this snapshot is not ingested; "
                                  "run rmq-recon export again on the host for a new folder"))
            continue
        snap.manifest = doc
        snap.files.extend(queue_files)
        for p in doc.get("listing_problems", []):
            problem(snap, Problem(p["source_path"], int(p["position"]), p["reason"]))
        kept.append(snap)
    return kept
