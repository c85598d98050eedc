"""gold/audit_hours: per run, group, client, queue and store hour: the offsets stored then and how many were delivered.

The hourly audit of the dashboard starts here. In a consume queue offsets grow with store time, so the messages
stored in one hour are one offset interval ``[first_offset, last_offset]`` (``stored`` of them); the dashboard
intersects it with the run's committed offset and its duplicated and unconsumed ranges. ``delivered`` counts the
distinct offsets of the interval with a trace delivery by the group (by the client, for a broadcast group).
Only the last 72 store hours up to the run's as-of time: bounded by queues and hours, never by messages.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "audit_hours"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("hour", TimestampType(), True),
        StructField("first_offset", LongType(), True),
        StructField("last_offset", LongType(), True),
        StructField("stored", LongType(), True),
        StructField("delivered", LongType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'hour', 'run_id')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
