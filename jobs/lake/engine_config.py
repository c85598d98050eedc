"""What the DAG boundary hands the jobs: the engine (from an Airflow connection) and the as-of time."""
from __future__ import annotations

import datetime as dt
import os
from typing import Any

# Sail's log: warnings, but not the one its actor system writes on every orderly shutdown ("aborting N task(s) for
# SessionManagerActor"), which Airflow showed as a red ERROR line in every task log. (Here, not in _spark: the CLI
# sets it before any command, and the exporter on a broker host imports no pyspark.)
RUST_LOG_DEFAULT = "warn,sail_common::actor=error"


def no_huge_pages() -> bool:
    """Turn transparent huge pages off for this process (``prctl(PR_SET_THP_DISABLE)``, Linux; inherited by its
    children); ``RMQ_RECON_HUGE_PAGES=1`` keeps them (and turns them on again in a process whose parent turned them
    off). Returns whether they are off.

    Sail's and Arrow's allocators (mimalloc, set to hand freed memory back at once: ``_spark.MIMALLOC_DEFAULTS``) and
    numpy fault fresh memory in all the time. Where the kernel backs it with 2 MiB pages (the allocators ask for them;
    a machine set to ``always`` gives them anyway), each fault zeroes the whole page: a fifth of the CPU of bench_export's
    ingest went to zeroing pages (``perf``: ``clear_page_erms`` under ``do_huge_pmd_anonymous_page``). Off, its system
    time went 13.6-15.4 -> 10.0-12.0 s and its wall time 30.9-33.2 -> 28.8-30.2 s (four runs each, alternately), with
    the same peak RSS."""
    keep = os.environ.get("RMQ_RECON_HUGE_PAGES") == "1"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        # PR_SET_THP_DISABLE (Linux 3.15+); a child inherits it, so keeping them turns them on again
        return libc.prctl(41, 0 if keep else 1, 0, 0, 0) == 0 and not keep
    except (OSError, AttributeError):  # not Linux: nothing to turn off
        return False


def apply_spark_connection(conn_id: str | None) -> None:
    """Point the jobs at the Spark Connect server of an Airflow ``spark_connect`` connection (none: embedded Sail)."""
    if not conn_id:
        return
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    os.environ["SPARK_REMOTE"] = SparkConnectHook(conn_id=conn_id).get_connection_url()
    os.environ["RMQ_RECON_ENGINE"] = "connect"


def as_of_for(logical_date: Any) -> str | None:
    """The reconciliation time of a scheduled or backfilled run: its logical date (None for manual runs)."""
    if logical_date is None:
        return None
    if isinstance(logical_date, dt.datetime):
        ts = logical_date if logical_date.tzinfo else logical_date.replace(tzinfo=dt.timezone.utc)
        return ts.astimezone(dt.timezone.utc).isoformat()
    return str(logical_date)


def require_marker_default() -> bool:
    """Take only snapshot folders with the sync job's marker: RMQ_RECON_REQUIRE_MARKER 1, true or yes (any case).
    One reading for the CLI and the snapshot DAG's Param (the DAG read only "1" and "true")."""
    return os.environ.get("RMQ_RECON_REQUIRE_MARKER", "0").strip().lower() in ("1", "true", "yes")


def default_lake() -> str:
    """The lake the DAGs serve when a run names none: ``RMQ_RECON_LAKE`` (``infra/airflow.sh`` exports it absolute),
    else ``var/lake``. The reconcile DAG waits for this lake's silver Assets."""
    return os.environ.get("RMQ_RECON_LAKE", "var/lake")


def silver_assets(lake: str) -> list[Any]:
    """The Airflow Assets an ingest into ``lake`` updates (those the reconcile DAG of that lake waits for)."""
    from schemas import consumer_offsets, deliveries, messages, queue_bounds, subscription_groups, topic_configs

    return [t.TABLE.asset(lake) for t in (consumer_offsets, queue_bounds, messages, deliveries, subscription_groups,
                                          topic_configs)]
