"""gold/reconcile_runs: the reconcile ledger: one row per completed run, written after its gold rows and report folder.

Readers of the gold tables take a run's rows at the versions its row records, so a run being re-run (or killed half
way through its five gold tables) never shows a mix: the row of the last completed attempt still points at its
rows. ``ingest_run_id`` is the ingest whose state the run read; ``kind`` what started it (scheduled, manual,
backfill, ad-hoc, cli).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "reconcile_runs"
SCHEMA = StructType(
    [
        StructField("run_id", StringType(), True),
        StructField("as_of", TimestampType(), True),
        StructField("completed_at", TimestampType(), True),
        StructField("report_dir", StringType(), True),
        StructField("ingest_run_id", StringType(), True),
        StructField("rows", MapType(StringType(), LongType()), True),
        StructField("table_versions", MapType(StringType(), LongType()), True),
        StructField("summary", StringType(), True),
        StructField("kind", StringType(), True),  # jobs.reconcile.reconcile.RUN_KINDS; null in rows before it
        # the newest snapshot the run judged (a scheduled run's as_of is its logical date, later than its snapshots)
        StructField("newest_snapshot", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('run_id',)
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
