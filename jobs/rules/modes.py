"""Consume mode of each (group, topic) (spec §4.1; docs/semantics.md rule 25): the rules that differ by mode read it.

First match wins: ``BROADCAST`` (the group's progress is in clients' offsets.json), ``ORDERLY`` (the subscription
group's ``consumeMessageOrderly`` flag, a 5.x FIFO group; or a *local redelivery* in the group's traces: a 4.x
orderly consumer retries a failing head in memory, so a delivery with retryTimes k >= 1 has no copy with
reconsumeTimes k in ``%RETRY%G`` or ``SCHEDULE_TOPIC_XXXX``), ``CONCURRENT``. The evidence of a local redelivery
names the original's topic, so an orderly group's ``%RETRY%G`` stays ``CONCURRENT`` unless the flag is set.
``POP`` (second, after ``BROADCAST``): the lake holds a POP checkpoint of the group for the topic or for its POP
retry topic (jobs.rules.pop.pop_pairs); a POP pair is never ``ORDERLY`` (its FIFO flag orders the pops instead).
"""
from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.formats.topics import RETRY_PREFIX, SCHEDULE_TOPIC
from jobs.rules.snapshots import broadcast_groups, first_original

MODES = ("BROADCAST", "POP", "ORDERLY", "CONCURRENT")
EVIDENCE_COLUMNS = ["cluster", "consumer_group", "topic"]


def local_redeliveries(deliveries: DataFrame, messages: DataFrame) -> DataFrame:
    """(cluster, consumer_group, topic) of the groups whose traces show a delivery with retryTimes k >= 1 of a message
    of the topic (its original copy, rule 7) with no copy of reconsumeTimes k in ``%RETRY%G`` or
    ``SCHEDULE_TOPIC_XXXX``: the client consumed it again without the broker (a 4.x orderly consumer).

    ``deliveries``: the deliveries in the run's window; ``messages``: every record the run sees (its retry and
    schedule copies included).
    """
    again = deliveries.where((F.col("retry_times") >= 1) & F.col("uniq_key").isNotNull()).select(
        "cluster", "consumer_group", "uniq_key", "retry_times").distinct()
    copies = messages.where(F.col("topic").startswith(RETRY_PREFIX) & F.col("uniq_key").isNotNull()).select(
        "cluster", F.expr(f"substring(topic, {len(RETRY_PREFIX) + 1})").alias("consumer_group"), "uniq_key",
        F.col("reconsume_times").alias("retry_times"))
    scheduled = messages.where((F.col("topic") == SCHEDULE_TOPIC) & F.col("uniq_key").isNotNull()).select(
        "cluster", "uniq_key", F.col("reconsume_times").alias("retry_times"))
    local = (again.join(copies, on=["cluster", "consumer_group", "uniq_key", "retry_times"], how="left_anti")
             .join(scheduled, on=["cluster", "uniq_key", "retry_times"], how="left_anti"))
    # the original copy of those keys only (first_original ranks each key's copies on its own: the same answer)
    theirs = messages.join(local.select("cluster", "uniq_key").distinct(), on=["cluster", "uniq_key"], how="left_semi")
    orig = first_original(theirs).select("cluster", "uniq_key", "topic")
    return local.join(orig, on=["cluster", "uniq_key"], how="inner").select(*EVIDENCE_COLUMNS).distinct()


def fifo_groups(subscription_groups: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """(cluster, consumer_group) whose latest subscription config at or before ``as_of`` says
    ``consumeMessageOrderly`` on some broker: each broker's own latest row, the one retryMaxTimes is read from
    (:func:`jobs.rules.dlq.latest_subscriptions`, which a scheduled run carries)."""
    from jobs.rules.dlq import latest_subscriptions

    return (latest_subscriptions(subscription_groups, as_of=as_of)
            .where(F.coalesce(F.col("consume_message_orderly"), F.lit(False)))
            .select("cluster", "consumer_group").distinct())


def with_mode(df: DataFrame, series: DataFrame, evidence: DataFrame, fifo: DataFrame,
              pop: DataFrame | None = None) -> DataFrame:
    """``df`` (with cluster, consumer_group, topic) plus ``consume_mode``. ``series``: the offset series (its client
    rows name the broadcast groups); ``evidence``: :func:`local_redeliveries`; ``fifo``: :func:`fifo_groups`;
    ``pop``: the POP pairs (jobs.rules.pop.pop_pairs)."""
    bcast = broadcast_groups(series).withColumn("_bcast", F.lit(True))
    flag = fifo.withColumn("_fifo", F.lit(True))
    local = evidence.withColumn("_local", F.lit(True))
    j = (df.join(bcast, on=["cluster", "consumer_group"], how="left")
         .join(flag, on=["cluster", "consumer_group"], how="left")
         .join(local, on=EVIDENCE_COLUMNS, how="left"))
    if pop is not None:
        j = j.join(pop.select(*EVIDENCE_COLUMNS).distinct().withColumn("_pop", F.lit(True)), on=EVIDENCE_COLUMNS,
                   how="left")
    else:
        j = j.withColumn("_pop", F.lit(None).cast("boolean"))
    return j.withColumn("consume_mode", mode_col()).drop("_bcast", "_fifo", "_local", "_pop")


def mode_col() -> Column:
    return (F.when(F.col("_bcast").isNotNull(), F.lit("BROADCAST"))
            .when(F.col("_pop").isNotNull(), F.lit("POP"))
            .when(F.col("_fifo").isNotNull() | F.col("_local").isNotNull(), F.lit("ORDERLY"))
            .otherwise(F.lit("CONCURRENT")))


def orderly_pairs(series: DataFrame, evidence: DataFrame, fifo: DataFrame, pop: DataFrame | None = None) -> DataFrame:
    """(cluster, consumer_group, topic) of every orderly pair: a FIFO group's topics in the series and the pairs
    with a local redelivery, broadcast groups and POP pairs left out."""
    bcast = broadcast_groups(series)
    flagged = series.select(*EVIDENCE_COLUMNS).distinct().join(fifo, on=["cluster", "consumer_group"], how="inner")
    out = (flagged.unionByName(evidence).distinct()
           .join(bcast, on=["cluster", "consumer_group"], how="left_anti"))
    if pop is not None:
        out = out.join(pop.select(*EVIDENCE_COLUMNS), on=EVIDENCE_COLUMNS, how="left_anti")
    return out


def mode_rows(series: DataFrame, evidence: DataFrame, fifo: DataFrame, pop: DataFrame | None = None) -> DataFrame:
    """(cluster, consumer_group, topic, consume_mode) of every pair of the series that is not ``CONCURRENT``."""
    pairs = series.select(*EVIDENCE_COLUMNS).distinct()
    return with_mode(pairs, series, evidence, fifo, pop).where(F.col("consume_mode") != "CONCURRENT")
