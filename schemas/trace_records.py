"""bronze/trace_records: every record decoded from RMQ_SYS_TRACE_TOPIC message bodies (formats §7).

Kept so that a SubBefore and its SubAfter can be paired across ingest runs (they may land in different
snapshots); silver/deliveries is derived from this table.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "trace_records"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("physical_offset", LongType(), True),
        StructField("record_index", IntegerType(), True),
        StructField("client_host", StringType(), True),
        StructField("type", StringType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("group", StringType(), True),
        StructField("request_id", StringType(), True),
        StructField("msg_id", StringType(), True),
        StructField("retry_times", IntegerType(), True),
        StructField("keys", StringType(), True),
        StructField("cost_time_ms", LongType(), True),
        StructField("success", BooleanType(), True),
        StructField("context_code", IntegerType(), True),
        StructField("topic", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("store_host", StringType(), True),
        StructField("offset_msg_id", StringType(), True),
        StructField("msg_type", IntegerType(), True),
        # the first snapshot whose commitlog held the record: what an as-of run may see (docs/semantics.md 0)
        StructField("first_snapshot_ts", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ("cluster", "broker", "physical_offset", "record_index")
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
