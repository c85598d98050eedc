"""silver/delay_offsets: delayOffset.json per snapshot: how far each SCHEDULE_TOPIC_XXXX level has been delivered."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "delay_offsets"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("delay_level", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("source_file", StringType(), True),
        StructField("used_backup", BooleanType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'snapshot_ts', 'delay_level')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY)
