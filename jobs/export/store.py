"""``rmq-recon export --store``: one snapshot folder of a broker store in the export layout (:mod:`jobs.export.layout`).

The commitlog's new records are decoded by the ingest's own code (:func:`jobs.ingest.decode_tasks.plan_units` on the
host's listing, :func:`jobs.ingest.decode_tasks.decode_unit` from the host state), so an export gives the rows the
ingest of a store copy at the same time gives, and reads only the bytes stored since the previous export. The
other files the ingest reads (``jobs.ingest.landing.classify``) are shipped as they are; the commitlog never is.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.export import layout, queues, stable, state
from jobs.ingest import decode_tasks, landing
from jobs.lake import failpoints, storage
from jobs.problems import UsageError

UTC = dt.timezone.utc
CHUNK_BYTES = 16 << 20  # commitlog bytes read at a time (the ingest reads 64 MiB: a host keeps less in memory)
BATCH_ROWS = 100_000
PART_ROWS = 1_000_000  # rows of a part before the next one starts
GROUP_ROWS = 32_768  # rows held before they are written as a row group (progress rows come one a segment; a
# decoded window gives a batch of up to 32,768 messages). 50,000 until stop 68: a broker storing 1 M messages an hour
# (265,000 a run) held up to 82,000 rows and peaked at 290-293 MiB, against 275-276 MiB now (target < 300); CPU
# within the noise both ways (3 runs each: 2.23-2.28 s per million against 2.15-2.45; a 6-broker fleet's bulk broker
# 3.2-4.0 against 3.5-4.0).
# Dictionary pages only for the columns of few values: on the high-cardinality ones (keys, properties, message ids)
# they cost time and bytes. With no statistics (the ingest reads the parts whole) a part is written in 1.03 s per
# million rows and 3.1 MB per 176k rows, against 1.55 s and 5.5 MB with pyarrow's defaults (bench_export's bulk
# broker, stop 54). zstd, not LZ4: LZ4 writes a part of 42,671 rows in 0.74 s per million rows against 1.35 s, but
# its parts are 2.6x larger and the ingest of bench_export's exports then peaked at 1.92 GiB against 1.70 GiB (stop 55).
COMPRESSION = "zstd"
DICTIONARY_COLUMNS = ["kind", "cluster", "broker", "snapshot_ts", "topic", "tags", "born_host", "store_host", "segment",
                      "first_snapshot_ts", "client_host", "type", "group", "stored_topic", "consumer_group",
                      "broker_name", "source_path", "reason"]
# Integer columns delta-encoded (offsets and sequence numbers climb): 264,325 messages of bench_export's bulk broker
# 20% smaller and written 5% faster than plain + zstd; its 24 exports 8% smaller for 4% less CPU (stop 56). Spark's
# and Sail's readers decode it.
DELTA_COLUMNS = [f.name for f in decode_tasks.OUTPUT_ARROW
                 if pa.types.is_integer(f.type) and f.name not in DICTIONARY_COLUMNS]
# the active segment's tail can hold a record the broker is writing: a problem there is read again before it ships
TAIL_TRIES, TAIL_PAUSE_S = 3, 0.2
# the kinds of files the ingest reads besides the commitlog, shipped as they are
SHIPPED = {"consumer_offsets", "subscription_groups", "topics", "delay_offsets", "order_info", "backup", "tiered",
           "batch_consumequeue"}
REWRITTEN = {"consumer_offsets", "subscription_groups", "topics", "delay_offsets", "order_info", "backup", "tiered"}


def default_state_dir() -> str:
    """Where the host state lives unless ``--state`` says: ``$RMQ_RECON_EXPORT_STATE`` or
    ``~/.local/state/rmq-recon/export``."""
    return os.environ.get("RMQ_RECON_EXPORT_STATE") or str(Path.home() / ".local/state/rmq-recon/export")


def export_store(store: str, to: str, *, cluster: str, broker: str, snapshot_ts: dt.datetime | None = None,
                 state_dir: str | None = None, reship_after_s: float = queues.RESHIP_AFTER_S,
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``cluster=C/broker=B/snapshot_ts=T/`` below ``to`` from the broker store folder ``store`` (the one
    holding ``commitlog/``, ``consumequeue/`` and ``config/``); returns the manifest. ``reship_after_s``: a consume
    queue file ships whole again once its oldest piece is that old (:mod:`jobs.export.queues`).

    Raises:
        UsageError: no store there, a snapshot time not after the previous export's, or the folder already exists.
    """
    root = Path(store)
    if not (root / "commitlog").is_dir() and not (root / "config").is_dir():
        raise UsageError(f"--store {store}: no commitlog/ or config/ folder; point it at the broker's storePathRootDir")
    for name, value in (("--cluster", cluster), ("--broker", broker)):
        if not value or "/" in value or "=" in value:
            raise UsageError(f"{name} {value!r}: a name without '/' or '='")
    ts = (snapshot_ts or dt.datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    folder = f"cluster={cluster}/broker={broker}/snapshot_ts={landing.format_snapshot_ts(ts)}"
    target = storage.join(to, folder)
    state_dir = state_dir or default_state_dir()
    with state.locked(state_dir, cluster, broker):
        return _export(root, to, cluster, broker, ts, folder, target, state_dir, reship_after_s, say)


def _export(root: Path, to: str, cluster: str, broker: str, ts: dt.datetime, folder: str, target: str,
            state_dir: str, reship_after_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    st = state.load(state_dir, cluster, broker)
    _recover(st, say)
    if ts == st.last_ts and storage.exists(storage.join(target, landing.MARKER)):  # a rerun of the last export
        say(f"export: {target} is complete already; nothing to do")
        return json.loads(storage.read_bytes(storage.join(target, layout.MANIFEST)) or b"{}")
    if st.last_ts is not None and ts <= st.last_ts:
        raise UsageError(f"--snapshot-ts {ts:%Y-%m-%dT%H:%M:%SZ} is not after this broker's last export "
                         f"({st.last_ts:%Y-%m-%dT%H:%M:%SZ}); exports of a store are taken in time order")
    if storage.exists(storage.join(target, landing.MARKER)):
        raise UsageError(f"{target} already holds a complete snapshot; choose another --snapshot-ts")
    st.begin(target, ts)  # from here a killed run's folder is deleted by the next run
    storage.delete_tree(target)
    started = time.process_time()
    scratch = st.path.with_name(f".{st.path.stem}.export")  # this broker's: what a killed run left is dropped
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        out = Path(tmp)
        packer = queues.Packer(out, ts, st.queues, reship_after_s)
        try:
            shipped = _ship_files(root, out, packer)
        finally:
            packer.close()
        failpoints.hit("export.after_files")
        commitlog = _export_commitlog(root, out, folder, st, ts, cluster, broker, say)
        failpoints.hit("export.after_decode")
        storage.upload_tree(str(out), target)
    failpoints.hit("export.after_upload")
    manifest = {"layout": layout.LAYOUT, "cluster": cluster, "broker": broker,
                "snapshot_ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "segments": commitlog["segments"],
                "listing_problems": commitlog["listing_problems"], "parts": commitlog["parts"],
                "counts": commitlog["counts"], "files": shipped, "queues": packer.files,
                "queue_bytes": {"shipped": packer.shipped, "read": packer.read},
                "store_dirs": sorted(p.name for p in root.iterdir() if p.is_dir()),
                "cpu_s": round(time.process_time() - started, 3)}
    st.prepare(commitlog["state"], packer.state)
    storage.write_bytes(storage.join(target, layout.MANIFEST), state.encode(manifest))
    failpoints.hit("export.before_marker")
    storage.write_bytes(storage.join(target, landing.MARKER), b"")
    failpoints.hit("export.after_marker")
    st.commit()
    c = commitlog["counts"]
    say(f"export: {target}: {c.get('message', 0)} message(s), {c.get('trace', 0)} trace record(s), "
        f"{c.get('problem', 0)} problem(s) from {commitlog['bytes_read']} new commitlog byte(s); "
        f"{len(packer.files)} queue file(s), {packer.shipped} new queue byte(s); {len(shipped)} other file(s)")
    return manifest


def _recover(st: state.HostState, say: Callable[[str], None]) -> None:
    """Finish what a killed run left: adopt its state when its folder is complete, else delete the folder."""
    p = st.pending
    if not p:
        return
    if p.get("segments") is not None and storage.exists(storage.join(p["folder"], landing.MARKER)):
        say(f"export: the previous run ended after {p['folder']} was complete: its state kept")
        st.commit()
        return
    say(f"export: the previous run stopped before {p['folder']} was complete: deleted, its range exported again")
    storage.delete_tree(p["folder"])
    st.drop()


def _ship_files(root: Path, out: Path, packer: queues.Packer) -> list[dict[str, Any]]:
    """Copy the files the ingest reads besides the commitlog into ``out/store/``: configs as one version each
    (:func:`jobs.export.stable.read_stable`), RocksDB databases whole (``copy_dir_stable``), batch queue files as they
    are; the consume queue files' new bytes go to ``packer``. Returns the copies' (rel, size, sha256)."""
    shipped: list[dict[str, Any]] = []
    dbs: set[str] = set()
    base = str(root)
    listed = [(sub, _kind("store/" + sub)) for sub in _files_below(root)]
    packer.max_pieces = queues.max_pieces(sum(kind == _PACKED for _, kind in listed))
    for sub, kind in listed:
        rel = "store/" + sub
        if kind in ("rocksdb", "rocksdb_cq"):  # a database: its folder is copied as one version
            parts = rel.split("/")
            dbs.add("/".join(parts[:3]) if kind == "rocksdb" else "store/consumequeue")
            continue
        if kind == _PACKED:  # (a string: 1,224 Path objects a run were 20 ms of a bulk broker's, stop 69)
            packer.add(f"{base}/{sub}", rel)
            continue
        if kind not in SHIPPED and kind != "consumequeue":
            continue
        path = root / sub
        try:
            before = path.stat()
        except FileNotFoundError:
            continue
        data = stable.read_stable(path) if kind in REWRITTEN else _read_whole(path)
        if data is None:  # deleted since the listing (a queue file the broker's clean-up removed)
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        # the copy keeps the file's modification time, as a sync job does: the ingest's queue file ledger knows an
        # unchanged file by (size, mtime) and does not read it again (on S3 by its ETag, the bytes' digest)
        try:
            after = path.stat()
        except FileNotFoundError:
            after = before
        stamp = before if stable._stamp(before) == stable._stamp(after) else after
        os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        shipped.append({"rel": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    for db in sorted(dbs):
        src = root / db.removeprefix("store/")
        # the RocksDB consume queue's files sit beside the topic folders
        n = stable.copy_dir_stable(src, out / db, flat=db == "store/consumequeue")
        shipped.append({"rel": db + "/", "files": n})
    return shipped


_PACKED = "consumequeue (packed)"
_KINDS: dict[str, str] = {}  # rel -> kind: a long-lived exporter meets the same files run after run


def _kind(rel: str) -> str:
    """``landing.classify``'s kind of a store file, :data:`_PACKED` for a consume queue file whose bytes go to the pack
    (a name the ingest refuses ships as a file, to be refused as a copy's is). Remembered: 8.5 ms a run for a bulk
    broker's 1,224 queue files, a tenth of a run with nothing new (stop 69)."""
    kind = _KINDS.get(rel)
    if kind is None:
        kind = landing.classify(rel, clients=False)["kind"]
        if kind == "consumequeue" and not (landing.misplaced(rel, clients=False)
                                           or landing.bad_name_in(rel, clients=False)):
            kind = _PACKED
        if len(_KINDS) >= 1 << 20:
            _KINDS.clear()
        _KINDS[rel] = kind
    return kind


def _files_below(root: Path) -> list[str]:
    """The store's files (``is_file``: symbolic links to files too) relative to it, in ``Path`` order (by their
    parts). Entries' types come from the directory listing: a bulk broker's ``rglob`` with a ``stat`` per entry cost
    14 ms a run, a third of a run with nothing new (stop 56)."""
    out: list[str] = []
    todo = [("", str(root))]
    while todo:
        prefix, d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except (FileNotFoundError, NotADirectoryError):  # removed since its parent was listed
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                todo.append((prefix + e.name + "/", e.path))
            elif e.is_file():
                out.append(prefix + e.name)
    return sorted(out, key=lambda rel: rel.split("/"))


def _read_whole(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _export_commitlog(root: Path, out: Path, folder: str, st: state.HostState, ts: dt.datetime, cluster: str,
                      broker: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Decode what the host's segments hold past the state into parts under ``out``; the new state, the listing,
    the parts and the row counts."""
    segs = []
    cl = root / "commitlog"
    for p in sorted(cl.iterdir()) if cl.is_dir() else []:
        if p.is_file() and landing._segment_name(p.name):
            segs.append(landing.LandingFile(uri=str(p), path=f"{folder}/store/commitlog/{p.name}",
                                            rel=f"store/commitlog/{p.name}", size=p.stat().st_size,
                                            kind="commitlog", start=int(p.name)))
    snap = landing.Snapshot(cluster, broker, ts, folder, segs)
    ledger = {(cluster, broker, name): SimpleNamespace(
        start_offset=s["start_offset"], decoded_to=s["decoded_to"], segment_size=s["segment_size"],
        complete=s["complete"], snapshot_ts=dt.datetime.fromisoformat(s["snapshot_ts"]) if s["snapshot_ts"] else None)
        for name, s in st.segments.items()}
    listing_problems: list[dict[str, Any]] = []
    units = decode_tasks.plan_units(
        [snap], ledger, frozenset(),
        lambda _s, p: listing_problems.append({"source_path": p.source_path, "position": p.position,
                                               "reason": p.reason}),
        chunk_bytes=CHUNK_BYTES, batch_rows=BATCH_ROWS, trace_batch_rows=BATCH_ROWS)
    for i, u in enumerate(units):
        u["unit"] = unit_id(ts, i)
    newest = max((u["segment"] for u in units), default=None)
    parts = _Parts(out)
    new_state: dict[str, dict[str, Any]] = {}
    bytes_read = 0
    for u in units:
        info = parts.write_unit(u, retry_tail=u["segment"] == newest)
        new_state[u["segment"]] = info["state"]
        bytes_read += sum(f["read_to"] - f["read_from"] for f in info["files"])
    parts.close()
    return {"segments": [{"name": f.rel.rsplit("/", 1)[-1], "start": f.start, "size": f.size} for f in segs],
            "listing_problems": listing_problems, "parts": parts.done, "counts": parts.counts, "state": new_state,
            "bytes_read": bytes_read}


def unit_id(ts: dt.datetime, index: int) -> int:
    """A decode unit's number in an export: its snapshot time in seconds, then its index. Unique across the folders an
    ingest run stages together, far above the run's own units (counted from 0), and in snapshot order, which is the
    order the ingest applies the segments' progress in."""
    if not 0 <= index < 1 << 16:
        raise ValueError(f"{index + 1} commitlog segments in one export: more than this layout numbers")
    return (int(ts.timestamp()) << 16) + index


def _coalesced(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """``batches`` with each run of small ones (progress rows: one a segment) made one batch, in order: the writer
    pays per batch and column, and a bulk broker's 97 progress rows written as 97 batches of ~60 columns cost 10 ms a
    run (stop 69)."""
    def joined(run: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        return [pa.concat_batches(run)] if len(run) > 1 else run

    out: list[pa.RecordBatch] = []
    run: list[pa.RecordBatch] = []
    for b in batches:
        if b.num_rows < 1024:
            run.append(b)
            continue
        out += [*joined(run), b]
        run = []
    return out + joined(run)


class _Sink:
    """One Parquet file being written through a local temporary file, in row groups of at least :data:`GROUP_ROWS`
    rows: each segment already exported gives a progress row at every run, and a row group per row cost 0.6 ms each
    (a small broker's run of 60 segments: two thirds of its CPU)."""

    def __init__(self, tmp: Path, schema: pa.Schema, **options: Any) -> None:
        self.tmp, self.schema, self.options = tmp, schema, options
        self.writer: pq.ParquetWriter | None = None
        self.rows = 0
        self._held: list[pa.RecordBatch] = []
        self._held_rows = 0

    def write(self, b: pa.RecordBatch) -> None:
        self._held.append(b)
        self._held_rows += b.num_rows
        self.rows += b.num_rows
        if self._held_rows >= GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        if self.writer is None:
            self.tmp.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(str(self.tmp), self.schema, compression=COMPRESSION, **self.options)
        self.writer.write_table(pa.Table.from_batches(_coalesced(self._held), self.schema))
        self._held, self._held_rows = [], 0

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.tmp.unlink()
        self.writer, self.rows, self._held, self._held_rows = None, 0, [], 0

    def finish(self, target: Path) -> bool:
        """Close the file as ``target``; False when it got no row (no file)."""
        self.flush()
        if self.writer is None:
            return False
        self.writer.close()
        self.tmp.replace(target)
        self.writer, self.rows = None, 0
        return True


def _message_columns(b: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch of messages with silver/messages' columns only, in commitlog order (a record's messages by
    queue offset): the order the decode gives, so a check that costs a pass over two columns."""
    po, qo = b.column("physical_offset").to_numpy(), b.column("queue_offset").to_numpy()
    b = pa.RecordBatch.from_arrays([b.column(n) for n in decode_tasks.MESSAGES_ARROW.names],
                                   schema=decode_tasks.MESSAGES_ARROW)
    step_po, step_qo = np.diff(po), np.diff(qo)
    if bool(((step_po > 0) | ((step_po == 0) & (step_qo > 0))).all()):
        return b
    return b.take(pa.array(np.lexsort((qo, po))))


class _Parts:
    """Rows of decode units into ``store-export/records-<lo>-<hi>.parquet`` parts of about :data:`PART_ROWS` rows,
    their messages into ``messages-<lo>-<hi>.parquet`` beside, each through one local file at a time (the host's
    memory holds a batch, not a part).

    A messages file is written as a file of silver/messages, to be adopted whole (:mod:`jobs.export.layout`): with the
    Parquet statistics the lake's Delta log is given, and dictionary pages for the columns of few values."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.done: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        folder = out / layout.FOLDER
        self._records = _Sink(folder / ".open.parquet", decode_tasks.OUTPUT_ARROW, use_dictionary=DICTIONARY_COLUMNS,
                              write_statistics=False,
                              column_encoding=dict.fromkeys(DELTA_COLUMNS, "DELTA_BINARY_PACKED"))
        names = decode_tasks.MESSAGES_ARROW.names
        self._messages = _Sink(folder / ".open-messages.parquet", decode_tasks.MESSAGES_ARROW,
                               use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names], write_statistics=True,
                               column_encoding={c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in names})
        self._lo: int | None = None
        self._hi: int | None = None
        self._kinds: dict[str, int] = {}

    @property
    def _rows(self) -> int:
        return self._records.rows + self._messages.rows

    def write_unit(self, unit: dict[str, Any], *, retry_tail: bool) -> dict[str, Any]:
        """Stream a unit's rows into the open part. The active segment's unit gets a part of its own: a problem
        in it may be a record the broker is still writing, so the part is dropped and the unit read again (up to
        :data:`TAIL_TRIES` times) before the problem ships."""
        if retry_tail:
            self._finish()
        for attempt in range(TAIL_TRIES if retry_tail else 1):
            kinds: dict[str, int] = {}
            info: dict[str, Any] = {}
            for b in decode_tasks.decode_unit(unit):
                if not b.num_rows:
                    continue
                kind = b.column("kind")[0].as_py()
                if kind == decode_tasks.PROGRESS:
                    info = json.loads(b.column("info")[0].as_py())
                kinds[kind] = kinds.get(kind, 0) + b.num_rows
                if kind == decode_tasks.MESSAGE:
                    self._messages.write(_message_columns(b))
                else:
                    self._records.write(b)
            if not retry_tail or not kinds.get(decode_tasks.PROBLEM) or attempt == TAIL_TRIES - 1:
                break
            self._abort()
            time.sleep(TAIL_PAUSE_S)  # the broker may be writing the last record: read it again
        for k, n in kinds.items():
            self.counts[k] = self.counts.get(k, 0) + n
            self._kinds[k] = self._kinds.get(k, 0) + n
        start = info["state"]["start_offset"]
        for f in info["files"] or [{"read_from": info["state"]["decoded_to"], "read_to": info["state"]["decoded_to"]}]:
            lo, hi = start + f["read_from"], start + f["read_to"]
            self._lo = lo if self._lo is None else min(self._lo, lo)
            self._hi = hi if self._hi is None else max(self._hi, hi)
        if retry_tail or self._rows >= PART_ROWS:
            self._finish()
        return info

    def _abort(self) -> None:
        self._records.abort()
        self._messages.abort()
        self._lo, self._hi, self._kinds = None, None, {}

    def _finish(self) -> None:
        rows = self._rows
        lo, hi = self._lo or 0, self._hi or 0
        n_messages = self._messages.rows
        messages = self._messages.finish(self.out / layout.messages_name(lo, hi))
        # every unit gives its progress row: a part whose bytes held messages has its records part too
        if not self._records.finish(self.out / layout.part_name(lo, hi)):
            assert not messages, "a messages file without its records part"
            return
        part = {"name": layout.part_name(lo, hi), "rows": rows, "lo": self._lo, "hi": self._hi, "kinds": self._kinds}
        if messages:
            part["messages"] = {"name": layout.messages_name(lo, hi), "rows": n_messages}
        self.done.append(part)
        self._lo, self._hi, self._kinds = None, None, {}

    def close(self) -> None:
        self._finish()
