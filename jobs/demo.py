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
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

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


class Progress:
    """Every line the demo prints goes through :meth:`say`; while a step runs, a line at least every ``every``
    seconds (no step stays silent longer: an install, a simulation or a DAG run took minutes): for an Airflow run
    the tasks' own progress lines as they come (jobs.progress), else a heartbeat naming the step and its time."""

    def __init__(self, every: float = 8.0) -> None:
        self.every = every
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)
            self.last = time.monotonic()

    @contextmanager
    def step(self, what: str, progress_file: pathlib.Path | None = None) -> Iterator[None]:
        started = time.monotonic()
        done = threading.Event()
        shown = ""

        def beat() -> None:
            nonlocal shown
            while not done.wait(1.0):
                newest = _newest_line(progress_file) if progress_file is not None else ""
                if newest and newest != shown:  # the tasks' own progress (jobs.progress), as it comes
                    shown = newest
                    self.say(f"  {newest}")
                elif time.monotonic() - self.last >= self.every:
                    self.say(f"demo: {what}: still running ({time.monotonic() - started:.0f} s)")

        t = threading.Thread(target=beat, name="demo-heartbeat", daemon=True)
        t.start()
        try:
            yield
        finally:
            done.set()
            t.join()


def _newest_line(path: pathlib.Path) -> str:
    """The last line of a progress file (its tail only: it grows)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""


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


def make_landing(landing: pathlib.Path, scenario: str, seed: int, scale: int,
                 progress: Any = None) -> dict[str, Any]:
    """``real``: the real broker stores of tests/fixtures/real; anything else: the fleet simulator."""
    if scenario == "real":
        from jobs.ingest import sample_landing

        sample_landing.build(landing)
        return {"scenario": "real", "source": str(sample_landing.REAL)}
    from jobs import simulate

    return simulate.run(scenario, str(landing), seed=seed, scale=scale, progress=progress)


def main(*, workdir: str = "var/demo", scenario: str = "mixed", seed: int = 7, scale: int = 1) -> int:
    """Build a landing zone, run the DAGs through Airflow, print the offsets, the summary and the report folder."""
    t0 = time.time()
    out = Progress()
    say = out.say
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
    say(f"demo: landing zone '{scenario}' (seed {seed}, scale {scale}) -> {landing}")
    with out.step("simulating the fleet"):
        sim = make_landing(landing, scenario, seed, scale, progress=say)
    say(f"demo: {json.dumps({k: v for k, v in sim.items() if not isinstance(v, (dict, list))})}")
    env = airflow_env(airflow_home)
    progress_file = work / "progress.log"
    progress_file.write_text("")
    env["RMQ_RECON_PROGRESS_FILE"] = str(progress_file)  # the tasks' progress lines (jobs.progress)
    _write_deployment(airflow_home, landing, lake, reports_root)
    say("demo: preparing the Airflow metadata DB (SQLite)")
    with out.step("airflow db migrate"):
        _airflow(["db", "migrate"], env, log_path)
    conf = {"landing": str(landing), "lake": str(lake)}
    say("demo: airflow dags test rocketmq_snapshot (ingest, then the silver expectation suites)")
    with out.step("rocketmq_snapshot", progress_file):
        _airflow(["dags", "test", "rocketmq_snapshot", "-c", json.dumps(conf)], env, log_path)
    say("\nCommitted offsets at the newest snapshot of each broker (lake: " + str(lake) + ")")
    say(offsets_table(str(lake)))
    rconf = {"lake": str(lake), "reports": str(reports_root)}
    say("\ndemo: airflow dags test rocketmq_reconcile (reconcile, gold expectation suites, dashboard)")
    with out.step("rocketmq_reconcile", progress_file):
        _airflow(["dags", "test", "rocketmq_reconcile", "-c", json.dumps(rconf)], env, log_path)
    runs = sorted(reports_root.glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise RuntimeError(f"the reconcile DAG wrote no report under {reports_root}; see {log_path}")
    summary = json.loads(runs[-1].read_text())
    say("\n" + summary_text(summary))
    say(f"\nReport folder: {runs[-1].parent}")
    dashboard = reports_root / "dashboard" / "index.html"
    if not dashboard.exists():
        raise RuntimeError(f"the reconcile DAG wrote no dashboard ({dashboard}); see {log_path}")
    say(f"Run's index:   {runs[-1].parent / 'index.html'}")
    say(f"Dashboard:     {dashboard}  (open it in a browser: file://{dashboard})")
    say(f"Lake:          {lake}")
    say(f"Airflow UI:    infra/airflow.sh start, then open the URL it prints (AIRFLOW_HOME={airflow_home}; the "
        "demo's DAG runs are there, and its scheduled runs read this landing zone and lake)")
    say(f"demo: done in {time.time() - t0:.0f} s (Airflow log: {log_path})")
    return 0


def summary_text(summary: dict[str, Any]) -> str:
    """What the terminal shows of a run: counts per report (an offset once, its breakdown labelled), then every
    group with the severity and reason the dashboard shows and its Burrow status (jobs.reconcile.verdict)."""
    lines = ["Reconciliation summary (offsets: each group, client, queue and offset once)"]
    for name, info in summary["tables"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in info.get("by_kind", {}).items())
        extra = ""
        if "offsets" in info:
            by = info.get("offsets_by_evidence") or info.get("offsets_by_kind") or {}
            extra = f"  {info['offsets']:>7} offsets" + (f" (by {'evidence' if 'offsets_by_evidence' in info else 'kind'}: "
                                                          + ", ".join(f"{k} {v}" for k, v in by.items()) + ")"
                                                          if by else "")
        lines.append(f"  {name:20} {info['rows']:6} rows  {kinds}{extra}")
    sev = summary.get("severities", {})
    lines.append(f"\nGroups: {len(summary['groups'])} (" + ", ".join(f"{k} {v}" for k, v in reversed(list(sev.items())))
                 + "); severity, Burrow status, reason:")
    order = {"CRITICAL": 0, "WARNING": 1, "OK": 2}
    for g, info in sorted(summary["groups"].items(), key=lambda kv: (order.get(kv[1].get("severity"), 3), kv[0])):
        lines.append(f"  {g:34} {info.get('severity', '-'):8} {info.get('status', '-'):6}  "
                     f"{info.get('reason') or '-'}")
    return "\n".join(lines)


def _write_deployment(airflow_home: pathlib.Path, landing: pathlib.Path, lake: pathlib.Path,
                      reports_root: pathlib.Path) -> None:
    """Where the demo's data is, for ``infra/airflow.sh start`` (which reads this file when RMQ_RECON_LANDING, _LAKE
    and _REPORTS are not set): the services the demo suggests then show and schedule the demo's lake."""
    text = "".join(f"{k}={v}\n" for k, v in (("RMQ_RECON_LANDING", landing), ("RMQ_RECON_LAKE", lake),
                                             ("RMQ_RECON_REPORTS", reports_root)))
    (airflow_home / "rmq-recon.env").write_text(text)
