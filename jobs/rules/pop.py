"""POP consumption (reconciliation spec §4.1 POP part; rocketmq5.md §2): what was popped, acked in time, acked late,
and is in flight, from silver/pop_checkpoints and silver/pop_acks.

A POP group's committed offset means *popped* (the broker commits a batch's next offset as soon as it stores the
checkpoint), so its consumption is read from the checkpoints and acks, which the broker stores as messages:
* a **checkpoint** is identified by (topic, queue_id, start_offset, consumer_group, pop_time, broker_name) and
  counted once however many copies the commitlogs hold (its timer copy, its revive copy); it covers the offsets
  ``start_offset + deltas[i]``, or ``start_offset .. start_offset + num - 1`` without deltas (old CKs); its revive
  time is pop_time + invisible_time;
* an **ack** names its checkpoint by the same identity and the offsets it acks (``ao``; ``aol`` for a bAck); its first
  stored copy says when it was acked. The checkpoint's stored ``bm`` is always 0 (every writer sets it so; the bitmap
  exists only in the reviving broker's memory), so the acks are the only evidence;
* an offset acked before its checkpoint's revive time was consumed in time; acked at or after it, *late* (the broker
  had revived it: a retry copy follows).
What an as-of run sees follows rule 0: the copies first held by a snapshot at or before its time.
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs.rules.snapshots import _ts

IDENTITY = ["cluster", "topic", "queue_id", "start_offset", "consumer_group", "pop_time", "broker_name"]
# the popped queue: the checkpoint's broker_name is the broker of the queue (bn), which is the broker storing it
QUEUE = ["cluster", "consumer_group", "topic", "broker", "queue_id"]


def _seen(df: DataFrame, as_of: dt.datetime) -> DataFrame:
    return df.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") <= _ts(as_of)))


def checkpoints(pop_checkpoints: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """Each checkpoint once (IDENTITY, invisible_time, revive_time in ms, num, deltas, first_store_ts, broker):
    its copies seen by ``as_of``, the first stored one's fields. ``broker``: the popped queue's broker (``bn``, else
    the broker whose commitlog holds it)."""
    ck = _seen(pop_checkpoints, as_of).withColumn("broker_name", F.coalesce("broker_name", "broker"))
    w = Window.partitionBy(*IDENTITY).orderBy("store_ts", "broker", "physical_offset")
    return (ck.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1)
            .select(*IDENTITY, "invisible_time", "revive_time", "num", "deltas",
                    F.col("store_ts").alias("first_store_ts"), F.col("broker_name").alias("broker")))


def popped(cks: DataFrame) -> DataFrame:
    """One row per (checkpoint, offset it covers): IDENTITY, broker, queue_offset, revive_time (ms)."""
    offsets = F.when(F.col("deltas").isNotNull(),
                     F.transform("deltas", lambda d: F.col("start_offset") + d.cast("long"))).otherwise(
        F.transform(F.sequence(F.lit(0), F.greatest(F.col("num") - 1, F.lit(0))),
                    lambda i: F.col("start_offset") + i.cast("long")))
    rows = cks.where(F.col("deltas").isNotNull() | (F.col("num") > 0))
    return rows.select(*IDENTITY, "broker", "revive_time", F.explode(offsets).alias("queue_offset"))


def acked(pop_acks: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """One row per (checkpoint identity, acked offset): the first stored copy's time (``acked_ms``, epoch ms) among
    the ack and bAck copies seen by ``as_of``."""
    acks = _seen(pop_acks, as_of).withColumn("broker_name", F.coalesce("broker_name", "broker"))
    rows = acks.select(*IDENTITY, F.explode("ack_offsets").alias("queue_offset"),
                       F.unix_millis("store_ts").alias("_ms"))
    return rows.groupBy(*IDENTITY, "queue_offset").agg(F.min("_ms").alias("acked_ms"))


def popped_state(cks: DataFrame, acks: DataFrame) -> DataFrame:
    """Each popped offset with its ack: IDENTITY, broker, queue_offset, revive_time, acked_ms (null: never acked)
    and ``late`` (acked at or after the revive time; null when not acked)."""
    return (popped(cks).join(acks, on=[*IDENTITY, "queue_offset"], how="left")
            .withColumn("late", F.col("acked_ms") >= F.col("revive_time")))


def inflight(state: DataFrame, *, t_s: dt.datetime) -> DataFrame:
    """(QUEUE, inflight): per popped queue, the offsets popped by a checkpoint whose revive time is after ``t_s`` and
    not acked by then (spec §4.1 ``consumer_status.inflight``), each offset once."""
    t_ms = int(t_s.astimezone(dt.timezone.utc).timestamp() * 1000) if t_s.tzinfo else \
        int(t_s.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    open_ = state.where((F.col("revive_time") > F.lit(t_ms))
                        & (F.col("acked_ms").isNull() | (F.col("acked_ms") > F.lit(t_ms))))
    return open_.groupBy(*QUEUE).agg(F.countDistinct("queue_offset").alias("inflight"))


def pop_pairs(cks: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic): the pairs a checkpoint names: consume_mode POP (spec §4.1)."""
    return cks.select("cluster", "consumer_group", "topic").distinct()
