"""DAG files: they import cleanly, name themselves, look up no connections while parsing, and wire as drawn."""
from __future__ import annotations

import pathlib
from unittest import mock

import pytest

DAG_FILES = sorted((pathlib.Path(__file__).resolve().parents[2] / "dags").glob("*.py"))


def _bag(path: pathlib.Path):  # noqa: ANN202
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(path))


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_dag_file_imports_with_one_dag_named_after_the_file(path: pathlib.Path) -> None:
    bag = _bag(path)
    assert bag.import_errors == {}
    assert list(bag.dags) == [path.stem]


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_parsing_looks_up_no_connection(path: pathlib.Path) -> None:
    from airflow.sdk import BaseHook

    with mock.patch.object(BaseHook, "get_connection", side_effect=AssertionError("connection lookup at parse")):
        bag = _bag(path)
    assert bag.import_errors == {}


@pytest.mark.parametrize("dag_id, structure", [
    ("rocketmq_snapshot", {"snapshot_time": ["export"], "broker_hosts": ["export"],
                           "export": ["an_export_failed", "ingest"], "an_export_failed": [],
                           "ingest": ["landed_anything", "validate_silver"], "validate_silver": [],
                           "landed_anything": ["publish"], "publish": []}),
    ("rocketmq_reconcile", {"reconcile": ["alert", "push_metrics", "validate_gold"],
                            "validate_gold": ["alert", "dashboard", "push_metrics"],
                            "dashboard": ["alert", "push_metrics"], "alert": [], "push_metrics": []}),
    ("rocketmq_maintenance", {"maintain": []}),
])
def test_structure(dag_id: str, structure: dict[str, list[str]]) -> None:
    dag = _bag(DAG_FILES[0].parent / f"{dag_id}.py").dags[dag_id]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == structure


def test_dashboard_alerts_and_metrics_run_after_every_reconcile_and_never_decide_its_state() -> None:
    dag = _bag(DAG_FILES[0].parent / "rocketmq_reconcile.py").dags["rocketmq_reconcile"]
    assert {t.task_id: (t.is_teardown, t.on_failure_fail_dagrun, t.trigger_rule.value) for t in dag.tasks
            if t.task_id in ("alert", "push_metrics", "dashboard")} == {
        "alert": (True, False, "all_done_setup_success"), "push_metrics": (True, False, "all_done_setup_success"),
        "dashboard": (True, False, "all_done_setup_success")}


def test_snapshot_dag_publishes_the_silver_assets_the_reconcile_dag_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Assets are named by the lake (the fifth audit: two lakes on one Airflow started each other's reconciles):
    the reconcile DAG waits for RMQ_RECON_LAKE's two tables, the snapshot DAG's publish task names the run's lake's
    six through an alias (tests/dags/test_dag_run.py counts the events)."""
    from airflow.sdk import AssetAlias

    from jobs.lake import engine_config

    monkeypatch.setenv("RMQ_RECON_LAKE", "s3://fleet-a/lake")
    snap = _bag(DAG_FILES[0].parent / "rocketmq_snapshot.py").dags["rocketmq_snapshot"]
    rec = _bag(DAG_FILES[0].parent / "rocketmq_reconcile.py").dags["rocketmq_reconcile"]
    assert [(t.task_id, t.outlets) for t in snap.tasks if t.outlets] == [("publish", [AssetAlias("rmq_recon.silver")])]
    assert [(a.name, a.uri) for a in engine_config.silver_assets("/data/lake-b/")] == [
        (f"rmq_recon.silver.{t}@file:///data/lake-b", f"file:///data/lake-b/silver/{t}")
        for t in ("consumer_offsets", "queue_bounds", "messages", "deliveries", "subscription_groups", "topic_configs")]
    condition = rec.timetable.asset_condition
    assert type(condition).__name__ == "AssetAll"  # both tables must have been updated
    assert {(a.name, a.uri) for a in condition.objects} == {
        ("rmq_recon.silver.consumer_offsets@s3://fleet-a/lake", "s3://fleet-a/lake/silver/consumer_offsets"),
        ("rmq_recon.silver.queue_bounds@s3://fleet-a/lake", "s3://fleet-a/lake/silver/queue_bounds")}
    assert (snap.params["lake"], rec.params["lake"]) == ("s3://fleet-a/lake", "s3://fleet-a/lake")
    assert (snap.catchup, rec.catchup, snap.max_active_runs, rec.max_active_runs) == (False, False, 1, 1)


@pytest.mark.parametrize("value, expected", [("yes", True), ("True", True), ("1", True), ("0", False), ("no", False)])
def test_the_snapshot_dag_reads_require_marker_as_the_cli_does(monkeypatch: pytest.MonkeyPatch, value: str,
                                                                expected: bool) -> None:
    """The fifth audit: with RMQ_RECON_REQUIRE_MARKER=yes the CLI took 0 unmarked snapshots and the DAG took all 4."""
    from jobs.ingest import ingest

    monkeypatch.setenv("RMQ_RECON_REQUIRE_MARKER", value)
    dag = _bag(DAG_FILES[[p.stem for p in DAG_FILES].index("rocketmq_snapshot")]).dags["rocketmq_snapshot"]
    assert (dag.params["require_marker"], ingest.require_marker_default()) == (expected, expected)
