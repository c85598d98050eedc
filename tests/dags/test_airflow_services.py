"""The DAGs on real Airflow services: scheduler (LocalExecutor), dag-processor and api-server on SQLite.

One set of services for the module (started by ``infra/airflow.sh``, stopped by PID at the end):
* a triggered ``rocketmq_snapshot`` run ingests the real broker stores with exact row counts;
* ``airflow backfill create`` of ``rocketmq_reconcile`` over two past hours reconciles each hour as of its
  logical date, with the same report files as ``rmq-recon reconcile --as-of`` gives for those times.
"""
from __future__ import annotations

import itertools
import json
import os
import pathlib
import random
import sqlite3
import subprocess
import sys
import time
from typing import Iterator

import pytest

from exactness import read_csv
from jobs.ingest import sample_landing
from jobs.lake import _delta
from schemas import consumer_offsets, messages, queue_bounds

pytestmark = pytest.mark.integration
ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "airflow.sh"
AIRFLOW = str(pathlib.Path(sys.executable).with_name("airflow"))
REPORTS = ["duplicated_ranges.csv", "unconsumed_ranges.csv", "offset_corrections.csv", "dlq_candidates.csv",
           "consumer_status.csv"]


def _env_file(home: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    for line in (home / "env").read_text().splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip('"').replace("${PYTHONPATH:+:$PYTHONPATH}", "")
    return env


def _runs(db: pathlib.Path, dag_id: str) -> dict[str, str]:
    with sqlite3.connect(db) as c:
        return dict(c.execute("select run_id, state from dag_run where dag_id = ?", (dag_id,)).fetchall())


class Services:
    def __init__(self, home: pathlib.Path, env: dict[str, str], landing: str, lake: str) -> None:
        self.home, self.env, self.landing, self.lake = home, env, landing, lake

    def airflow(self, *args: str) -> str:
        """An ``airflow`` command; tried again at random intervals for up to 90 s while SQLite answers "database is
        locked" (WAL mode: at once, no busy wait, when a read transaction must become a write while the scheduler
        writes)."""
        deadline = time.time() + 90
        while True:
            proc = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True)
            locked = "database is locked" in proc.stdout + proc.stderr
            if proc.returncode == 0 or not locked or time.time() > deadline:
                break
            time.sleep(random.uniform(0.5, 3.0))
        assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def wait(self, dag_id: str, run_ids: set[str] | None, *, count: int = 0, timeout: float = 300) -> dict[str, str]:
        """Wait until the given runs (or ``count`` runs) of ``dag_id`` are finished; returns run_id -> state."""
        deadline = time.time() + timeout
        while True:
            runs = _runs(self.home / "airflow.db", dag_id)
            mine = {k: v for k, v in runs.items() if run_ids is None or k in run_ids}
            if len(mine) >= max(count, len(run_ids or ())) and all(v in ("success", "failed") for v in mine.values()):
                return mine
            assert time.time() < deadline, f"{dag_id} runs not finished in {timeout:.0f} s: {runs}"
            time.sleep(2)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    tmp = tmp_path_factory.mktemp("airflow_services")
    home = tmp / "airflow"
    landing = str(sample_landing.build(tmp / "landing"))
    lake = str(tmp / "lake")
    env = dict(os.environ, AIRFLOW_HOME=str(home))
    for k in [k for k in env if k.startswith(("AIRFLOW__", "RMQ_RECON_"))]:
        del env[k]
    # where the data is, as `make demo` leaves it (jobs/demo.py): the services must serve it (issue 38: they pointed
    # at var/landing and var/lake, which did not exist, and the first scheduled reconcile failed)
    home.mkdir()
    (home / "rmq-recon.env").write_text(f"RMQ_RECON_LANDING={landing}\nRMQ_RECON_LAKE={lake}\n"
                                        f"RMQ_RECON_REPORTS={tmp / 'reports'}\n")
    t0 = time.time()
    subprocess.run(["bash", str(SCRIPT), "start"], env=env, check=True, capture_output=True, timeout=300)
    print(f"airflow services started in {time.time() - t0:.0f} s")
    try:
        served = _env_file(home)
        assert (served["RMQ_RECON_LANDING"], served["RMQ_RECON_LAKE"], served["RMQ_RECON_REPORTS"]) == (
            landing, lake, str(tmp / "reports"))
        s = Services(home, served, landing, lake)
        deadline = time.time() + 120
        while not {"rocketmq_snapshot", "rocketmq_reconcile"} <= set(s.airflow("dags", "list", "-o", "plain").split()):
            assert time.time() < deadline, "the dag-processor did not parse both DAGs in 120 s"
            time.sleep(2)
        yield s
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, timeout=120)
    assert subprocess.run(["pgrep", "-f", str(home)], capture_output=True).stdout == b""


def test_triggered_snapshot_run_succeeds(services: Services) -> None:
    s = services
    s.airflow("dags", "unpause", "rocketmq_snapshot")
    s.airflow("dags", "trigger", "rocketmq_snapshot", "--run-id", "it-run",
              "-c", json.dumps({"landing": s.landing, "lake": s.lake}))
    t1 = time.time()
    assert s.wait("rocketmq_snapshot", {"it-run"})["it-run"] == "success"
    print(f"triggered snapshot run finished in {time.time() - t1:.0f} s")
    # a scheduled run the unpause started beside it (it waits for the lake's lease) finishes too before the pause; a
    # paused DAG's running runs stall, so when the clock crossed a quarter hour meanwhile (CI, stop 63: a third run
    # with publish still None) the DAG is unpaused again until every run it made has finished
    while True:
        runs = s.wait("rocketmq_snapshot", None, count=len(_runs(s.home / "airflow.db", "rocketmq_snapshot")))
        s.airflow("dags", "pause", "rocketmq_snapshot")
        if len(_runs(s.home / "airflow.db", "rocketmq_snapshot")) == len(runs):
            break
        s.airflow("dags", "unpause", "rocketmq_snapshot")
    with sqlite3.connect(s.home / "airflow.db") as c:
        states = dict(c.execute("select task_id, state from task_instance where run_id = 'it-run'").fetchall())
        published = [r[1] for r in c.execute("select run_id, state from task_instance where dag_id = "
                                             "'rocketmq_snapshot' and task_id = 'publish'") if r[0] in runs]
    assert {k: v for k, v in states.items() if k != "publish"} == {
        "snapshot_time": "success", "broker_hosts": "success", "export": "skipped", "an_export_failed": "skipped",
        "ingest": "success", "validate_silver": "success", "landed_anything": "success"}
    # Unpausing may start a scheduled run before it-run: the run that landed the stores published the silver
    # Assets, a run after it found nothing new and did not
    assert (published.count("success"), set(published) <= {"success", "skipped"}) == (1, True), (published, runs)
    assert [len(_delta.read_pandas(s.lake, t.TABLE)) for t in (consumer_offsets, queue_bounds, messages)] == [123, 1, 179]


def test_backfill_reconciles_each_hour_as_of_its_logical_date(services: Services, tmp_path: pathlib.Path) -> None:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    landing, lake, reports = tmp_path / "landing", tmp_path / "lake", tmp_path / "reports"
    simulate.run("retry-to-dlq", str(landing), seed=7)
    ingest.run(str(landing), str(lake))
    conf = {"lake": str(lake), "reports": str(reports)}
    t1 = time.time()
    # Backfill runs of a paused DAG stay queued. Unpaused, the DAG may also start its own run for the latest
    # hour (on the snapshot test's lake): only the two backfill runs are checked.
    services.airflow("dags", "unpause", "rocketmq_reconcile")
    args = ["backfill", "create", "--dag-id", "rocketmq_reconcile", "--from-date", "2026-01-05T02:00:00+00:00",
            "--to-date", "2026-01-05T03:00:00+00:00", "--dag-run-conf", json.dumps(conf)]
    deadline = time.time() + 90
    for attempt in itertools.count():
        # "database is locked" as in Services.airflow (three tries 2 s apart all met it on 2026-12-03, the scheduler
        # busy with the unpaused DAG's own run); a try cut off that way may already have made the backfill.
        proc = subprocess.run([AIRFLOW, *args], env=services.env, capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        if proc.returncode == 0 or "AlreadyRunningBackfill" in out:
            break
        assert "database is locked" in out and time.time() < deadline, \
            f"airflow backfill create failed (try {attempt + 1}):\n{out}"
        time.sleep(random.uniform(0.5, 3.0))
    # The DAG's own run for the latest hour goes first (max_active_runs=1), then the two backfill runs, one after the
    # other; on a loaded machine the three took more than 300 s (2026-12-03): the deadline is a hang's, not a speed's
    runs = services.wait("rocketmq_reconcile", {"backfill__2026-01-05T02:00:00+00:00",
                                                "backfill__2026-01-05T03:00:00+00:00"}, timeout=900)
    services.airflow("dags", "pause", "rocketmq_reconcile")
    print(f"backfill of 2 reconcile runs finished in {time.time() - t1:.0f} s")
    assert sorted(runs.values()) == ["success", "success"], runs
    folders = sorted(p.parent for p in reports.glob("*/summary.json"))
    as_of = sorted(json.loads((f / "summary.json").read_text())["as_of"] for f in folders)
    assert as_of == ["2026-01-05T02:00:00.000Z", "2026-01-05T03:00:00.000Z"]
    # The same hours through the CLI path: identical report files.
    for hour in ("02", "03"):
        cli = pathlib.Path(reconcile.run(str(lake), str(tmp_path / "cli"), as_of=f"2026-01-05T{hour}:00:00Z")["report_dir"])
        dag = next(f for f in folders if json.loads((f / "summary.json").read_text())["as_of"].startswith(
            f"2026-01-05T{hour}"))
        assert {n: read_csv(dag / n) for n in REPORTS} == {n: read_csv(cli / n) for n in REPORTS}, hour
    retries = sorted(r["reconsume_times"] for f in folders for r in read_csv(f / "dlq_candidates.csv"))
    assert retries == ["14", "15"]
