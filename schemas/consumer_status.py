"""gold/consumer_status: Burrow-style status per group and queue at the latest snapshot (spec §4 Consumer status)."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "consumer_status"
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
        StructField("lag", LongType(), True),
        StructField("consumable_lag", LongType(), True),
        StructField("time_lag_s", LongType(), True),
        StructField("status", StringType(), True),
        StructField("run_id", StringType(), True),
        # spec §5 new columns, after the listed ones: the (group, topic)'s consume mode (spec §4.1), POP in flight
        StructField("consume_mode", StringType(), True),
        StructField("inflight", LongType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'run_id')
PARTITION_BY: tuple[str, ...] = ()

# The report file's columns (spec §5), in order: the gold table minus run_id.
REPORT_COLUMNS: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'snapshot_ts', 'committed_offset', 'min_offset', 'max_offset', 'lag', 'consumable_lag', 'time_lag_s', 'status', 'consume_mode', 'inflight']
SORT_KEY: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id']

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
