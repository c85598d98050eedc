"""silver/messages: Commitlog message metadata (no bodies): one row per stored message. A record is one message,
except an ``INNER_BATCH`` record (a batch sent to a BatchCQ topic): one row per inner message, each at its own queue
offset with the record's physical offset (jobs.ingest.decode_tasks._unwrapped)."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "messages"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("physical_offset", LongType(), True),
        StructField("topic", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("queue_offset", LongType(), True),
        StructField("store_ts", TimestampType(), True),
        StructField("born_ts", TimestampType(), True),
        StructField("uniq_key", StringType(), True),
        StructField("keys", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("reconsume_times", IntegerType(), True),
        StructField("properties", MapType(StringType(), StringType()), True),
        StructField("size", IntegerType(), True),
        StructField("sys_flag", IntegerType(), True),
        StructField("born_host", StringType(), True),
        StructField("store_host", StringType(), True),
        StructField("offset_msg_id", StringType(), True),
        StructField("segment", StringType(), True),
        # The snapshot whose commitlog first held the record: an as-of run sees only records of snapshots <= as-of.
        StructField("first_snapshot_ts", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'physical_offset', 'queue_offset')
PARTITION_BY: tuple[str, ...] = ()

# The ingest's anti-join and a reconcile's reads go by cluster, broker and commitlog position (issue 13.3).
CLUSTER_BY: tuple[str, ...] = ("cluster", "broker", "physical_offset")

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY, CLUSTER_BY)
