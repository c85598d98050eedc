"""gold/alerts_sent: one row per (reconcile run, channel) whose alert was delivered, written after the send.

Why: a re-run of a run (a cleared task, a retried DAG run) must not page anyone twice. The alert job sends a
channel's message only when no row of ``(run_id, channel)`` exists, and writes the row once the channel accepted
it, so a channel that failed is retried alone. ``previous_run_id`` is the run the changes were measured against;
``message`` is the text that was sent (for the record; it never holds connection secrets).
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "alerts_sent"
SCHEMA = StructType(
    [
        StructField("run_id", StringType(), True),
        StructField("channel", StringType(), True),
        StructField("previous_run_id", StringType(), True),
        StructField("as_of", TimestampType(), True),
        StructField("sent_at", TimestampType(), True),
        StructField("message", StringType(), True),
    ]
)
KEY: tuple[str, ...] = ('run_id', 'channel')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
