"""silver/order_info: consumerOrderInfo.json per snapshot (5.x ``ConsumerOrderInfoManager``): for each orderly POP
queue (a FIFO group's gRPC client) the batch the broker handed out last and how often each offset of it was
consumed. Landed as the broker wrote it; no rule reads it yet (docs/semantics.md rule 21d)."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "order_info"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("pop_time", LongType(), True),  # epoch ms of the pop (popTime)
        StructField("invisible_time", LongType(), True),  # i, ms (null: not written)
        StructField("offsets", ArrayType(LongType()), True),  # o: the batch's offsets
        StructField("next_visible_ms", MapType(LongType(), LongType()), True),  # ot: offset -> next visible time
        StructField("consumed_counts", MapType(LongType(), IntegerType()), True),  # oc: offset -> times consumed
        StructField("last_consume_ts", LongType(), True),  # l, epoch ms
        StructField("commit_offset_bit", LongType(), True),  # cm: bit i set = offsets[i] committed
        StructField("attempt_id", StringType(), True),  # a
        StructField("source_file", StringType(), True),
        StructField("used_backup", BooleanType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'consumer_group', 'topic', 'queue_id')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
