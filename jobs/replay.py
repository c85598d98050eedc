"""Commit replay: what each client would have committed, from its deliveries (spec §4, formats §3).

A concurrent push consumer commits the lowest offset still in its ProcessQueue (``ProcessQueue.removeMessage``).
With L(o) the time the first delivery of offset o left the ProcessQueue (its SubAfter; never for one in
flight) and D(o) = max L(o') over o' <= o (a running max), the commit at time t is the smallest pulled o with
D(o) > t (spec §4 identity), or one past the last pulled offset when everything has left.

* ``commit_timeline``: the per-offset timeline (L, D) per (group, client host, queue, ProcessQueue lifetime).
* ``agreement``: does the broker's copy at each snapshot lie where the replay says it can be?
* ``duplicate_causes``: why an offset was delivered twice (docs/semantics.md rule 12).

A ProcessQueue *lifetime* of one client host on one queue ends when that host delivers an offset below one it
already delivered (a restart or a re-assignment starting from an older commit): within one lifetime the
pulls, hence the first deliveries, go up in offset order.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Optional

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.snapshots import SERIES_KEY, _ts, decreases

TIMELINE_KEY = ["cluster", "consumer_group", "client_id", "client_host", "topic", "broker", "queue_id"]
# The broker's copy lags the client's by up to one client persist (5 s) plus one broker flush (5 s).
BROKER_LAG_S = 10
CAUSE_RANK = {"UNKNOWN": 0, "UNPERSISTED": 1, "HEAD_BLOCKED": 2, "REWIND": 3}


def cause_rank_col(cause: Column) -> Column:
    """REWIND > HEAD_BLOCKED > UNPERSISTED > UNKNOWN (rule 10) as a number."""
    out = F.lit(0)
    for name, rank in CAUSE_RANK.items():
        out = F.when(cause == name, F.lit(rank)).otherwise(out)
    return out


def cause_of_rank_col(rank: Column) -> Column:
    out = F.lit("UNKNOWN")
    for name, r in CAUSE_RANK.items():
        out = F.when(rank == r, F.lit(name)).otherwise(out)
    return out


def with_queue_ids(frame: DataFrame) -> DataFrame:
    """``frame`` (with every ``TIMELINE_KEY`` column) plus dense integer ids of its queues.

    ``sid`` numbers the ``SERIES_KEY`` values, ``hid`` the ``TIMELINE_KEY`` values, in ``client_host`` order
    within a ``sid``. Why: windows partitioned by one integer instead of seven strings run 2-3x faster on Sail
    (DataFusion), and the ids are exact (a dense numbering, not a hash).
    """
    keys = frame.select(*TIMELINE_KEY).distinct()
    every = Window.partitionBy(F.lit(0))  # all keys in one partition: one row per queue and host
    keys = keys.select(*TIMELINE_KEY, F.dense_rank().over(every.orderBy(*SERIES_KEY)).cast("long").alias("sid"),
                       F.row_number().over(every.orderBy(*SERIES_KEY, "client_host")).cast("long").alias("hid"))
    return keys.join(frame, on=TIMELINE_KEY, how="inner")  # the small frame on the left (Sail builds from it)


# A running max of (lifetime, value) as one number: lifetime * 10^18 + value in microseconds (|value| < 2.6e17
# for any Spark timestamp), a decimal(38, 0). Lifetimes only grow along the timeline's order, so the running
# max of this is the max of the value within the current lifetime. Sail computes a max over a struct about
# 10x slower than over a decimal.
LIFE_SCALE = 10**18


def _life_value(lifetime: Column, value_us: Column) -> Column:
    dec = "decimal(38,0)"
    return lifetime.cast(dec) * F.lit(LIFE_SCALE).cast(dec) + value_us.cast(dec)


def _value_of(packed: Column, lifetime: Column) -> Column:
    return (packed - _life_value(lifetime, F.lit(0))).cast("long")


def commit_timeline(deliveries: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """Per client host and queue, each first-delivered offset with when it left the ProcessQueue.

    Args:
        deliveries: silver/deliveries (retry deliveries are of retry copies in another queue: ignored; so are
            deliveries without a queue, which no snapshot or duplicate can be matched with).
        as_of: deliveries that started later are ignored.

    Returns:
        ``TIMELINE_KEY`` + sid, hid (:func:`with_queue_ids`), lifetime, queue_offset, next_offset (the next
        entry's offset in the lifetime, null for the last), start_ts, left_ts (null: never left), in_flight_upto
        (some offset <= this one never left) and d_ts (D(o), null when infinite).
    """
    d = deliveries.where((F.col("retry_times") == 0) & F.col("queue_offset").isNotNull()
                         & F.col("start_ts").isNotNull())
    for k in SERIES_KEY:
        if k != "client_id":
            d = d.where(F.col(k).isNotNull())
    if as_of is not None:
        d = d.where(F.col("start_ts") <= _ts(as_of))
    d = d.select(*[F.coalesce(F.col(c), F.lit("")).alias(c) if c in ("client_id", "client_host") else F.col(c)
                   for c in TIMELINE_KEY],
                 F.col("queue_offset").cast("long"), "start_ts", F.col("end_ts").alias("left_ts"), "request_id")
    d = with_queue_ids(d)
    # Everything in one ordering (per queue and host, by start): within a lifetime the offsets rise with the start
    # time, so the lifetime's "per offset" windows are running windows of this one, and a value that must restart
    # with each lifetime is a running max of (lifetime, value) (lifetimes only grow). One sort instead of three.
    by_time = Window.partitionBy("hid").orderBy("start_ts", "queue_offset", "request_id")
    upto = by_time.rowsBetween(Window.unboundedPreceding, 0)
    restarts = d.withColumn(
        "_restart",
        F.when(F.col("queue_offset") < F.max("queue_offset").over(by_time.rowsBetween(Window.unboundedPreceding, -1)),
               1).otherwise(0),
    ).withColumn("lifetime", F.sum("_restart").over(upto).cast("long"))
    # One entry per offset and lifetime: the first delivery of it (the one that was pulled into this queue); the
    # deliveries of one offset in one lifetime are consecutive in this order.
    prev_life = F.lag("lifetime").over(by_time)
    new_entry = (prev_life.isNull() | (prev_life != F.col("lifetime"))
                 | (F.lag("queue_offset").over(by_time) != F.col("queue_offset")))
    life = F.col("lifetime")
    entries = (restarts.withColumn("_new", new_entry).where("_new")
               .withColumn("_open", F.col("left_ts").isNull().cast("long"))
               .withColumn("_left", F.coalesce(F.unix_micros(F.col("left_ts")), F.lit(0).cast("long"))))
    in_flight = (F.max(life * 2 + F.col("_open")).over(upto) - life * 2) == 1
    latest = F.max(_life_value(life, F.col("_left"))).over(upto)
    next_offset = F.when(F.lead("lifetime").over(by_time) == life, F.lead("queue_offset").over(by_time))
    return entries.select(
        *TIMELINE_KEY, "sid", "hid", "lifetime", "queue_offset", next_offset.alias("next_offset"), "start_ts", "left_ts",
        in_flight.alias("in_flight_upto"),
        F.when(~in_flight, F.timestamp_micros(_value_of(latest, life))).alias("d_ts"),
    )


def replayed_commits(timeline: DataFrame, series: DataFrame) -> DataFrame:
    """The client's commit at ``t_s - 10 s`` (lower) and at ``t_s`` (upper) for every snapshot the replay covers.

    The active ProcessQueue at ``t_s`` is the lifetime of the latest delivery started at or before it; when
    that lifetime had pulled nothing 10 s earlier, the lower bound is its first offset.

    As-of form of the spec §4 identity, with no snapshot x timeline join: within a lifetime, offsets rise with
    their start time and D(o) rises with the offset, so with P(x) the last offset pulled by x and o*(x) the
    first offset whose D exceeds x (the entry after the last one whose D is at most x), the commit at x is
    min(o*(x), P(x) + 1). Two sorted passes of running windows, each with the probe times interleaved as
    marker rows: one per (G, client, q) for the active lifetime, one per lifetime for P and o*.
    """
    sids = timeline.groupBy("sid").agg(*[F.first(k).alias(k) for k in SERIES_KEY])
    s = sids.join(series.select(*SERIES_KEY, "snapshot_ts", "committed_offset"), on=SERIES_KEY, how="inner")
    life_key = ["hid", "lifetime"]
    marker = F.lit(1)
    entry = F.lit(0)
    none_long = F.lit(None).cast("long")
    dec = "decimal(38,0)"

    # 1. the active lifetime at t_s: the (host, lifetime) of the last entry started at or before t_s, in the order
    # (start, hid, lifetime) (hid follows client_host within a sid): a running max of the three packed in one
    # decimal, start_us * 10^20 + hid * 10^10 + lifetime (hid and lifetime count deliveries: below 10^10).
    ents = timeline.select("sid", F.col("start_ts").alias("_k"), entry.alias("_m"),
                           (F.unix_micros("start_ts").cast(dec) * F.lit(Decimal(10**20)).cast(dec)
                            + F.col("hid").cast(dec) * F.lit(Decimal(10**10)).cast(dec)
                            + F.col("lifetime").cast(dec)).alias("_e"))
    marks = s.select("sid", F.col("snapshot_ts").alias("_k"), marker.alias("_m"), F.lit(None).cast(dec).alias("_e"))
    upto = Window.partitionBy("sid").orderBy("_k", "_m").rowsBetween(Window.unboundedPreceding, 0)
    last_entry = F.max("_e").over(upto)
    low = F.col("_a") % F.lit(Decimal(10**20)).cast(dec)
    lag = F.expr(f"INTERVAL {BROKER_LAG_S} SECONDS")
    # 2. probes at t_s (upper) and t_s - 10 s (lower) in that lifetime, both from one row (Sail would compute a
    # frame used twice twice)
    probes = (
        ents.unionByName(marks)
        .select("sid", "_k", "_m", last_entry.alias("_a"))
        .where((F.col("_m") == 1) & F.col("_a").isNotNull())
        .select("sid", F.col("_k").alias("snapshot_ts"),
                ((low - low % F.lit(Decimal(10**10)).cast(dec)) / F.lit(Decimal(10**10)).cast(dec)).cast("long").alias("hid"),
                (low % F.lit(Decimal(10**10)).cast(dec)).cast("long").alias("lifetime"),
                F.explode(F.array(F.struct(F.col("_k").alias("x"), F.lit(False).alias("lower")),
                                  F.struct((F.col("_k") - lag).alias("x"), F.lit(True).alias("lower")))).alias("_p"))
        .select(*life_key, "sid", "snapshot_ts", F.col("_p.x").alias("_x"), F.col("_p.lower").alias("_lower"))
    )
    none_ts = F.lit(None).cast("timestamp")
    none_bool = F.lit(None).cast("boolean")
    # One sorted pass per lifetime over three kinds of rows: each entry at its start time (a pull), each entry that
    # left at D(o) (in flight: never, no row), and each probe at x. Entries sort before a probe at the same time:
    # pulled at x counts, D(o) = x does not exceed x. P(x) = the largest pulled offset so far; o*(x) = the next
    # offset of the last D row so far (D rises with the offset), the lifetime's first offset when there is none,
    # and past P(x) when the last entry has left (no next offset: "never").
    never_next = F.lit(2**63 - 1).cast("long")
    rows = (
        timeline.select(*life_key, F.col("start_ts").alias("_k"), entry.alias("_m"), F.col("queue_offset").alias("_pull"),
                        none_long.alias("_next"), none_long.alias("sid"), none_ts.alias("snapshot_ts"),
                        none_bool.alias("_lower"))
        .unionByName(timeline.where(F.col("d_ts").isNotNull())
                     .select(*life_key, F.col("d_ts").alias("_k"), entry.alias("_m"), none_long.alias("_pull"),
                             F.coalesce(F.col("next_offset"), never_next).alias("_next"), none_long.alias("sid"),
                             none_ts.alias("snapshot_ts"), none_bool.alias("_lower")))
        .unionByName(probes.select(*life_key, F.col("_x").alias("_k"), marker.alias("_m"), none_long.alias("_pull"),
                                   none_long.alias("_next"), "sid", "snapshot_ts", "_lower"))
    )
    ordered = Window.partitionBy(*life_key).orderBy("_k", "_m").rowsBetween(Window.unboundedPreceding, 0)
    p_next = F.col("_p") + 1
    commits = (
        rows.select("sid", "snapshot_ts", "_lower", "_m",
                    F.max("_pull").over(ordered).alias("_p"),
                    F.max("_next").over(ordered).alias("_o"),
                    F.min("_pull").over(Window.partitionBy(*life_key)).alias("_first"))
        .where(F.col("_m") == 1)
        .select("sid", "snapshot_ts", "_lower", "_first",
                F.when(F.col("_p").isNotNull(),
                       F.least(F.coalesce(F.col("_o"), F.col("_first")), p_next)).alias("_c"))
    )
    return (
        commits.groupBy("sid", "snapshot_ts")
        .agg(F.max(F.when(~F.col("_lower"), F.col("_c"))).alias("upper"),
             F.coalesce(F.max(F.when(F.col("_lower"), F.col("_c"))), F.min("_first")).alias("lower"))
        .join(s, on=["sid", "snapshot_ts"], how="inner")
        .drop("sid")
    )


def agreement(timeline: DataFrame, series: DataFrame) -> DataFrame:
    """Per (cluster, consumer_group): snapshots compared, agreeing, and their ratio.

    A snapshot is compared when the replay has a ProcessQueue for its (G, client, q) at ``t_s``; it agrees when
    ``C_s`` lies in [replayed commit at ``t_s - 10 s``, replayed commit at ``t_s``].
    """
    r = replayed_commits(timeline, series)
    agrees = (F.col("committed_offset") >= F.col("lower")) & (F.col("committed_offset") <= F.col("upper"))
    return (
        r.groupBy("cluster", "consumer_group")
        .agg(F.count(F.lit(1)).cast("long").alias("compared"), F.sum(agrees.cast("long")).cast("long").alias("agreeing"))
        .withColumn("ratio", (F.col("agreeing") / F.col("compared")).cast("double"))
    )


def duplicate_causes(duplicated: DataFrame, timeline: DataFrame, series: DataFrame) -> DataFrame:
    """The cause of each TRACE-duplicated offset (docs/semantics.md rule 12).

    Args:
        duplicated: one row per duplicated offset copy: ``SERIES_KEY`` + queue_offset, d1_host, d1_start, b
            (the client host and start of the first first-delivery, the start of the second), unique per
            ``SERIES_KEY`` + queue_offset + uniq_key.
        timeline: :func:`commit_timeline`.
        series: :func:`jobs.snapshots.offset_series`.

    Returns:
        The rows of ``duplicated`` with ``cause``: ``REWIND`` when the committed offset dropped over o between
        the two deliveries, else ``HEAD_BLOCKED`` when in d1's ProcessQueue some offset <= o had not left by b
        (D(o) > b), else ``UNPERSISTED``; ``UNKNOWN`` when o is not in a timeline of d1's host.
    """
    p = duplicated
    pkey = SERIES_KEY + ["queue_offset", "uniq_key"]
    o = F.col("p.queue_offset")
    rew = (
        p.alias("p").join(
            decreases(series).alias("r"),
            on=[F.col(f"p.{k}") == F.col(f"r.{k}") for k in SERIES_KEY]
            + [F.col("r.committed_offset") <= o, o < F.col("r.prev_offset"),
               F.col("r.prev_ts") >= F.col("p.d1_start"), F.col("r.snapshot_ts") <= F.col("p.b")],
            how="inner")
        .select(*[F.col(f"p.{k}").alias(k) for k in pkey]).distinct().withColumn("_rewind", F.lit(True))
    )
    e = timeline.alias("e")
    same_queue = [F.col(f"p.{k}") == F.col(f"e.{k}") for k in SERIES_KEY] + [F.col("p.d1_host") == F.col("e.client_host")]
    life = (
        p.alias("p").join(e, on=same_queue + [F.col("e.queue_offset") == o, F.col("e.start_ts") <= F.col("p.d1_start")],
                          how="inner")
        .groupBy(*[F.col(f"p.{k}").alias(k) for k in pkey]).agg(F.max_by(F.col("e.lifetime"), F.col("e.start_ts")).alias("_life"))
    )
    pl = p.join(life, on=pkey, how="inner")
    blocked = (
        pl.alias("p").join(
            e, on=same_queue + [F.col("e.lifetime") == F.col("p._life"), F.col("e.queue_offset") <= o,
                                F.col("e.start_ts") <= F.col("p.b"),
                                F.col("e.left_ts").isNull() | (F.col("e.left_ts") > F.col("p.b"))],
            how="inner")
        .select(*[F.col(f"p.{k}").alias(k) for k in pkey]).distinct().withColumn("_blocked", F.lit(True))
    )
    out = p.join(rew, on=pkey, how="left").join(life, on=pkey, how="left").join(blocked, on=pkey, how="left")
    cause = (
        F.when(F.col("_rewind"), F.lit("REWIND"))
        .when(F.col("_life").isNull(), F.lit("UNKNOWN"))
        .when(F.col("_blocked"), F.lit("HEAD_BLOCKED"))
        .otherwise(F.lit("UNPERSISTED"))
    )
    return out.withColumn("cause", cause).drop("_rewind", "_life", "_blocked")
