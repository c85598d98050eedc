"""Keep the lake small and fast: compact small files and vacuum old versions, daily.

Every ingest and reconcile adds small files; this DAG rewrites them into large ones (delta-rs ``optimize.compact``)
and deletes the files only old versions name (``vacuum``), keeping at least ``retention_h`` hours and every version
the newest ledger rows still read, after deleting the gold rows of runs older than ``gold_retention_days`` beyond
the 30 newest. It holds the lake's leases, so it never runs beside an ingest or a reconcile
(they wait for it), and it records its new versions in the ingest ledger, so the next ingest stays a no-op.
"""
from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import Param, dag, task

from jobs.lake import engine_config
from jobs.problems import fail_fast


@dag(
    dag_id=Path(__file__).stem,
    description=(__doc__ or "").strip().splitlines()[0],
    doc_md=__doc__,
    schedule="30 3 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["rocketmq", "maintenance"],
    default_args={"retries": 2, "retry_delay": pendulum.duration(minutes=5),
                  "execution_timeout": pendulum.duration(hours=2)},
    params={
        "lake": Param(engine_config.default_lake(), type="string",
                      description="lake root (folder or s3://)"),
        "retention_h": Param(float(os.environ.get("RMQ_RECON_VACUUM_RETENTION_H", "168")), type="number", minimum=0,
                             description="hours a removed file is kept at least (raised to keep ledger versions)"),
        "gold_retention_days": Param(float(os.environ.get("RMQ_RECON_GOLD_RETENTION_DAYS", "7")), type="number",
                                     minimum=0, description="days old runs' gold rows are kept (the 30 newest always)"),
    },
)
def rocketmq_maintenance() -> None:
    @task
    @fail_fast
    def maintain(params: dict | None = None) -> dict:
        from jobs.ops import maintenance

        return maintenance.run(params["lake"], retention_h=params["retention_h"],
                               gold_retention_days=params["gold_retention_days"])

    maintain()


rocketmq_maintenance()
