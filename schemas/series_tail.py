"""gold/series_tail: what a reconcile run leaves of each key's offset series for the next run to carry (rule 24).

One row per (run, group, client, queue, snapshot) for each key's last ``max(window, 48)`` snapshots with known bounds
and its newest snapshot (bounds known or not), as of the run: every series answer a later run can need of the
snapshots at or before this run's time (latest, newest, the status window, the samples, the last committed offset
a decrease is measured from). Bounded per key, so the next run reads a few rows per key, not the lake's history of
offsets (jobs.reconcile.offset_state).
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
