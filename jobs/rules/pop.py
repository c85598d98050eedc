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

from jobs.rules.ranges import interval_union
from jobs.rules.snapshots import _ts
from schemas import duplicated_ranges as dup_schema
from schemas import unconsumed_ranges as unc_schema

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


def _ms(t: dt.datetime) -> int:
    return int((t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp() * 1000)


def inflight(state: DataFrame, *, t_s: dt.datetime) -> DataFrame:
    """(QUEUE, inflight): per popped queue, the offsets popped by a checkpoint whose revive time is after ``t_s`` and
    not acked by then (spec §4.1 ``consumer_status.inflight``), each offset once."""
    t_ms = _ms(t_s)
    open_ = state.where((F.col("revive_time") > F.lit(t_ms))
                        & (F.col("acked_ms").isNull() | (F.col("acked_ms") > F.lit(t_ms))))
    return open_.groupBy(*QUEUE).agg(F.countDistinct("queue_offset").alias("inflight"))


def pop_pairs(cks: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic): the pairs a checkpoint names: consume_mode POP (spec §4.1)."""
    return cks.select("cluster", "consumer_group", "topic").distinct()


# --------------------------------------------------------------------------------- copies of a popped message

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def popped_copies(state: DataFrame, messages: DataFrame) -> DataFrame:
    """The popped offsets with the record stored there (positional lookup): IDENTITY, broker, queue_offset,
    revive_time, acked_ms, late, uniq_key, reconsume_times, keys, store_ts. A position whose record the lake lacks is
    left out (nothing is known of its message)."""
    m = messages.select("cluster", "topic", "broker", "queue_id", "queue_offset", "uniq_key", "reconsume_times", "keys",
                        "store_ts", "properties")
    return state.join(m, on=["cluster", "topic", "broker", "queue_id", "queue_offset"], how="inner")


def retry_topics(pairs: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic, retry_topic): both names a POP retry topic of (G, T) can have (``%RETRY%G_T``,
    and ``%RETRY%G+T`` with enableRetryTopicV2; KeyBuilder.buildPopRetryTopic)."""
    base = pairs.where(~F.col("topic").startswith(RETRY_PREFIX))
    v1 = base.select("*", F.concat(F.lit(RETRY_PREFIX), "consumer_group", F.lit("_"), "topic").alias("retry_topic"))
    v2 = base.select("*", F.concat(F.lit(RETRY_PREFIX), "consumer_group", F.lit("+"), "topic").alias("retry_topic"))
    return v1.unionByName(v2)


def message_fate(copies: DataFrame, messages: DataFrame, pairs: DataFrame) -> DataFrame:
    """Per (cluster, consumer_group, topic, uniq_key) of an original a POP group popped: its original positions
    (broker, queue_id, queue_offset; a producer resend has two), whether a copy was acked late and its next revive
    copy exists (``late_again``), whether any copy was acked, whether it is in ``%DLQ%G``, the newest copy's
    reconsumeTimes and the latest revive time of the pops of that copy (``newest_revive_ms``: null when the newest
    copy was never popped)."""
    rt = retry_topics(pairs)
    originals = (copies.where(~F.col("topic").startswith(RETRY_PREFIX))
                 .select("cluster", "consumer_group", "topic", "broker", "queue_id", "queue_offset", "uniq_key",
                         "keys", "properties").distinct())
    # every copy a popped original has: the original (its reconsumeTimes) and the revive copies in G's retry topics
    revive = (messages.where(F.col("topic").startswith(RETRY_PREFIX)).withColumnRenamed("topic", "retry_topic")
              .join(F.broadcast(rt), on=["cluster", "retry_topic"])
              .select("cluster", "consumer_group", "topic", "uniq_key", "reconsume_times"))
    keys = originals.select("cluster", "consumer_group", "topic", "uniq_key").distinct()
    revive = revive.join(keys, on=["cluster", "consumer_group", "topic", "uniq_key"], how="left_semi")
    # the pops of each copy, keyed by the original's (G, T, uniq_key): a retry copy's checkpoint names its retry topic
    pops = copies.join(F.broadcast(rt.select("cluster", "consumer_group", F.col("retry_topic").alias("topic"),
                                             F.col("topic").alias("_base"))),
                       on=["cluster", "consumer_group", "topic"], how="left") \
        .withColumn("_base", F.coalesce("_base", "topic"))
    pops = pops.select("cluster", "consumer_group", F.col("_base").alias("topic"), "uniq_key", "reconsume_times",
                       "revive_time", "acked_ms", "late")
    existing = revive.select("cluster", "consumer_group", "topic", "uniq_key", "reconsume_times").unionByName(
        pops.select("cluster", "consumer_group", "topic", "uniq_key", "reconsume_times"))
    newest = existing.groupBy("cluster", "consumer_group", "topic", "uniq_key").agg(
        F.max("reconsume_times").alias("newest_r"))
    late_again = (pops.where(F.col("late")).select("cluster", "consumer_group", "topic", "uniq_key",
                                                   (F.col("reconsume_times") + 1).alias("reconsume_times"))
                  .join(revive, on=["cluster", "consumer_group", "topic", "uniq_key", "reconsume_times"],
                        how="left_semi")
                  .select("cluster", "consumer_group", "topic", "uniq_key").distinct()
                  .withColumn("late_again", F.lit(True)))
    acked_any = (pops.groupBy("cluster", "consumer_group", "topic", "uniq_key")
                 .agg(F.max(F.col("acked_ms").isNotNull()).alias("acked")))
    newest_pops = (pops.join(newest, on=["cluster", "consumer_group", "topic", "uniq_key"])
                   .where(F.col("reconsume_times") == F.col("newest_r"))
                   .groupBy("cluster", "consumer_group", "topic", "uniq_key")
                   .agg(F.max("revive_time").alias("newest_revive_ms")))
    dlq = (messages.where(F.col("topic").startswith(DLQ_PREFIX))
           .select("cluster", F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"), "uniq_key")
           .distinct().withColumn("in_dlq", F.lit(True)))
    on = ["cluster", "consumer_group", "topic", "uniq_key"]
    return (originals.join(newest, on=on, how="left").join(late_again, on=on, how="left")
            .join(acked_any, on=on, how="left").join(newest_pops, on=on, how="left")
            .join(dlq, on=["cluster", "consumer_group", "uniq_key"], how="left")
            .select(*originals.columns, "newest_r", F.coalesce("late_again", F.lit(False)).alias("late_again"),
                    F.coalesce("acked", F.lit(False)).alias("acked"), "newest_revive_ms",
                    F.coalesce("in_dlq", F.lit(False)).alias("in_dlq")))


RANGE_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]


def _runs(positions: DataFrame) -> DataFrame:
    rows = positions.select("cluster", "consumer_group", F.lit("").alias("client_id"), "topic", "broker", "queue_id",
                            F.col("queue_offset").cast("long").alias("start_offset"),
                            F.col("queue_offset").cast("long").alias("end_offset"))
    return interval_union(rows, keys=RANGE_KEY)


def late_ack_ranges(fate: DataFrame) -> DataFrame:
    """duplicated_ranges rows, evidence ``POP_LATE_ACK``, cause ``INVISIBLE_TIME_EXCEEDED``: the original offsets one
    of whose copies was acked late while its next revive copy exists (processed, then delivered again)."""
    types = {f.name: f.dataType for f in dup_schema.SCHEMA.fields}
    runs = _runs(fate.where(F.col("late_again")))
    return runs.select(*[F.col(c) for c in runs.columns], F.lit("POP_LATE_ACK").alias("evidence"),
                       F.lit("INVISIBLE_TIME_EXCEEDED").alias("cause")).select(
        *[F.col(c).cast(types[c]).alias(c) for c in dup_schema.REPORT_COLUMNS])


def lost_ranges(fate: DataFrame, *, t_s: dt.datetime, blocking_min_age_s: int) -> DataFrame:
    """unconsumed_ranges rows, kind ``POP_LOST``: popped originals no copy of which was ever acked nor reached
    ``%DLQ%G``, whose newest copy was popped by a checkpoint that revived at least ``blocking_min_age_s`` before
    ``t_s`` with no newer revive copy written (the broker could not revive it: the original had expired, or the
    checkpoint was dropped). A newest copy not popped yet is its retry topic's BACKLOG, not lost."""
    types = {f.name: f.dataType for f in unc_schema.SCHEMA.fields}
    cut = _ms(t_s) - int(blocking_min_age_s) * 1000
    runs = _runs(fate.where(~F.col("acked") & ~F.col("in_dlq") & F.col("newest_revive_ms").isNotNull()
                            & (F.col("newest_revive_ms") <= F.lit(cut))))
    return runs.select(*[F.col(c) for c in runs.columns], F.lit("POP_LOST").alias("kind")).select(
        *[F.col(c).cast(types[c]).alias(c) for c in unc_schema.REPORT_COLUMNS])
