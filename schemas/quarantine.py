"""bronze/quarantine: Input that could not be used, with a reason naming the file and the byte/record position."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "quarantine"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("source_path", StringType(), True),
        StructField("position", LongType(), True),
        StructField("reason", StringType(), True),
        StructField("detected_at", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'source_path', 'position')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
