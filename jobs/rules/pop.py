"""POP consumption (reconciliation spec §4.1 POP part; rocketmq5.md §2): what was popped, acked in time, acked late,
and is in flight, from silver/pop_checkpoints and silver/pop_acks.

A POP group's committed offset means *popped* (the broker commits a batch's next offset as soon as it stores the
checkpoint), so its consumption is read from the checkpoints and acks, which the broker stores as messages:
* a **checkpoint** is identified by (topic, queue_id, start_offset, consumer_group, pop_time, broker_name) and
  counted once however many copies the commitlogs hold (its timer copy, its revive copy); it covers the offsets
  ``start_offset + deltas[i]``, or ``start_offset .. start_offset + num - 1`` without deltas (old CKs); its revive
  time is pop_time + invisible_time;
* an **ack** names its checkpoint by the same identity and the offsets it acks (``ao``; ``aol`` for a bAck); its first
  stored copy says when it was acked. Spec §4.1 also counts bit i of a stored checkpoint's ``bm`` as an ack of its
  i-th offset, stored with that copy; RocketMQ's writers store 0 there (even the ack-merging buffer keeps its bits
  apart and stores acks as messages: jobs/formats/pop.py), so on real stores the acks are the evidence;
* an offset acked before its checkpoint's revive time was consumed in time; acked at or after it, *late* (the broker
  had revived it: a retry copy follows).
What an as-of run sees follows rule 0: the copies first held by a snapshot at or before its time.
"""
from __future__ import annotations

import datetime as dt
from typing import Callable

from pyspark.sql import Column, DataFrame, Window
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


def _covered() -> Column:
    """The offsets a checkpoint covers, in bit order: start_offset + deltas[i], or start_offset .. + num - 1."""
    return F.when(F.col("deltas").isNotNull(),
                  F.transform("deltas", lambda d: F.col("start_offset") + d.cast("long"))).otherwise(
        F.transform(F.sequence(F.lit(0), F.greatest(F.col("num") - 1, F.lit(0))),
                    lambda i: F.col("start_offset") + i.cast("long")))


def _covering(cks: DataFrame) -> DataFrame:
    return cks.where(F.col("deltas").isNotNull() | (F.col("num") > 0))


def popped(cks: DataFrame) -> DataFrame:
    """One row per (checkpoint, offset it covers): IDENTITY, broker, queue_offset, revive_time (ms)."""
    return _covering(cks).select(*IDENTITY, "broker", "revive_time", F.explode(_covered()).alias("queue_offset"))


def acked(pop_acks: DataFrame, *, as_of: dt.datetime, pop_checkpoints: DataFrame | None = None) -> DataFrame:
    """One row per (checkpoint identity, acked offset): the first stored copy's time (``acked_ms``, epoch ms) among
    the ack and bAck copies seen by ``as_of`` and, with ``pop_checkpoints``, the checkpoint copies whose ``bm`` has
    the offset's bit set (spec §4.1: bit i of the checkpoint's bm is an ack of its i-th offset)."""
    acks = _seen(pop_acks, as_of).withColumn("broker_name", F.coalesce("broker_name", "broker"))
    rows = acks.select(*IDENTITY, F.explode("ack_offsets").alias("queue_offset"),
                       F.unix_millis("store_ts").alias("_ms"))
    if pop_checkpoints is not None:
        ck = (_covering(_seen(pop_checkpoints, as_of)).where(F.col("bitmap").isNotNull() & (F.col("bitmap") != 0))
              .withColumn("broker_name", F.coalesce("broker_name", "broker")))
        bits = (ck.select(*IDENTITY, "bitmap", "store_ts", F.posexplode(_covered()).alias("_i", "queue_offset"))
                .where(F.expr("(shiftright(bitmap, _i) & 1) = 1")))
        rows = rows.unionByName(bits.select(*IDENTITY, "queue_offset", F.unix_millis("store_ts").alias("_ms")))
    return rows.groupBy(*IDENTITY, "queue_offset").agg(F.min("_ms").alias("acked_ms"))


def popped_state(cks: DataFrame, acks: DataFrame) -> DataFrame:
    """Each popped offset with its ack: IDENTITY, broker, queue_offset, revive_time, acked_ms (null: never acked)
    and ``late`` (acked at or after the revive time; null when not acked)."""
    return (popped(cks).join(acks, on=[*IDENTITY, "queue_offset"], how="left")
            .withColumn("late", F.col("acked_ms") >= F.col("revive_time")))


def inflight(state: DataFrame, ends: DataFrame) -> DataFrame:
    """(QUEUE, inflight): per popped queue, the offsets popped by a checkpoint whose revive time is after t_S and not
    acked by then (spec §4.1 ``consumer_status.inflight``), each offset once. ``ends``: (cluster, t_end), t_S per
    cluster (jobs.rules.snapshots.window_end)."""
    t_ms = F.unix_millis("t_end")
    open_ = (state.join(ends, on="cluster").where((F.col("revive_time") > t_ms)
                                                  & (F.col("acked_ms").isNull() | (F.col("acked_ms") > t_ms))))
    return open_.groupBy(*QUEUE).agg(F.countDistinct("queue_offset").alias("inflight"))


def pop_pairs(cks: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic): consume_mode POP (spec §4.1): the pairs a checkpoint names, for a checkpoint
    of G's POP retry topic (``%RETRY%G_T``, ``%RETRY%G+T``) the topic T it retries too, and both retry topic names
    of every such T."""
    named = cks.select("cluster", "consumer_group", "topic")
    head = "length(concat('%RETRY%', consumer_group))"
    of_group = F.expr(f"substring(topic, 1, {head}) = concat('%RETRY%', consumer_group) "
                      f"AND substring(topic, {head} + 1, 1) IN ('_', '+') AND length(topic) > {head} + 1")
    base = named.where(of_group).select("cluster", "consumer_group",
                                        F.expr(f"substring(topic, {head} + 2)").alias("topic"))
    pairs = named.unionByName(base).distinct()
    # the retry topics of a POP pair are POP too, before any of their copies was popped
    retry = retry_topics(pairs).select("cluster", "consumer_group", F.col("retry_topic").alias("topic"))
    return pairs.unionByName(retry).distinct()


# --------------------------------------------------------------------------------- copies of a popped message

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def popped_copies(state: DataFrame, messages: DataFrame) -> DataFrame:
    """The popped offsets with the record stored there (positional lookup): IDENTITY, broker, queue_offset,
    revive_time, acked_ms, late and the record's physical_offset, uniq_key, reconsume_times, keys, store_ts (null
    when the lake does not hold the record: it is then a message of its own, at that offset)."""
    m = messages.select("cluster", "topic", "broker", "queue_id", "queue_offset", "physical_offset", "uniq_key",
                        "reconsume_times", "keys", "store_ts")
    return state.join(m, on=["cluster", "topic", "broker", "queue_id", "queue_offset"], how="left")


RECORD_COLUMNS = ["cluster", "topic", "broker", "queue_id", "queue_offset", "physical_offset", "uniq_key",
                  "reconsume_times", "keys", "store_ts"]


def pop_records(messages: DataFrame, pairs: DataFrame) -> DataFrame:
    """The records the POP rules read (RECORD_COLUMNS): those of the POP pairs' topics (their POP retry topics among
    them: :func:`pop_pairs`) and of the POP groups' ``%DLQ%G``. One pass over the stored records, which every later
    lookup (popped records by position, originals and revive copies by key, DLQ copies) reads instead of the whole
    table; the names are report-sized (a few per POP group), collected once."""
    named = pairs.select("consumer_group", "topic").distinct().collect()
    names = sorted({t for _g, t in named} | {DLQ_PREFIX + g for g, _t in named})
    return messages.where(F.col("topic").isin(names)).select(*RECORD_COLUMNS)


def retry_topics(pairs: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic, retry_topic): both names a POP retry topic of (G, T) can have (``%RETRY%G_T``,
    and ``%RETRY%G+T`` with enableRetryTopicV2; KeyBuilder.buildPopRetryTopic)."""
    base = pairs.where(~F.col("topic").startswith(RETRY_PREFIX))
    v1 = base.select("*", F.concat(F.lit(RETRY_PREFIX), "consumer_group", F.lit("_"), "topic").alias("retry_topic"))
    v2 = base.select("*", F.concat(F.lit(RETRY_PREFIX), "consumer_group", F.lit("+"), "topic").alias("retry_topic"))
    return v1.unionByName(v2)


MSG = ["cluster", "consumer_group", "topic", "msg_key"]  # a message of a POP pair: its base topic and key
PLACE = ["broker", "queue_id", "queue_offset"]


def message_fate(copies: DataFrame, messages: DataFrame, pairs: DataFrame,
                 keep: Callable[[DataFrame, str], DataFrame] = lambda df, _name: df) -> DataFrame:
    """One row per place a message a POP group popped is reported at, with what happened to it.

    A message of a POP pair (G, T) is its originals on T and its revive copies in G's POP retry topics of T, by
    UNIQ_KEY (``msg_key``); a popped record the lake does not hold is a message of its own (its key is its
    position). It is reported at each original's place, else (no original in the lake) at its newest copy's.
    Columns: MSG, uniq_key, PLACE, keys, ``popped_original`` (an original was popped), ``newest_r`` (the newest
    copy's reconsumeTimes: highest, then the newest stored), ``late_again`` (a copy with reconsumeTimes r was acked
    late and the revive copy r + 1 is in the lake), ``acked`` (a pop of any copy was acked), ``newest_revive_ms`` and
    ``newest_acked`` (the newest copy's last pop, highest pop time: its revive time, and whether a pop of that copy
    was acked; null and false when it was never popped), ``last_pop_ms`` (any copy's) and ``in_dlq``."""
    rt = retry_topics(pairs)
    as_base = F.broadcast(rt.select("cluster", "consumer_group", F.col("retry_topic").alias("topic"),
                                    F.col("topic").alias("_base")))
    pops = (copies.join(as_base, on=["cluster", "consumer_group", "topic"], how="left")
            .withColumn("_base", F.coalesce("_base", "topic"))
            .withColumn("msg_key", F.coalesce(F.col("uniq_key"), F.concat_ws(
                "@", F.lit(""), "broker", "topic", F.col("queue_id").cast("string"),
                F.col("queue_offset").cast("string")))))
    pops = pops.select("cluster", "consumer_group", F.col("_base").alias("base"), "topic", "msg_key", "uniq_key",
                       *PLACE, "physical_offset", "reconsume_times", "keys", "store_ts", "pop_time", "revive_time",
                       "acked_ms", "late")
    # the pops, the copies and each message's newest one are read by several branches of the plan: computed once
    # (``keep``: the engine recomputes a shared frame at every use; 1.04 -> 0.48 s at 10,000 pops, issue 39)
    pops = keep(pops, "pop_pops")
    keys = pops.select("cluster", "consumer_group", "base", "msg_key", "uniq_key").distinct()
    # the copies the lake holds: originals on T and revive copies in G's retry topics of T (by UNIQ_KEY), and every
    # popped record (one the key lookup did not give, or the only copy of a keyless message)
    plain = messages.where(~F.col("topic").startswith(RETRY_PREFIX) & F.col("uniq_key").isNotNull())
    originals = (plain.withColumnRenamed("topic", "base")
                 .join(keys.where(F.col("uniq_key").isNotNull()), on=["cluster", "base", "uniq_key"], how="inner")
                 .select("cluster", "consumer_group", "base", "msg_key", F.col("base").alias("topic"), *PLACE,
                         "physical_offset", "reconsume_times", "keys", "store_ts", F.lit(True).alias("original")))
    revive = (messages.where(F.col("topic").startswith(RETRY_PREFIX) & F.col("uniq_key").isNotNull())
              .withColumnRenamed("topic", "retry_topic")
              .join(F.broadcast(rt), on=["cluster", "retry_topic"], how="inner").withColumnRenamed("topic", "base")
              .join(keys.where(F.col("uniq_key").isNotNull()),
                    on=["cluster", "consumer_group", "base", "uniq_key"], how="inner")
              .select("cluster", "consumer_group", "base", "msg_key", F.col("retry_topic").alias("topic"), *PLACE,
                      "physical_offset", "reconsume_times", "keys", "store_ts", F.lit(False).alias("original")))
    popped_records = pops.select("cluster", "consumer_group", "base", "msg_key", "topic", *PLACE, "physical_offset",
                                 "reconsume_times", "keys", "store_ts",
                                 (F.col("topic") == F.col("base")).alias("original"))
    all_copies = originals.unionByName(revive).unionByName(popped_records).dropDuplicates(
        [*MSG[:2], "base", "msg_key", "topic", *PLACE])
    all_copies = keep(all_copies, "pop_copies")
    on = ["cluster", "consumer_group", "base", "msg_key"]
    wn = Window.partitionBy(*on).orderBy(F.col("reconsume_times").desc_nulls_last(), F.col("store_ts").desc_nulls_last(),
                                         F.col("physical_offset").desc_nulls_last())
    newest = (all_copies.withColumn("_rn", F.row_number().over(wn)).where("_rn = 1")
              .select(*on, F.col("topic").alias("n_topic"), *[F.col(c).alias(f"n_{c}") for c in PLACE],
                      F.col("reconsume_times").alias("newest_r")))
    newest = keep(newest, "pop_newest")
    is_newest = ((F.col("topic") == F.col("n_topic")) & (F.col("broker") == F.col("n_broker"))
                 & (F.col("queue_id") == F.col("n_queue_id")) & (F.col("queue_offset") == F.col("n_queue_offset")))
    wl = Window.partitionBy(*on).orderBy(F.col("pop_time").desc(), F.col("revive_time").desc())
    # the newest copy's last pop and whether any of its pops was acked, in one pass over its pops
    newest_last = (pops.join(newest, on=on).where(is_newest)
                   .withColumn("newest_acked", F.max(F.col("acked_ms").isNotNull()).over(Window.partitionBy(*on)))
                   .withColumn("_rn", F.row_number().over(wl)).where("_rn = 1")
                   .select(*on, F.col("revive_time").alias("newest_revive_ms"), "newest_acked"))
    revive_rs = revive.select(*on, F.col("reconsume_times").alias("_r")).distinct()
    late_again = (pops.where(F.col("late") & F.col("reconsume_times").isNotNull())
                  .select(*on, (F.col("reconsume_times") + 1).alias("_r"))
                  .join(revive_rs, on=[*on, "_r"], how="left_semi").select(*on).distinct()
                  .withColumn("late_again", F.lit(True)))
    per_msg = pops.groupBy(*on).agg(F.max(F.col("acked_ms").isNotNull()).alias("acked"),
                                    F.max("pop_time").alias("last_pop_ms"),
                                    F.max(F.col("topic") == F.col("base")).alias("popped_original"))
    dlq = (messages.where(F.col("topic").startswith(DLQ_PREFIX))
           .select("cluster", F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"),
                   F.col("uniq_key").alias("msg_key")).distinct().withColumn("in_dlq", F.lit(True)))
    # where it is reported: each original's place, else the newest copy's
    orig_places = originals.select(*on, *PLACE, "keys").distinct()
    has_orig = orig_places.select(*on).distinct().withColumn("_has", F.lit(True))
    fallback = (newest.join(has_orig, on=on, how="left_anti")
                .select(*on, *[F.col(f"n_{c}").alias(c) for c in PLACE], F.col("n_topic").alias("_place_topic")))
    keys_of = all_copies.groupBy(*on).agg(F.first("keys", ignorenulls=True).alias("_keys"))
    places = (orig_places.withColumn("_place_topic", F.col("base"))
              .unionByName(fallback.join(keys_of, on=on, how="left").withColumnRenamed("_keys", "keys")))
    return (places.join(keys.select(*on, "uniq_key"), on=on, how="left")
            .join(newest.select(*on, "newest_r"), on=on, how="left")
            .join(late_again, on=on, how="left").join(per_msg, on=on, how="left")
            .join(newest_last, on=on, how="left")
            .join(dlq, on=["cluster", "consumer_group", "msg_key"], how="left")
            .select("cluster", "consumer_group", F.col("_place_topic").alias("topic"), "msg_key", "uniq_key", *PLACE,
                    "keys", F.coalesce("popped_original", F.lit(False)).alias("popped_original"), "newest_r",
                    F.coalesce("late_again", F.lit(False)).alias("late_again"),
                    F.coalesce("acked", F.lit(False)).alias("acked"), "newest_revive_ms",
                    F.coalesce("newest_acked", F.lit(False)).alias("newest_acked"), "last_pop_ms",
                    F.coalesce("in_dlq", F.lit(False)).alias("in_dlq"), F.col("base")))


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


def lost_ranges(fate: DataFrame, ends: DataFrame, *, blocking_min_age_s: int) -> DataFrame:
    """unconsumed_ranges rows, kind ``POP_LOST``: popped originals no copy of which was ever acked nor reached
    ``%DLQ%G``, whose newest copy was popped by a checkpoint that revived at least ``blocking_min_age_s`` before
    t_S (``ends``: (cluster, t_end)) with no newer revive copy written (the broker could not revive it: the original
    had expired, or the checkpoint was dropped). A newest copy not popped yet is its retry topic's BACKLOG, not
    lost."""
    types = {f.name: f.dataType for f in unc_schema.SCHEMA.fields}
    cut = F.unix_millis("t_end") - F.lit(int(blocking_min_age_s) * 1000)
    # with originals in the lake, one of them must have been popped (places at the originals' topic)
    original_ok = F.col("popped_original") | (F.col("topic") != F.col("base"))
    runs = _runs(fate.join(ends, on="cluster").where(
        ~F.col("acked") & ~F.col("in_dlq") & F.col("newest_revive_ms").isNotNull() & original_ok
        & (F.col("newest_revive_ms") <= cut)))
    return runs.select(*[F.col(c) for c in runs.columns], F.lit("POP_LOST").alias("kind")).select(
        *[F.col(c).cast(types[c]).alias(c) for c in unc_schema.REPORT_COLUMNS])


def retrying(fate: DataFrame, retry_max: DataFrame, *, dlq_warn_retries: int) -> DataFrame:
    """dlq_candidates rows, reason ``RETRYING`` for POP (spec §4.1): the newest copy has reconsumeTimes >=
    ``dlq_warn_retries``, is not acked and the message is not in ``%DLQ%G``; ``max_reconsume_times`` = the group's
    retryMaxTimes on the original's broker (16 when unknown), no ETA (the retry interval is the client's invisible
    time, not a delay level); ``last_attempt_ts`` = the last pop of any copy."""
    from jobs.rules import dlq

    rows = fate.where((F.col("newest_r") >= F.lit(int(dlq_warn_retries))) & ~F.col("newest_acked") & ~F.col("in_dlq"))
    rows = dlq.with_retry_max(rows, retry_max).withColumn(
        "_max", F.coalesce(F.col("retry_max"), F.lit(dlq.DEFAULT_RETRY_MAX_TIMES)))
    return dlq.typed(rows.select(
        "cluster", "consumer_group", F.lit("").alias("client_id"), "topic", "broker", "queue_id",
        F.col("queue_offset").cast("long").alias("queue_offset"), "uniq_key", "keys",
        F.col("newest_r").alias("reconsume_times"), F.col("_max").alias("max_reconsume_times"),
        F.lit("RETRYING").alias("reason"), F.timestamp_millis("last_pop_ms").alias("last_attempt_ts")))


# what a POP pair's rows are not (spec §4.1: SKIPPED is not evaluated, BLOCKING_COMMIT does not apply; RETRYING is
# the POP rule's; a POP pair is never ORDERLY)
NOT_FOR_POP = {"unconsumed_ranges": ("kind", ("SKIPPED",)),
               "dlq_candidates": ("reason", ("RETRYING", "BLOCKING_COMMIT", "ORDERLY_BLOCKED"))}


def reports(frames: dict[str, DataFrame], msgs: DataFrame, series: DataFrame, retry_max: DataFrame, *,
            as_of: dt.datetime, dlq_warn_retries: int, blocking_min_age_s: int,
            keep: Callable[[DataFrame, str], DataFrame] = lambda df, _name: df) -> dict[str, DataFrame]:
    """The POP rows of a run from silver/pop_checkpoints and silver/pop_acks (``frames``) and the records an as-of
    run sees (``msgs``): ``pairs`` (consume_mode POP), ``duplicated`` (POP_LATE_ACK), ``lost`` (POP_LOST),
    ``retrying`` and ``inflight`` per queue."""
    from jobs.rules.snapshots import window_end

    cks = keep(checkpoints(frames["pop_checkpoints"], as_of=as_of), "pop_checkpoints")
    state = keep(popped_state(cks, acked(frames["pop_acks"], as_of=as_of, pop_checkpoints=frames["pop_checkpoints"])),
                 "pop_state")
    pairs = keep(pop_pairs(cks), "pop_pairs")
    msgs = keep(pop_records(msgs, pairs), "pop_records")
    fate = keep(message_fate(popped_copies(state, msgs), msgs, pairs, keep), "pop_fate")
    ends = window_end(series)
    return {"pairs": pairs, "duplicated": late_ack_ranges(fate),
            "lost": lost_ranges(fate, ends, blocking_min_age_s=blocking_min_age_s),
            "retrying": retrying(fate, retry_max, dlq_warn_retries=dlq_warn_retries),
            "inflight": inflight(state, ends)}


def merged(pdfs: dict[str, "pd.DataFrame"], pop: dict[str, "pd.DataFrame"]) -> dict[str, "pd.DataFrame"]:
    """The report rows (pandas, report-sized) with the POP rows of :func:`reports` (collected) in: the POP pairs'
    SKIPPED, push RETRYING, BLOCKING_COMMIT and ORDERLY_BLOCKED rows out, POP_LATE_ACK, POP_LOST and POP RETRYING
    rows in, consume_mode POP (after BROADCAST) and ``inflight`` in consumer_status. The same step after a full and
    a scheduled run, from the same whole tables, so both give the same rows."""
    import pandas as pd

    pairs = set(zip(pop["pairs"]["cluster"], pop["pairs"]["consumer_group"], pop["pairs"]["topic"]))
    if not pairs:
        return pdfs

    def of_pop(df: pd.DataFrame) -> pd.Series:
        return pd.Series([k in pairs for k in zip(df["cluster"], df["consumer_group"], df["topic"])], index=df.index,
                         dtype=bool)

    res = dict(pdfs)
    for name, (col, values) in NOT_FOR_POP.items():
        df = res[name]
        if len(df):
            res[name] = df[~(of_pop(df) & df[col].isin(values))].reset_index(drop=True)
    for name, part in (("duplicated_ranges", "duplicated"), ("unconsumed_ranges", "lost"),
                       ("dlq_candidates", "retrying")):
        add = pop[part]
        if len(add):
            base = res[name]
            res[name] = (pd.concat([base, add[base.columns]], ignore_index=True).astype(base.dtypes.to_dict())
                         if len(base) else add[base.columns].reset_index(drop=True))
    st = res["consumer_status"]
    if len(st):
        st = st.copy()
        is_pop = of_pop(st) & (st["consume_mode"] != "BROADCAST")
        flights = {tuple(k): int(v) for *k, v in pop["inflight"][[*QUEUE, "inflight"]].itertuples(index=False)}
        st.loc[is_pop, "consume_mode"] = "POP"
        st.loc[is_pop, "inflight"] = [flights.get(k, 0) for k in zip(*[st.loc[is_pop, c] for c in QUEUE])]
        res["consumer_status"] = st
    return res


def pop_only_groups(pairs: "pd.DataFrame", series_pairs: set[tuple[str, str, str]]) -> set[tuple[str, str]]:
    """The (cluster, group) pairs that are POP on every topic they have offsets for (spec §4.1: no NO_TRACE row)."""
    pop = set(zip(pairs["cluster"], pairs["consumer_group"], pairs["topic"]))
    by_group: dict[tuple[str, str], bool] = {}
    for c, g, t in series_pairs:
        by_group[(c, g)] = by_group.get((c, g), True) and (c, g, t) in pop
    return {k for k, v in by_group.items() if v}
