"""The snapshot DAG end to end with dag.test() on the real broker stores; a second run changes nothing."""
from __future__ import annotations

import pathlib

import pytest

from jobs import _delta, sample_landing
from schemas import consumer_offsets, messages, queue_bounds, validation_results


@pytest.mark.integration
def test_snapshot_dag_ingests_and_validates(tmp_path: pathlib.Path, airflow_db: pathlib.Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    landing = str(sample_landing.build(tmp_path / "landing"))
    lake = str(tmp_path / "lake")
    dag = DagBag(dag_folder=str(pathlib.Path(__file__).resolve().parents[2] / "dags" / "rocketmq_snapshot.py")) \
        .dags["rocketmq_snapshot"]
    counts = []
    for _ in range(2):
        run = dag.test(run_conf={"landing": landing, "lake": lake})
        assert run.state == "success"
        assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
            "ingest": "success", "validate_silver": "success"}
        counts.append([len(_delta.read_pandas(lake, t.TABLE)) for t in (consumer_offsets, queue_bounds, messages)])
    assert counts == [[123, 1, 179], [123, 1, 179]]
    # The second run ingested nothing: validate_silver answered from the first run's kept results (no new commit).
    from jobs import ledger

    kept = _delta.read_pandas(lake, validation_results.TABLE)
    assert (sorted(set(kept["validation_id"])), len(kept), int(kept["success"].sum()),
            len(_delta.history(lake, validation_results.TABLE))) == ([ledger.last_ingest(lake)["run_id"]], 48, 48, 1)
