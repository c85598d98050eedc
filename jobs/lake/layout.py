"""The per-broker layout of silver/messages (issue 39): the ingest (:func:`split_added`, its own appends) and
maintenance (:func:`arrange`, whatever is left, and merging) rewrite the files the engine writes, each of which holds
every broker of its run, into files of one broker each, their row groups sorted by commitlog position,
so that a look-up by position (``jobs.lake.lookups.records_at``, the ingest's anti-join, ``_delta.any_rows``) reads
the files of its broker and offset range only: the Delta log's file statistics skip the rest, in Sail and delta-rs.

Measured on bench_age's 41 M-record lake (10 brokers; 29 files compacted by delta-rs, each holding every broker and
one 1 M-row row group): the records of 3 spans (23 MB of commitlog) took 14.6 s to read, the same spans 0.12 s once
split per broker; offsets of different brokers are unrelated, so a file of every broker spans every offset.

Why not the engine or delta-rs: Sail spreads ``repartitionByRange`` like a hash and its partitioned writer holds
every partition's rows (``jobs.lake._delta.clustered``); delta-rs z-order sorts the whole table in one pool (41 M
rows fail at 1 GiB) and its compaction bins files by size and concatenates them. Here memory is bounded by
:data:`CHUNK_ROWS` and :data:`BUFFER_ROWS` whatever the table's size:

* **split**: the files holding more than one (cluster, broker), oldest first, in bins of :data:`BIN_ROWS`; each is
  read in chunks, each chunk sorted and cut per broker, each broker's rows written to its own file of the bin in
  sorted row groups of :data:`ROW_GROUP_ROWS`.
* **merge**: per broker, consecutive files (by first offset) under :data:`SMALL_ROWS` rows, up to
  :data:`TARGET_ROWS`, streamed into one file (row group by row group, re-cut to :data:`ROW_GROUP_ROWS`).

Each bin is one commit (delta-rs ``create_write_transaction``) that removes its inputs and adds its outputs with
``dataChange = false`` and the outputs' statistics, as a compaction: same rows, so ``added_since`` readers treat the
new files as a rewrite (maintenance records the versions after it in a ledger row). Output names are derived from
the inputs, so a run killed before a commit and run again writes the same files over the orphans and commits them;
killed after, the inputs are gone and the plan moves on. A rerun finds nothing to split or merge: no commit.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from jobs.lake import _delta, failpoints

if TYPE_CHECKING:  # pragma: no cover
    from schemas._table import Table

ROW_GROUP_ROWS = 131_072  # rows per row group of the files written (one broker, a narrow offset range each)
CHUNK_ROWS = 65_536  # rows of a multi-broker file read and sorted at once (~30 MB of silver/messages rows)
BUFFER_ROWS = 2 * ROW_GROUP_ROWS  # rows held back per bin across brokers before the largest buffer is written
BIN_ROWS = 8_000_000  # rows of multi-broker files split per commit
TARGET_ROWS = 2_000_000  # rows of a merged file of one broker
SMALL_ROWS = TARGET_ROWS // 2  # a file of one broker with fewer rows is merged with its neighbours
KEY_ORDER = ["cluster", "broker", "physical_offset", "queue_offset"]  # the key :func:`_sort` orders by numpy
DICTIONARY_RATIO = 10  # a column with fewer distinct values than rows / this is dictionary-encoded
STATS_MAX_CHARS = 64  # longer strings get no min/max in the log (missing statistics only mean "may match")


def applies(table: "Table") -> bool:
    """Tables laid out per broker: those clustered by (cluster, broker, position)."""
    return tuple(table.cluster_by[:2]) == ("cluster", "broker")


def sort_key(table: "Table") -> list[str]:
    return list(dict.fromkeys([*table.cluster_by, *table.key]))


def arrange(lake: str, table: "Table", say: Callable[[str], None] = lambda _line: None) -> dict[str, int]:
    """Split the table's multi-broker files per broker and merge each broker's small files; the figures
    :func:`jobs.ops.maintenance.compact` returns (files before and after, removed, added)."""
    files = _files(lake, table)
    split = _apply(lake, table, "split", _split_plan(files), say)
    merge = _apply(lake, table, "merge", _merge_plan(_files(lake, table)), say)  # on the files the split left
    removed, added = split[0] + merge[0], split[1] + merge[1]
    return {"files_before": len(files), "files_after": len(files) - removed + added, "files_removed": removed,
            "files_added": added}


def split_added(lake: str, table: "Table", since: int | None, say: Callable[[str], None] = lambda _line: None) -> int:
    """Split the multi-broker files the table gained after version ``since`` (every file when None): the ingest's
    own appends, before its ledger row, so that look-ups read per-broker files between two maintenance runs too.
    Returns the number of files split."""
    files = _files(lake, table)
    if since is not None:
        import pyarrow as pa

        old = set(pa.table(_delta.delta_table(lake, table, version=since).get_add_actions()).column("path").to_pylist())
        files = [f for f in files if f["path"] not in old]
    return _apply(lake, table, "split", _split_plan(files), say)[0]


def append(lake: str, table: "Table", chunks: Iterable[Any], name: str,
           say: Callable[[str], None] = lambda _line: None, adopt: Sequence[str] = ()) -> int:
    """Append new rows (Arrow tables of the table's columns) as files of one broker each, in one commit: what the
    engine's append then :func:`split_added` leave, without writing the rows twice. The ingest's load of the records
    it decoded for the first time (``jobs.ingest.load``): the engine's append and the split were 33 s of
    bench_export's 58 s ingest of 6.1 M records. ``name`` names the outputs (a killed run's orphans are never
    committed; ``maintain`` vacuums them). Returns the rows appended (no commit when none).

    ``adopt``: Parquet files (URIs) of new rows already laid out as the table's files are (an export's messages
    files, ``jobs.export.layout``), copied in whole with the Delta statistics their footers give
    (:func:`_adoptable`); one that is not (another schema, more than one broker) is read and written as ``chunks``
    are. bench_export's 6.1 M exported records were 13.5 s of its ingest's 30 s written again."""
    fs = _filesystem(lake, table)
    schema = _append_schema(fs, lake, table)
    adopted, rewritten = [], []
    shapes = [schema.remove_metadata(), _delta._arrow_schema(table)]
    for uri in adopt:
        stats = _adoptable(uri, shapes)
        (adopted if stats is not None else rewritten).append((uri, stats))
    chunks = itertools.chain(chunks, *(_file_chunks(uri, schema) for uri, _ in rewritten))
    # One row group's rows held back, not two: bench_age's hourly ingest of 1 M records held 330 -> 235 MiB of
    # Arrow memory at its peak, at the same or less CPU (issue 39: that ingest peaked at 1.53 GiB once). The cost is
    # smaller row groups. Maintenance merges a file under SMALL_ROWS and re-cuts its row groups, which covers a
    # 15-minute run of a broker below 1 M records; a broker writing more keeps its append's row groups as written.
    out = _Outputs(fs, schema, [(c, "ascending") for c in sort_key(table)],
                   lambda n: f"part-append-{name}-{n:04d}.zstd.parquet", buffer_rows=ROW_GROUP_ROWS)
    rows = 0
    for chunk in chunks:
        rows += len(chunk)
        _add_per_broker(out, _conform(chunk, schema))
    outputs = out.close()
    for uri, (stats, n) in adopted:
        outputs.append(_adopt(table.path(lake), uri, f"part-adopted-{name}-"
                              f"{hashlib.sha256(uri.encode()).hexdigest()[:24]}.zstd.parquet", stats))
        rows += n
    if not outputs:
        return 0
    failpoints.hit("layout.append.before_commit")
    _commit(lake, table, "append", [], outputs)
    say(f"{table.qualified}: appended {rows:,} rows as {len(outputs)} file(s) of one broker each"
        + (f" ({len(adopted)} adopted as written)" if adopted else ""))
    return rows


def _adoptable(uri: str, shapes: list[Any]) -> tuple[str, int] | None:
    """(Delta statistics, rows) of the Parquet file ``uri`` if it can be one of a table's files as it is: one of the
    table's schemas ``shapes`` (its files', as declared), rows of one (cluster, broker), statistics for both; else
    None. The statistics come from the file's footer (:class:`_Stats` of its row groups' statistics); a
    column whose row groups lack some gets none (which only means "may match")."""
    import pyarrow.parquet as pq

    fs, path = _delta.arrow_file(uri)
    with fs.open_input_file(path) as fh:
        pf = pq.ParquetFile(fh)
        if not any(pf.schema_arrow.remove_metadata().equals(shape) for shape in shapes):
            return None
        meta = pf.metadata
    stats = _Stats(pf.schema_arrow)
    stats.rows = meta.num_rows
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    unknown = set()
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in stats.cols:
            st = group.column(index[c]).statistics
            if st is None or not st.has_null_count:
                return None  # the null counts are a part of the statistics the log is given
            stats.nulls[c] += st.null_count
            if st.null_count == group.num_rows:
                continue
            if not st.has_min_max:
                unknown.add(c)
                continue
            stats.min[c] = st.min if c not in stats.min else min(stats.min[c], st.min)
            stats.max[c] = st.max if c not in stats.max else max(stats.max[c], st.max)
    for c in unknown:
        stats.min.pop(c, None)
        stats.max.pop(c, None)
    brokers = [c for c in ("cluster", "broker") if c in stats.cols]
    if not stats.rows or any(stats.nulls[c] or c not in stats.min or stats.min[c] != stats.max[c] for c in brokers):
        return None
    return stats.json(), stats.rows


def _file_chunks(uri: str, schema: Any) -> Iterator[Any]:
    """The rows of the Parquet file ``uri`` in ``schema`` (a column it lacks: null), :data:`CHUNK_ROWS` at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = _delta.arrow_file(uri)
    with fs.open_input_file(path) as fh:
        for batch in pq.ParquetFile(fh, pre_buffer=False).iter_batches(batch_size=CHUNK_ROWS):
            yield _conform(pa.Table.from_batches([batch]), schema)


def _adopt(folder: str, uri: str, target: str, stats: str) -> dict[str, Any]:
    """Copy the file ``uri`` to ``target`` in the table's ``folder``; the add action's fields. On S3 one GET and one
    PUT (a messages file holds at most one export part's messages, ~20 MB: jobs.export.store.PART_ROWS); delta-rs's
    Python file system, which the rewrites write through, takes no Arrow buffer."""
    import shutil

    from jobs.lake import storage

    dest = storage.join(folder, target)
    if not storage.is_s3(dest) and not storage.is_s3(uri):
        local = dest[len("file://"):] if dest.startswith("file://") else dest
        shutil.copyfile(uri[len("file://"):] if uri.startswith("file://") else uri, local)
        return {"path": target, "size": os.path.getsize(local), "stats": stats}
    data = storage.read_bytes(uri)
    if data is None:
        raise FileNotFoundError(f"{uri}: gone before the ingest copied it into {folder}")
    storage.write_bytes(dest, data)
    return {"path": target, "size": len(data), "stats": stats}


def _append_schema(fs: Any, lake: str, table: "Table") -> Any:
    """The schema of the table's files: a live file's (as the engine wrote it), else the declared one."""
    live = _files(lake, table)
    return _schema(fs, table, live[:1]) if live else _delta._arrow_schema(table)


def _conform(t: Any, schema: Any) -> Any:
    """``t``'s columns in ``schema``'s order and types (a column ``t`` lacks: null)."""
    import pyarrow as pa

    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(len(t), f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _apply(lake: str, table: "Table", kind: str, bins: list[list[dict[str, Any]]],
           say: Callable[[str], None]) -> tuple[int, int]:
    """Rewrite and commit each bin; (files removed, files added)."""
    removed = added = 0
    for n, bin_ in enumerate(bins, 1):
        outputs = _rewrite(lake, table, kind, bin_)
        failpoints.hit(f"layout.{kind}.before_commit")
        _commit(lake, table, kind, bin_, outputs)
        removed, added = removed + len(bin_), added + len(outputs)
        say(f"{table.qualified}: {kind} {n}/{len(bins)}: {len(bin_)} file(s), "
            f"{sum(f['num_records'] for f in bin_):,} rows -> {len(outputs)} file(s)")
    return removed, added


# ------------------------------------------------------------------------------------------------ plan


def _files(lake: str, table: "Table") -> list[dict[str, Any]]:
    """The live data files with their size, rows, modification time and (cluster, broker, position) statistics."""
    import pyarrow as pa

    actions = pa.table(_delta.delta_table(lake, table).get_add_actions(flatten=True))
    cols = ["path", "size_bytes", "num_records", "modification_time"]
    stats = {f"{m}.{c}": f"{m}_{c}" for m in ("min", "max") for c in ("cluster", "broker", "physical_offset")}
    rows = actions.select(cols + [c for c in stats if c in actions.column_names]).to_pylist()
    return [{**{k: r[k] for k in cols}, **{v: r.get(k) for k, v in stats.items()}} for r in rows]


# Delta Spark truncates string statistics to 32 characters (``delta.dataSkippingStringPrefixLength``): a shorter
# min equal to the max names the file's one value exactly
EXACT_STAT_CHARS = 32


def files_admitting(lake: str, table: "Table", wanted: dict[tuple[str, str], tuple[int, int]]) -> list[str] | None:
    """The data files (paths as the Delta log names them) whose statistics admit a record of a wanted broker inside
    its [lo, hi) of physical offsets; None when the table has no such statistics (a Parquet lake: read every file).

    Why: offsets of different brokers are unrelated, so one offset range for all brokers (as a pyarrow filter can
    prune by) spans every broker's history once a broker with low offsets is among them: the ingest's read of the
    records it checks consume queue entries against scanned all 43 M records of bench_age's old lake (15 M of the
    young one) for 1.2 M in range. A file of one broker (the layout this module keeps) is kept when its range meets
    its broker's; a file of several brokers, or whose broker statistics may be truncated, when its range meets any
    wanted range."""
    if _delta.table_format() != "delta" or not wanted:
        return None
    files = _files(lake, table)
    if any(f["min_physical_offset"] is None or f["max_physical_offset"] is None for f in files):
        return None
    keep = []
    for f in files:
        lo, hi = f["min_physical_offset"], f["max_physical_offset"]
        key = (f["min_cluster"], f["min_broker"])
        exact = _one_broker(f) and max(len(key[0]), len(key[1])) < EXACT_STAT_CHARS
        ranges = ([wanted[key]] if key in wanted else []) if exact else wanted.values()
        if any(lo < w_hi and hi >= w_lo for w_lo, w_hi in ranges):
            keep.append(f["path"])
    return keep


def _one_broker(f: dict[str, Any]) -> bool:
    return (f["min_cluster"] is not None and f["min_cluster"] == f["max_cluster"]
            and f["min_broker"] is not None and f["min_broker"] == f["max_broker"]
            and f["min_physical_offset"] is not None)


def _split_plan(files: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Bins of multi-broker files (or files without statistics), oldest first, each up to :data:`BIN_ROWS` rows."""
    mixed = sorted((f for f in files if not _one_broker(f)), key=lambda f: (f["modification_time"], f["path"]))
    bins: list[list[dict[str, Any]]] = []
    for f in mixed:
        if not bins or sum(g["num_records"] for g in bins[-1]) + f["num_records"] > BIN_ROWS:
            bins.append([])
        bins[-1].append(f)
    return bins


def _merge_plan(files: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Per broker, runs of consecutive small files (by first position; a large file ends a run), each up to
    :data:`TARGET_ROWS` rows; a run of one file stays."""
    by_broker: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in filter(_one_broker, files):
        by_broker.setdefault((f["min_cluster"], f["min_broker"]), []).append(f)
    bins: list[list[dict[str, Any]]] = []
    for key in sorted(by_broker):
        run: list[dict[str, Any]] = []
        for f in sorted(by_broker[key], key=lambda f: (f["min_physical_offset"], f["max_physical_offset"], f["path"])):
            small = f["num_records"] < SMALL_ROWS
            if run and (not small or sum(g["num_records"] for g in run) + f["num_records"] > TARGET_ROWS):
                bins.append(run)
                run = []
            if small:
                run.append(f)
        bins.append(run)
    return [b for b in bins if len(b) > 1]


# ------------------------------------------------------------------------------------------------ rewrite


def _filesystem(lake: str, table: "Table") -> Any:
    """Where the rewrite reads and writes the table's files. A local lake: pyarrow's own filesystem, rooted at the
    table (delta-rs's Python one can abort the process at exit: :func:`jobs.lake._delta.arrow_filesystem`). On S3,
    delta-rs's object store: Arrow's S3 multipart uploads are refused by Ceph RGW (HTTP 411, MissingContentLength)."""
    path = table.path(lake)
    if not _delta._is_s3(path):
        return _delta.arrow_filesystem(path)
    import pyarrow.fs as pafs
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(path, options=_delta.storage_options()))


def _name(kind: str, bin_: list[dict[str, Any]], n: int) -> str:
    digest = hashlib.sha256("\n".join([kind, *sorted(f["path"] for f in bin_)]).encode()).hexdigest()[:24]
    return f"part-{kind}-{digest}-{n:04d}.zstd.parquet"


def _schema(fs: Any, table: "Table", bin_: list[dict[str, Any]]) -> Any:
    """The first input file's Arrow schema (as the engine wrote it) with the table's columns it lacks (declared
    since; null in its rows), in the table's column order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with fs.open_input_file(bin_[0]["path"]) as fh:
        have = pq.ParquetFile(fh).schema_arrow
    declared = _delta._arrow_schema(table)
    return pa.schema([have.field(c) if c in have.names else declared.field(c) for c in table.columns])


def _batches(fs: Any, path: str, schema: Any, rows: int) -> Iterator[Any]:
    """The file's rows in tables of up to ``rows`` rows, in ``schema`` (columns missing from an older file: null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as fh:  # page by page: a 1 M-row row group read whole costs ~600 MB
        for batch in pq.ParquetFile(fh, pre_buffer=False, buffer_size=1 << 20).iter_batches(batch_size=rows):
            t = pa.Table.from_batches([batch])
            cols = [t.column(c) if c in t.column_names else pa.nulls(len(t), schema.field(c).type)
                    for c in schema.names]
            yield pa.Table.from_arrays(cols, schema=schema)


def _rewrite(lake: str, table: "Table", kind: str, bin_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write the bin's rows per broker (split) or as one file (merge); the outputs' add-action fields."""
    import pyarrow as pa

    fs = _filesystem(lake, table)
    schema = _schema(fs, table, bin_)
    key = [(c, "ascending") for c in sort_key(table)]
    out = _Outputs(fs, schema, key, lambda n: _name(kind, bin_, n))
    if kind == "split":
        for f in bin_:
            for chunk in _batches(fs, f["path"], schema, CHUNK_ROWS):
                _add_per_broker(out, chunk)
                del chunk
                pa.default_memory_pool().release_unused()
    else:
        for f in bin_:
            for chunk in _batches(fs, f["path"], schema, ROW_GROUP_ROWS):
                out.add(("", ""), chunk)
    return out.close()


def _add_per_broker(out: "_Outputs", chunk: Any) -> None:
    """Each broker's rows of ``chunk`` to its output, grouped in the chunk's order (a stable sort of small codes):
    each row group is sorted by the whole key when it is written (:meth:`_Outputs._flush`), so a sort of the chunk by
    it was twice the work."""
    import pyarrow as pa

    codes = _broker_codes(chunk)
    order = np.argsort(codes, kind="stable")
    for lo, hi in _runs(codes[order]):  # a copy of each broker's rows: a slice would hold the whole chunk
        part = chunk if hi - lo == len(chunk) else chunk.take(pa.array(order[lo:hi]))
        out.add(_broker(part, 0), part)


def _broker(chunk: Any, row: int) -> tuple[str, str]:
    return chunk.column("cluster")[row].as_py(), chunk.column("broker")[row].as_py()


def _broker_codes(chunk: Any) -> Any:
    """A small integer per row naming its (cluster, broker) (null: the empty name)."""
    import pyarrow.compute as pc

    pair = pc.binary_join_element_wise(pc.fill_null(chunk.column("cluster"), ""),
                                       pc.fill_null(chunk.column("broker"), ""), "\x00")
    return pc.dictionary_encode(pair).combine_chunks().indices.to_numpy(zero_copy_only=False)


def _runs(codes: Any) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of one code each in grouped codes."""
    n = len(codes)
    if n == 0:
        return []
    cuts = (np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, n]))


def _sort(t: Any, key: list[tuple[str, str]]) -> Any:
    """``t`` sorted by ``key``. Rows of one (cluster, broker) without a null offset, sorted by the table's key, are
    ordered by numpy on the two offsets: the engine's files hold a broker's rows nearly in order, so a stable argsort
    of them is a merge of sorted runs (0.07 s for the 101 row groups of bench_export's 6.1 M rows), where Arrow's sort
    compared the broker's name too (0.8 s, stop 59). Both sorts are stable: rows equal in the key keep their order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = ("cluster", "broker", "physical_offset", "queue_offset")
    if (key != [(c, "ascending") for c in KEY_ORDER] or any(t.column(c).null_count for c in names)
            or any(pc.count_distinct(t.column(c)).as_py() > 1 for c in ("cluster", "broker"))):
        return t.sort_by(key)
    po, qo = (t.column(c).to_numpy() for c in ("physical_offset", "queue_offset"))
    if bool((np.diff(po) > 0).all()):
        return t
    order = np.argsort(po, kind="stable")
    if not bool((np.diff(po[order]) > 0).all()):  # equal offsets (a batch's messages): by queue offset too
        order = np.lexsort((qo, po))
    return t.take(pa.array(order))


def _dictionary_columns(t: Any) -> list[str]:
    """The top-level primitive columns whose values repeat (at most one distinct value in :data:`DICTIONARY_RATIO`
    rows of ``t``): pyarrow tries a dictionary for every column by default, and on a column of unique values (UNIQ_KEY,
    KEYS, the offset message id) it fills a page's dictionary before falling back: a broker's 1 M rows written in 1.07 s
    against 0.84 s, and 16% larger (stop 59)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = max(1, len(t) // DICTIONARY_RATIO)
    return [f.name for f in t.schema if not pa.types.is_nested(f.type)
            and pc.count_distinct(t.column(f.name)).as_py() <= n]


class _Outputs:
    """One Parquet file per broker key, written in sorted row groups of :data:`ROW_GROUP_ROWS`; at most
    ``buffer_rows`` (default :data:`BUFFER_ROWS`) rows held back across keys (the largest buffer is written first).

    A row group is sorted, encoded and compressed on a writer thread (Arrow releases the GIL) while the caller
    reads and groups the next rows, one group at a time: bench_export's 6.1 M staged records 16.7 -> 10.1-12.0 s
    wall (CPU 16.7 -> 17.2-19.7 s, peak RSS 701 -> 800 MiB: a row group more in memory)."""

    def __init__(self, fs: Any, schema: Any, key: list[tuple[str, str]], name: Callable[[int], str],
                 buffer_rows: int | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.fs, self.schema, self.key, self.name = fs, schema, key, name
        self.buffer_rows = BUFFER_ROWS if buffer_rows is None else buffer_rows
        self.buffers: dict[tuple[str, str], list[Any]] = {}
        self.files: dict[tuple[str, str], dict[str, Any]] = {}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="layout-writer")
        self.pending: Any = None

    def _write(self, f: dict[str, Any], rows: Any) -> None:
        for lo in range(0, len(rows), ROW_GROUP_ROWS):
            group = _sort(rows.slice(lo, ROW_GROUP_ROWS), self.key)
            f["writer"].write_table(group, row_group_size=ROW_GROUP_ROWS)
            f["stats"].add(group)

    def _wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()  # the writer's error, raised here

    def add(self, broker: tuple[str, str], rows: Any) -> None:
        self.buffers.setdefault(broker, []).append(rows)
        if sum(len(t) for t in self.buffers[broker]) >= ROW_GROUP_ROWS:
            self._flush(broker, whole_groups=True)
        while sum(len(t) for ts in self.buffers.values() for t in ts) > self.buffer_rows:
            self._flush(max(self.buffers, key=lambda b: sum(len(t) for t in self.buffers[b])))

    def _flush(self, broker: tuple[str, str], whole_groups: bool = False) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = pa.concat_tables(self.buffers.pop(broker, []))
        if whole_groups and len(rows) % ROW_GROUP_ROWS:  # keep the remainder for the next group
            keep = len(rows) - len(rows) % ROW_GROUP_ROWS
            self.buffers[broker] = [rows.slice(keep).take(pa.array(range(len(rows) - keep)))]
            rows = rows.slice(0, keep)
        if not len(rows):
            return
        f = self.files.get(broker)
        if f is None:
            path = self.name(len(self.files))
            sink = self.fs.open_output_stream(path)
            writer = pq.ParquetWriter(sink, self.schema, compression="zstd", write_statistics=True,
                                      use_dictionary=_dictionary_columns(rows))
            f = self.files[broker] = {"path": path, "sink": sink, "writer": writer, "stats": _Stats(self.schema)}
        self._wait()
        self.pending = self.pool.submit(self._write, f, rows)

    def close(self) -> list[dict[str, Any]]:
        try:
            for broker in list(self.buffers):
                self._flush(broker)
            self._wait()
        finally:
            self.pool.shutdown(wait=True)
        out = []
        for f in self.files.values():
            f["writer"].close()
            f["sink"].close()
            size = self.fs.get_file_info(f["path"]).size
            out.append({"path": f["path"], "size": size, "stats": f["stats"].json()})
        return out


class _Stats:
    """Delta statistics of a file being written: numRecords, and min, max and null count of each column of a
    primitive type (as the engine writes them; timestamps to the millisecond, widened outwards)."""

    def __init__(self, schema: Any) -> None:
        import pyarrow as pa

        self.cols = [f.name for f in schema if not (pa.types.is_nested(f.type) or pa.types.is_binary(f.type))]
        self.rows = 0
        self.min: dict[str, Any] = {}
        self.max: dict[str, Any] = {}
        self.nulls = dict.fromkeys(self.cols, 0)

    def add(self, t: Any) -> None:
        import pyarrow.compute as pc

        self.rows += len(t)
        for c in self.cols:
            col = t.column(c)
            self.nulls[c] += col.null_count
            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is None:
                continue
            self.min[c] = lo if c not in self.min else min(self.min[c], lo)
            self.max[c] = hi if c not in self.max else max(self.max[c], hi)

    def json(self) -> str:
        def value(v: Any, up: bool) -> Any:
            if isinstance(v, dt.datetime):
                v = v.astimezone(dt.timezone.utc)
                ms = v.replace(microsecond=v.microsecond // 1000 * 1000)
                if up and ms != v:
                    ms += dt.timedelta(milliseconds=1)
                return ms.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"
            return v

        keep = [c for c in self.min if not (isinstance(self.min[c], str) and max(
            len(self.min[c]), len(self.max[c])) > STATS_MAX_CHARS)]
        return json.dumps({"numRecords": self.rows,
                           "minValues": {c: value(self.min[c], False) for c in keep},
                           "maxValues": {c: value(self.max[c], True) for c in keep},
                           "nullCount": self.nulls}, separators=(",", ":"))


def _commit(lake: str, table: "Table", kind: str, bin_: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> None:
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    now = int(time.time() * 1000)
    dt_ = _delta.delta_table(lake, table)
    actions: list[Any] = [AddAction(path=o["path"], size=o["size"], partition_values={}, modification_time=now,
                                    data_change=kind == "append", stats=o["stats"]) for o in outputs]
    actions += [RemoveAction(path=f["path"], data_change=False, deletion_timestamp=now, size=f["size_bytes"],
                             partition_values={}) for f in bin_]
    dt_.create_write_transaction(actions, mode="append", schema=dt_.schema(),
                                 commit_properties=CommitProperties(custom_metadata={"rmq_recon_layout": kind}))
