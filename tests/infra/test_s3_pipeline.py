"""The whole pipeline on S3: a landing zone and a lake on ``s3://`` (a real Ceph RGW), ingested and
reconciled by the CLI as an operator runs it, each command in its own process (Sail reads the S3 variables when
its server starts). The report equals the simulator's truth and, file for file, the report of the same landing
zone ingested from local disk; a second ingest changes nothing.

The decode tasks read their segments from S3 and write the staging folder below the S3 lake; the driver reads
the staging folder back from S3 (the queue bounds) and removes it at the end.
"""
from __future__ import annotations

import filecmp
import os
import pathlib
import subprocess
import sys
import uuid
from typing import Any

import pytest

from exactness import compare, report_files
from jobs.lake import storage

pytestmark = pytest.mark.integration

SEED = 4
RUN_ID = "s3-e2e"
NAME_THE_LAKE = {"summary.json", "index.html"}  # the run's summary and page name the lake they read


def _cli(*args: str, env: dict[str, str]) -> dict[str, Any]:
    """``rmq-recon <args>`` in a fresh process; the JSON summary it prints."""
    import json

    r = subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True,
                       timeout=600, cwd=pathlib.Path(__file__).resolve().parents[2])
    assert r.returncode == 0, f"rmq-recon {' '.join(args)} exited {r.returncode}:\n{r.stderr[-4000:]}"
    return json.loads(r.stdout)


def _env(store: Any | None) -> dict[str, str]:
    from infra_fixtures import S3_VARS

    env = {k: v for k, v in os.environ.items() if k not in S3_VARS and k not in ("SPARK_REMOTE",)}
    env.update({"RUST_LOG": "warn", "RMQ_RECON_ENGINE": "sail", "PYTHONPATH": str(pathlib.Path(__file__)
                                                                                   .resolve().parents[2])})
    if store is not None:
        env.update(store.env)
    return env


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``mixed`` (seed 4) simulated, ingested and reconciled on local disk: the reference."""
    from jobs import simulate

    base = tmp_path_factory.mktemp("s3-local")
    landing = base / "landing"
    simulate.run("mixed", str(landing), seed=SEED, scale=1)
    env = _env(None)
    ingested = _cli("ingest", "--landing", str(landing), "--lake", str(base / "lake"), "--settle-s", "0", env=env)
    rec = _cli("reconcile", "--lake", str(base / "lake"), "--reports", str(base / "reports"), "--run-id", RUN_ID,
               env=env)
    return {"landing": landing, "ingested": ingested, "report": pathlib.Path(rec["report_dir"]), "base": base}


# The real S3 (Ceph RGW) only: moto's server answers the same calls in tests/infra/test_rgw_lake.py, and a second
# whole pipeline on it added 67 s to `make test` without reaching code the RGW run does not.
@pytest.mark.parametrize("backend", ["rgw_s3"], ids=["rgw"])
def test_ingest_and_reconcile_on_s3_equal_the_truth_and_the_local_run(
        backend: str, local: dict[str, Any], request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> None:
    store = request.getfixturevalue(backend)
    root = storage.join(store.bucket_uri, f"e2e-{uuid.uuid4().hex[:10]}")
    landing, lake = storage.join(root, "landing"), storage.join(root, "lake")
    env = _env(store)
    with pytest.MonkeyPatch.context() as mp:
        store.apply(mp)
        storage.upload_tree(str(local["landing"]), landing)
    first = _cli("ingest", "--landing", landing, "--lake", lake, "--settle-s", "0", env=env)
    assert (first["snapshots"], first["files"], first["quarantined"]) == (
        local["ingested"]["snapshots"], local["ingested"]["files"], local["ingested"]["quarantined"])
    assert first["changed_rows"] == local["ingested"]["changed_rows"]
    again = _cli("ingest", "--landing", landing, "--lake", lake, "--settle-s", "0", env=env)
    assert (again["snapshots"], again["changed_rows"], again["run_id"]) == (0, {}, first["run_id"])
    with pytest.MonkeyPatch.context() as mp:
        store.apply(mp)
        assert storage.list_keys(storage.join(lake, "_staging")) == []  # the staging folder is gone
    rec = _cli("reconcile", "--lake", lake, "--reports", str(tmp_path / "reports"), "--run-id", RUN_ID, env=env)
    report = pathlib.Path(rec["report_dir"])
    assert compare(report, local["landing"] / "_truth") == []
    names = report_files(local["report"])
    assert report_files(report) == names
    same, differ, errors = filecmp.cmpfiles(local["report"], report, [n for n in names if n not in NAME_THE_LAKE],
                                            shallow=False)
    assert (differ, errors) == ([], [])
    page = (local["report"] / "index.html").read_text().replace(str(local["base"] / "lake"), lake)
    assert (report / "index.html").read_text() == page


@pytest.mark.parametrize("backend", ["rgw_s3"], ids=["rgw"])
def test_exports_on_s3_land_the_rows_they_land_from_local_disk(backend: str, request: pytest.FixtureRequest,
                                                               tmp_path: pathlib.Path) -> None:
    """Issue 37 on S3: an export landing zone (``store-types`` seed 7 through the exporters) on the RGW, ingested
    into a lake on it. The export parts are read where they landed, by the engine (trace records, POP rows) and by
    the driver through Arrow's S3 filesystem (the records, written per broker below the S3 lake; the parts' problem
    and progress rows and their counts by kind): the lake's rows
    equal those of the same landing zone ingested on local disk."""
    from export.test_export_parity import compared, export_history
    from jobs import simulate

    copies, exported = tmp_path / "copies", tmp_path / "exported"
    simulate.run("store-types", str(copies), seed=7)
    assert export_history(copies, exported, tmp_path / "state") == 20
    local_lake = tmp_path / "lake-local"
    here = _cli("ingest", "--landing", str(exported), "--lake", str(local_lake), "--settle-s", "0", env=_env(None))
    store = request.getfixturevalue(backend)
    root = storage.join(store.bucket_uri, f"exports-{uuid.uuid4().hex[:10]}")
    landing, lake = storage.join(root, "landing"), storage.join(root, "lake")
    with pytest.MonkeyPatch.context() as mp:
        store.apply(mp)
        storage.upload_tree(str(exported), landing)
    there = _cli("ingest", "--landing", landing, "--lake", lake, "--settle-s", "0", env=_env(store))
    assert (there["snapshots"], there["changed_rows"]) == (here["snapshots"], here["changed_rows"])
    assert there["changed_rows"]["silver/messages"] == 50_402
    with pytest.MonkeyPatch.context() as mp:
        store.apply(mp)
        storage.download_tree(lake, str(tmp_path / "lake-s3"))
    assert compared(tmp_path / "lake-s3") == compared(local_lake)
