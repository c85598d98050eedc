"""silver/pop_checkpoints: every POP checkpoint (CK) message the commitlogs hold, one row per stored copy.

A POP consumer's committed offset means *popped* (rocketmq5.md §2.1): what it consumed is in the checkpoints and
acks the broker stores as messages, first in ``rmq_sys_wheel_timer`` and again in ``rmq_sys_REVIVE_LOG_<cluster>``
when the timer fires (jobs.formats.pop). Each stored copy is a row, keyed like silver/messages by the commitlog
position of the message that carries it, so a record decoded twice is loaded once; the rules count a checkpoint once
by its identity (topic, queue_id, start_offset, consumer_group, pop_time, broker_name), however many copies.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "pop_checkpoints"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),  # the broker whose commitlog holds the copy
        StructField("physical_offset", LongType(), True),
        StructField("stored_topic", StringType(), True),  # rmq_sys_wheel_timer or the revive topic
        StructField("store_ts", TimestampType(), True),
        StructField("topic", StringType(), True),  # the popped queue (t, q)
        StructField("queue_id", IntegerType(), True),
        StructField("start_offset", LongType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("pop_time", LongType(), True),  # epoch ms
        StructField("broker_name", StringType(), True),  # bn: the broker of the popped queue
        StructField("invisible_time", LongType(), True),
        StructField("bitmap", IntegerType(), True),
        StructField("num", IntegerType(), True),
        StructField("revive_offset", LongType(), True),
        StructField("deltas", ArrayType(IntegerType()), True),  # offsets - start_offset; null in old CKs
        StructField("reput_times", StringType(), True),
        StructField("revive_time", LongType(), True),  # pop_time + invisible_time, epoch ms
        StructField("first_snapshot_ts", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'physical_offset')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields]

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
