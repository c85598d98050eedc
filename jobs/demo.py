"""``rmq-recon demo`` / ``make demo``: simulated fleet -> Airflow snapshot DAG -> reconcile DAG -> reports.

Runs both DAGs through Airflow itself (``airflow dags test``: the real DAG files, tasks and Params, with an
embedded SQLite metadata DB under ``var/airflow``, the home ``infra/airflow.sh`` serves, so its UI shows the demo's
runs), then prints what an operator looks at first.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def airflow_env(airflow_home: pathlib.Path) -> dict[str, str]:
    """An isolated Airflow: SQLite metadata DB, this project's dags/ folder, no examples."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "RUST_LOG": env.get("RUST_LOG", "warn,sail_common::actor=error"),
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    return env


def _airflow(args: list[str], env: dict[str, str], log_path: pathlib.Path) -> None:
    exe = str(pathlib.Path(sys.executable).with_name("airflow"))
    with open(log_path, "ab") as log:
        proc = subprocess.run([exe, *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        raise RuntimeError(f"`airflow {' '.join(args[:3])}` failed (exit {proc.returncode}); "
                           f"log {log_path}:\n" + "\n".join(tail))


def offsets_table(lake: str, *, max_rows: int = 25) -> str:
    """Committed offsets per group and queue at each broker's newest snapshot, the first ``max_rows`` of them."""
    from jobs.lake import _delta
    from schemas import consumer_offsets, queue_bounds

    off = _delta.read_pandas(lake, consumer_offsets.TABLE)
    if not len(off):
        return "(no consumer offsets)"
    latest = off.groupby(["cluster", "broker", "client_id"])["snapshot_ts"].transform("max")
    off = off[off["snapshot_ts"] == latest]
    qb = _delta.read_pandas(lake, queue_bounds.TABLE)
    cols = ["cluster", "broker", "snapshot_ts", "topic", "queue_id"]
    if len(qb):
        off = off.merge(qb[cols + ["min_offset", "max_offset"]], on=cols, how="left")
    else:
        off["min_offset"] = off["max_offset"] = None
    off = off.sort_values(["consumer_group", "client_id", "topic", "broker", "queue_id"])
    lines = [f"{'group':34} {'client':18} {'topic':30} {'broker':10} {'q':>3} {'committed':>10} {'min':>8} {'max':>8}"]
    more = len(off) - max_rows
    for r in off.head(max_rows).to_dict("records"):
        mn = "" if r["min_offset"] is None or r["min_offset"] != r["min_offset"] else int(r["min_offset"])
        mx = "" if r["max_offset"] is None or r["max_offset"] != r["max_offset"] else int(r["max_offset"])
        lines.append(f"{r['consumer_group'][:34]:34} {r['client_id'][:18]:18} {r['topic'][:30]:30} {r['broker'][:10]:10} "
                     f"{r['queue_id']:>3} {r['committed_offset']:>10} {mn!s:>8} {mx!s:>8}")
    if more > 0:
        lines.append(f"... and {more} more (every group and queue: consumer_status.csv in the report folder)")
    return "\n".join(lines)


def make_landing(landing: pathlib.Path, scenario: str, seed: int, scale: int) -> dict[str, Any]:
    """``real``: the real broker stores of tests/fixtures/real; anything else: the fleet simulator."""
    if scenario == "real":
        from jobs.ingest import sample_landing

        sample_landing.build(landing)
        return {"scenario": "real", "source": str(sample_landing.REAL)}
    from jobs import simulate

    return simulate.run(scenario, str(landing), seed=seed, scale=scale)


def main(*, workdir: str = "var/demo", scenario: str = "mixed", seed: int = 7, scale: int = 1) -> int:
    """Build a landing zone, run the DAGs through Airflow, print the offsets, the summary and the report folder."""
    t0 = time.time()
    work = (ROOT / workdir).resolve() if not os.path.isabs(workdir) else pathlib.Path(workdir)
    landing, lake, reports_root = work / "landing", work / "lake", work / "reports"
    # The Airflow home infra/airflow.sh serves: the UI it starts shows the demo's runs.
    airflow_home = pathlib.Path(os.environ.get("AIRFLOW_HOME") or ROOT / "var" / "airflow")
    for p in (landing, lake, reports_root):
        shutil.rmtree(p, ignore_errors=True)
    airflow_home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "airflow.log"
    log_path.write_text("")
    print(f"demo: landing zone '{scenario}' (seed {seed}, scale {scale}) -> {landing}", flush=True)
    sim = make_landing(landing, scenario, seed, scale)
    print(f"demo: {json.dumps({k: v for k, v in sim.items() if not isinstance(v, (dict, list))})}", flush=True)
    env = airflow_env(airflow_home)
    print("demo: preparing the Airflow metadata DB (SQLite)", flush=True)
    _airflow(["db", "migrate"], env, log_path)
    conf = {"landing": str(landing), "lake": str(lake)}
    print("demo: airflow dags test rocketmq_snapshot", flush=True)
    _airflow(["dags", "test", "rocketmq_snapshot", "-c", json.dumps(conf)], env, log_path)
    print("\nCommitted offsets at the newest snapshot of each broker (lake: " + str(lake) + ")")
    print(offsets_table(str(lake)))
    rconf = {"lake": str(lake), "reports": str(reports_root)}
    print("\ndemo: airflow dags test rocketmq_reconcile", flush=True)
    _airflow(["dags", "test", "rocketmq_reconcile", "-c", json.dumps(rconf)], env, log_path)
    runs = sorted(reports_root.glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise RuntimeError(f"the reconcile DAG wrote no report under {reports_root}; see {log_path}")
    summary = json.loads(runs[-1].read_text())
    print("\nReconciliation summary")
    for name, info in summary["tables"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in info.get("by_kind", {}).items())
        print(f"  {name:20} {info['rows']:6} rows  {kinds}")
    print(f"\nGroups: {len(summary['groups'])}; worst status per group:")
    for g, info in sorted(summary["groups"].items()):
        print(f"  {g:40} {info.get('status', '-'):7} dup {info.get('duplicated_messages', 0):>6}  "
              f"unconsumed {info.get('unconsumed_messages', 0):>7}  dlq {info.get('dlq_candidates', 0):>4}")
    print(f"\nReport folder: {runs[-1].parent}")
    dashboard = reports_root / "dashboard" / "index.html"
    if not dashboard.exists():
        raise RuntimeError(f"the reconcile DAG wrote no dashboard ({dashboard}); see {log_path}")
    print(f"Run's index:   {runs[-1].parent / 'index.html'}")
    print(f"Dashboard:     {dashboard}  (open it in a browser: file://{dashboard})")
    print(f"Lake:          {lake}")
    print(f"Airflow UI:    infra/airflow.sh start, then open the URL it prints (AIRFLOW_HOME={airflow_home}; "
          "the demo's DAG runs are there)")
    print(f"demo: done in {time.time() - t0:.0f} s (Airflow log: {log_path})")
    return 0
