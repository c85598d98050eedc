"""The reconciliation on a real Apache Spark standalone cluster through Spark Connect (``infra/spark-cluster.sh``).

The ``spark_cluster`` fixture starts a master, a worker and a Spark Connect server on 127.0.0.1 (free ports, logs
in ``var/pytest-spark-cluster/log``, process groups stopped at the end of the run). For one §7 scenario (six with
``RMQ_RECON_CLUSTER_SCENARIOS=all``):

1. simulate the landing zone and ingest it on embedded Sail into a Parquet lake (``RMQ_RECON_FORMAT=parquet``:
   the cluster has no Delta jars);
2. copy that lake, one copy per engine, so that each run writes its own gold tables;
3. run the unchanged reconcile job, ``jobs.reconcile.reconcile.run``, with the engine chosen by configuration only:
   ``SPARK_REMOTE=<cluster>``, ``RMQ_RECON_ENGINE=connect``, ``RMQ_RECON_FORMAT=parquet``;
4. the reports must equal the simulator's ``_truth`` (``tests/exactness.py``) and hold the same rows as the
   same job run on Sail over the same Parquet tables.

The closing note (terminal) gives the format used, the cluster's start time and the wall time of the §7 suite
(reconcile job per scenario, summed) on the cluster next to the same on Sail.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import time
from typing import Iterator

import pytest

from exactness import compare, read_csv

pytestmark = pytest.mark.integration

# One §7 scenario: retry-to-dlq (duplicates and DLQ candidates). The others run the same job steps on other rows
# (30-110 s each on the cluster, dropped to keep `make test` under 30 minutes; blocked-head, 108 s, since stop 54;
# RMQ_RECON_CLUSTER_SCENARIOS=all runs blocked-head, expired-offset, rewind, broadcast and rebalance too): every scenario runs on
# Sail in tests/test_scenarios_e2e.py, and every output (EXPIRED ranges and corrections included) is compared row for
# row between classic Spark and Sail on `mixed` (all §7 scenarios drawn at random on several brokers, broadcast
# clients and rebalances included) in tests/test_engine_parity.py.
SCENARIOS = ["retry-to-dlq"]
if os.environ.get("RMQ_RECON_CLUSTER_SCENARIOS") == "all":
    SCENARIOS += ["blocked-head", "expired-offset", "rewind", "broadcast", "rebalance"]
STRICT_CAUSE = {"blocked-head"}  # as tests/test_scenarios_e2e.py: the spec states this cause outright
SEED = 7
FORMAT = "parquet"  # the cluster has no Delta jars (infra/spark-cluster.sh)
REPORTS = ["duplicated_ranges", "unconsumed_ranges", "offset_corrections", "dlq_candidates", "consumer_status"]
ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER_DIR = ROOT / "var" / "pytest-spark-cluster"  # the spark_cluster fixture's state directory


class Suite:
    """Wall times of the §7 suite per engine, filled by the scenario tests."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"prepare": 0.0, "cluster": 0.0, "sail": 0.0}
        self.done: list[str] = []


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest, spark_cluster: str) -> Iterator[Suite]:
    """The module's timings; at module teardown the closing note goes to the terminal."""
    from infra_fixtures import START_TIMES, _report

    s = Suite()
    t0 = time.monotonic()
    yield s
    wall = time.monotonic() - t0
    start = START_TIMES.get("spark_cluster")
    n = len(s.done)
    _report(request.config, (
        f"Spark cluster suite: table format {FORMAT} (ingested on Sail); cluster "
        f"{spark_cluster} started in {start:.1f} s; §7 suite ({n}/{len(SCENARIOS)} scenarios, reconcile job "
        f"wall time summed): cluster {s.seconds['cluster']:.1f} s vs Sail {s.seconds['sail']:.1f} s "
        f"(simulate + Sail ingest {s.seconds['prepare']:.1f} s; module {wall:.1f} s)"
        if start is not None else f"Spark cluster suite: table format {FORMAT}; cluster did not start"))


def _clear_engine_env(mp: pytest.MonkeyPatch) -> None:
    for name in ("SPARK_REMOTE", "RMQ_RECON_ENGINE", "RMQ_RECON_FORMAT"):
        mp.delenv(name, raising=False)


def _report_lines(report_dir: str, name: str) -> tuple[str, list[str]]:
    """A report CSV as (header, sorted data lines): row order among equal sort keys is not part of the contract."""
    text = pathlib.Path(report_dir, f"{name}.csv").read_text(encoding="utf-8")
    header, *lines = text.splitlines()
    return header, sorted(lines)


def test_cluster_is_standalone_spark_chosen_by_configuration(spark_cluster: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL is a loopback Spark Connect server whose driver runs on the standalone master; the job's own
    session factory reaches it from the environment alone; the script's processes and logs are there."""
    from jobs.lake import _spark

    assert spark_cluster.startswith("sc://127.0.0.1:")
    _clear_engine_env(monkeypatch)
    monkeypatch.setenv("SPARK_REMOTE", spark_cluster)
    monkeypatch.setenv("RMQ_RECON_FORMAT", FORMAT)
    assert _spark.engine_from_env() == "connect"
    assert _spark.table_format() == FORMAT
    with _spark.session() as s:
        master = s.conf.get("spark.master")
        assert master.startswith("spark://127.0.0.1:"), master
        assert s.version.startswith("4."), s.version
        assert s.conf.get("spark.sql.session.timeZone") == "UTC"
        assert s.range(100).selectExpr("sum(id) AS n").collect()[0]["n"] == 4950
    for proc in ("master", "worker", "connect"):
        pid = int((CLUSTER_DIR / f"{proc}.pid").read_text().strip())
        assert pathlib.Path(f"/proc/{pid}").exists(), f"{proc} (pid {pid}) is not running"
        assert (CLUSTER_DIR / "log" / f"{proc}.out").stat().st_size > 0, f"no log for {proc}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_on_cluster_equals_truth_and_sail(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                   spark_cluster: str, suite: Suite, scenario: str) -> None:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    landing, lake = tmp_path / "landing", tmp_path / "lake"
    cluster_lake, sail_lake = tmp_path / "lake-cluster", tmp_path / "lake-sail"
    truth = landing / "_truth"

    # 1-2: landing zone, Sail ingest into a Parquet lake, one copy of it per engine.
    _clear_engine_env(monkeypatch)
    monkeypatch.setenv("RMQ_RECON_FORMAT", FORMAT)
    t0 = time.monotonic()
    simulate.run(scenario, str(landing), seed=SEED, scale=1)
    ingested = ingest.run(str(landing), str(lake))
    assert ingested["changed_rows"]["silver/consumer_offsets"] > 0, ingested
    assert not list(lake.rglob("_delta_log")), "ingest did not write Parquet"
    shutil.copytree(lake, cluster_lake)
    shutil.copytree(lake, sail_lake)
    suite.seconds["prepare"] += time.monotonic() - t0

    # 3: the same job on the cluster, engine and format from the environment only.
    monkeypatch.setenv("SPARK_REMOTE", spark_cluster)
    monkeypatch.setenv("RMQ_RECON_ENGINE", "connect")
    monkeypatch.setenv("RMQ_RECON_FORMAT", FORMAT)
    t0 = time.monotonic()
    on_cluster = reconcile.run(str(cluster_lake), str(tmp_path / "reports-cluster"), run_id="cluster")
    suite.seconds["cluster"] += time.monotonic() - t0
    gold = pathlib.Path(cluster_lake, "gold", "consumer_status")
    assert list(gold.glob("*.parquet")) and not (gold / "_delta_log").exists(), "gold not written as Parquet"

    # ... and on Sail over the same Parquet tables.
    monkeypatch.delenv("SPARK_REMOTE")
    monkeypatch.setenv("RMQ_RECON_ENGINE", "sail")
    t0 = time.monotonic()
    on_sail = reconcile.run(str(sail_lake), str(tmp_path / "reports-sail"), run_id="sail")
    suite.seconds["sail"] += time.monotonic() - t0

    # 4: the cluster's reports equal the truth, and hold the same rows as Sail's.
    assert compare(on_cluster["report_dir"], truth, strict_cause=scenario in STRICT_CAUSE) == []
    for name in REPORTS:
        assert _report_lines(on_cluster["report_dir"], name) == _report_lines(on_sail["report_dir"], name), name
    assert on_cluster["tables"] == on_sail["tables"]
    assert on_cluster["groups"] == on_sail["groups"]  # includes the replay agreement per group
    assert on_cluster["as_of"] == on_sail["as_of"]
    assert sum(len(read_csv(pathlib.Path(on_cluster["report_dir"], f"{n}.csv"))) for n in REPORTS) > 0
    suite.done.append(scenario)


def test_ingest_decodes_on_the_cluster_and_lands_the_rows_sail_lands(tmp_path: pathlib.Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     spark_cluster: str) -> None:
    """Issue 13: the ingest job itself on the cluster (its executors decode the commitlogs,
    jobs.ingest.decode_tasks): every bronze and silver table holds exactly the rows the same ingest on Sail writes,
    and a second run changes none."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.lake import _delta
    from schemas import ALL_TABLES

    def lake_rows(lake: pathlib.Path) -> dict[str, list[tuple]]:  # every bronze/silver row but the ledgers'
        volatile = {"ingested_at", "detected_at", "updated_at", "completed_at", "started_at"}
        out = {}
        for t in ALL_TABLES:
            if t.layer in ("bronze", "silver") and t.qualified != "bronze/ingest_runs" and _delta.exists(str(lake), t):
                df = _delta.read_pandas(str(lake), t)
                cols = [c for c in t.columns if c not in volatile]
                out[t.qualified] = sorted(tuple(repr(v) for v in r) for r in df[cols].itertuples(index=False, name=None))
        return out

    landing = tmp_path / "landing"
    _clear_engine_env(monkeypatch)
    monkeypatch.setenv("RMQ_RECON_FORMAT", FORMAT)
    sim = simulate.run("blocked-head", str(landing), seed=SEED)
    on_sail = ingest.run(str(landing), str(tmp_path / "lake-sail"))
    monkeypatch.setenv("SPARK_REMOTE", spark_cluster)
    monkeypatch.setenv("RMQ_RECON_ENGINE", "connect")
    on_cluster = ingest.run(str(landing), str(tmp_path / "lake-cluster"))
    assert on_cluster["changed_rows"]["silver/messages"] == sim["messages_stored"] == 2641
    assert on_cluster["changed_rows"] == on_sail["changed_rows"]
    assert lake_rows(tmp_path / "lake-cluster") == lake_rows(tmp_path / "lake-sail")
    again = ingest.run(str(landing), str(tmp_path / "lake-cluster"), retake=True)
    assert again["table_versions"]["after"] == again["table_versions"]["before"]
