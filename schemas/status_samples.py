"""gold/status_samples: the snapshots behind each queue's status and timeline (dashboard: "why this status").

One row per (run, group, client, queue, snapshot with known bounds) for the last ``max(window, 48)`` such
snapshots of each key as of the run: the committed offset, Min, Max and lag of each sample, and whether the
sample is in the status window (the ``window`` newest ones, the rows :func:`jobs.rules.status.window_status` judged).
Bounded per key, so the table grows with queues and runs, never with messages.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "status_samples"
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
        StructField("lag", LongType(), True),
        StructField("in_window", BooleanType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'snapshot_ts',
                        'run_id')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
