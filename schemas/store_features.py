"""silver/store_features: what a broker snapshot's files say about how the broker stores its queues (spec §4.2).

A row only where the store is not the 4.x default the rules were written for: a compaction topic
(``cleanup.policy=COMPACTION``), a batch consume queue topic (``queue.type=BatchCQ`` or ``store/batchconsumequeue/``),
tiered storage (``config/tieredStoreMetadata.json``), RocksDB config beside a stale JSON file. A fleet without these
features has no rows, so reading the table whole costs a run nothing; the reconcile turns them into gold/coverage
rows and, for compaction topics, leaves out the findings the files cannot support.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "store_features"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("topic", StringType(), True),  # "" for a broker-wide feature
        StructField("feature", StringType(), True),  # a gold/coverage reason: COMPACTION_TOPIC, BATCH_CQ, TIERED...
        StructField("detail", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'topic', 'feature')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
