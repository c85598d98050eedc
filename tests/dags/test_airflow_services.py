"""The snapshot DAG on real Airflow services: scheduler (LocalExecutor), dag-processor and api-server on SQLite."""
from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import time

import pytest

from jobs import _delta, sample_landing
from schemas import consumer_offsets, messages, queue_bounds

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "airflow.sh"


def _env_file(home: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    for line in (home / "env").read_text().splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip('"').replace("${PYTHONPATH:+:$PYTHONPATH}", "")
    return env


def _runs(db: pathlib.Path) -> dict[str, str]:
    with sqlite3.connect(db) as c:
        return dict(c.execute("select run_id, state from dag_run where dag_id = 'rocketmq_snapshot'").fetchall())


@pytest.mark.integration
def test_triggered_run_succeeds_on_real_services(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "airflow"
    landing = str(sample_landing.build(tmp_path / "landing"))
    lake = str(tmp_path / "lake")
    env = dict(os.environ, AIRFLOW_HOME=str(home), RMQ_RECON_LANDING=landing, RMQ_RECON_LAKE=lake)
    for k in [k for k in env if k.startswith("AIRFLOW__")]:
        del env[k]
    t0 = time.time()
    subprocess.run(["bash", str(SCRIPT), "start"], env=env, check=True, capture_output=True, timeout=300)
    started = time.time() - t0
    try:
        senv = {**_env_file(home), "RMQ_RECON_LANDING": landing, "RMQ_RECON_LAKE": lake}
        airflow = str(pathlib.Path(sys.executable).with_name("airflow"))
        deadline = time.time() + 120
        while "rocketmq_snapshot" not in subprocess.run([airflow, "dags", "list", "-o", "plain"], env=senv,
                                                         capture_output=True, text=True).stdout:
            assert time.time() < deadline, "the dag-processor did not parse the DAG in 120 s"
            time.sleep(2)
        subprocess.run([airflow, "dags", "unpause", "rocketmq_snapshot"], env=senv, check=True, capture_output=True)
        subprocess.run([airflow, "dags", "trigger", "rocketmq_snapshot", "--run-id", "it-run",
                        "-c", json.dumps({"landing": landing, "lake": lake})], env=senv, check=True, capture_output=True)
        t1 = time.time()
        deadline = t1 + 300
        while _runs(home / "airflow.db").get("it-run") not in ("success", "failed"):
            assert time.time() < deadline, f"run not finished in 300 s: {_runs(home / 'airflow.db')}"
            time.sleep(2)
        print(f"services started in {started:.0f} s; triggered run finished in {time.time() - t1:.0f} s")
        assert _runs(home / "airflow.db")["it-run"] == "success"
        with sqlite3.connect(home / "airflow.db") as c:
            states = dict(c.execute("select task_id, state from task_instance where run_id = 'it-run'").fetchall())
        assert states == {"ingest": "success", "validate_silver": "success"}
        assert [len(_delta.read_pandas(lake, t.TABLE)) for t in (consumer_offsets, queue_bounds, messages)] == [123, 1, 179]
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, timeout=120)
    assert subprocess.run(["pgrep", "-f", str(home)], capture_output=True).stdout == b""
