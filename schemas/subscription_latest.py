"""gold/subscription_latest: each (group, broker)'s newest retryMaxTimes as of the run, what the next run carries.

The DLQ rules read a group's ``retryMaxTimes`` from each broker's latest subscriptionGroup.json at or before a time
(``jobs.rules.dlq.retry_max_times``); silver/subscription_groups gains a row per group and broker every snapshot, so
reading it whole costs a scheduled run more every day. A run stores, per (cluster, group, broker), the latest row with
a retryMaxTimes at or before its as-of time; the next run reads these and the silver rows after that time only
(jobs.reconcile.offset_state), which give every answer the whole table gives at or after this run's time.
One row per (run, cluster, group, broker).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "subscription_latest"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("retry_max_times", IntegerType(), True),
        StructField("run_id", StringType(), True),
        StructField("consume_message_orderly", BooleanType(), True),  # the FIFO flag of that row (spec §4.1)
    ]
)
KEY: tuple[str, ...] = ('run_id', 'cluster', 'consumer_group', 'broker')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
