"""silver/pop_acks: every POP ack (``ack``) and batch ack (``bAck``) message the commitlogs hold, one row per copy.

An ack names its checkpoint by (topic, queue_id, start_offset, consumer_group, pop_time, broker_name) and the
offsets it acks (``ao``, or ``aol`` for a batch ack); like a checkpoint it is stored first in the timer topic and
again in the revive topic (jobs.formats.pop). The rules take an ack's first stored copy: an offset acked before its
checkpoint's revive time was consumed in time (reconciliation spec §4.1). Keyed by the carrying message's position.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "pop_acks"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("physical_offset", LongType(), True),
        StructField("stored_topic", StringType(), True),
        StructField("store_ts", TimestampType(), True),
        StructField("topic", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("start_offset", LongType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("pop_time", LongType(), True),
        StructField("broker_name", StringType(), True),
        StructField("ack_offsets", ArrayType(LongType()), True),
        StructField("kind", StringType(), True),  # ack or bAck
        StructField("first_snapshot_ts", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'physical_offset')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields]

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
