"""The lake on S3: delta-rs and Sail read and write Delta tables on s3:// against moto and a real Ceph RGW.

Each backend gets its own Sail server process, started with the backend's variables in its environment
(Sail reads them once per process, at server start). Every test writes below a fresh prefix of the backend's bucket.
"""
from __future__ import annotations

import datetime as dt
import os
import pathlib
import socket
import subprocess
import sys
import time
import uuid
from typing import Iterator

import pytest

from infra_fixtures import _free_port, stop_process
from jobs.lake import _delta, storage
from schemas import consumer_offsets

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
TS = dt.datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module", params=["moto_s3", "rgw_s3"], ids=["moto", "rgw"])
def store(request: pytest.FixtureRequest) -> Iterator[object]:
    """One S3 backend, its variables in the environment for this module's tests on it."""
    endpoint = request.getfixturevalue(request.param)
    with pytest.MonkeyPatch.context() as mp:
        endpoint.apply(mp)
        yield endpoint


@pytest.fixture(scope="module")
def sail(store: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A session on a Sail server started, in its own process, with ``store``'s S3 variables.

    Sail reads the S3 settings once per process and caches object stores process-wide, so the second backend
    of this module would reach S3 with the first one's credentials from an in-process server. A deployment has
    one endpoint per process; this fixture gives each backend its own server process the same way.
    """
    from jobs.lake._spark import session

    port = _free_port()
    log_path = tmp_path_factory.mktemp("sail") / "sail.log"
    sail_bin = pathlib.Path(sys.executable).with_name("sail")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(sail_bin), "spark", "server", "--ip", "127.0.0.1", "--port", str(port)],
                                env=dict(os.environ, RUST_LOG="warn"), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sail server did not start on port {port}; log {log_path}:\n{log_path.read_text()}")
            time.sleep(0.2)
        with session("connect", remote=f"sc://127.0.0.1:{port}") as spark:
            yield spark
    finally:
        stop_process(proc)


@pytest.fixture()
def lake(store: object) -> str:
    return storage.join(store.bucket_uri, f"lake-{uuid.uuid4().hex[:10]}")  # type: ignore[attr-defined]


def _offsets(*rows: tuple[str, int, int]) -> list[tuple]:
    """consumer_offsets rows for (group, queue_id, committed_offset) on one broker snapshot."""
    return [("c1", "b1", TS, g, "TopicTest", q, "", off, False, "store/config/consumerOffset.json", False)
            for g, q, off in rows]


def test_delta_rs_writes_and_reads_a_table_on_s3(store: object, lake: str) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = storage.join(lake, "bronze/probe")
    opts = _delta.storage_options()
    write_deltalake(path, pa.table({"k": [1, 2], "v": ["a", "b"]}), storage_options=opts)
    write_deltalake(path, pa.table({"k": [3], "v": ["c"]}), mode="append", storage_options=opts)

    dt_ = DeltaTable(path, storage_options=opts)
    assert sorted(dt_.to_pyarrow_table().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 3, "v": "c"},
    ]
    assert dt_.version() == 1
    # delta-rs 1.6 records both commits as WRITE: the first with mode ErrorIfExists, the append with Append
    assert [(h["operation"], h["operationParameters"]["mode"]) for h in dt_.history()] == [
        ("WRITE", "Append"), ("WRITE", "ErrorIfExists")]
    assert storage.exists(storage.join(path, "_delta_log/00000000000000000001.json"))


def test_sail_writes_delta_on_s3_and_merges_into_it_with_sql(sail: object, lake: str) -> None:
    from deltalake import DeltaTable

    spark = sail
    path = storage.join(lake, "silver/probe")
    spark.createDataFrame([(1, "a"), (2, "b")], "k INT, v STRING").write.format("delta").save(path)  # type: ignore[attr-defined]
    spark.createDataFrame([(2, "B"), (3, "c")], "k INT, v STRING").createOrReplaceTempView("probe_src")  # type: ignore[attr-defined]
    spark.sql(  # type: ignore[attr-defined]
        f"MERGE INTO delta.`{path}` AS t USING probe_src AS s ON t.k = s.k "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    rows = spark.read.format("delta").load(path).orderBy("k").collect()  # type: ignore[attr-defined]
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "B"), (3, "c")]
    # The same table, as delta-rs sees it on the same store: two commits, the second a MERGE.
    dt_ = DeltaTable(path, storage_options=_delta.storage_options())
    assert sorted(dt_.to_pyarrow_table().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": "a"}, {"k": 2, "v": "B"}, {"k": 3, "v": "c"},
    ]
    assert dt_.history(1)[0]["operation"] == "MERGE"


def test_merge_twice_changes_nothing_and_adds_no_commit(sail: object, lake: str) -> None:
    spark = sail
    table = consumer_offsets.TABLE
    df = spark.createDataFrame(_offsets(("g1", 0, 100), ("g1", 1, 7)), table.schema)  # type: ignore[attr-defined]

    assert _delta.merge(spark, df, lake, table) == 2  # type: ignore[arg-type]
    commits = len(_delta.history(lake, table))
    assert _delta.merge(spark, df, lake, table) == 0  # type: ignore[arg-type]
    assert len(_delta.history(lake, table)) == commits

    changed = spark.createDataFrame(_offsets(("g1", 1, 9), ("g2", 0, 5)), table.schema)  # type: ignore[attr-defined]
    assert _delta.merge(spark, changed, lake, table) == 2  # type: ignore[arg-type]
    history = _delta.history(lake, table)
    assert len(history) == commits + 1
    assert history[0]["operation"] == "MERGE"
    got = _delta.read_pandas(lake, table).sort_values(["consumer_group", "queue_id"])
    assert list(zip(got.consumer_group, got.queue_id, got.committed_offset)) == [
        ("g1", 0, 100), ("g1", 1, 9), ("g2", 0, 5),
    ]
    assert _delta.merge(spark, changed, lake, table) == 0  # type: ignore[arg-type]
    assert len(_delta.history(lake, table)) == commits + 1


def test_wrong_secret_is_refused_with_a_named_error_that_hides_it(
    store: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store.name == "moto":  # type: ignore[attr-defined]
        pytest.skip("moto accepts any key pair; only RGW checks signatures")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-42")
    uri = storage.join(store.bucket_uri, "x")  # type: ignore[attr-defined]
    with pytest.raises(storage.S3AccessError) as err:
        storage.read_bytes(uri)
    assert str(err.value) == (
        f"read {uri}: endpoint {store.env['AWS_ENDPOINT_URL']} refused the credentials (SignatureDoesNotMatch). "  # type: ignore[attr-defined]
        "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to a key pair of that store"
    )
    assert "not-the-secret-42" not in str(err.value)


def test_lease_is_exclusive_and_a_dead_holders_expires(store: object, lake: str) -> None:
    """jobs.lake.lease on the store's own conditional writes (If-None-Match / If-Match): Ceph RGW as moto."""
    import json

    from jobs.lake import lease

    with lease.hold(lake, "writer", purpose="first") as held:
        with pytest.raises(lease.LeaseBusy, match="held by first"):
            with lease.hold(lake, "writer", purpose="second", wait_s=0.5, say=lambda _: None):
                pass
        held.check()
    uri = storage.join(lake, "_control", "writer.lease")
    assert storage.read_bytes(uri) is None
    storage.write_bytes(uri, json.dumps({"purpose": "dead", "pid": 1, "host": "h", "expires_at": 0}).encode())
    lines: list[str] = []
    with lease.hold(lake, "writer", purpose="next", wait_s=5, say=lines.append):
        assert json.loads(storage.read_bytes(uri))["purpose"] == "next"
    assert [line.split(" from ")[1] for line in lines if "took over" in line] == [
        "dead (pid 1 on h, since None), which stopped renewing it"]
