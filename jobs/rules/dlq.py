"""gold/dlq_candidates: messages that need a human (spec §4 DLQ candidates, docs/semantics.md rules 16, 18-20).

* ``IN_DLQ``: every message stored in ``%DLQ%G``, at its original position when the UNIQ_KEY resolves.
* ``RETRYING``: clustering groups; never consumed, not in the DLQ, retried >= ``dlq_warn_retries`` times,
  with the time it reaches the DLQ if every remaining retry fails (delay levels, formats §5).
* ``BLOCKING_COMMIT``: the message at ``C_S`` has a delivery in flight (no SubAfter) for at least
  ``blocking_min_age_s``: it pins the group's progress (``ProcessQueue.removeMessage``); also on ``%RETRY%G`` queues
  and per broadcast client.
* ``BROADCAST_DROPPED``: a broadcast group's failed delivery, per client (no retry in broadcast mode).
* ``ORDERLY_BLOCKED`` (spec §4.1): the message at ``C_S`` of an orderly queue, delivered >= ``dlq_warn_retries``
  times and never successfully: the client retries it locally, the queue waits behind it; no delay-level ETA, and
  no ``RETRYING`` row for an orderly (group, topic).

* ``TRANSACTION_DISCARDED`` (spec §4.3): a transaction's half message the broker moved to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` after ``transactionCheckMax`` checks: never committed nor rolled back, the producer
  lost it. No group (``consumer_group`` empty), ``producer_group`` = its ``PGROUP``; empty on every other reason.
"""
from __future__ import annotations

import datetime as dt
from itertools import accumulate

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.rules.snapshots import (
    QUEUE,
    SERIES_KEY,
    _ts,
    broadcast_groups,
    deliveries_in_window,
    first_original,
    message_at,
    newest,
)
from jobs.formats.topics import DLQ_PREFIX, RETRY_PREFIX, TRANS_CHECK_TOPIC, is_system_topic_col
from schemas import dlq_candidates as schema

COLUMNS = schema.REPORT_COLUMNS
DEFAULT_RETRY_MAX_TIMES = 16
ORDERLY_MAX_RECONSUME = 2**31 - 1  # a 4.x orderly consumer's maxReconsumeTimes -1 reads Integer.MAX_VALUE
# messageDelayLevel 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h (MessageStoreConfig), in ms.
DELAY_LEVELS_MS = [1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
                   480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000]
MAX_LEVEL = len(DELAY_LEVELS_MS)
_CUMULATIVE_MS = [0] + list(accumulate(DELAY_LEVELS_MS))  # _CUMULATIVE_MS[j] = levels 1..j
PLACE = ("topic", "broker", "queue_id", "queue_offset", "keys")  # where a row is reported


def remaining_delay_ms(retries: int, max_retries: int) -> int:
    """Sum over k = retries .. max_retries - 1 of the delay of level min(3 + k, 18) (rule 19), in plain Python."""
    return sum(DELAY_LEVELS_MS[min(3 + k, MAX_LEVEL) - 1] for k in range(retries, max_retries))


def remaining_delay_ms_col(retries: Column, max_retries: Column) -> Column:
    """:func:`remaining_delay_ms` as a column: levels 3 + r .. capped at 18, then 2 h per retry beyond 15."""
    cum = F.array(*[F.lit(v).cast("long") for v in _CUMULATIVE_MS])
    uncapped_last = F.least(max_retries - 1, F.lit(MAX_LEVEL - 3))  # last k whose level is below the cap
    part1 = F.when(retries <= uncapped_last,
                   F.element_at(cum, uncapped_last + 3 + 1) - F.element_at(cum, retries + 2 + 1)).otherwise(F.lit(0))
    capped = F.greatest(max_retries - F.greatest(retries, F.lit(MAX_LEVEL - 2)), F.lit(0))
    return (part1 + capped * F.lit(DELAY_LEVELS_MS[-1])).cast("long")


def typed(df: DataFrame) -> DataFrame:
    """``df`` as dlq_candidates rows: the schema's columns in order, cast to their types, absent ones null (every
    rule that writes a candidate, the POP rule's included)."""
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    have = set(df.columns)
    return df.select(*[(F.col(c) if c in have else F.lit(None)).cast(types[c]).alias(c) for c in COLUMNS])


ANY_BROKER = ""  # the ``broker`` of retry_max_times' row for a broker without the group's entry


def latest_subscriptions(subscription_groups: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """Per (cluster, consumer_group, broker), the latest row with a retryMaxTimes at or before ``as_of``
    (schemas.subscription_latest's columns): all :func:`retry_max_times` reads of the rows up to then, so these rows
    plus the later ones answer it at ``as_of`` and after as the whole table does."""
    sg = subscription_groups.where((F.col("snapshot_ts") <= _ts(as_of)) & F.col("retry_max_times").isNotNull())
    own = Window.partitionBy("cluster", "consumer_group", "broker").orderBy(F.col("snapshot_ts").desc())
    return (sg.withColumn("_rn", F.row_number().over(own)).where("_rn = 1")
            .select("cluster", "broker", "snapshot_ts", "consumer_group", "retry_max_times",
                    "consume_message_orderly"))


def retry_max_times(subscription_groups: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """(cluster, consumer_group, broker, retry_max) from each broker's latest subscriptionGroup.json at or before
    ``as_of``, and with ``broker`` = :data:`ANY_BROKER` the latest of any broker (for a broker without the group).

    Per broker: the broker that receives a send-back decides with its own group config (formats §5), and
    ``mqadmin updateSubGroup -b`` changes one broker's.
    """
    latest = latest_subscriptions(subscription_groups, as_of=as_of)
    # the latest row of any broker is one broker's latest (a broker has one row per group and snapshot: the key)
    any_ = Window.partitionBy("cluster", "consumer_group").orderBy(F.col("snapshot_ts").desc(), F.col("broker").desc())
    per_broker = latest.select("cluster", "consumer_group", "broker", F.col("retry_max_times").alias("retry_max"))
    fallback = latest.withColumn("_rn", F.row_number().over(any_)).where("_rn = 1").select(
        "cluster", "consumer_group", F.lit(ANY_BROKER).alias("broker"), F.col("retry_max_times").alias("retry_max"))
    return per_broker.unionByName(fallback)


def with_retry_max(df: DataFrame, retry_max: DataFrame) -> DataFrame:
    """``df`` with ``retry_max``: the group's retryMaxTimes on the broker of ``df``'s ``broker`` column, else on any
    broker (null when no subscriptionGroup.json has the group)."""
    own = retry_max.where(F.col("broker") != ANY_BROKER).select(
        "cluster", "consumer_group", "broker", F.col("retry_max").alias("_own_max"))
    fallback = retry_max.where(F.col("broker") == ANY_BROKER).select(
        "cluster", "consumer_group", F.col("retry_max").alias("_any_max"))
    return (df.join(own, on=["cluster", "consumer_group", "broker"], how="left")
            .join(fallback, on=["cluster", "consumer_group"], how="left")
            .withColumn("retry_max", F.coalesce(F.col("_own_max"), F.col("_any_max"))).drop("_own_max", "_any_max"))


def in_dlq(deliveries: DataFrame, messages: DataFrame, retry_max: DataFrame) -> DataFrame:
    """``IN_DLQ``: one row per message stored in ``%DLQ%G`` (rule 18), whatever else is known of G.

    A ``--groups`` run leaves out the other groups' DLQ topics when it reads the messages
    (``jobs.reconcile.reconcile.extract``).
    """
    dlq = messages.where(F.col("topic").startswith(DLQ_PREFIX)).select(
        "cluster", F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"),
        "topic", "broker", "queue_id", F.col("queue_offset").cast("long"), "uniq_key", "keys", "reconsume_times",
        F.col("properties").getItem("MAX_RECONSUME_TIMES").cast("int").alias("_prop_max"), "store_ts")
    orig = first_original(messages).select("cluster", "uniq_key", *[F.col(c).alias(f"o_{c}") for c in QUEUE[1:]],
                                           F.col("queue_offset").alias("o_queue_offset"))
    last = deliveries.groupBy("cluster", "consumer_group", "uniq_key").agg(F.max("start_ts").alias("_last"))
    j = with_retry_max(  # the broker that moved it to the DLQ decided with its own retryMaxTimes
        dlq.join(orig, on=["cluster", "uniq_key"], how="left")
        .join(last, on=["cluster", "consumer_group", "uniq_key"], how="left"), retry_max)
    return typed(j.select(
        "cluster", "consumer_group", F.lit("").alias("client_id"),
        *[F.coalesce(F.col(f"o_{c}"), F.col(c)).alias(c) for c in ("topic", "broker", "queue_id", "queue_offset")],
        "uniq_key", "keys", (F.col("reconsume_times") - 1).alias("reconsume_times"),
        F.coalesce(F.col("_prop_max"), F.col("retry_max"), F.lit(DEFAULT_RETRY_MAX_TIMES)).alias("max_reconsume_times"),
        F.lit("IN_DLQ").alias("reason"), F.col("_last").alias("last_attempt_ts"), F.col("store_ts").alias("dlq_eta_ts"),
    ))


def retrying(deliveries: DataFrame, messages: DataFrame, retry_max: DataFrame, *, dlq_warn_retries: int,
             orderly: DataFrame | None = None) -> DataFrame:
    """``RETRYING``: clustering groups' keys with no success, no DLQ copy and >= ``dlq_warn_retries`` retries; none
    where the row's (group, topic) is in ``orderly`` (:func:`jobs.rules.modes.orderly_pairs`)."""
    d = deliveries.where(~F.col("is_broadcast") & F.col("uniq_key").isNotNull())
    per_key = d.groupBy("cluster", "consumer_group", "uniq_key").agg(
        F.max(F.coalesce(F.col("success"), F.lit(False)).cast("int")).alias("_ok"),
        F.max("retry_times").alias("_r"))
    w = Window.partitionBy("cluster", "consumer_group", "uniq_key", "retry_times").orderBy(
        F.col("start_ts").desc(), F.col("request_id").desc())
    last = d.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").select(
        "cluster", "consumer_group", "uniq_key", F.col("retry_times").alias("_r"), "start_ts", "end_ts")
    dlq_keys = messages.where(F.col("topic").startswith(DLQ_PREFIX)).select(
        "cluster", F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"), "uniq_key").distinct()
    orig = first_original(messages).select("cluster", "uniq_key", *[F.col(c).alias(f"_o_{c}") for c in PLACE])
    # No original copy in the lake (its commitlog expired before a snapshot held it): the group's newest retry copy,
    # reported as the %RETRY%G queue it is (spec §5); neither: nowhere to report it (rule 19)
    wr = Window.partitionBy("cluster", "consumer_group", "uniq_key").orderBy(
        F.col("reconsume_times").desc_nulls_last(), F.col("physical_offset").desc())
    retry = (messages.where(F.col("topic").startswith(RETRY_PREFIX) & F.col("uniq_key").isNotNull())
             .withColumn("consumer_group", F.expr(f"substring(topic, {len(RETRY_PREFIX) + 1})"))
             .withColumn("_rn", F.row_number().over(wr)).where("_rn = 1")
             .withColumn("queue_offset", F.col("queue_offset").cast("long"))
             .select("cluster", "consumer_group", "uniq_key", *[F.col(c).alias(f"_c_{c}") for c in PLACE]))
    j = (
        per_key.where((F.col("_ok") == 0) & (F.col("_r") >= F.lit(dlq_warn_retries)))
        .join(dlq_keys, on=["cluster", "consumer_group", "uniq_key"], how="left_anti")
        .join(last, on=["cluster", "consumer_group", "uniq_key", "_r"], how="inner")
        .join(orig, on=["cluster", "uniq_key"], how="left")
        .join(retry, on=["cluster", "consumer_group", "uniq_key"], how="left")
        .where(F.col("_o_topic").isNotNull() | F.col("_c_topic").isNotNull())
    )
    found = F.col("_o_topic").isNotNull()
    j = j.select("*", *[F.when(found, F.col(f"_o_{c}")).otherwise(F.col(f"_c_{c}")).alias(c) for c in PLACE])
    if orderly is not None:
        j = j.join(orderly, on=["cluster", "consumer_group", "topic"], how="left_anti")
    # the broker of the original copy receives its send-backs (the row's broker)
    j = with_retry_max(j, retry_max).withColumn("_max", F.coalesce(F.col("retry_max"),
                                                                   F.lit(DEFAULT_RETRY_MAX_TIMES)))
    base_ms = F.unix_millis(F.coalesce(F.col("end_ts"), F.col("start_ts")))
    return typed(j.select(
        "cluster", "consumer_group", F.lit("").alias("client_id"), *QUEUE[1:], "queue_offset", "uniq_key", "keys",
        F.col("_r").alias("reconsume_times"), F.col("_max").alias("max_reconsume_times"), F.lit("RETRYING").alias("reason"),
        F.col("start_ts").alias("last_attempt_ts"),
        F.timestamp_millis(base_ms + remaining_delay_ms_col(F.col("_r"), F.col("_max"))).alias("dlq_eta_ts"),
    ))


def blocking_commit(series: DataFrame, deliveries: DataFrame, messages: DataFrame, retry_max: DataFrame, *,
                    blocking_min_age_s: int) -> DataFrame:
    """``BLOCKING_COMMIT``: the message at ``C_S`` has had a delivery in flight since ``t_S - blocking_min_age``.

    Every committed offset pins alike (``ProcessQueue.removeMessage``): a clustering group's queues, its
    ``%RETRY%G`` queues (a retry copy that hangs; reported at its original copy, spec §5) and each broadcast
    client's own queues (its ``offsets.json``; 0 retries of at most 0, as BROADCAST_DROPPED). S is the key's newest
    snapshot, with or without queue bounds (rule 20 needs no Min/Max). ``deliveries`` must be client-normalised
    (:func:`jobs.rules.snapshots.deliveries_in_window`).
    """
    bcast = broadcast_groups(series).withColumn("_bcast", F.lit(True))
    s = (
        newest(series).join(bcast, on=["cluster", "consumer_group"], how="left")
        # a broadcast group's offsets are its clients' (a broker-side entry of it has no client to pin)
        .where((F.col("client_id") != "") == F.col("_bcast").isNotNull())
        .select(*SERIES_KEY, F.col("committed_offset").alias("queue_offset"), "snapshot_ts",
                F.col("_bcast").isNotNull().alias("_bcast"))
        .join(message_at(messages), on=[*QUEUE, "queue_offset"], how="inner")
    )
    hung = deliveries.where(F.col("end_ts").isNull()).select(
        "cluster", "consumer_group", "client_id", "uniq_key", F.col("retry_times").alias("_r"),
        F.col("start_ts").alias("_start"), F.col("request_id").alias("_req"))
    j = s.join(hung, on=["cluster", "consumer_group", "client_id", "uniq_key"], how="inner").where(
        F.col("_start") <= F.col("snapshot_ts") - F.expr(f"INTERVAL {int(blocking_min_age_s)} SECONDS"))
    # where the row is reported: a retry copy's original when it resolves, else the message at C_S itself
    orig = first_original(messages).select("cluster", "uniq_key", *[F.col(c).alias(f"_o_{c}") for c in
                                                                     ("topic", "broker", "queue_id", "queue_offset")])
    copy = is_system_topic_col(F.col("topic")) & F.col("_o_topic").isNotNull()
    place = ["topic", "broker", "queue_id", "queue_offset"]
    j = with_retry_max(j, retry_max)  # the committed queue's broker
    j = j.join(orig, on=["cluster", "uniq_key"], how="left").select(
        *[c for c in j.columns if c not in place],
        *[F.when(copy, F.col(f"_o_{c}")).otherwise(F.col(c)).alias(c) for c in place])
    # one row per message: the latest started delivery in flight (an original and its retry copy can both hang)
    w = Window.partitionBy("cluster", "consumer_group", "client_id", *place, "uniq_key").orderBy(
        F.col("_start").desc(), F.col("_req").desc())
    j = j.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
    return typed(j.select(
        "cluster", "consumer_group", "client_id", *QUEUE[1:], "queue_offset", "uniq_key", "keys",
        F.col("_r").alias("reconsume_times"),
        F.when(F.col("_bcast"), F.lit(0)).otherwise(F.coalesce(F.col("retry_max"), F.lit(DEFAULT_RETRY_MAX_TIMES)))
        .alias("max_reconsume_times"),
        F.lit("BLOCKING_COMMIT").alias("reason"), F.col("_start").alias("last_attempt_ts"),
        F.lit(None).cast("timestamp").alias("dlq_eta_ts"),
    ))


def orderly_blocked(series: DataFrame, deliveries: DataFrame, messages: DataFrame, retry_max: DataFrame,
                    orderly: DataFrame, fifo: DataFrame, *, dlq_warn_retries: int) -> DataFrame:
    """``ORDERLY_BLOCKED`` (spec §4.1): the message at C_S (the key's newest snapshot) of an orderly queue has
    >= ``dlq_warn_retries`` deliveries by G (SubBefore records, the first included), none successful.

    ``reconsume_times`` = its highest retryTimes, ``max_reconsume_times`` = Integer.MAX_VALUE (a 4.x orderly
    consumer) or the group's retryMaxTimes on the committed queue's broker when the FIFO flag is set (``fifo``),
    ``last_attempt_ts`` = the latest delivery's start, no ETA (the client's suspend interval, not delay levels).
    The row is at the original copy when the message at C_S is a retry copy (a FIFO group's ``%RETRY%G``).
    """
    s = (newest(series).where(F.col("client_id") == "")
         .join(orderly, on=["cluster", "consumer_group", "topic"], how="left_semi")
         .select(*SERIES_KEY, F.col("committed_offset").alias("queue_offset"), "snapshot_ts")
         .join(message_at(messages), on=[*QUEUE, "queue_offset"], how="inner"))
    per_key = deliveries.where(F.col("uniq_key").isNotNull()).groupBy("cluster", "consumer_group", "uniq_key").agg(
        F.count(F.lit(1)).alias("_n"), F.max(F.coalesce(F.col("success"), F.lit(False)).cast("int")).alias("_ok"),
        F.max("retry_times").alias("_r"), F.max("start_ts").alias("_start"))
    j = s.join(per_key.where((F.col("_n") >= F.lit(dlq_warn_retries)) & (F.col("_ok") == 0)),
               on=["cluster", "consumer_group", "uniq_key"], how="inner")
    j = with_retry_max(j, retry_max).join(fifo.withColumn("_fifo", F.lit(True)), on=["cluster", "consumer_group"],
                                          how="left")
    orig = first_original(messages).select("cluster", "uniq_key", *[F.col(c).alias(f"_o_{c}") for c in
                                                                     ("topic", "broker", "queue_id", "queue_offset")])
    copy = is_system_topic_col(F.col("topic")) & F.col("_o_topic").isNotNull()
    place = ["topic", "broker", "queue_id", "queue_offset"]
    j = j.join(orig, on=["cluster", "uniq_key"], how="left").select(
        *[c for c in j.columns if c not in place],
        *[F.when(copy, F.col(f"_o_{c}")).otherwise(F.col(c)).alias(c) for c in place])
    w = Window.partitionBy("cluster", "consumer_group", *place, "uniq_key").orderBy(F.col("_start").desc())
    j = j.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
    return typed(j.select(
        "cluster", "consumer_group", F.lit("").alias("client_id"), *QUEUE[1:], "queue_offset", "uniq_key", "keys",
        F.col("_r").alias("reconsume_times"),
        F.when(F.col("_fifo").isNotNull(), F.coalesce(F.col("retry_max"), F.lit(DEFAULT_RETRY_MAX_TIMES)))
        .otherwise(F.lit(ORDERLY_MAX_RECONSUME)).alias("max_reconsume_times"),
        F.lit("ORDERLY_BLOCKED").alias("reason"), F.col("_start").alias("last_attempt_ts"),
        F.lit(None).cast("timestamp").alias("dlq_eta_ts"),
    ))


def transaction_discarded(messages: DataFrame) -> DataFrame:
    """``TRANSACTION_DISCARDED`` (spec §4.3): one row per (real topic, broker, real queue, UNIQ_KEY) of the records in
    ``TRANS_CHECK_MAX_TIME_TOPIC`` (``DefaultTransactionalMessageCheckListener.resolveDiscardMsg`` keeps the half's
    properties: ``REAL_TOPIC``, ``REAL_QID``, ``PGROUP``), at the newest such copy: ``last_attempt_ts`` its store
    time; no offset (never committed to the real topic), no reconsume times, no ETA."""
    props = F.col("properties")
    t = messages.where((F.col("topic") == TRANS_CHECK_TOPIC) & F.col("uniq_key").isNotNull()
                       & props.getItem("REAL_TOPIC").isNotNull()).select(
        "cluster", props.getItem("REAL_TOPIC").alias("topic"), "broker",
        F.expr("try_cast(properties['REAL_QID'] AS INT)").alias("queue_id"), "uniq_key", "keys", "store_ts",
        "physical_offset", props.getItem("PGROUP").alias("producer_group"))
    w = Window.partitionBy("cluster", "topic", "broker", "queue_id", "uniq_key").orderBy(
        F.col("store_ts").desc(), F.col("physical_offset").desc())
    t = t.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
    return typed(t.select(
        "cluster", F.lit("").alias("consumer_group"), F.lit("").alias("client_id"), "topic", "broker", "queue_id",
        F.lit(None).cast("long").alias("queue_offset"), "uniq_key", "keys",
        F.lit(None).cast("int").alias("reconsume_times"), F.lit(None).cast("int").alias("max_reconsume_times"),
        F.lit("TRANSACTION_DISCARDED").alias("reason"), F.col("store_ts").alias("last_attempt_ts"),
        F.lit(None).cast("timestamp").alias("dlq_eta_ts"), "producer_group"))


def broadcast_dropped(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """``BROADCAST_DROPPED``: per client and key, the latest failed delivery of a broadcast group (rule 16)."""
    failed = deliveries.where(F.col("is_broadcast") & (F.col("success") == F.lit(False)))
    w = Window.partitionBy("cluster", "consumer_group", "client_id", "uniq_key").orderBy(
        F.col("start_ts").desc(), F.col("request_id").desc())
    last = failed.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").select(
        "cluster", "consumer_group", "client_id", "uniq_key", "start_ts")
    j = last.join(first_original(messages), on=["cluster", "uniq_key"], how="inner")
    return typed(j.select(
        "cluster", "consumer_group", "client_id", *QUEUE[1:], "queue_offset", "uniq_key", "keys",
        # broadcast mode never retries (spec §4): 0 reconsumes of at most 0
        F.lit(0).alias("reconsume_times"), F.lit(0).alias("max_reconsume_times"),
        F.lit("BROADCAST_DROPPED").alias("reason"), F.col("start_ts").alias("last_attempt_ts"),
        F.lit(None).cast("timestamp").alias("dlq_eta_ts"),
    ))


def dlq_candidates(series: DataFrame, deliveries: DataFrame, messages: DataFrame, subscription_groups: DataFrame, *,
                   as_of: dt.datetime, dlq_warn_retries: int = 3, blocking_min_age_s: int = 900,
                   evidence: DataFrame | None = None) -> DataFrame:
    """The gold/dlq_candidates rows (without run_id).

    Args:
        series: :func:`jobs.rules.snapshots.offset_series`.
        deliveries: silver/deliveries (those started after t_S or ``as_of`` are ignored).
        messages: silver/messages.
        subscription_groups: silver/subscription_groups (``retryMaxTimes`` at S; 16 when unknown).
        as_of: the reconciliation time.
        dlq_warn_retries: RETRYING from this many retries on (default 3).
        blocking_min_age_s: BLOCKING_COMMIT when in flight at least this long before t_S (default 900, the
            client's consumeTimeout).
        evidence: the local redeliveries (:func:`jobs.rules.modes.local_redeliveries`), when computed already.

    Returns:
        ``schemas.dlq_candidates.REPORT_COLUMNS``.
    """
    from jobs.rules import modes

    d = deliveries_in_window(deliveries, series, as_of=as_of)
    rmax = retry_max_times(subscription_groups, as_of=as_of)
    if evidence is None:
        evidence = modes.local_redeliveries(d, messages)
    fifo = modes.fifo_groups(subscription_groups, as_of=as_of)
    orderly = modes.orderly_pairs(series, evidence, fifo)
    return (
        in_dlq(d, messages, rmax)
        .unionByName(retrying(d, messages, rmax, dlq_warn_retries=dlq_warn_retries, orderly=orderly))
        .unionByName(blocking_commit(series, d, messages, rmax, blocking_min_age_s=blocking_min_age_s))
        .unionByName(broadcast_dropped(d, messages))
        .unionByName(orderly_blocked(series, d, messages, rmax, orderly, fifo, dlq_warn_retries=dlq_warn_retries))
        .unionByName(transaction_discarded(messages))
    )
