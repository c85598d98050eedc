"""Reconcile RocketMQ consumer progress and write the reports.

Runs when the snapshot DAG updates the silver tables (and hourly, so that backfills have intervals):
replays the min-offset commits, finds duplicated and unconsumed offset ranges, offset corrections and DLQ
candidates, writes the gold tables and the report folder, then checks the gold tables and rebuilds the dashboard
(``<reports>/dashboard/``, also after a failed check: it shows the failures). A re-run of a run (its task
cleared) replaces that run's rows and files with the same, nothing else; Airflow gives a new run of the same logical
date (``airflow dags test`` again) a new run id, hence its own report folder and rows.

After every run, whatever its outcome, ``alert`` tells people what changed since the previous run (webhook and
email, through the Airflow connections ``rmq_recon_webhook`` / ``rmq_recon_smtp``; once per run) and
``push_metrics`` pushes the run's figures to a Prometheus Pushgateway (Param ``pushgateway_url``). Both are teardown
tasks: they never decide the run's state.
"""
from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from jobs.lake import engine_config
from jobs.problems import fail_fast
from schemas import consumer_offsets, queue_bounds

# Both silver tables of this deployment's lake updated (the snapshot DAG names the Assets by the lake it ingested).
GOLD_READY = (consumer_offsets.TABLE.asset(engine_config.default_lake())
              & queue_bounds.TABLE.asset(engine_config.default_lake()))


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
        "lake": Param(engine_config.default_lake(), type="string"),
        "reports": Param(os.environ.get("RMQ_RECON_REPORTS", "var/reports"), type="string"),
        "as_of": Param(None, type=["null", "string"], description="ISO-8601 UTC; default: the run's logical date"),
        "window": Param(10, type="integer", minimum=2, description="snapshots per queue for the status"),
        "groups": Param(None, type=["null", "array"], description="consumer groups (default: all)"),
        "full": Param(False, type="boolean",
                      description="recompute everything (investigation, backfill); default: carry the previous "
                                  "run's final rows beyond the horizon"),
        "retention_h": Param(float(os.environ.get("RMQ_RECON_RETENTION_H", "72")), type="number", exclusiveMinimum=0,
                             description="the horizon in hours: the broker's fileReservedTime"),
        "spark_conn_id": Param(None, type=["null", "string"], description="Airflow spark_connect connection id"),
        "webhook_conn_id": Param("rmq_recon_webhook", type="string", description="HTTP connection of the webhook"),
        "smtp_conn_id": Param("rmq_recon_smtp", type="string", description="SMTP connection of the alert emails"),
        "dashboard_url": Param(os.environ.get("RMQ_RECON_DASHBOARD_URL", ""), type="string",
                               description="where the report folders are served (alert links); empty: the folder"),
        "pushgateway_url": Param(os.environ.get("RMQ_RECON_PUSHGATEWAY_URL", ""), type="string",
                                 description="Prometheus Pushgateway for the run's metrics; empty: off"),
    },
)
def rocketmq_reconcile() -> None:
    @task
    @fail_fast
    def reconcile(params: dict | None = None, run_id: str | None = None, logical_date=None,  # noqa: ANN001
                  dag_run=None) -> dict:  # noqa: ANN001
        from jobs.reconcile import reconcile

        engine_config.apply_spark_connection(params["spark_conn_id"])
        as_of = params["as_of"] or engine_config.as_of_for(logical_date)
        return reconcile.run(params["lake"], params["reports"], as_of=as_of, run_id=run_id,
                             window=params["window"], groups=params["groups"], full=params["full"],
                             retention_h=params["retention_h"],
                             kind=reconcile.run_kind(getattr(dag_run, "run_type", None), params))

    @task
    @fail_fast
    def validate_gold(summary: dict, params: dict | None = None) -> dict:
        from jobs.ops import quality

        return quality.validate_layer(params["lake"], "gold", run_id=summary["run_id"])

    @task
    @fail_fast
    def dashboard(params: dict | None = None) -> dict:
        from jobs.ops import dashboard

        return dashboard.run(params["lake"], params["reports"])

    @task
    def alert(summary: dict | None, quality: dict | None, params: dict | None = None,
              **context) -> dict | None:  # noqa: ANN003
        from jobs.ops import alerts

        return alerts.after_run(summary, quality, lake=params["lake"], webhook_conn_id=params["webhook_conn_id"],
                                smtp_conn_id=params["smtp_conn_id"], dashboard_base_url=params["dashboard_url"],
                                context=context)

    @task
    def push_metrics(summary: dict | None, quality: dict | None, params: dict | None = None) -> dict | None:
        from jobs.ops import metrics

        return metrics.after_run(summary, quality, lake=params["lake"], url=params["pushgateway_url"])

    summary = reconcile()
    quality = validate_gold(summary)
    site = dashboard().as_teardown()
    quality >> site
    site >> alert(summary, quality).as_teardown()
    site >> push_metrics(summary, quality).as_teardown()


rocketmq_reconcile()
