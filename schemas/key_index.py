"""silver/key_index: where each stored copy of a UNIQ_KEY lies, by a hash of the key (issue 39).

The look-ups by UNIQ_KEY (the original copies of traced keys, the old copies of recently delivered and DLQ keys) join
on ``key_hash``, a long, instead of the key's 32-character string over every record: the index is five narrow
columns, so a look-up reads a fraction of what the key column of silver/messages costs, and each run's file is sorted
by the hash on a Spark cluster (Sail 0.7 writes it unsorted: jobs.lake._delta.clustered). The hits are then read from
silver/messages by position (``jobs.lake.lookups``), which also drops the rare rows whose hash matched another key. Derived from silver/messages by the ingest (``jobs.ingest.key_index``);
a message without a UNIQ_KEY has no row."""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "key_index"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        # Spark's xxhash64 (seed 42) of the UNIQ_KEY: the same on Sail and on a Spark cluster
        StructField("key_hash", LongType(), True),
        StructField("broker", StringType(), True),
        StructField("physical_offset", LongType(), True),
        StructField("queue_offset", LongType(), True),
    ]
)
# a copy is a silver/messages row: its key
KEY: tuple[str, ...] = ('cluster', 'broker', 'physical_offset', 'queue_offset')
PARTITION_BY: tuple[str, ...] = ()
CLUSTER_BY: tuple[str, ...] = ('cluster', 'key_hash')

TABLE = Table("silver", NAME, SCHEMA, KEY, PARTITION_BY, CLUSTER_BY)
