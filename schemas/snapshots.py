"""bronze/snapshots: the snapshot ledger: every snapshot folder taken, with a digest of its file listing.

An ingest takes a snapshot folder when it is complete (its marker file, or no file changed for the settle time)
and its listing differs from the one recorded here: a new folder, or files that arrived late into a folder
already taken. A landing zone with nothing new costs a listing and this table's few columns, nothing else.
Written after the snapshot's rows, before the run's bronze/ingest_runs row.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "snapshots"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),  # "" for the clients' folder
        StructField("snapshot_ts", TimestampType(), True),
        StructField("folder", StringType(), True),
        StructField("files", LongType(), True),
        StructField("bytes", LongType(), True),
        StructField("listing_digest", StringType(), True),
        StructField("completed_by", StringType(), True),  # "marker" or "settle"
        # the files spec §3 expects that the folder lacks (jobs.ingest.landing.missing_files), paths in the folder
        # joined by ", "; "" when none: "missing files are reported, never fatal"
        StructField("missing", StringType(), True),
        StructField("ingested_at", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
