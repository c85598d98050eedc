"""gold/offset_decreases: every decrease of a committed offset between consecutive snapshots, as of a run (rules 3, 11).

The REWIND rows and the REWIND cause of a duplicated offset come from these. A run writes all of them (the previous
run's plus those after its time), so the next run reads them instead of every snapshot since the lake began. A
decrease is rare (a reset, a rewind): the table grows with runs and decreases, never with snapshots or messages.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "offset_decreases"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("consumer_group", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("queue_id", IntegerType(), True),
        StructField("prev_ts", TimestampType(), True),
        StructField("prev_offset", LongType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("run_id", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'consumer_group', 'client_id', 'topic', 'broker', 'queue_id', 'snapshot_ts',
                        'run_id')
PARTITION_BY: tuple[str, ...] = ()
COLUMNS: list[str] = [f.name for f in SCHEMA.fields if f.name != "run_id"]

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
