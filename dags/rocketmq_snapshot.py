"""Snapshot RocketMQ broker and client state into the lake.

First, when the run lists broker hosts (Param export_hosts), takes their snapshots itself: ``rmq-recon export`` on each
host over its Airflow SSH connection, one mapped task per broker, all at one snapshot time; a host that fails does
not keep the others' folders from landing, and fails the run.
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
from airflow.sdk.exceptions import AirflowFailException

from jobs.lake import engine_config
from jobs.ops import remote_export
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
        "export_hosts": Param(remote_export.default_hosts(), schema=remote_export.SCHEMA,
                              description="broker hosts to export from over SSH before the ingest: "
                                          "[{conn_id, store, cluster, broker[, state][, command]}]"),
        "snapshot_ts": Param("", type="string",
                             description="the exports' snapshot time (empty: now; a replay names its times)"),
        "export_command": Param(os.environ.get("RMQ_RECON_EXPORT_COMMAND", "rmq-recon"), type="string",
                                description="the rmq-recon command on the broker hosts"),
    },
)
def rocketmq_snapshot() -> None:
    @task
    @fail_fast
    def snapshot_time(params: dict | None = None) -> str:
        return remote_export.snapshot_stamp(params["snapshot_ts"])

    @task
    @fail_fast
    def broker_hosts(params: dict | None = None) -> list[dict]:
        return remote_export.hosts(params["export_hosts"])

    @task(map_index_template="{{ task.op_kwargs['host']['cluster'] }}/{{ task.op_kwargs['host']['broker'] }}")
    @fail_fast
    def export(host: dict, stamp: str, params: dict | None = None) -> dict:
        return remote_export.run(host, params["landing"], stamp, default_command=params["export_command"])

    @task(trigger_rule="one_failed")
    def an_export_failed() -> None:
        """Fails the run when an export failed; the ingest took the other hosts' folders all the same."""
        raise AirflowFailException("an export on a broker host failed: see the export task's log for that host")

    @task(trigger_rule="all_done")
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

    exports = export.partial(stamp=snapshot_time()).expand(host=broker_hosts())
    summary = ingest()
    exports >> [summary, an_export_failed()]
    validate_silver(summary)
    landed_anything(summary) >> publish()


rocketmq_snapshot()
