"""The decode step: the commitlog work a run's snapshots add, planned here and decoded by the engine's tasks into a
staging folder below the lake (issue 13); only problems, segment progress and bronze/files rows come back."""
from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from jobs.ingest.extracted import Extracted
from jobs.ingest.landing import Snapshot
from jobs.ingest.segment_ledger import SegmentState, _segment_state_key
from jobs.lake import _delta, storage
from jobs.problems import Problem
from schemas import files

# The job's logger, not this module's: these lines are the ingest run's progress (log filters and tests name it).
log = logging.getLogger("jobs.ingest.ingest")

CHUNK_BYTES = 64 << 20  # bytes of a segment a decode task reads at a time
# A decode task yields decoded records and trace records in Arrow batches of about these many rows.
TRACE_BATCH_ROWS = 100_000
MESSAGE_BATCH_ROWS = 100_000
# Below the lake: the decode tasks' output until it is loaded (jobs.ingest.decode_tasks).
STAGING = "_staging/ingest"
MAX_SLICES = 4  # a batch whose records form more runs than this is filtered (Decoded.record_batches)


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


@dataclass
class Decoded:
    """What the engine's decode tasks left in the staging folder, and what the driver took from their progress."""

    staging: str
    messages: int = 0
    trace: int = 0
    pop_checkpoints: int = 0
    pop_acks: int = 0
    # (cluster, broker) -> snapshot ts -> the record ranges known after that snapshot's copies were read
    ranges: dict[tuple[str, str], dict[dt.datetime, list[tuple[int, int]]]] = field(default_factory=dict)
    # (cluster, broker) -> (lowest, highest) physical offset of the bytes that gave records
    spans: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # whether silver/messages held a record inside ``spans`` before the run loaded any (None: not known); the
    # queue-bounds step reads them anyway (lake_records reads a range holding each span): the load does not again
    lake_overlap: bool | None = None
    # whether two folders of the run may hold one record (an export beside another folder of its broker): the reads
    # keep its first copy, as a decode of store copies reads each record from the first copy that holds it
    overlap: bool = False
    # the export folders' decoded parts (``rmq-recon export``), read where they landed beside the staging folder:
    # copying them into it was 6 s of bench_export's 6.1 M records
    parts: list[str] = field(default_factory=list)
    # their messages files (export layout 2): rows of silver/messages, no ``kind`` column
    message_parts: list[str] = field(default_factory=list)
    # the kinds of rows each export part holds, as its manifest counts them (a part of layout 2 holds no messages:
    # they are in its messages file); a part not listed may hold any
    part_kinds: dict[str, set[str]] = field(default_factory=dict)
    # whether the run's own decode wrote the staging folder
    decoded_here: bool = False

    def files(self, messages: bool = True) -> Iterator[tuple[Any, str, bool]]:
        """(Arrow filesystem, path, whether it is an export's messages file) of each file that may hold staged records:
        the staging folder's and the export parts that hold any (:meth:`parts_of`), and the exports' messages files
        unless not ``messages``."""
        import pyarrow.dataset as pads

        if self.decoded_here:
            dataset = pads.dataset(self.staging, format="parquet")
            for fragment in dataset.get_fragments():
                yield dataset.filesystem, fragment.path, False
        from jobs.ingest import decode_tasks

        for uri in self.parts_of(decode_tasks.MESSAGE):
            yield *_delta.arrow_file(uri), False
        for uri in self.message_parts if messages else []:
            yield *_delta.arrow_file(uri), True

    def parts_of(self, kind: str) -> list[str]:
        """The export parts that may hold rows of ``kind``: a scan of all 478 parts of bench_export's exports, most
        holding a progress row only, was most of each load's time (trace records, POP checkpoints and acks: 0.4-0.7 s
        each) and 0.65 s of the messages' load and of the queue bounds, for no row."""
        return [u for u in self.parts if kind in self.part_kinds.get(u, (kind,))]

    def read(self, spark: Any, table: Any, kind: str, renamed: dict[str, str] | None = None) -> Any:
        """The staged rows of ``kind`` with the columns of ``table`` (``renamed``: table column -> staged column)."""
        from pyspark.sql import functions as F

        from jobs.ingest import decode_tasks

        renamed = renamed or {}
        cols = ", ".join(f"`{renamed.get(f.name, f.name)}` {f.dataType.simpleString()}" for f in table.schema.fields)
        # the staging folder and the parts read apart: Sail's Parquet writer names a map's entries ``entries``,
        # pyarrow's ``key_value``, and one read of both fails to merge the schemas
        parts = self.parts_of(kind)
        groups = ([[self.staging]] if self.decoded_here else []) + ([parts] if parts else [])
        rows = None
        for paths in groups:
            part = (spark.read.schema(f"kind STRING, {cols}").parquet(*paths).where(F.col("kind") == kind)
                    .select(*[F.col(renamed.get(c, c)).alias(c) for c in table.columns]))
            rows = part if rows is None else rows.unionByName(part)
        if kind == decode_tasks.MESSAGE and self.message_parts:  # the exports' messages files: no kind
            part = spark.read.schema(cols).parquet(*self.message_parts).select(*table.columns)
            rows = part if rows is None else rows.unionByName(part)
        assert rows is not None, "read() of a run that staged nothing"
        if not self.overlap:
            return rows
        from pyspark.sql import Window

        first = Window.partitionBy(*table.key).orderBy(F.col("first_snapshot_ts").asc_nulls_last(),
                                                      *[F.col(c) for c in ("segment", "source_path") if c in
                                                        table.columns])
        return rows.withColumn("_n", F.row_number().over(first)).where(F.col("_n") == 1).drop("_n")

    def message_chunks(self, table: Any, rows: int, messages_files: bool = True) -> Iterator[pa.Table]:
        """The staged records with ``table``'s columns (a column a file lacks: left out, null in
        :func:`jobs.lake.layout.append`), in Arrow tables of up to ``rows`` rows: as :meth:`read`, without the
        engine; the exports' messages files' too unless not ``messages_files`` (the load adopts them)."""
        for b in self.record_batches(list(table.columns), rows, messages_files=messages_files):
            yield pa.Table.from_batches([b])

    def record_batches(self, columns: list[str], rows: int, dictionary: tuple[str, ...] = (),
                       messages_files: bool = True) -> Iterator[pa.RecordBatch]:
        """The staged records' ``columns`` (those a file has), file by file in the driver, in batches of up to
        ``rows`` rows (``dictionary``: columns read dictionary-encoded).

        Picked on the dictionary codes of ``kind`` (a comparison of the strings was 1.8 s for bench_export's 6.1 M
        records) and as slices of their runs where they are few (an export part ends with its one progress row; a
        filter copied every row: 2 s more)."""
        import pyarrow.parquet as pq

        from jobs.ingest import decode_tasks

        for fs, path, messages_file in self.files(messages_files):
            with fs.open_input_file(path) as f:
                if messages_file:  # every row a message, no kind
                    pf = pq.ParquetFile(f, read_dictionary=list(dictionary))
                    have = set(pf.schema_arrow.names)
                    yield from pf.iter_batches(batch_size=rows, columns=[c for c in columns if c in have],
                                               use_threads=False)
                    continue
                pf = pq.ParquetFile(f, read_dictionary=["kind", *dictionary])
                have = set(pf.schema_arrow.names)
                cols = ["kind", *[c for c in columns if c in have]]
                for b in pf.iter_batches(batch_size=rows, columns=cols, use_threads=False):
                    kind = b.column("kind")
                    code = kind.dictionary.index(decode_tasks.MESSAGE).as_py()
                    if code < 0:
                        continue
                    mask = kind.indices.to_numpy(zero_copy_only=False) == code
                    b = b.drop_columns(["kind"])
                    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
                    if len(edges) <= 2 * MAX_SLICES:
                        yield from (b.slice(lo, hi - lo) for lo, hi in zip(edges[::2], edges[1::2]))
                    else:
                        yield b.filter(pa.array(mask))


def staging_folder(lake: str) -> str:
    """Where the decode tasks write their output (below the lake; one writer at a time holds the lease)."""
    return f"{lake.rstrip('/')}/{STAGING}"


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


def decode_commitlogs(spark: Any, lake: str, snaps: list[Snapshot], state: dict[tuple[str, str, str], SegmentState],
                      out: Extracted, now: dt.datetime, seen_paths: frozenset[str] = frozenset()) -> Decoded:
    """Decode what the snapshots add to the commitlogs: planned here, decoded by the engine (jobs.ingest.decode_tasks).

    The decoded messages and trace records stay in the staging folder for the loads; the problems, the bronze/files
    rows of the segments and their new ledger state (``state`` is updated in place) come back here.
    """
    from jobs.ingest import decode_tasks

    units = decode_tasks.plan_units(
        [s for s in snaps if not s.is_clients and not s.is_export], state, seen_paths,
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
    exports = [s for s in snaps if s.is_export]
    if exports:
        batches.extend(_stage_exports(spark, exports, staged))
    _apply_progress(batches, state, out, now, staged)
    return staged


def _decode_pass(spark: Any, work: list[dict[str, Any]], staged: Decoded, segments: int) -> list[pa.RecordBatch]:
    """Decode ``work`` in the engine's tasks into the staging folder (replacing what it held); the problem and
    progress rows, which the driver reads back."""
    import json

    from jobs.ingest import decode_tasks

    tasks = decode_tasks.pack(work, task_bytes(), min_tasks())
    log.info("ingest: %d segment(s) to decode in %d task(s)%s", segments, len(tasks),
             f" ({len(work) - segments} more pieces of split segments)" if len(work) > segments else "")
    frame = spark.createDataFrame([(i, json.dumps(t)) for i, t in enumerate(tasks)], "task BIGINT, units STRING")
    (frame.repartition(len(tasks)).mapInArrow(decode_tasks.decode_tasks, decode_tasks.output_ddl())
     .write.mode("overwrite").parquet(staged.staging))
    staged.decoded_here = True
    # One folder, not one per kind: Spark sorts a task's rows by the partition columns before a partitioned
    # write, which on a small executor cost more than the decode.
    small, counts = _read_back(spark.read.schema(decode_tasks.output_ddl()).parquet(staged.staging))
    staged.messages, staged.trace = counts.get(decode_tasks.MESSAGE, 0), counts.get(decode_tasks.TRACE, 0)
    staged.pop_checkpoints, staged.pop_acks = counts.get(decode_tasks.POP_CK, 0), counts.get(decode_tasks.POP_ACK, 0)
    return small


SMALL_COLUMNS = ["kind", "unit", "seq", "cluster", "broker", "snapshot_ts", "source_path", "position", "reason", "info"]


def _read_back_parts(uris: list[str]) -> tuple[list[pa.RecordBatch], dict[str, int]]:
    """:func:`_read_back` of export parts, read here in one Arrow scan: their small columns, the rows counted by kind
    and the problem and progress rows kept. The parts hold an export's trace, POP, problem and progress rows (its
    messages are in files of their own), a few bytes per message: bench_export's 478 parts hold 195,347 rows for
    6.1 M messages. The engine's query over them (a plan over every file, then the scan) held the ingest up 1.4 s;
    this scan takes 0.3-0.5 s, in one call that does not wait on the interpreter (the config files are parsed on
    a thread meanwhile: a read per part, each taking the interpreter back, took 1.6 s)."""
    import posixpath

    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from jobs.ingest import decode_tasks

    schema = pa.schema([decode_tasks.OUTPUT_ARROW.field(c) for c in SMALL_COLUMNS])
    scheme = uris[0].split("://", 1)[0] + "://" if "://" in uris[0] else ""
    paths = [u[len(scheme):] for u in uris]
    root = posixpath.commonpath(paths) if len(paths) > 1 else posixpath.dirname(paths[0])
    fs = _delta.arrow_filesystem(scheme + root)
    try:
        table = ds.dataset([posixpath.relpath(p, root) for p in paths], schema=schema, format="parquet",
                           filesystem=fs).to_table()
    except (OSError, pa.ArrowException) as exc:
        raise OSError(f"export parts not readable ({exc}); move the snapshot folder named out of the landing zone "
                      "(or export it again) and run ingest again") from exc
    tally = pc.value_counts(table.column("kind"))  # (a null kind too, as the engine's groupBy counts it)
    counts = {k: int(n) for k, n in zip(tally.field(0).to_pylist(), tally.field(1).to_pylist())}
    rows = table.filter(pc.is_in(table.column("kind"), value_set=pa.array([decode_tasks.PROBLEM,
                                                                           decode_tasks.PROGRESS])))
    return rows.combine_chunks().to_batches(), counts


def _read_back(staged_rows: Any) -> tuple[list[pa.RecordBatch], dict[str, int]]:
    """The problem and progress rows of the decoded rows ``staged_rows`` (a frame of decode_tasks.output_ddl()), and
    how many rows of each kind it holds.

    The engine counts the kinds and picks out the problem and progress rows, in one query: reading them here, even
    streamed a row group at a time, held ~0.35 GiB in the driver at 10 M records (1 M-row row groups)."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from jobs.ingest import decode_tasks

    small_cols = SMALL_COLUMNS
    got = (staged_rows.where(F.col("kind").isin(decode_tasks.PROBLEM, decode_tasks.PROGRESS)).select(*small_cols)
           .withColumn("rows", F.lit(None).cast("bigint"))  # null: a problem or progress row; else a kind's count
           .unionByName(staged_rows.groupBy("kind").agg(F.count(F.lit(1)).alias("rows")), allowMissingColumns=True)
           .toArrow())
    tally = got.filter(pc.is_valid(got.column("rows")))
    counts = dict(zip(tally.column("kind").to_pylist(), tally.column("rows").to_pylist()))
    rows = got.filter(pc.is_null(got.column("rows"))).select(small_cols)
    rows = rows.cast(pa.schema([decode_tasks.OUTPUT_ARROW.field(c) for c in small_cols]))
    return rows.combine_chunks().to_batches(), counts


def _stage_exports(spark: Any, exports: list[Snapshot], staged: Decoded) -> list[pa.RecordBatch]:
    """The export folders' decoded rows (``rmq-recon export``, jobs.export) staged beside the run's own decode
    (:attr:`Decoded.parts`: read where they landed, not copied); their problem and progress rows, as a decode pass
    gives them.

    The host decoded them with the same code from the same bytes (jobs.ingest.decode_tasks.decode_unit): what
    follows (the loads, the queue checks, the segment ledger) does not tell the layouts apart."""
    from jobs.ingest import decode_tasks

    uris = [f.uri for snap in exports for f in snap.files if f.kind == "export_part"]
    if not uris:
        return []
    staged.message_parts = [f.uri for snap in exports for f in snap.files if f.kind == "export_messages"]
    log.info("ingest: %d export folder(s) to stage (%d part(s), %d messages file(s))", len(exports), len(uris),
             len(staged.message_parts))
    staged.parts = uris
    small, counts = _read_back_parts(uris)
    staged.part_kinds = _part_kinds(exports, counts)
    # the messages files' rows, as their manifests name them (an export of layout 1 counts them among its parts'
    # kinds); the load reads each file's footer once, when it adopts it
    staged.messages += counts.get(decode_tasks.MESSAGE, 0) + sum(
        int(p["messages"]["rows"]) for snap in exports for p in (snap.manifest or {}).get("parts", [])
        if p.get("messages"))
    staged.trace += counts.get(decode_tasks.TRACE, 0)
    staged.pop_checkpoints += counts.get(decode_tasks.POP_CK, 0)
    staged.pop_acks += counts.get(decode_tasks.POP_ACK, 0)
    return small


def _part_kinds(exports: list[Snapshot], counts: dict[str, int]) -> dict[str, set[str]]:
    """The kinds of rows each export part holds, as the manifests count them (:attr:`Decoded.part_kinds`), when
    their counts add up to what the parts hold (``counts``, the engine's count of every part's rows by kind); else
    none: every part is read for every kind."""
    from jobs.ingest import decode_tasks

    kinds: dict[str, set[str]] = {}
    total: dict[str, int] = {}
    try:
        for snap in exports:
            uri = {f.rel: f.uri for f in snap.files if f.kind == "export_part"}
            for p in (snap.manifest or {}).get("parts", []):
                # layout 2 counts the messages among the part's kinds, and writes them to its messages file
                held = {k: int(n) for k, n in p["kinds"].items()
                        if n and not (k == decode_tasks.MESSAGE and p.get("messages"))}
                kinds[uri[p["name"]]] = set(held)
                for k, n in held.items():
                    total[k] = total.get(k, 0) + n
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}
    return kinds if total == {k: n for k, n in counts.items() if n} else {}


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
    decoded: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for _, cluster, broker, info in sorted(progress, key=lambda x: x[0]):
        s = info["state"]
        ts = dt.datetime.fromisoformat(s["snapshot_ts"]) if s["snapshot_ts"] else None
        key = _segment_state_key(cluster, broker, info["segment"])
        had = state.get(key)
        # the state of a newer snapshot holds (a segment a store copy and its host's export both gave in one run, or
        # an export folder that landed late: its host's state then was behind the lake's)
        if not (had is not None and had.snapshot_ts and ts and had.snapshot_ts > ts):
            state[key] = SegmentState(cluster, broker, info["segment"], s["start_offset"], s["decoded_to"],
                                      s["segment_size"], s["complete"], ts)
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
            if hi > lo:
                decoded.setdefault((cluster, broker), []).append((lo, hi))
    # A store copy's segments are read from where the last copy stopped, an export from where the host's last export
    # did: the bytes two folders of the run gave overlap only where a broker moved from copies to exports, or its
    # host lost its state. Then a record is staged twice, and the loads keep its first copy (Decoded.read).
    staged.overlap = any(b[0] < a[1] for ranges in map(sorted, decoded.values()) for a, b in zip(ranges, ranges[1:]))
