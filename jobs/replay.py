"""Commit replay: what each client would have committed, from its deliveries (spec §4, formats §3).

A concurrent push consumer commits the lowest offset still in its ProcessQueue (``ProcessQueue.removeMessage``).
With L(o) the time the first delivery of offset o left the ProcessQueue (its SubAfter; never for one in
flight) and D(o) = max L(o') over o' <= o (a running max), the commit at time t is the smallest pulled o with
D(o) > t (spec §4 identity), or one past the last pulled offset when everything has left.

* ``commit_timeline``: the per-offset timeline (L, D) per (group, client host, queue, ProcessQueue lifetime).
* ``replayed_commits``: the client's commit around each snapshot, by the as-of form of that identity.
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


# Several values travel as one decimal(38, 0) so that one window computes what would take several (Sail runs
# each window function as its own pass over the rows, and a max over a struct about 10x slower than over a
# decimal): ``hi * scale + lo`` with 0 <= lo < scale orders as (hi, lo) and unpacks exactly.
DEC = "decimal(38,0)"
# Microseconds of any Spark timestamp (years 1-9999) plus US_SHIFT lie in [0, NEVER_US); NEVER_US stands for
# "never" (an entry still in flight) and sorts after every real time.
US_SHIFT = 10**17
NEVER_US = 10**18
LIFE_SCALE = 10**19  # (lifetime, shifted microseconds)
OFFSET_SCALE = 10**20  # (lifetime, queue offset + OFFSET_SHIFT): every long offset fits
OFFSET_SHIFT = 10**19
ID_SCALE = 10**10  # (hid, lifetime) in the active pass: both count deliveries of one run, below 10^10


def _dec(n: int) -> Column:
    return F.lit(Decimal(n)).cast(DEC)


def _pack(hi: Column, lo: Column, scale: int) -> Column:
    return hi.cast(DEC) * _dec(scale) + lo.cast(DEC)


def _low(packed: Column, hi: Column, scale: int) -> Column:
    """``lo`` of ``packed`` when its ``hi`` is known."""
    return packed - hi.cast(DEC) * _dec(scale)


def _split(packed: Column, scale: int) -> tuple[Column, Column]:
    """(hi, lo) of ``packed`` as longs."""
    lo = packed % _dec(scale)
    return ((packed - lo) / _dec(scale)).cast("long"), lo.cast("long")


def commit_timeline(deliveries: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """Per client host and queue, each first-delivered offset with when it left the ProcessQueue.

    Args:
        deliveries: silver/deliveries (retry deliveries are of retry copies in another queue: ignored; so are
            deliveries without a queue, which no snapshot or duplicate can be matched with).
        as_of: deliveries that started later are ignored.

    Returns:
        ``TIMELINE_KEY`` + sid, hid (:func:`with_queue_ids`), lifetime, lifetime_start (the lifetime's first
        entry), queue_offset, next_offset and next_start_ts (the lifetime's next entry, null for the last),
        start_ts, left_ts (null: never left), in_flight_upto (some offset <= this one never left) and d_ts (D(o),
        null when infinite).
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
    # with each lifetime is a running max of (lifetime, value) (lifetimes only grow). One sort for all of it.
    by_time = Window.partitionBy("hid").orderBy("start_ts", "queue_offset", "request_id")
    upto = by_time.rowsBetween(Window.unboundedPreceding, 0)
    before = F.max("queue_offset").over(by_time.rowsBetween(Window.unboundedPreceding, -1))
    # a restart unless at or above every earlier offset (the first row, with nothing before, starts one too)
    restarts = (d.withColumn("_restart", F.when(F.col("queue_offset") >= before, 0).otherwise(1))
                .withColumn("lifetime", (F.sum("_restart").over(upto) - 1).cast("long")))
    life = F.col("lifetime")
    # One entry per offset and lifetime: the first delivery of it (the one that was pulled into this queue); the
    # deliveries of one offset in one lifetime are consecutive in this order.
    here = _pack(life, F.col("queue_offset").cast(DEC) + _dec(OFFSET_SHIFT), OFFSET_SCALE)
    prev = F.col("_prev")  # a column first: Sail cannot plan a window function inside a filter
    entries = (restarts.withColumn("_prev", F.lag(here).over(by_time)).where(prev.isNull() | (prev != here)))
    # D(o) and in-flight in one running max: an entry that never left leaves at NEVER_US.
    left_us = F.coalesce(F.unix_micros(F.col("left_ts")) + F.lit(US_SHIFT), F.lit(NEVER_US))
    latest = _low(F.max(_pack(life, left_us, LIFE_SCALE)).over(upto), life, LIFE_SCALE)
    in_flight = latest == _dec(NEVER_US)
    nxt = _low(F.lead(here).over(by_time), life, OFFSET_SCALE)  # the next entry, in this lifetime when < SCALE
    same_life = nxt < _dec(OFFSET_SCALE)
    return entries.select(
        *TIMELINE_KEY, "sid", "hid", "lifetime", (F.col("_restart") == 1).alias("lifetime_start"), "queue_offset",
        F.when(same_life, (nxt - _dec(OFFSET_SHIFT)).cast("long")).alias("next_offset"),
        F.when(same_life, F.lead("start_ts").over(by_time)).alias("next_start_ts"),
        "start_ts", "left_ts",
        in_flight.alias("in_flight_upto"),
        F.when(~in_flight, F.timestamp_micros((latest - F.lit(US_SHIFT)).cast("long"))).alias("d_ts"),
    )


def replayed_commits(timeline: DataFrame, series: DataFrame) -> DataFrame:
    """The client's commit at ``t_s - 10 s`` (lower) and at ``t_s`` (upper) for every snapshot the replay covers.

    The active ProcessQueue at ``t_s`` is the lifetime of the latest delivery started at or before it; when
    that lifetime had pulled nothing 10 s earlier, the lower bound is its first offset.

    As-of form of the spec §4 identity, with no snapshot x timeline join. Within a lifetime the commit (the
    smallest pulled offset not yet left, or one past the last pulled) never goes down, and it changes only at
    D(o_j) (everything up to o_j has left: it becomes o_(j+1) when that was pulled, else o_j + 1) and at the
    start of o_(j+1) when that comes after D(o_j) (it becomes o_(j+1)). So the commit at x is the largest value
    among these breakpoints at or before x, plus the first offset "before everything" (the lower bound's rule).
    Two sorted passes of one running max each, with the probe times interleaved as marker rows: one per
    (G, client, q) for the active lifetime, one per lifetime over the breakpoints.
    """
    # the queue names of each sid, from the first entry of each lifetime (a small fraction of the rows)
    sids = timeline.where(F.col("lifetime_start")).select(*SERIES_KEY, "sid").distinct()
    s = sids.join(series.select(*SERIES_KEY, "snapshot_ts", "committed_offset"), on=SERIES_KEY, how="inner")
    life_key = ["hid", "lifetime"]
    marker = F.lit(1)
    entry = F.lit(0)
    none_dec = F.lit(None).cast(DEC)

    # 1. the active lifetime at t_s: the (host, lifetime) of the last entry started at or before t_s, in the order
    # (start, hid, lifetime) (hid follows client_host within a sid): one running max of the three packed.
    ids = _pack(F.col("hid"), F.col("lifetime"), ID_SCALE)
    ents = timeline.select("sid", F.col("start_ts").alias("_k"), entry.alias("_m"),
                           _pack(F.unix_micros("start_ts") + F.lit(US_SHIFT), ids, ID_SCALE * ID_SCALE).alias("_e"))
    marks = s.select("sid", F.col("snapshot_ts").alias("_k"), marker.alias("_m"), none_dec.alias("_e"))
    upto = Window.partitionBy("sid").orderBy("_k", "_m").rowsBetween(Window.unboundedPreceding, 0)
    hid, lifetime = _split(F.col("_a") % _dec(ID_SCALE * ID_SCALE), ID_SCALE)
    lag = F.expr(f"INTERVAL {BROKER_LAG_S} SECONDS")
    # 2. probes at t_s (upper) and t_s - 10 s (lower) in that lifetime, both from one row (Sail computes a frame
    # used twice twice)
    probes = (
        ents.unionByName(marks)
        .select("sid", "_k", "_m", F.max("_e").over(upto).alias("_a"))
        .where((F.col("_m") == 1) & F.col("_a").isNotNull())
        .select("sid", F.col("_k").alias("snapshot_ts"), hid.alias("hid"), lifetime.alias("lifetime"),
                F.explode(F.array(F.lit(False), F.lit(True))).alias("_lower"))
        .select(*life_key, "sid", "snapshot_ts", "_lower",
                F.when(F.col("_lower"), F.col("snapshot_ts") - lag).otherwise(F.col("snapshot_ts")).alias("_k"))
    )
    # 3. the breakpoints of each lifetime (k null: before everything; nulls sort first), from one row per entry
    o, nxt, nstart, d = F.col("queue_offset"), F.col("next_offset"), F.col("next_start_ts"), F.col("d_ts")
    after_left = F.when(nstart <= d, nxt).otherwise(o + 1)
    # one row per entry and kind (0: first offset, 1: at D(o), 2: at the next start), from one read
    kind = F.col("_kind")
    ok = (F.when(kind == 0, F.col("lifetime_start")).when(kind == 1, d.isNotNull())
          .otherwise(d.isNotNull() & (nstart > d)))
    points = (timeline.select(*life_key, o.alias("queue_offset"), nxt.alias("next_offset"),
                              nstart.alias("next_start_ts"), d.alias("d_ts"), "lifetime_start",
                              F.explode(F.array(F.lit(0), F.lit(1), F.lit(2))).alias("_kind"))
              .where(ok)
              .select(*life_key, F.when(kind == 1, d).when(kind == 2, nstart).alias("_k"), entry.alias("_m"),
                      F.when(kind == 0, o).when(kind == 1, after_left).otherwise(nxt).alias("_v"),
                      F.lit(None).cast("long").alias("sid"), F.lit(None).cast("timestamp").alias("snapshot_ts"),
                      F.lit(None).cast("boolean").alias("_lower")))
    # Breakpoints sort before a probe at the same time: pulled at x counts, D(o) = x does not exceed x.
    rows = points.unionByName(probes.select(*life_key, "_k", marker.alias("_m"), F.lit(None).cast("long").alias("_v"),
                                            "sid", "snapshot_ts", "_lower"))
    ordered = Window.partitionBy(*life_key).orderBy(F.col("_k").asc_nulls_first(), "_m").rowsBetween(
        Window.unboundedPreceding, 0)
    commits = (rows.select("sid", "snapshot_ts", "_lower", "_m", F.max("_v").over(ordered).alias("_c"))
               .where(F.col("_m") == 1))
    return (
        commits.groupBy("sid", "snapshot_ts")
        .agg(F.max(F.when(~F.col("_lower"), F.col("_c"))).alias("upper"),
             F.max(F.when(F.col("_lower"), F.col("_c"))).alias("lower"))
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
