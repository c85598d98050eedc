"""The snapshot DAG end to end with dag.test() on the real broker stores; a second run changes nothing."""
from __future__ import annotations

import pathlib

import pytest

from jobs import _delta, sample_landing
from schemas import consumer_offsets, messages, queue_bounds


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
