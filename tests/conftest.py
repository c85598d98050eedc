"""Shared fixtures: one embedded Sail session for the whole run, paths to the real fixtures."""
from __future__ import annotations

import os
import pathlib
from typing import Iterator

import pytest

from infra_fixtures import *  # noqa: F401,F403 - moto_s3, rgw_s3, spark_cluster

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
REAL = FIXTURES / "real"

os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
# Airflow reads its configuration at import: an isolated home with SQLite, this project's dags, no examples.
AIRFLOW_HOME = ROOT / os.environ.get("RMQ_TEST_AIRFLOW_HOME", "var/airflow-test")  # infra/run-tests.sh: one a process
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"


@pytest.fixture(scope="session")
def spark() -> Iterator["object"]:
    """An embedded Sail Spark Connect session (stopped before its server, so the run never hangs at exit)."""
    from jobs.lake._spark import session

    with session("sail") as s:
        yield s


@pytest.fixture()
def lake(tmp_path: pathlib.Path) -> str:
    """A fresh local lake root per test."""
    p = tmp_path / "lake"
    p.mkdir()
    return str(p)


@pytest.fixture(scope="session")
def airflow_db() -> pathlib.Path:
    """A migrated Airflow metadata DB (SQLite) for dag.test()."""
    import subprocess
    import sys

    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    airflow = pathlib.Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, env=dict(os.environ))
    return AIRFLOW_HOME


@pytest.fixture(scope="session")
def mixed_world(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """``mixed`` seed 1 at scale 1 simulated and ingested once a session, on the embedded engine with Delta:
    ``landing/`` and ``lake/`` under the returned folder. Six modules judge this world, and a simulation and ingest
    of it costs ~50 s each time. Never written to: a module whose runs write into the lake (a reconcile's gold
    tables, a dashboard) works on its own copy (``shutil.copytree(mixed_world / "lake", ...)``)."""
    from jobs import simulate
    from jobs.ingest import ingest

    root = tmp_path_factory.mktemp("mixed-seed1")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("RMQ_RECON_ENGINE", "RMQ_RECON_FORMAT", "SPARK_REMOTE"):
            mp.delenv(name, raising=False)
        simulate.run("mixed", str(root / "landing"), seed=1)
        ingest.run(str(root / "landing"), str(root / "lake"))
    return root


@pytest.fixture(scope="session")
def mixed_bulk_landing(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict]:
    """``mixed`` seed 4 with 40,000 bulk messages, simulated once a session: (landing zone, simulate.run's summary).
    Read only (the split-decode tests and the bulk end-to-end test ingest it into lakes of their own)."""
    from jobs import simulate

    landing = tmp_path_factory.mktemp("mixed-bulk") / "landing"
    summary = simulate.run("mixed", str(landing), seed=4, scale=1, bulk_messages=40_000)
    return landing, summary

