"""The snapshot DAG end to end with dag.test() on the real broker stores; a second run changes nothing."""
from __future__ import annotations

import pathlib

import pytest

from alert_servers import pushgateway, servers  # noqa: F401 - fixtures
from jobs.ingest import sample_landing
from jobs.lake import _delta, engine_config
from schemas import consumer_offsets, messages, queue_bounds, validation_results


def _asset_events(name: str) -> int:
    """Asset events recorded so far for the Asset ``name`` (the test database is shared by the session's runs)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name == name).count())


def _serve(lake: str | None) -> None:
    """Serialize the DAGs into the test database as the services would for RMQ_RECON_LAKE=``lake`` and unpause the
    reconcile DAG (``None``: pause it again and drop what was queued for it)."""
    import os
    import subprocess
    import sys

    from airflow.utils.session import create_session
    from sqlalchemy import text

    airflow = str(pathlib.Path(sys.executable).with_name("airflow"))
    if lake is None:
        subprocess.run([airflow, "dags", "pause", "rocketmq_reconcile"], check=True, capture_output=True)
        with create_session() as session:
            session.execute(text("delete from asset_dag_run_queue where target_dag_id = 'rocketmq_reconcile'"))
        return
    env = dict(os.environ, RMQ_RECON_LAKE=lake)
    subprocess.run([airflow, "dags", "reserialize"], check=True, capture_output=True, env=env)
    subprocess.run([airflow, "dags", "unpause", "rocketmq_reconcile"], check=True, capture_output=True, env=env)


def _queued_for_reconcile() -> set[str]:
    """The Assets whose events wait to start a reconcile DAG run (Airflow's asset_dag_run_queue)."""
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:
        return {r[0] for r in session.execute(text(
            "select a.name from asset_dag_run_queue q join asset a on a.id = q.asset_id "
            "where q.target_dag_id = 'rocketmq_reconcile'"))}


@pytest.mark.integration
def test_snapshot_dag_ingests_and_validates(tmp_path: pathlib.Path, airflow_db: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    landing = str(sample_landing.build(tmp_path / "landing"))
    lake = str(tmp_path / "lake")
    dag = DagBag(dag_folder=str(pathlib.Path(__file__).resolve().parents[2] / "dags" / "rocketmq_snapshot.py")) \
        .dags["rocketmq_snapshot"]
    mine = [a.name for a in engine_config.silver_assets(lake)]  # named by the run's lake (its Param)
    # The reconcile DAG as the services would run it for this lake: waiting for its Assets, unpaused (dag.test
    # serializes every DAG of the folder again, with this process's RMQ_RECON_LAKE).
    monkeypatch.setenv("RMQ_RECON_LAKE", lake)
    _serve(lake)
    counts, states, events = [], [], [[_asset_events(n) for n in mine]]
    for _ in range(2):
        run = dag.test(run_conf={"landing": landing, "lake": lake})
        assert run.state == "success"
        states.append({ti.task_id: ti.state for ti in run.get_task_instances()})
        counts.append([len(_delta.read_pandas(lake, t.TABLE)) for t in (consumer_offsets, queue_bounds, messages)])
        events.append([_asset_events(n) for n in mine])
    assert counts == [[123, 1, 179], [123, 1, 179]]
    # The silver Assets the reconcile DAG waits for are marked updated by the run that moved them, not by the
    # second, which found nothing new (the fifth audit: every 15-minute no-op started a reconcile)
    # (no broker host listed: nothing exported, the landing zone is filled by other means)
    no_exports = {"snapshot_time": "success", "broker_hosts": "success", "export": "skipped",
                  "an_export_failed": "skipped"}
    assert states == [
        {**no_exports, "ingest": "success", "validate_silver": "success", "landed_anything": "success",
         "publish": "success"},
        {**no_exports, "ingest": "success", "validate_silver": "success", "landed_anything": "success",
         "publish": "skipped"}]
    # One event on each of the six Assets of the run's lake by the first run, none by the second.
    assert [[b - a for a, b in zip(x, y)] for x, y in zip(events, events[1:])] == [[1] * 6, [0] * 6]
    # ... which queued the reconcile DAG of that lake once per Asset it waits for
    assert _queued_for_reconcile() == {"rmq_recon.silver.consumer_offsets@" + pathlib.Path(lake).as_uri(),
                                       "rmq_recon.silver.queue_bounds@" + pathlib.Path(lake).as_uri()}
    # An ad-hoc run into another lake marks that lake's Assets, which no reconcile waits for (the fifth audit: it
    # started the served lake's reconcile).
    other = str(tmp_path / "other-lake")
    # (counted from before the run: the test Airflow DB outlives pytest's numbered temporary folders, so an earlier
    # session may have used this path)
    before = [_asset_events(a.name) for a in engine_config.silver_assets(other)]
    assert dag.test(run_conf={"landing": landing, "lake": other}).state == "success"
    assert [_asset_events(a.name) - n for a, n in zip(engine_config.silver_assets(other), before)] == [1] * 6
    assert _queued_for_reconcile() == {"rmq_recon.silver.consumer_offsets@" + pathlib.Path(lake).as_uri(),
                                       "rmq_recon.silver.queue_bounds@" + pathlib.Path(lake).as_uri()}
    _serve(None)
    # The second run ingested nothing: validate_silver answered from the first run's kept results (no new commit).
    from jobs.lake import ledger

    kept = _delta.read_pandas(lake, validation_results.TABLE)
    # (51: silver/messages' key has queue_offset too, not null: issue 35's inner batches; 52: issue 39's indexed rule
    # on silver/messages, which checks no copy: these real records carry no UNIQ_KEY)
    assert (sorted(set(kept["validation_id"])), len(kept), int(kept["success"].sum()),
            len(_delta.history(lake, validation_results.TABLE))) == ([ledger.last_ingest(lake)["run_id"]], 52, 52, 1)


@pytest.mark.integration
def test_reconcile_dag_alerts_once_per_change_and_pushes_its_metrics(
        tmp_path: pathlib.Path, airflow_db: pathlib.Path, servers: tuple, pushgateway: str) -> None:
    """queue2-offset32 (seed 7) through the reconcile DAG as of 00:05, 00:10, and 00:10 again (a second manual run):
    one webhook POST and one email, for the run where GID_recon enters STALL; the Pushgateway holds the last run."""
    import urllib.request

    from airflow.dag_processing.dagbag import DagBag

    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    hook, box = servers
    simulate.run("queue2-offset32", str(tmp_path / "landing"), seed=7)
    ingest.run(str(tmp_path / "landing"), str(tmp_path / "lake"))
    dag = DagBag(dag_folder=str(pathlib.Path(__file__).resolve().parents[2] / "dags" / "rocketmq_reconcile.py")) \
        .dags["rocketmq_reconcile"]
    conf = {"lake": str(tmp_path / "lake"), "reports": str(tmp_path / "reports"), "pushgateway_url": pushgateway,
            "dashboard_url": "http://dash.example/reports"}
    run_ids, posts = [], []
    for as_of in ("2026-01-05T00:05:00Z", "2026-01-05T00:10:00Z", "2026-01-05T00:10:00Z"):
        run = dag.test(run_conf={**conf, "as_of": as_of})
        assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
            "reconcile": "success", "validate_gold": "success", "dashboard": "success", "alert": "success",
            "push_metrics": "success"}
        assert run.state == "success"
        run_ids.append(reconcile.sanitize_run_id(run.run_id))
        posts.append(len(hook.posts))
    assert (posts, len(box.messages)) == ([0, 1, 1], 1)
    assert hook.posts[0]["body"]["text"] == (
        f"RocketMQ reconciliation {run_ids[1]} (as of 2026-01-05T00:10:00.000Z): 1 group needs attention\n"
        "- GID_recon (DefaultCluster): STALL (was OK); queues entered STALL: 1, WARN: 3\n"
        f"Compared with run {run_ids[0]}.\n"
        "Dashboard: http://dash.example/reports/dashboard/index.html")
    with urllib.request.urlopen(pushgateway + "/metrics", timeout=10) as r:
        text = r.read().decode()
    assert [line for line in text.splitlines() if line.startswith("rocketmq_recon_run_info")] == [
        f'rocketmq_recon_run_info{{cluster="DefaultCluster",instance="",job="rmq_recon",run_id="{run_ids[2]}"}} 1']


@pytest.mark.integration
def test_a_usage_error_fails_the_task_at_once(tmp_path: pathlib.Path, airflow_db: pathlib.Path) -> None:
    """A missing landing zone fails ingest on its first try (67 s and three tries before: two retries 30 s apart
    met the same error)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(pathlib.Path(__file__).resolve().parents[2] / "dags" / "rocketmq_snapshot.py")) \
        .dags["rocketmq_snapshot"]
    run = dag.test(run_conf={"landing": str(tmp_path / "no-landing"), "lake": str(tmp_path / "lake")})
    assert (run.state, {ti.task_id: (ti.state, ti.try_number) for ti in run.get_task_instances()}) == (
        "failed", {"snapshot_time": ("success", 1), "broker_hosts": ("success", 1), "export": ("skipped", 0),
                   "an_export_failed": ("skipped", 0), "ingest": ("failed", 1),
                   "validate_silver": ("upstream_failed", 0),
                   "landed_anything": ("upstream_failed", 0), "publish": ("upstream_failed", 0)})
