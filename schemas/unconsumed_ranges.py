"""gold/unconsumed_ranges: Offsets never consumed (spec §4 Unconsumed)."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "unconsumed_ranges"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("start_offset", LongType(), True),
        StructField("end_offset", LongType(), True),
        StructField("messages", LongType(), True),
        StructField("kind", StringType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'start_offset', 'kind', 'run_id')
PARTITION_BY: tuple[str, ...] = ()

# The report file's columns (spec §5), in order: the gold table minus run_id.
REPORT_COLUMNS: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'start_offset', 'end_offset', 'messages', 'kind']
SORT_KEY: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'start_offset', 'kind']

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
