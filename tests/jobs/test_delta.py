"""jobs.lake._delta: a lake written before a table schema gained a column keeps working (reads null, merges add it)."""
from __future__ import annotations

import datetime as dt
import pathlib

import pandas as pd
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from jobs.lake import _delta
from schemas._table import Table

T = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
OLD = Table("bronze", "t", StructType([StructField("k", LongType()), StructField("v", StringType())]), ("k",), ())
NEW = Table("bronze", "t", StructType([*OLD.schema.fields, StructField("ts", TimestampType())]), ("k",), ())


def test_a_column_declared_later_reads_null_and_the_next_merge_adds_it(spark, tmp_path: pathlib.Path) -> None:  # noqa: ANN001
    lake = str(tmp_path)
    assert _delta.merge(spark, spark.createDataFrame([(1, "a"), (2, "b")], OLD.schema), lake, OLD) == 2
    assert sorted(_delta.read(spark, lake, NEW).collect()) == [(1, "a", None), (2, "b", None)]
    assert _delta.merge(spark, spark.createDataFrame([(2, "b", T), (3, "c", T)], NEW.schema), lake, NEW) == 2
    got = _delta.read_pandas(lake, NEW).sort_values("k")
    assert [(r.k, r.v, None if pd.isna(r.ts) else r.ts.to_pydatetime()) for r in got.itertuples()] == [
        (1, "a", None), (2, "b", T), (3, "c", T)]
    assert [h["operation"] for h in _delta.history(lake, NEW)][:2] == ["MERGE", "ADD COLUMN"]
    assert _delta.merge(spark, spark.createDataFrame([(2, "b", T), (3, "c", T)], NEW.schema), lake, NEW) == 0


def test_a_version_before_a_checkpoint_reads_as_it_was(spark, tmp_path: pathlib.Path) -> None:  # noqa: ANN001
    """Found by the soak benchmark (issue 12 item 5): the writer checkpoints every 10th commit, and Sail 0.7.2's
    ``versionAsOf`` of an earlier version then failed ("Missing commit file: expected version 0, found 8"), so the
    ingest after the 10th (deliveries read the previous version of consumer_offsets) failed, and so did every retry."""
    lake = str(tmp_path)
    for k in range(12):
        _delta.merge(spark, spark.createDataFrame([(k, f"v{k}")], OLD.schema), lake, OLD)
    assert [f.name for f in (tmp_path / "bronze" / "t" / "_delta_log").glob("*.checkpoint.parquet")] == [
        "00000000000000000010.checkpoint.parquet"]
    for at in (0, 9, 10, 11):
        assert sorted(_delta.read(spark, lake, OLD, at=at).collect()) == [(k, f"v{k}") for k in range(at + 1)]
    assert sorted(_delta.read(spark, lake, NEW, at=9).collect()) == [(k, f"v{k}", None) for k in range(10)]


SNAP = Table("silver", "s", StructType([StructField("ts", TimestampType()), StructField("k", LongType()),
                                        StructField("v", StringType())]), ("ts", "k"), ())


def test_a_pruned_merge_appends_new_keys_and_updates_existing_ones_only_inside_its_filter(spark, tmp_path) -> None:  # noqa: ANN001
    """target_filter (issue 12): rows whose keys are all new are appended (no MERGE, whose join reads the whole
    table); a row whose key is in the pruned rows is updated by a MERGE that matches inside the filter only."""
    lake = str(tmp_path)
    t1, t2 = T, T + dt.timedelta(minutes=30)
    at = lambda t: f"t.ts >= TIMESTAMP '{t:%Y-%m-%d %H:%M:%S}+00:00' AND t.ts <= TIMESTAMP '{t:%Y-%m-%d %H:%M:%S}+00:00'"  # noqa: E731
    rows = lambda *r: spark.createDataFrame(list(r), SNAP.schema)  # noqa: E731
    assert _delta.merge(spark, rows((t1, 1, "a"), (t1, 2, "b")), lake, SNAP, target_filter=at(t1)) == 2
    assert _delta.merge(spark, rows((t2, 1, "c"), (t2, 3, "d")), lake, SNAP, target_filter=at(t2)) == 2
    assert _delta.history(lake, SNAP)[0]["operation"] == "WRITE"  # every key new: an append
    assert _delta.merge(spark, rows((t2, 1, "c"), (t2, 3, "d")), lake, SNAP, target_filter=at(t2)) == 0
    assert _delta.merge(spark, rows((t2, 3, "e"), (t2, 4, "f")), lake, SNAP, target_filter=at(t2)) == 2
    assert _delta.history(lake, SNAP)[0]["operation"] == "MERGE"  # (t2, 3) existed: updated, not appended twice
    got = _delta.read_pandas(lake, SNAP).sort_values(["ts", "k"])
    assert [(r.ts.to_pydatetime(), r.k, r.v) for r in got.itertuples()] == [
        (t1, 1, "a"), (t1, 2, "b"), (t2, 1, "c"), (t2, 3, "e"), (t2, 4, "f")]


VOL = Table("silver", "u", StructType([StructField("k", LongType()), StructField("v", StringType()),
                                       StructField("ingested_at", TimestampType())]), ("k",), ())


def test_a_merge_appends_when_no_changed_key_is_stored_and_merges_when_one_is(spark, tmp_path) -> None:  # noqa: ANN001
    """The target is read once (issue 39: silver/deliveries' MERGE read every row again each run, and only inserted):
    rows whose keys are all new are appended; one stored key (null-safe: a null key is a key) makes it a MERGE that
    updates that row. A row differing only in a volatile column is no change."""
    lake = str(tmp_path)
    t2 = T + dt.timedelta(hours=1)
    rows = lambda *r: spark.createDataFrame(list(r), VOL.schema)  # noqa: E731
    assert _delta.merge(spark, rows((1, "a", T), (None, "n", T)), lake, VOL) == 2
    assert _delta.merge(spark, rows((1, "a", t2), (None, "n", t2), (2, "b", t2)), lake, VOL) == 1
    assert [h["operation"] for h in _delta.history(lake, VOL)][:2] == ["WRITE", "CREATE TABLE"]
    assert _delta.merge(spark, rows((None, "m", t2), (3, "c", t2), (1, "a", t2)), lake, VOL) == 2
    assert _delta.history(lake, VOL)[0]["operation"] == "MERGE"
    assert _delta.merge(spark, rows((None, "m", T), (3, "c", T)), lake, VOL) == 0
    assert len(_delta.history(lake, VOL)) == 3  # no commit when nothing changes
    got = _delta.read_pandas(lake, VOL)
    assert sorted((-1 if pd.isna(r.k) else int(r.k), r.v, r.ingested_at.to_pydatetime()) for r in got.itertuples()
                  ) == [(-1, "m", t2), (1, "a", T), (2, "b", t2), (3, "c", t2)]


def test_rows_reach_the_engine_as_a_file_with_the_table_s_types(spark, tmp_path: pathlib.Path) -> None:  # noqa: ANN001
    """The small tables' rows go to the engine as a Parquet file, not a local relation (issue 13: a local relation
    is serialised again with every query on its plan): the frame holds exactly the rows and the declared types."""
    from schemas import files

    rows = [{"cluster": "c", "broker": "b", "snapshot_ts": T, "source_path": "p/consumerOffset.json",
             "file_kind": "consumer_offsets", "size": 3, "sha256": "ab", "content": b"{}\x00", "used_backup": False,
             "read_from": 0, "read_to": 3, "ingested_at": T},
            {"cluster": "c", "broker": "b", "snapshot_ts": T, "source_path": "p/commitlog/0", "file_kind": "commitlog",
             "size": 1 << 40, "sha256": "cd", "ingested_at": T}]  # a column left out is null
    folder = tmp_path / "rows"
    df = _delta.rows_frame(spark, rows, files.TABLE, str(folder))
    assert df.schema == files.TABLE.schema
    naive = T.replace(tzinfo=None)  # collect() gives the session's (UTC) wall time
    assert sorted(tuple(r) for r in df.collect()) == sorted(
        tuple(naive if r.get(c) is T else r.get(c) for c in files.TABLE.columns) for r in rows)
    assert [p.suffix for p in folder.iterdir()] == [".parquet"]


def test_delta_rs_reads_go_through_a_native_arrow_filesystem(tmp_path: pathlib.Path, monkeypatch) -> None:  # noqa: ANN001
    """CI at stop 54: a CLI that read a table with delta-rs printed its answer, then died with SIGABRT ("terminate
    called without an active exception") at interpreter exit. delta-rs's default is a Python filesystem over its own
    store, whose Arrow I/O threads can outlive the interpreter (delta-io/delta-rs#2184): every read passes a native
    pyarrow filesystem rooted at the table instead, and still reads the same rows."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from pyarrow import fs as pa_fs

    lake = str(tmp_path)
    write_deltalake(OLD.path(lake), pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
    seen: list[object] = []
    original = DeltaTable.to_pyarrow_dataset

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(kwargs.get("filesystem"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", spy)
    assert _delta.read_pandas_columns(lake, OLD, ["v", "k"], filters=[("k", ">=", 2)]).values.tolist() == [
        ["b", 2], ["c", 3]]
    assert sorted(_delta.read_pandas(lake, OLD).itertuples(index=False, name=None)) == [(1, "a"), (2, "b"), (3, "c")]
    assert [b.to_pylist() for b in _delta.scan_batches(lake, OLD, ["k"], filters=[("v", "=", "a")])] == [[{"k": 1}]]
    assert len(seen) == 3
    for fs in seen:
        assert isinstance(fs, pa_fs.SubTreeFileSystem) and isinstance(fs.base_fs, pa_fs.LocalFileSystem)
        assert fs.base_path.rstrip("/") == str(tmp_path / "bronze" / "t")


def test_an_s3_lake_is_read_through_arrow_s3_with_the_project_s_endpoint_and_keys(monkeypatch) -> None:  # noqa: ANN001
    from pyarrow import fs as pa_fs

    monkeypatch.setenv("AWS_ENDPOINT", "http://127.0.0.1:7480")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sk")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    fs = _delta.arrow_filesystem("s3://lake-bucket/prod/silver/messages")
    assert isinstance(fs, pa_fs.SubTreeFileSystem) and isinstance(fs.base_fs, pa_fs.S3FileSystem)
    assert fs.base_path.rstrip("/") == "lake-bucket/prod/silver/messages"
    assert fs.base_fs.region == "us-east-1"


def test_added_spans_come_from_the_files_statistics_and_equal_the_engine_s_aggregate(spark, tmp_path) -> None:  # noqa: ANN001
    """Per (cluster, broker) of the files added after a version: min and max position and the rows having one, as
    the engine's groupBy gives them; None when a file holds two brokers or a name its statistics may cut short."""
    import pyarrow as pa
    from deltalake import write_deltalake
    from pyspark.sql import functions as F

    schema = StructType([StructField("cluster", StringType()), StructField("broker", StringType()),
                         StructField("physical_offset", LongType())])
    table = Table("silver", "m", schema, ("cluster", "broker", "physical_offset"), ())
    lake, path = str(tmp_path), str(tmp_path / "silver" / "m")

    def add(rows: list[tuple]) -> None:  # one file per commit
        write_deltalake(path, pa.table({"cluster": [r[0] for r in rows], "broker": [r[1] for r in rows],
                                        "physical_offset": pa.array([r[2] for r in rows], pa.int64())}),
                        mode="append")

    def engine(since: int | None) -> dict:
        df = _delta.added_since(spark, lake, table, since) if since is not None else _delta.read(spark, lake, table)
        return {(c, b): (lo, hi, n) for c, b, lo, hi, n in df.where(F.col("physical_offset").isNotNull())
                .groupBy("cluster", "broker").agg(F.min("physical_offset"), F.max("physical_offset"),
                                                  F.count(F.lit(1))).collect()}

    add([("c", "a", 30), ("c", "a", None), ("c", "a", 10)])  # version 0
    add([("c", "b", 5)])
    add([("c", "a", 50), ("c", "a", 40)])
    add([("c", "z", None)])  # version 3: no position, no group
    assert _delta.added_spans(lake, table, None) == engine(None) == {("c", "a"): (10, 50, 4), ("c", "b"): (5, 5, 1)}
    assert _delta.added_spans(lake, table, 0) == engine(0) == {("c", "a"): (40, 50, 2), ("c", "b"): (5, 5, 1)}
    assert _delta.added_spans(lake, table, 3) == engine(3) == {}

    add([("c", "b", 7), ("c", "d", 8)])  # version 4: two brokers in one file
    assert _delta.added_spans(lake, table, 3) is None and _delta.added_spans(lake, table, None) is None
    add([("c", "x" * 40, 9)])  # version 5: a name a statistic may cut at 32 characters
    assert _delta.added_spans(lake, table, 4) is None
    assert _delta.added_spans(lake, Table("silver", "none", schema, table.key, ()), None) is None
