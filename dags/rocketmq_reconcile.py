"""Reconcile RocketMQ consumer progress and write the reports.

Runs when the snapshot DAG updates the silver tables (and hourly, so that backfills have intervals):
replays the min-offset commits, finds duplicated and unconsumed offset ranges, offset corrections and DLQ
candidates, writes the gold tables and the report folder, then checks the gold tables. A re-run of the same
logical date replaces its own rows and files, nothing else.
"""
from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from schemas import consumer_offsets, queue_bounds

GOLD_READY = consumer_offsets.TABLE.asset() & queue_bounds.TABLE.asset()


@dag(
    dag_id=Path(__file__).stem,
    description=(__doc__ or "").strip().splitlines()[0],
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 * * * *", timezone="UTC"), assets=GOLD_READY),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["rocketmq", "reconcile"],
    default_args={"retries": 2, "retry_delay": pendulum.duration(seconds=30),
                  "execution_timeout": pendulum.duration(hours=2)},
    params={
        "lake": Param(os.environ.get("RMQ_RECON_LAKE", "var/lake"), type="string"),
        "reports": Param(os.environ.get("RMQ_RECON_REPORTS", "var/reports"), type="string"),
        "as_of": Param(None, type=["null", "string"], description="ISO-8601 UTC; default: the run's logical date"),
        "window": Param(10, type="integer", minimum=2, description="snapshots per queue for the status"),
        "groups": Param(None, type=["null", "array"], description="consumer groups (default: all)"),
        "spark_conn_id": Param(None, type=["null", "string"], description="Airflow spark_connect connection id"),
    },
)
def rocketmq_reconcile() -> None:
    @task
    def reconcile(params: dict | None = None, run_id: str | None = None, logical_date=None) -> dict:  # noqa: ANN001
        from jobs import engine_config, reconcile

        engine_config.apply_spark_connection(params["spark_conn_id"])
        as_of = params["as_of"] or engine_config.as_of_for(logical_date)
        return reconcile.run(params["lake"], params["reports"], as_of=as_of, run_id=run_id,
                             window=params["window"], groups=params["groups"])

    @task
    def validate_gold(summary: dict, params: dict | None = None) -> dict:
        from jobs import quality

        return quality.validate_layer(params["lake"], "gold", run_id=summary["run_id"])

    validate_gold(reconcile())


rocketmq_reconcile()
