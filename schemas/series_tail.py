"""gold/series_tail: the part of each key's offset-series tail that gold/status_samples does not hold (rule 24).

A key's tail is its last ``max(window, 48)`` snapshots with known bounds and its newest snapshot: every series answer
a later run can need of the snapshots at or before this run's time (latest, newest, the status window, the samples,
the last committed offset a decrease is measured from). gold/status_samples holds the known ones already; this table
holds the rest: one row per (run, group, client, queue) whose newest snapshot has unknown bounds (a snapshot without
``consumequeue/``), usually none. The next run reads both instead of the lake's history of offsets
(jobs.reconcile.offset_state).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "series_tail"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("min_offset", LongType(), True),
        StructField("max_offset", LongType(), True),
        StructField("bounds_known", BooleanType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'snapshot_ts',
                        'run_id')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
