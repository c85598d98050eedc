"""gold/dlq_candidates: Messages that need a human (spec §4 DLQ candidates)."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "dlq_candidates"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("queue_offset", LongType(), True),
        StructField("uniq_key", StringType(), True),
        StructField("keys", StringType(), True),
        StructField("reconsume_times", IntegerType(), True),
        StructField("max_reconsume_times", IntegerType(), True),
        StructField("reason", StringType(), True),
        StructField("last_attempt_ts", TimestampType(), True),
        StructField("dlq_eta_ts", TimestampType(), True),
        StructField("run_id", StringType(), True),
        StructField("producer_group", StringType(), True),  # spec §5 new columns: after the listed ones
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'queue_offset', 'uniq_key', 'reason', 'run_id')
PARTITION_BY: tuple[str, ...] = ()

# The report file's columns (spec §5), in order: the gold table minus run_id.
REPORT_COLUMNS: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'queue_offset', 'uniq_key', 'keys', 'reconsume_times', 'max_reconsume_times', 'reason', 'last_attempt_ts', 'dlq_eta_ts', 'producer_group']
SORT_KEY: list[str] = ['cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'queue_offset', 'uniq_key', 'reason']

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
