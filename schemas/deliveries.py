"""silver/deliveries: Consumer deliveries from message trace: SubBefore paired with SubAfter, mapped to the original message."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "deliveries"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("request_id", StringType(), True),
        StructField("uniq_key", StringType(), True),
        StructField("retry_times", IntegerType(), True),
        StructField("start_ts", TimestampType(), True),
        StructField("end_ts", TimestampType(), True),
        StructField("success", BooleanType(), True),
        StructField("context_code", IntegerType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("queue_offset", LongType(), True),
        StructField("client_host", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("cost_time_ms", LongType(), True),
        StructField("trace_broker", StringType(), True),
        StructField("trace_physical_offset", LongType(), True),
        # the first snapshots holding the SubBefore and the SubAfter records (an as-of run sees only earlier ones)
        StructField("first_snapshot_ts", TimestampType(), True),
        StructField("after_snapshot_ts", TimestampType(), True),
        # a delivery without a SubAfter that cleanExpireMsg sent back (formats §3: the client sends a message consumed
        # for longer than consumeTimeout back to %RETRY%G and removes it from its ProcessQueue): the store time of
        # that copy, when it left the ProcessQueue (docs/semantics.md rule 12a), and the snapshot that first held it
        StructField("sent_back_ts", TimestampType(), True),
        StructField("sent_back_snapshot_ts", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'request_id')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
