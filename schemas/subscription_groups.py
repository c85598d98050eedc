"""silver/subscription_groups: subscriptionGroup.json per snapshot: the retry/DLQ settings of each group."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "subscription_groups"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("retry_max_times", IntegerType(), True),
        StructField("retry_queue_nums", IntegerType(), True),
        StructField("consume_enable", BooleanType(), True),
        StructField("consume_broadcast_enable", BooleanType(), True),
        StructField("consume_message_orderly", BooleanType(), True),
        StructField("consume_timeout_minute", IntegerType(), True),
        StructField("group_retry_policy", StringType(), True),
        StructField("source_file", StringType(), True),
        StructField("used_backup", BooleanType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'consumer_group')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
