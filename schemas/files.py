"""bronze/files: every landing-zone file seen, with its bytes for JSON files (raw layer: replayable).

``sha256`` is the digest of the bytes read in this ingest, ``[read_from, read_to)``: the whole file for JSON and
consumequeue files; for a commitlog segment only the part decoded for the first time (a full segment seen
again is not read at all, and its row has ``read_from == read_to``). A full segment decoded in pieces
(``RMQ_RECON_DECODE_SPLIT_MB``) records the sha256 of its pieces' sha256 digests (hex, in order) instead. An
export's consume queue file (pieces of its broker's export packs, ``jobs.export.queues``) records the sha256 of its
size and pieces (``jobs.ingest.bounds._pieces_sha``): packs are never rewritten, so equal pieces are equal bytes, and
a copy grown by new pieces is read from where the earlier copy's entries ended, not hashed whole.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "files"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("snapshot_ts", TimestampType(), True),
        StructField("source_path", StringType(), True),
        StructField("file_kind", StringType(), True),
        StructField("size", LongType(), True),
        StructField("sha256", StringType(), True),
        StructField("content", BinaryType(), True),
        StructField("used_backup", BooleanType(), True),
        StructField("read_from", LongType(), True),
        StructField("read_to", LongType(), True),
        StructField("ingested_at", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('cluster', 'source_path', 'sha256')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
