"""Commit replay: what each client would have committed, from its deliveries (spec §4, formats §3).

A concurrent push consumer commits the lowest offset still in its ProcessQueue (``ProcessQueue.removeMessage``).
With L(o) the time the first delivery of offset o left the ProcessQueue (its SubAfter, or the copy cleanExpireMsg
sent back after consumeTimeout; never for one still in flight) and D(o) = max L(o') over o' <= o (a running max), the commit at time t is the smallest pulled o with
D(o) > t (spec §4 identity), or one past the last pulled offset when everything has left.

* ``commit_timeline``: the per-offset timeline (L, D) per (group, client host, queue, ProcessQueue lifetime).
* ``replayed_commits``: the client's commit around each snapshot, by the as-of form of that identity.
* ``agreement``: does the broker's copy at each snapshot lie where the replay says it can be?
* ``duplicate_causes``: why an offset was delivered twice (docs/semantics.md rule 12).

A ProcessQueue *lifetime* of one client host on one queue ends when that host delivers an offset below the one
it delivered just before (a restart, a reset or a re-assignment: the new ProcessQueue pulls from the commit,
which is at or below what was delivered): within one lifetime the pulls, hence the first deliveries, go up in
offset order.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Optional

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.rules.snapshots import SERIES_KEY, _ts
from schemas import consumer_offsets

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


def replay_deliveries(deliveries: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """The deliveries the replay reads, with every ``TIMELINE_KEY`` column (client id and host '' when null).

    Retry deliveries are of retry copies in another queue: ignored; so are deliveries without a queue, which no
    snapshot or duplicate can be matched with, and (with ``as_of``) deliveries that started later.
    """
    keep = (F.col("retry_times") == 0) & F.col("queue_offset").isNotNull() & F.col("start_ts").isNotNull()
    for k in SERIES_KEY:
        if k != "client_id":
            keep = keep & F.col(k).isNotNull()
    if as_of is not None:
        keep = keep & (F.col("start_ts") <= _ts(as_of))
    keys = [F.coalesce(F.col(c), F.lit("")).alias(c) if c in ("client_id", "client_host") else F.col(c)
            for c in TIMELINE_KEY]
    return deliveries.where(keep).select(*keys, F.col("queue_offset").cast("long"), "start_ts",
                                         F.coalesce("end_ts", "sent_back_ts").alias("left_ts"))


def queue_ids(frame: DataFrame) -> DataFrame:
    """One row per ``TIMELINE_KEY`` value of ``frame``, with dense integer ids of its queue.

    ``sid`` numbers the ``SERIES_KEY`` values, ``hid`` the ``TIMELINE_KEY`` values, in ``client_host`` order
    within a ``sid``. Why: the replay's windows partition by one integer and its rows carry no strings, which
    makes them several times cheaper on Sail (DataFusion); the ids are exact (a dense numbering, not a hash).
    """
    keys = frame.select(*TIMELINE_KEY).distinct()
    every = Window.partitionBy(F.lit(0))  # all keys in one partition: one row per queue and host
    return keys.select(*TIMELINE_KEY, F.dense_rank().over(every.orderBy(*SERIES_KEY)).cast("long").alias("sid"),
                       F.row_number().over(every.orderBy(*SERIES_KEY, "client_host")).cast("long").alias("hid"))


def with_queue_ids(frame: DataFrame) -> DataFrame:
    """``frame`` (with every ``TIMELINE_KEY`` column) plus its :func:`queue_ids`."""
    return queue_ids(frame).join(frame, on=TIMELINE_KEY, how="inner")  # the small frame on the left (Sail builds from it)


def queues(deliveries: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """The names of the :func:`commit_timeline` ids: ``TIMELINE_KEY`` + sid, hid, one row per hid."""
    return queue_ids(replay_deliveries(deliveries, as_of=as_of))


def named(timeline: DataFrame, queue_names: DataFrame) -> DataFrame:
    """``timeline`` with the ``TIMELINE_KEY`` columns of its ``hid`` (from :func:`queues`)."""
    return queue_names.select(*TIMELINE_KEY, "hid").join(timeline, on="hid", how="inner")


# Several values travel as one decimal(38, 0) so that one window computes what would take several (Sail runs
# each window function as its own pass over the rows): ``hi * scale + lo`` with 0 <= lo < scale orders as
# (hi, lo) and unpacks exactly.
DEC = "decimal(38,0)"
# Microseconds of any Spark timestamp (years 1-9999) plus US_SHIFT lie in [0, NEVER_US); NEVER_US stands for
# "never" (an entry still in flight) and sorts after every real time.
US_SHIFT = 10**17
NEVER_US = 10**18
LIFE_SCALE = 10**19  # (lifetime, shifted microseconds)
# (hid, lifetime) as one long, hid * 2^32 + lifetime: a lifetime (a position among one host's entries on one
# queue) below 2^32 and a hid (a queue and host) below 2^31; past that the replay stops with an error
LIFE_BITS = 32


def _dec(n: int) -> Column:
    return F.lit(Decimal(n)).cast(DEC)


def _pack(hi: Column, lo: Column, scale: int) -> Column:
    return hi.cast(DEC) * _dec(scale) + lo.cast(DEC)


def _low(packed: Column, hi: Column, scale: int) -> Column:
    """``lo`` of ``packed`` when its ``hi`` is known."""
    return packed - hi.cast(DEC) * _dec(scale)


def _host_life(hid: Column, lifetime: Column) -> Column:
    """(hid, lifetime) packed in one long (``LIFE_BITS``); unpacked by :func:`_host_life_split`."""
    fits = (lifetime < F.lit(2**LIFE_BITS)) & (hid < F.lit(2**(63 - LIFE_BITS)))
    return F.when(fits, F.shiftleft(hid, LIFE_BITS) + lifetime).otherwise(
        F.raise_error(F.lit(f"replay: a queue and host with 2^{LIFE_BITS} entries or more, or 2^{63 - LIFE_BITS} "
                            "queues and hosts or more; reconcile a shorter window (--as-of)")).cast("long"))


def _host_life_split(packed: Column) -> tuple[Column, Column]:
    return F.shiftright(packed, LIFE_BITS), packed.bitwiseAND(F.lit(2**LIFE_BITS - 1))


def _last_before(value: str, partition: list[str], order: str) -> Column:
    """The last non-null ``value`` on an earlier row of the window (``lag ... IGNORE NULLS``).

    Why: where ``value`` never decreases along the order this is the running max of the earlier rows (an as-of
    lookup), at the price of a ``lag``: Sail evaluates a running aggregate row by row, about 3x slower. The
    DataFrame API has no ``ignoreNulls`` for ``lag``; the SQL form runs on Sail and on classic Spark alike.
    """
    return F.expr(f"lag({value}) IGNORE NULLS OVER (PARTITION BY {', '.join(partition)} ORDER BY {order})")


def commit_timeline(deliveries: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """Per client host and queue, each first-delivered offset with when it left the ProcessQueue.

    Args:
        deliveries: silver/deliveries (read through :func:`replay_deliveries`).
        as_of: deliveries that started later are ignored.

    Returns:
        sid, hid (:func:`queue_ids`; names by :func:`named`), lifetime (numbered by the position of its first
        entry among the host's entries on the queue, from 0), lifetime_start (the lifetime's first entry),
        queue_offset, prev_offset (the lifetime's previous entry; null for its first), start_ts, left_ts (null:
        never left; a time before the start counts as the start), d_ts (D(o); null when infinite: some offset <=
        this one never left) and prev_d_ts (D of the lifetime's previous entry; null for its first entry or when
        infinite).
    """
    start, left = F.col("start_ts"), F.col("left_ts")
    d = with_queue_ids(replay_deliveries(deliveries, as_of=as_of)).select(
        "sid", "hid", "queue_offset", "start_ts",
        # a delivery cannot leave before it started (a clock step): D(o) >= start keeps the breakpoints of
        # replayed_commits in order
        F.when(left.isNotNull(), F.greatest(left, start)).alias("left_ts"))
    # Everything in one ordering (per queue and host, by start): within a lifetime the offsets rise with the start
    # time. A lifetime restarts where the host delivers an offset below the one it delivered just before (a new
    # ProcessQueue pulls from the commit, at or below what was delivered); the deliveries of one offset in one
    # lifetime are consecutive, the first of them is the entry (the one pulled into the ProcessQueue).
    # Ties on (start, offset) are broken by the time left: deliveries equal in all three are interchangeable here
    # (nothing else of a delivery enters the timeline), so the result does not depend on their order.
    order = ["start_ts", "queue_offset", "left_ts"]
    by_time = Window.partitionBy("hid").orderBy(*order)
    prev = F.col("_prev")  # a column first: Sail cannot plan a window function inside a filter
    entries = (d.withColumn("_prev", F.lag("queue_offset").over(by_time))
               .where(prev.isNull() | (F.col("queue_offset") != prev))
               .withColumn("_restart", prev.isNull() | (F.col("queue_offset") < prev))
               .withColumn("_mark", F.when(F.col("_restart"), F.row_number().over(by_time) - 1)))
    # each entry's lifetime: the mark of the lifetime's first entry, carried forward (marks rise with the order)
    entries = entries.withColumn("lifetime", F.coalesce(F.col("_mark"), _last_before("_mark", ["hid"], ", ".join(order)))
                                 .cast("long"))
    life = F.col("lifetime")
    # D of the previous entry: the running max of (lifetime, time left) over the earlier entries, in this lifetime
    # when its high part is this lifetime; an entry that never left leaves at NEVER_US.
    left_us = F.coalesce(F.unix_micros(left) + F.lit(US_SHIFT), F.lit(NEVER_US))
    earlier = _low(F.max(_pack(life, left_us, LIFE_SCALE)).over(by_time.rowsBetween(Window.unboundedPreceding, -1)),
                   life, LIFE_SCALE)
    entries = entries.withColumn("_before", F.when(earlier >= _dec(0), earlier))
    before = F.col("_before")
    latest = F.greatest(before, left_us.cast(DEC))  # greatest skips a null (no earlier entry in the lifetime)

    def ts(us: Column) -> Column:
        return F.when(us != _dec(NEVER_US), F.timestamp_micros((us - F.lit(US_SHIFT)).cast("long")))

    return entries.select(
        # the delivery before an entry that starts no lifetime is of the previous entry's offset
        "sid", "hid", "lifetime", F.col("_restart").alias("lifetime_start"), "queue_offset",
        F.when(~F.col("_restart"), prev).alias("prev_offset"), "start_ts", "left_ts",
        ts(latest).alias("d_ts"), ts(before).alias("prev_d_ts"),
    )


def replayed_commits(timeline: DataFrame, queue_names: DataFrame, series: DataFrame) -> DataFrame:
    """The client's commit at ``t_s - 10 s`` (lower) and at ``t_s`` (upper) for every snapshot the replay covers.

    The active ProcessQueue at ``t_s`` is the lifetime of the latest delivery started at or before it; when
    that lifetime had pulled nothing 10 s earlier, the lower bound is its first offset.

    As-of form of the spec §4 identity, with no snapshot x timeline join. In a lifetime with entries o_1 < o_2 <
    ..., the commit at x (the smallest pulled offset not yet left, or one past the last pulled) is the value of
    the last of these breakpoints at or before x: o_1 before everything; o_j + 1 at D(o_j); o_j at
    max(D(o_(j-1)), start of o_j). Their values never decrease along (time, value) (D(o_j) >= start of o_j), so
    "the last at or before x" is a ``lag ... IGNORE NULLS`` over the breakpoints and the probe rows interleaved.
    The last kind is left out where it repeats one of the second: o_j = o_(j-1) + 1, the value of the breakpoint
    at D(o_(j-1)) <= max(D(o_(j-1)), start of o_j) (no gap in the offsets: the common case), so most entries give
    one row. One plan that reads the timeline once: the active lifetime per (G, client, q) first, then the
    breakpoints.

    Args:
        timeline: :func:`commit_timeline`.
        queue_names: :func:`queues` of the same deliveries.
        series: :func:`jobs.rules.snapshots.offset_series`.

    Returns:
        sid (names by :func:`queues`), cluster, consumer_group, snapshot_ts, committed_offset, lower, upper. Only
        numbers and the group travel with a snapshot through the three sorts (strings cost there).
    """
    carried = ["cluster", "consumer_group", "committed_offset"]
    types = {c: consumer_offsets.SCHEMA[c].dataType.simpleString() for c in carried}  # no schema round trip
    s = (queue_names.select(*SERIES_KEY, "sid").distinct()
         .join(series.select(*SERIES_KEY, "snapshot_ts", "committed_offset"), on=SERIES_KEY, how="inner"))
    o, d, prev_d, start = F.col("queue_offset"), F.col("d_ts"), F.col("prev_d_ts"), F.col("start_ts")
    first = F.col("lifetime_start")
    # 1. the active lifetime at t_s: the (host, lifetime) of the last entry started at or before t_s, in the order
    # (start, hid, lifetime) (hid follows client_host within a sid), on the entry row before each snapshot row.
    # An entry brings what its breakpoints need: D(o) (o + 1 from then on) and, when it gives one, the time of the
    # second (o from then on; null = before everything for the lifetime's first entry).
    ents = timeline.select(
        "sid", start.alias("_k"), F.lit(0).alias("_m"), _host_life(F.col("hid"), F.col("lifetime")).alias("_e"),
        d.alias("_d"), o.alias("_o"), F.when(~first, F.greatest(prev_d, start)).alias("_kb"),
        (first | (prev_d.isNotNull() & (o != F.col("prev_offset") + 1))).alias("_b"),
        *[F.lit(None).cast(t).alias(c) for c, t in types.items()])
    marks = s.select("sid", F.col("snapshot_ts").alias("_k"), F.lit(1).alias("_m"), F.lit(None).cast("long").alias("_e"),
                     F.lit(None).cast("timestamp").alias("_d"), F.lit(None).cast("long").alias("_o"),
                     F.lit(None).cast("timestamp").alias("_kb"), F.lit(None).cast("boolean").alias("_b"), *carried)
    rows = ents.unionByName(marks).select("*", _last_before("_e", ["sid"], "_k, _m, _e").alias("_a"))
    # 2. from each entry its breakpoints, from each snapshot two probes (t_s, upper, and t_s - 10 s, lower) in its
    # active lifetime: 0, 1 or 2 flags per row, exploded from one read (Sail computes a frame once per use).
    second = F.col("_second")
    is_entry = F.col("_m") == 0
    one = F.when(is_entry, F.col("_d").isNotNull()).otherwise(F.col("_a").isNotNull())
    two = F.when(is_entry, F.col("_b")).otherwise(one)
    flags = (F.when(one & two, F.array(F.lit(False), F.lit(True))).when(one, F.array(F.lit(False)))
             .when(two, F.array(F.lit(True))).otherwise(F.array().cast("array<boolean>")))
    hid, lifetime = _host_life_split(F.when(is_entry, F.col("_e")).otherwise(F.col("_a")))
    lag = F.expr(f"INTERVAL {BROKER_LAG_S} SECONDS")
    k = F.when(is_entry, F.when(second, F.col("_kb")).otherwise(F.col("_d"))) \
        .otherwise(F.when(second, F.col("_k") - lag).otherwise(F.col("_k")))
    points = (rows.select("*", F.explode(flags).alias("_second"))
              .select(hid.alias("_h"), lifetime.alias("_l"), k.alias("_x"), "_m",
                      F.when(is_entry, F.when(second, F.col("_o")).otherwise(F.col("_o") + 1)).alias("_v"),
                      "_second", "sid", F.col("_k").alias("snapshot_ts"), *carried))
    # Breakpoints sort before a probe at the same time (pulled at x counts, D(o) = x does not exceed x), and by
    # value among themselves.
    commit = _last_before("_v", ["_h", "_l"], "_x ASC NULLS FIRST, _m, _v")
    probes = points.select("*", commit.alias("_c")).where(F.col("_m") == 1)
    return (probes.groupBy("sid", "cluster", "consumer_group", "snapshot_ts", "committed_offset")
            .agg(F.max(F.when(F.col("_second"), F.col("_c"))).alias("lower"),
                 F.max(F.when(~F.col("_second"), F.col("_c"))).alias("upper")))


def agreement(deliveries: DataFrame, series: DataFrame, *, as_of: Optional[dt.datetime] = None) -> DataFrame:
    """Per (cluster, consumer_group): snapshots compared, agreeing, and their ratio.

    A snapshot is compared when the replay has a ProcessQueue for its (G, client, q) at ``t_s``; it agrees when
    ``C_s`` lies in [replayed commit at ``t_s - 10 s``, replayed commit at ``t_s``]. The timeline and the queue
    names come from the same deliveries and ``as_of``, so their ids agree.
    """
    r = replayed_commits(commit_timeline(deliveries, as_of=as_of), queues(deliveries, as_of=as_of), series)
    agrees = (F.col("committed_offset") >= F.col("lower")) & (F.col("committed_offset") <= F.col("upper"))
    return (
        r.groupBy("cluster", "consumer_group")
        .agg(F.count(F.lit(1)).cast("long").alias("compared"), F.sum(agrees.cast("long")).cast("long").alias("agreeing"))
        .withColumn("ratio", (F.col("agreeing") / F.col("compared")).cast("double"))
    )


def duplicate_causes(duplicated: DataFrame, timeline: DataFrame, queue_names: DataFrame,
                     falls: DataFrame) -> DataFrame:
    """The cause of each TRACE-duplicated offset (docs/semantics.md rule 12).

    Args:
        duplicated: one row per duplicated offset copy: ``SERIES_KEY`` + queue_offset, d1_host, d1_start, b
            (the client host and start of the first first-delivery, the start of the second), unique per
            ``SERIES_KEY`` + queue_offset + uniq_key.
        timeline: :func:`commit_timeline`.
        queue_names: :func:`queues` of the same deliveries.
        falls: every decrease of the committed offsets (:func:`jobs.rules.snapshots.decreases`).

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
            falls.alias("r"),
            on=[F.col(f"p.{k}") == F.col(f"r.{k}") for k in SERIES_KEY]
            + [F.col("r.committed_offset") <= o, o < F.col("r.prev_offset"),
               F.col("r.prev_ts") >= F.col("p.d1_start"), F.col("r.snapshot_ts") <= F.col("p.b")],
            how="inner")
        .select(*[F.col(f"p.{k}").alias(k) for k in pkey]).distinct().withColumn("_rewind", F.lit(True))
    )
    e = named(timeline, queue_names).alias("e")
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
