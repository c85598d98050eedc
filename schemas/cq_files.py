"""bronze/cq_files: what ingest knows of each consume queue file of a broker's newest snapshot, so that a file the
next snapshot holds unchanged is not read again (issue 12: a broker keeps days of CQ files; only the last file of
each queue changes).

One row per (cluster, broker, path inside the snapshot folder). A file is unchanged when its fingerprint equals the
row's: the S3 ETag and size when the listing gives an ETag, else size and modification time (snapshot jobs such as
``rsync --link-dest`` or ``cp -p`` keep both for a file they did not copy again). The rest summarises its valid
entries exactly enough for the queue bounds and the quarantine to be computed without its bytes, except where the
snapshot's commitlog bounds fall inside its commit offsets, or the records they span differ from those its
dangling entries were found against (then ingest reads it). ``problems``: the file's size is
not a multiple of 20 or its entries are out of commit-offset order; such a file is always read. Rewritten per broker
by every ingest that takes a snapshot of it, in the same run as the other tables; ``ingest --retake`` ignores it.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "cq_files"
SCHEMA = StructType(
    [
        StructField("cluster", StringType(), True),
        StructField("broker", StringType(), True),
        StructField("rel", StringType(), True),  # e.g. store/consumequeue/<topic>/<queueId>/<start byte>
        StructField("size", LongType(), True),
        StructField("mtime", DoubleType(), True),
        StructField("etag", StringType(), True),  # "" when the listing gives none (local files)
        StructField("sha256", StringType(), True),
        StructField("entries", LongType(), True),  # valid entries (up to the first invalid one)
        StructField("full", BooleanType(), True),  # entries == size // 20
        StructField("first_commit_offset", LongType(), True),  # null when there are no valid entries
        StructField("last_commit_offset", LongType(), True),
        StructField("problems", BooleanType(), True),
        # The entries that point at no record (dangling) as the snapshot that read the file found them, with what
        # named the records its commit offsets spanned then (their number, first and last offset); null when not
        # checked over all its entries.
        StructField("records_digest", StringType(), True),
        StructField("dangling", StringType(), True),  # JSON [[byte position, reason], ...]
    ]
)
KEY: tuple[str, ...] = ('cluster', 'broker', 'rel')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("bronze", NAME, SCHEMA, KEY, PARTITION_BY)
