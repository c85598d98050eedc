"""bronze/segments: How far each commitlog segment has been decoded: the state that makes commitlog ingest incremental."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "segments"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("segment", StringType(), True),
        StructField("start_offset", LongType(), True),
        StructField("decoded_to", LongType(), True),
        StructField("segment_size", LongType(), True),
        StructField("complete", BooleanType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("updated_at", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'segment')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
