"""gold/held_queues: since when each queue is known to have held messages, as of a run; what the next run carries.

Spec §4.2 NO_CONSUME_QUEUE: a snapshot with no consume queue data for q gives unknown bounds only when q held
messages by then (its committed offset above 0, an earlier snapshot with entries, a record of q); otherwise q is the
empty queue the broker reports, Min = Max = 0. The evidence is in every snapshot's bounds and every record, which a
scheduled run does not read again: a run stores each queue's earliest such time (jobs.rules.snapshots.held_queues)
and the next one adds what is new. One row per (run, queue).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "held_queues"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("held_from", TimestampType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('run_id', 'cluster', 'broker', 'topic', 'queue_id')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
