"""silver/consumer_offsets: Committed offsets per snapshot: broker consumerOffset.json rows and broadcast clients' offsets.json rows."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "consumer_offsets"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("client_id", StringType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("is_retry_topic", BooleanType(), True),
        StructField("source_file", StringType(), True),
        StructField("used_backup", BooleanType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'consumer_group', 'topic', 'queue_id', 'client_id')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
