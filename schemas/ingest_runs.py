"""bronze/ingest_runs: the ingest ledger: one row per completed ingest run, written last.

A row says "everything this run loaded is in, and these are the versions it left": a reconcile reads every table at
the versions of the newest row (one consistent state, never an ingest half done), and the next ingest rebuilds a
derived table whenever its inputs moved since the newest row (the rows of a run that died are then taken in).
``table_versions``: the Delta version of each table, or for Parquet tables a fingerprint of their data files.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "ingest_runs"
SCHEMA = StructType(
    [
        StructField("run_id", StringType(), True),
        StructField("started_at", TimestampType(), True),
        StructField("completed_at", TimestampType(), True),
        StructField("landing", StringType(), True),
        StructField("snapshots", LongType(), True),
        StructField("files", LongType(), True),
        StructField("quarantined", LongType(), True),
        StructField("changed_rows", MapType(StringType(), LongType()), True),
        StructField("table_versions", MapType(StringType(), LongType()), True),
    ]
)
KEY: tuple[str, ...] = ('run_id',)
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
