"""silver/topic_configs: topics.json per snapshot."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "topic_configs"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("topic", StringType(), True),
        StructField("read_queue_nums", IntegerType(), True),
        StructField("write_queue_nums", IntegerType(), True),
        StructField("perm", IntegerType(), True),
        StructField("topic_sys_flag", IntegerType(), True),
        StructField("order", BooleanType(), True),
        # TopicAttributes (5.x): SimpleCQ or BatchCQ; DELETE or COMPACTION (spec §4.2); defaults when absent
        StructField("queue_type", StringType(), True),
        StructField("cleanup_policy", StringType(), True),
        StructField("source_file", StringType(), True),
        StructField("used_backup", BooleanType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'topic')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
