"""Snapshot RocketMQ broker and client state into the lake.

Ingests every new (or late-completed) snapshot folder of the landing zone (broker config files with their .bak,
commitlog and consumequeue segments, broadcast clients' offsets.json) into bronze and silver Delta tables, then
checks the silver tables with their Great Expectations suites, and marks the silver Assets of the lake it ingested
into updated (which starts that lake's reconcile DAG) only when it moved a table. Incremental and idempotent: a
re-run changes nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import AssetAlias, Param, dag, task

from jobs.lake import engine_config
from jobs.problems import fail_fast

# The silver Assets of the lake a run ingested into (its Param), named at run time: an ad-hoc run on another lake
# does not start the reconcile of the lake the services serve.
SILVER = AssetAlias("rmq_recon.silver")


@dag(
    dag_id=Path(__file__).stem,
    description=(__doc__ or "").strip().splitlines()[0],
    doc_md=__doc__,
    schedule="*/15 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["rocketmq", "ingest"],
    default_args={"retries": 2, "retry_delay": pendulum.duration(seconds=30),
                  "execution_timeout": pendulum.duration(hours=2)},
    params={
        "landing": Param(os.environ.get("RMQ_RECON_LANDING", "var/landing"), type="string",
                         description="landing zone root (folder or s3://)"),
        "lake": Param(engine_config.default_lake(), type="string",
                      description="lake root (folder or s3://)"),
        "settle_s": Param(float(os.environ.get("RMQ_RECON_SNAPSHOT_SETTLE_S", "0")), type="number", minimum=0,
                          description="a snapshot folder without _SUCCESS is taken once unchanged this long"),
        "require_marker": Param(engine_config.require_marker_default(), type="boolean",
                                description="take only snapshot folders whose sync job wrote _SUCCESS"),
    },
)
def rocketmq_snapshot() -> None:
    @task
    @fail_fast
    def ingest(params: dict | None = None) -> dict:
        from jobs.ingest import ingest

        return ingest.run(params["landing"], params["lake"], settle_s=params["settle_s"],
                          require_marker=params["require_marker"])

    @task
    @fail_fast
    def validate_silver(summary: dict, params: dict | None = None) -> dict:
        from jobs.ops import quality

        return quality.validate_layer(params["lake"], "silver", run_id=summary["run_id"], reuse=True)

    @task.short_circuit
    def landed_anything(summary: dict) -> bool:
        from jobs.ingest import ingest

        return ingest.landed_anything(summary)

    @task(outlets=[SILVER])
    def publish(params: dict | None = None, *, outlet_events=None) -> None:  # noqa: ANN001
        """Marks the lake's silver Assets updated, which its reconcile DAG waits for: only when the ingest changed
        them."""
        for asset in engine_config.silver_assets(params["lake"]):
            outlet_events[SILVER].add(asset)

    summary = ingest()
    validate_silver(summary)
    landed_anything(summary) >> publish()


rocketmq_snapshot()
