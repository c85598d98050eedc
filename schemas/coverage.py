"""gold/coverage: what a run could not check exactly, and why (spec §4.2, §5 coverage.csv).

One row per queue, topic, group or broker the rules cannot judge as they judge a 4.x concurrent consumer on a JSON
broker: the report says so instead of guessing (a compaction topic has no EXPIRED, BELOW_MIN or SKIPPED; a queue
whose consume queue the snapshot lacks has unknown bounds). Fields wider than the row's scope are empty
(``queue_id`` null).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "coverage"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("reason", StringType(), True),
        StructField("detail", StringType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'topic', 'consumer_group', 'client_id', 'queue_id', 'reason', 'run_id')
PARTITION_BY: tuple[str, ...] = ()

REPORT_COLUMNS: list[str] = ['cluster', 'broker', 'topic', 'consumer_group', 'client_id', 'queue_id', 'reason',
                             'detail']
SORT_KEY: list[str] = ['cluster', 'broker', 'topic', 'consumer_group', 'client_id', 'queue_id', 'reason']
# the reasons (spec §4.2); informational ones change no finding
REASONS = ("NO_CONSUME_QUEUE", "BATCH_CQ", "TIERED", "COMPACTION_TOPIC", "STATIC_TOPIC", "DLEDGER", "LMQ",
           "NO_TRACE", "STALE_JSON_IGNORED")

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY, nullable_key=("queue_id",))
