"""Reading and writing lake tables: the only module that knows table paths and formats.

Writes are idempotent by construction: silver/bronze tables are MERGEd on their key (and a MERGE whose source
holds nothing new is skipped, so a re-run adds no commit), gold tables are replaced per ``run_id``.
Sail has no ``DeltaTable`` Python API, so everything goes through SQL ``MERGE INTO`` and ``replaceWhere``;
delta-rs answers the questions Spark Connect cannot (does the table exist, what is its history).
"""
from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any, Iterator

from jobs.lake._spark import table_format

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from schemas._table import Table

log = logging.getLogger(__name__)

# Columns that record when we saw a row, not what the row says: a re-run must not rewrite them.
VOLATILE_COLUMNS = frozenset({"ingested_at", "detected_at", "updated_at", "completed_at", "validated_at"})


def storage_options() -> dict[str, str]:
    """delta-rs options for ``s3://`` lakes, from the same environment variables Sail reads."""
    opts: dict[str, str] = {}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_SESSION_TOKEN"):
        if os.environ.get(name):
            opts[name] = os.environ[name]
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
    if endpoint:
        opts["AWS_ENDPOINT_URL"] = endpoint
        opts.setdefault("AWS_REGION", "us-east-1")
        if endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    return opts


def _is_s3(path: str) -> bool:
    return path.startswith(("s3://", "s3a://"))


def delta_table(lake: str, table: "Table", *, version: int | None = None) -> Any:
    """delta-rs's handle on the table (at ``version``), with the S3 options when the lake is on S3."""
    from deltalake import DeltaTable

    path = table.path(lake)
    return DeltaTable(path, version=version, storage_options=storage_options() if _is_s3(path) else None)


def arrow_file(uri: str) -> tuple[Any, str]:
    """(native pyarrow filesystem, path in it) of the file ``uri``, for reads (:func:`arrow_filesystem`)."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    return arrow_filesystem(parent), name


def arrow_filesystem(path: str) -> Any:
    """A native pyarrow filesystem rooted at the table folder ``path``, for delta-rs's Arrow reads.

    Without one, delta-rs reads through a Python-implemented filesystem (``PyFileSystem`` over its own store) with
    pre-buffering, and Arrow's I/O threads can still be joinable when the interpreter exits: the process then dies
    with "terminate called without an active exception" (SIGABRT, exit 134) after printing its result, a few times
    in a hundred under CPU load (delta-io/delta-rs#2184, apache/arrow#34314). Arrow's own filesystems join their
    threads: 0 aborts in 300 runs of the same read, against 9 in 300 through delta-rs's. For reads: Ceph RGW refuses
    Arrow's S3 multipart uploads (HTTP 411), so writes to S3 stay with delta-rs's store (:mod:`jobs.lake.layout`)."""
    from pyarrow import fs as pa_fs

    if not _is_s3(path):
        local = path[len("file://"):] if path.startswith("file://") else path
        return pa_fs.SubTreeFileSystem(os.path.abspath(local), pa_fs.LocalFileSystem())
    opts = storage_options()
    endpoint = opts.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": opts.get("AWS_REGION") or "us-east-1"}
    if opts.get("AWS_ACCESS_KEY_ID"):  # else the default chain: the instance role, a profile
        kwargs.update(access_key=opts["AWS_ACCESS_KEY_ID"], secret_key=opts.get("AWS_SECRET_ACCESS_KEY"),
                      session_token=opts.get("AWS_SESSION_TOKEN"))
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme)  # path-style, as jobs.lake.storage
    return pa_fs.SubTreeFileSystem(path.split("://", 1)[1].rstrip("/"), pa_fs.S3FileSystem(**kwargs))


def exists(lake: str, table: "Table") -> bool:
    """Whether ``table`` has been created below ``lake``."""
    path = table.path(lake)
    if table_format() == "delta":
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(path, storage_options=storage_options() if _is_s3(path) else None)
    # A Parquet table is a folder with at least one data file (Sail writes no _SUCCESS marker).
    from jobs.lake import storage

    return any(uri.endswith(".parquet") for uri in storage.list_keys(path)) if storage.exists(path) else False


def version(lake: str, table: "Table") -> int | None:
    """The table's current version (None when it does not exist): what the ledgers record and reads pin.

    Delta: the table version. Parquet has none: a fingerprint of its data files (names and sizes), which changes
    with every write that changes the table.
    """
    if not exists(lake, table):
        return None
    path = table.path(lake)
    if table_format() == "delta":
        return int(delta_table(lake, table).version())
    import hashlib

    from jobs.lake import storage

    digest = hashlib.blake2b(digest_size=8)
    for info in storage.list_files(path):
        rel = storage.relative(info.uri, path)
        if rel.endswith(".parquet") and "__staging" not in rel:
            digest.update(f"{rel}\0{info.size}\n".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def added_since(spark: "SparkSession", lake: str, table: "Table", since: int | None, *,
                until: int | None = None) -> "DataFrame | None":
    """The rows of the data files the table gained after version ``since`` (all rows when ``since`` is None).

    For insert-only tables these are exactly the rows added since; a rewrite (a MERGE update, a compaction) adds
    files holding older rows too, so callers must treat the result as a superset. None for Parquet tables, which
    have no versions (callers fall back to the whole table).

    ``until``: compare the files of that version instead of the current one (the rows one ingest run added, even
    when later runs wrote since).
    """
    if table_format() != "delta":
        return None
    if not exists(lake, table):
        return spark.createDataFrame([], table.schema)
    now = delta_table(lake, table, version=until).file_uris()
    before = set(delta_table(lake, table, version=since).file_uris()) if since is not None else set()
    new = [u for u in now if u not in before]
    if not new:
        return spark.createDataFrame([], table.schema)
    from pyspark.sql import functions as F

    df = spark.read.format("parquet").load(new)
    have = set(df.columns)
    return df.select(*[F.col(c) if c in have else F.lit(None).cast(table.schema[c].dataType).alias(c)
                       for c in table.columns])


def removed_since(lake: str, table: "Table", since: int, *, until: int | None = None) -> bool:
    """Whether a data file of version ``since`` is no longer in the table (rewritten or deleted since; ``until``: by
    that version instead of the current one): when none is, the table only gained files, and :func:`added_since`
    holds only rows the version did not have (for tables whose appends are idempotent on their key)."""
    if not exists(lake, table):
        return False
    now = set(delta_table(lake, table, version=until).file_uris())
    return any(u not in now for u in delta_table(lake, table, version=since).file_uris())


def rows_added(lake: str, table: "Table", since: int | None) -> int:
    """The rows in the data files the table gained after version ``since`` (all when None), from the files' own
    record counts (delta-rs add actions): no data is read. Exact for appends."""
    if not exists(lake, table):
        return 0

    def counts(version: int | None) -> dict[str, int]:
        import pyarrow as pa

        actions = pa.table(delta_table(lake, table, version=version).get_add_actions(flatten=True)).to_pydict()
        return dict(zip(actions["path"], actions["num_records"]))

    before = counts(since) if since is not None else {}
    return int(sum(n or 0 for path, n in counts(None).items() if path not in before))


STATS_TEXT_MAX = 32  # a string statistic this long may be a truncated prefix (Delta writers cut them at 32)


def added_spans(lake: str, table: "Table", since: int | None, column: str = "physical_offset"
                ) -> dict[tuple[str, str], tuple[int, int, int]] | None:
    """Per (cluster, broker): the min and max of ``column`` over the rows of the data files the table gained after
    version ``since`` (every file when None) where it is not null, and how many such rows, from the files' statistics
    (delta-rs add actions): no data is read. What a ``groupBy("cluster", "broker")`` of those rows would give, when
    every file holds one broker's rows (as the ingest writes silver/messages).

    None (ask the engine) when a file lacks a statistic, holds more than one cluster or broker or a null one, or
    names one whose statistic may be cut short."""
    import pyarrow as pa

    if table_format() != "delta" or not exists(lake, table):
        return None
    now = pa.table(delta_table(lake, table).get_add_actions(flatten=True)).to_pydict()
    before = (set(pa.table(delta_table(lake, table, version=since).get_add_actions()).column("path").to_pylist())
              if since is not None else set())
    need = ["path", "num_records", f"min.{column}", f"max.{column}", f"null_count.{column}"] + [
        f"{s}.{c}" for c in ("cluster", "broker") for s in ("min", "max", "null_count")]
    if any(k not in now for k in need):
        return None
    out: dict[tuple[str, str], tuple[int, int, int]] = {}
    for i, path in enumerate(now["path"]):
        if path in before:
            continue
        rows, nulls = now["num_records"][i], now[f"null_count.{column}"][i]
        if rows is None or nulls is None:
            return None
        if rows == nulls:
            continue  # no row with a value: no group (the engine's where drops them)
        names = []
        for c in ("cluster", "broker"):
            lo, hi = now[f"min.{c}"][i], now[f"max.{c}"][i]
            if lo is None or lo != hi or now[f"null_count.{c}"][i] != 0 or len(lo) >= STATS_TEXT_MAX:
                return None
            names.append(lo)
        lo, hi = now[f"min.{column}"][i], now[f"max.{column}"][i]
        if lo is None or hi is None:
            return None
        key = (names[0], names[1])
        a, b, n = out.get(key, (lo, hi, 0))
        out[key] = (min(a, lo), max(b, hi), n + rows - nulls)
    return out


def read(spark: "SparkSession", lake: str, table: "Table", *, at: int | None = None) -> "DataFrame":
    """The table as a DataFrame with its declared schema; an empty frame when it does not exist yet.

    ``at``: a Delta version to read (a reconcile reads the state the last completed ingest left); ignored for
    Parquet, whose readers check the fingerprint instead. A column declared after the table was written reads
    as null in the rows written before.
    """
    from pyspark.sql import functions as F

    if not exists(lake, table):
        return spark.createDataFrame([], table.schema)
    if at is not None and table_format() == "delta":
        df = _read_version(spark, lake, table, int(at))
    else:
        df = spark.read.format(table_format()).load(table.path(lake))
    have = set(df.columns)
    return df.select(*[F.col(c) if c in have else F.lit(None).cast(table.schema[c].dataType).alias(c)
                       for c in table.columns])


def _read_version(spark: "SparkSession", lake: str, table: "Table", version: int) -> "DataFrame":
    """Version ``version`` of a Delta table: the data files delta-rs lists for it, read as Parquet.

    Why not ``versionAsOf``: the writer checkpoints every 10th commit, and Sail 0.7.2 then fails to read any earlier
    version ("Missing commit file: expected version 0, found 8"). The lake's tables have no partitions, deletion
    vectors or column mapping, so a version is exactly its data files; columns a file lacks read as null.
    """
    uris = delta_table(lake, table, version=version).file_uris()
    if not uris:
        return spark.createDataFrame([], table.schema)
    return spark.read.schema(table.schema).format("parquet").load(uris)


def add_missing_columns(lake: str, table: "Table") -> list[str]:
    """Add the declared columns a Delta table lacks (nullable; older rows read null), so new rows can be merged.

    Why: a lake written by an earlier release keeps working after a schema gains a column. Returns their names.
    """
    from deltalake.schema import Field

    dt = delta_table(lake, table)
    have = {f.name for f in dt.schema().fields}
    missing = [f for f in _arrow_schema(table) if f.name not in have]
    if missing:
        dt.alter.add_columns([Field.from_arrow(f) for f in missing])
        log.info("%s: added columns %s (null in the rows written before)", table.qualified, [f.name for f in missing])
    return [f.name for f in missing]


# Rows per data file of a clustered table (Table.cluster_by).
CLUSTER_FILE_ROWS = 1_000_000


def clustered(df: "DataFrame", table: "Table", rows: int | None) -> "DataFrame":
    """``df`` in about ``rows`` / :data:`CLUSTER_FILE_ROWS` partitions, each sorted by the table's ``cluster_by``
    columns (one file each when written). Unchanged for tables not clustered.

    On Spark the partitions are ranges of those columns. Sail 0.7 spreads the rows of ``repartitionByRange`` like a
    hash (measured: 9 partitions of 0.5 M records of 9 brokers, each file held every broker), so on Sail a run of up
    to 1 M rows writes one sorted file, and larger runs files that each span every broker. Partitioning the table
    by broker instead was measured and dropped: Sail's partitioned Delta writer holds every partition's rows
    (5 M records: 4.25 GiB and 10.9 s against 1.33 GiB and 6.6 s unpartitioned). Sail 0.7 also writes a partition
    without its ``sortWithinPartitions`` (stop 73: each of silver/key_index's files of bench_export's 6.1 M records
    holds its hashes in no order, and so does a plain Parquet write), so readers must not rely on the order: the key
    index's segments sort what they read (``jobs.lake.point_index``)."""
    if not table.cluster_by:
        return df
    n = max(1, -(-(rows or 0) // CLUSTER_FILE_ROWS))
    return df.repartitionByRange(n, *table.cluster_by).sortWithinPartitions(*table.cluster_by)


def create_empty(spark: "SparkSession", lake: str, table: "Table") -> None:
    """Create ``table`` with no rows, as the engine creates it (its first commit), for writers outside the engine."""
    _create(spark.createDataFrame([], table.schema), lake, table)


def _create(df: "DataFrame", lake: str, table: "Table") -> None:
    writer = df.select(*table.columns).write.format(table_format()).mode("overwrite")
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake))


def merge(spark: "SparkSession", df: "DataFrame", lake: str, table: "Table", *, insert_only: bool = False,
          target_filter: str | None = None, stage: str | None = None) -> int:
    """Upsert ``df`` into ``table`` on its key. Idempotent: merging the same rows twice changes nothing.

    Rows whose key is new are inserted; rows whose key exists are updated only when a non-volatile column
    differs (``insert_only`` skips updates altogether, for append-only bronze tables: the new rows are appended,
    as :func:`insert_new` does, so the write does not scan the table). When nothing would change no commit is
    made at all. ``target_filter`` (SQL on ``t``) prunes the table's rows compared: only rows it keeps can share
    a key with ``df``. ``stage`` (a folder the caller owns): the changed rows are computed once into it and the
    count and the write read them back; without it a derived ``df`` is computed again by the write (Sail does not
    cache), which for silver/deliveries cost 4-5 s and 0.85 GiB a run.

    Returns:
        The number of source rows that were new or changed.
    """
    from pyspark.sql import functions as F

    df = df.select(*table.columns)
    if not exists(lake, table):
        # counted once written (file metadata), not before: a derived ``df`` would be computed twice (the first
        # silver/deliveries on the standalone cluster: 9.4 s to count, then 7.9 s to write)
        _create(df, lake, table)
        return read(spark, lake, table).count()
    if table_format() == "delta":
        add_missing_columns(lake, table)
    target = read(spark, lake, table)
    if target_filter is not None:
        target = target.alias("t").where(target_filter)
    if insert_only:
        changed = df.join(target.select(*table.key), on=[df[k].eqNullSafe(target[k]) for k in table.key],
                          how="left_anti").withColumn(HIT, F.lit(None).cast("boolean"))
    else:
        # one pass over the target: its row of each key (flagged), so the rows new or changed are known with whether
        # any changed row's key is stored; when none is, appending them is the MERGE (whose join would read the
        # whole table again: silver/deliveries, 0.4-0.9 s a run at 0.16-0.56 M rows, growing with the history)
        compare = [c for c in table.columns if c not in VOLATILE_COLUMNS and c not in table.key]
        t = target.select(*[F.col(c).alias(f"_t_{c}") for c in (*table.key, *compare)], F.lit(True).alias(HIT))
        joined = df.join(t, on=[df[k].eqNullSafe(t[f"_t_{k}"]) for k in table.key], how="left")
        same = F.lit(True)
        for c in compare:
            same = same & joined[c].eqNullSafe(joined[f"_t_{c}"])
        changed = joined.where(joined[HIT].isNull() | ~same).select(*table.columns, HIT)
    if table_format() == "parquet":
        n = changed.count()
        if n:
            _merge_parquet(spark, df, read(spark, lake, table), lake, table)
        return n
    if stage is not None:
        from jobs.lake import _spark, storage

        try:
            return _merge_changed(spark, _spark.materialize(spark, changed, stage), lake, table, target_filter)
        finally:
            storage.delete_tree(stage)
    return _merge_changed(spark, changed, lake, table, target_filter)


# The column :func:`merge` flags a changed row with when its key is stored (null when new).
HIT = "_rmq_hit"


def _merge_changed(spark: "SparkSession", changed: "DataFrame", lake: str, table: "Table",
                   target_filter: str | None = None) -> int:
    """Write the rows :func:`merge` found new or changed (flagged by :data:`HIT`); their number."""
    from pyspark.sql import functions as F

    # one action for both (unstaged, each would compute the join again)
    n, hits = changed.agg(F.count(F.lit(1)), F.count(F.col(HIT))).collect()[0]
    if n == 0:
        return 0
    rows = changed.select(*table.columns)
    if hits == 0:
        # one writer per lake (jobs.lake.lease): appending rows whose keys are all new equals the MERGE
        rows.coalesce(1).write.format("delta").mode("append").save(table.path(lake))  # one file, as MERGE wrote
        return n
    view = f"rmq_src_{uuid.uuid4().hex[:12]}"
    rows.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in table.key)
    if target_filter is not None:
        on += f" AND ({target_filter})"
    sql = f"MERGE INTO delta.`{table.path(lake)}` AS t USING {view} AS s ON {on} "
    sql += "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    spark.sql(sql)
    spark.catalog.dropTempView(view)
    return n


def _rewrite_parquet(spark: "SparkSession", rows: "DataFrame", lake: str, table: "Table") -> None:
    """Replace a Parquet table's contents with ``rows`` (which may read the table) through a staging copy.

    A redo log: the staging copy is marked complete before the table is overwritten and removed after, so a run
    killed during the overwrite (which deletes the table first) is finished by :func:`recover_parquet_staging`.
    """
    from jobs.lake import storage

    staging = table.path(lake) + "__staging"
    rows.select(*table.columns).write.format("parquet").mode("overwrite").save(staging)
    storage.write_bytes(staging + ".complete", b"")
    _publish_staging(spark, lake, table)


def _publish_staging(spark: "SparkSession", lake: str, table: "Table") -> None:
    from jobs.lake import storage

    staging = table.path(lake) + "__staging"
    spark.read.schema(table.schema).format("parquet").load(staging).write.format("parquet").mode("overwrite").save(
        table.path(lake))
    storage.delete_tree(staging + ".complete")
    storage.delete_tree(staging)


def recover_parquet_staging(spark: "SparkSession", lake: str, tables: "list[Table]") -> list[str]:
    """Finish (or drop) the Parquet rewrites a killed run left: called by the next writer, under its lease."""
    from jobs.lake import storage

    done = []
    if table_format() != "parquet":
        return done
    for table in tables:
        staging = table.path(lake) + "__staging"
        if storage.exists(staging + ".complete"):
            _publish_staging(spark, lake, table)
            log.warning("%s: finished a rewrite a killed run left half done", table.qualified)
            done.append(table.qualified)
        elif storage.exists(staging):
            storage.delete_tree(staging)
    return done


def _merge_parquet(spark: "SparkSession", df: "DataFrame", target: "DataFrame", lake: str, table: "Table") -> None:
    """Parquet has no MERGE: rewrite the table as (target minus source keys) plus source."""
    keep = target.join(df.select(*table.key), on=[target[k].eqNullSafe(df[k]) for k in table.key], how="left_anti")
    _rewrite_parquet(spark, keep.unionByName(df), lake, table)


def replace_run(spark: "SparkSession", df: "DataFrame", lake: str, table: "Table", run_id: str) -> None:
    """Replace exactly the rows of ``run_id`` in a gold table (other runs are untouched). Idempotent per run."""
    df = df.select(*table.columns)
    if not exists(lake, table):
        _create(df, lake, table)
        return
    if table_format() == "delta":
        add_missing_columns(lake, table)  # a gold table an earlier release wrote gains the report's new columns
        safe = run_id.replace("'", "''")
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"run_id = '{safe}'")
            .save(table.path(lake))
        )
        return
    from pyspark.sql import functions as F

    keep = read(spark, lake, table).where(F.col("run_id") != F.lit(run_id))
    _rewrite_parquet(spark, keep.unionByName(df), lake, table)


def insert_new(spark: "SparkSession", df: "DataFrame", lake: str, table: "Table", *, target_filter: str,
               rows: int | None = None, target_dnf: list[list[tuple]] | None = None,
               target_rows: bool | None = None) -> None:
    """Append the rows of ``df`` whose key is not in the table yet; ``target_filter`` (SQL on ``t``) prunes the scan.

    For bulk appends that must stay idempotent (a decoded commitlog byte range written twice lands once). An
    anti-join on the keys then an append, not ``MERGE``: Sail's MERGE grew the process by ~16 MB per 100k-row
    batch that was never returned (8 GiB ingesting 10 M records); the append stays flat. One writer per lake
    (ingest) makes the two equivalent; an append with no rows makes no commit. ``rows``: about how many rows ``df``
    has, for the file count of a clustered table (:func:`clustered`). ``target_dnf``: ``target_filter`` in
    delta-rs's filter form (OR of ANDs); when no row of the table passes it (the usual case: bytes decoded for
    the first time), ``df`` is appended as it is. The engine builds an anti-join's hash table on ``df``, whole
    rows: 1.3 GiB for 1 M records even when the table has none of their keys.
    """
    df = df.select(*table.columns)
    if not exists(lake, table):
        _create(clustered(df, table, rows), lake, table)
        return
    if target_rows is None and target_dnf is not None:
        target_rows = any_rows(lake, table, target_dnf)
    if target_rows is False:
        clustered(df, table, rows).write.format(table_format()).mode("append").save(table.path(lake))
        return
    target = read(spark, lake, table).alias("t").where(target_filter).select(*table.key)
    new = df.join(target, on=[df[k].eqNullSafe(target[k]) for k in table.key], how="left_anti")
    clustered(new, table, rows).write.format(table_format()).mode("append").save(table.path(lake))


def any_rows(lake: str, table: "Table", dnf: list[list[tuple]]) -> bool:
    """Whether a row of the table passes ``dnf`` (delta-rs filters, OR of ANDs): a read of the key columns of the
    row groups whose statistics overlap it, outside the engine."""
    if not dnf:
        return False
    return len(read_pandas_columns(lake, table, [table.key[-1]], filters=dnf)) > 0


def replace_where(spark: "SparkSession", df: "DataFrame", lake: str, table: "Table", predicate: str) -> None:
    """Atomically replace the rows matching ``predicate`` with ``df`` (whose rows must all match it).

    Used for ranges that are rewritten whole, e.g. the messages of one decoded commitlog byte range:
    writing the same range twice leaves one copy.
    """
    df = df.select(*table.columns)
    if not exists(lake, table):
        _create(df, lake, table)
        return
    if table_format() == "parquet":
        keep = read(spark, lake, table).where(f"NOT ({predicate})")
        _rewrite_parquet(spark, keep.unionByName(df), lake, table)
        return
    df.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(table.path(lake))


def read_pandas_columns(lake: str, table: "Table", columns: list[str], *, filters: Any = None,
                        at: int | None = None) -> "pd.DataFrame":
    """A projection of a table outside Spark (delta-rs, or pyarrow for Parquet), e.g. the record offsets of a broker.

    ``at``: the Delta version to read (as :func:`read`).
    """
    path = table.path(lake)
    if table_format() == "parquet":
        return _read_parquet(path, table, columns, filters)
    dt = delta_table(lake, table, version=at)
    have = {f.name for f in dt.schema().fields}
    df = dt.to_pandas(columns=[c for c in columns if c in have], filters=filters, filesystem=arrow_filesystem(path))
    for c in columns:
        if c not in have:  # declared since that version was written (a report's new column): null, as :func:`read`
            df[c] = None
    return df[columns]


def scan_batches(lake: str, table: "Table", columns: list[str], *, filters: Any,
                 dictionary: tuple[str, ...] = (), files: "list[str] | None" = None) -> Iterator[Any]:
    """Arrow record batches of a projection of the table that pass ``filters`` (delta-rs / pyarrow DNF), streamed:
    one pass over the data files whose statistics admit the filter, without holding the result whole.

    ``dictionary``: string columns read dictionary-encoded from a Delta table (a Parquet lake reads them plain), for
    low-cardinality keys such as the broker: 49 M rows of cluster, broker, offset and size read in 0.9 s instead of
    2.0 s. Filter them after the scan: pyarrow evaluates a filter on a dictionary column slower than on strings.

    ``files``: only these data files of a Delta table (paths as its log names them, e.g.
    ``jobs.lake.layout.files_admitting``); None: every file."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    path = table.path(lake)
    if table_format() == "parquet":
        dataset = pads.dataset(path, format="parquet", schema=_arrow_schema(table))
    else:
        options = pads.ParquetReadOptions(dictionary_columns=set(dictionary)) if dictionary else None
        dataset = delta_table(lake, table).to_pyarrow_dataset(parquet_read_options=options,
                                                              filesystem=arrow_filesystem(path))
        if files is not None:
            from urllib.parse import unquote

            names = set(files) | {unquote(f) for f in files}
            every = list(dataset.get_fragments())
            chosen = [f for f in every if f.path in names]
            if len(chosen) != len(set(files)):  # a file the dataset names otherwise: every file, not a wrong answer
                log.warning("%s: %d of %d chosen data files not found by name; reading every file", path,
                            len(set(files)) - len(chosen), len(set(files)))
                chosen = every
            dataset = pads.FileSystemDataset(chosen, dataset.schema, dataset.format, dataset.filesystem)
    yield from dataset.scanner(columns=columns, filter=pq.filters_to_expression(filters) if filters else None,
                               batch_readahead=2,
                               fragment_readahead=1).to_batches()


def _read_parquet(path: str, table: "Table", columns: list[str], filters: Any) -> "pd.DataFrame":
    """A Parquet table (every data file of the folder) with pyarrow; same ``filters`` form as delta-rs."""
    import pyarrow.parquet as pq

    arrow = pq.read_table(path, columns=columns, filters=filters, schema=_arrow_schema(table))
    return arrow.to_pandas()[columns]


def _arrow_schema(table: "Table") -> Any:
    """The table's schema in Arrow types (Spark writes timestamps as UTC instants)."""
    import pyarrow as pa
    from pyspark.sql import types as T

    def conv(t: Any) -> Any:
        simple = {T.StringType: pa.string(), T.LongType: pa.int64(), T.IntegerType: pa.int32(),
                  T.BooleanType: pa.bool_(), T.DoubleType: pa.float64(), T.BinaryType: pa.binary(),
                  T.TimestampType: pa.timestamp("us", tz="UTC")}
        for cls, arrow_type in simple.items():
            if isinstance(t, cls):
                return arrow_type
        if isinstance(t, T.MapType):
            return pa.map_(conv(t.keyType), conv(t.valueType))
        if isinstance(t, T.ArrayType):  # a POP checkpoint's deltas, an ack's offsets
            return pa.list_(conv(t.elementType))
        raise TypeError(f"no Arrow type for {t}")

    return pa.schema([pa.field(f.name, conv(f.dataType)) for f in table.schema.fields])


def rows_frame(spark: "SparkSession", rows: list[dict[str, Any]], table: "Table", folder: str) -> "DataFrame":
    """``rows`` (dicts with ``table``'s columns) as a frame the engine reads from a Parquet file written here, in
    ``folder`` (the caller owns it and deletes it).

    Not a local relation: Spark Connect sends a local relation's rows inside the plan with every query on it (the
    MERGE's anti-join count, its key probe, its write), and each send serialises them again: 34,670 bronze/files
    rows raised the client's RSS by 0.19 GiB at 10 M messages (issue 13). A file is written once and read by the
    engine where it runs (local disk or S3, as the decode tasks' staging is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.lake import storage

    tbl = pa.Table.from_pydict({c: [r.get(c) for r in rows] for c in table.columns}, schema=_arrow_schema(table))
    sink = pa.BufferOutputStream()
    pq.write_table(tbl, sink, compression="zstd")
    del tbl
    uri = f"{folder.rstrip('/')}/{table.layer}-{table.name}-{uuid.uuid4().hex}.parquet"
    storage.write_bytes(uri, memoryview(sink.getvalue()))
    del sink
    pa.default_memory_pool().release_unused()
    return spark.read.schema(table.schema).parquet(uri)


def read_pandas(lake: str, table: "Table", *, filters: Any = None) -> "pd.DataFrame":
    """A small read outside Spark (delta-rs), for reports, expectations and tests."""
    path = table.path(lake)
    if table_format() == "delta":
        if not exists(lake, table):
            import pandas as pd

            return pd.DataFrame({c: [] for c in table.columns})
        return delta_table(lake, table).to_pandas(filters=filters, filesystem=arrow_filesystem(path))[table.columns]
    if not exists(lake, table):
        import pandas as pd

        return pd.DataFrame({c: [] for c in table.columns})
    return _read_parquet(path, table, table.columns, filters)


def history(lake: str, table: "Table") -> list[dict[str, Any]]:
    """The Delta commit history, newest first (Sail has no DESCRIBE HISTORY)."""
    return delta_table(lake, table).history()
