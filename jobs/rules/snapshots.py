"""Shared preparation for every report: the committed-offset series per (G, q, client) and the message lookups.

``offset_series`` is the one place that decides which snapshots count (docs/semantics.md rules 1-5): the
series of ``C_s`` with the ``Min_s``/``Max_s`` of the same broker snapshot (a broadcast client's snapshot takes
the bounds of the broker snapshot at or before it), the latest snapshot S and the as-of cut. The other
helpers answer the questions several reports ask of silver/messages and silver/deliveries: the original
copies of a UNIQ_KEY (rule 7), the message stored at a queue position, the records and deliveries an as-of
run sees (rule 0), the deliveries inside the window (rule 8) and which groups are broadcast (rule 4). All are
pure DataFrame -> DataFrame functions.
"""
from __future__ import annotations

import datetime as dt
from typing import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.formats.topics import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, is_system_topic_col
from schemas import deliveries as deliveries_schema

SERIES_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
QUEUE = ["cluster", "topic", "broker", "queue_id"]
SERIES_COLUMNS = SERIES_KEY + ["snapshot_ts", "committed_offset", "min_offset", "max_offset", "bounds_known",
                               "snapshots_after", "is_latest"]


def _ts(value: dt.datetime) -> Column:
    """A UTC timestamp literal (naive values are taken as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return F.lit(value.strftime("%Y-%m-%d %H:%M:%S.%f")).cast("timestamp")


HELD_COLUMNS = ["cluster", "broker", "topic", "queue_id", "held_from"]
EPOCH = dt.datetime(1970, 1, 1)


def held_queues(queue_bounds: DataFrame, messages: DataFrame, *, as_of: dt.datetime,
                after: dt.datetime | None = None) -> DataFrame:
    """(cluster, broker, topic, queue_id, held_from): since when each queue is known to have held messages (spec
    §4.2 NO_CONSUME_QUEUE's signs): its first snapshot at or before ``as_of`` whose consume queue had entries (Max
    > 0), or the first snapshot that held one of its records (a record without a snapshot: always). A snapshot with
    no consume queue data for q has unknown bounds there only when q held messages by then; otherwise q is the empty
    queue the broker reports (Min = Max = 0). ``after``: only the bounds and records after that time (a horizon
    run adds them to the previous run's rows, :func:`merge_held`)."""
    b = queue_bounds.where((F.col("snapshot_ts") <= _ts(as_of)) & (F.col("max_offset") > 0))
    m = messages_as_of(messages, as_of=as_of)
    if after is not None:
        b = b.where(F.col("snapshot_ts") > _ts(after))
        m = m.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") > _ts(after)))
    rows = (b.select("cluster", "broker", "topic", "queue_id", F.col("snapshot_ts").alias("held_from"))
            .unionByName(m.select("cluster", "broker", "topic", "queue_id",
                                  F.coalesce(F.col("first_snapshot_ts"), _ts(EPOCH)).alias("held_from"))))
    return merge_held(rows)


def merge_held(rows: DataFrame) -> DataFrame:
    """One row per queue, its earliest ``held_from``."""
    return (rows.groupBy("cluster", "broker", "topic", "queue_id").agg(F.min("held_from").alias("held_from"))
            .select(*HELD_COLUMNS))


def offset_series(consumer_offsets: DataFrame, queue_bounds: DataFrame, *, as_of: dt.datetime,
                  held: DataFrame | None = None) -> DataFrame:
    """``C_s`` with ``Min_s``/``Max_s`` per (cluster, G, client, q, snapshot), snapshots at or before ``as_of``.

    Rules (docs/semantics.md): 1. groups or topics containing ``@`` are skipped; 2. only snapshots with
    ``snapshot_ts <= as_of``; 4. a broadcast client's snapshot (``client_id != ''``) takes the bounds of the
    latest broker snapshot with known bounds at or before it; 5. a broker snapshot without any queue bounds
    has no consume queue data for any q; one with no data for q has ``Min = Max = 0`` unless q held messages by
    then (then unknown, spec §4.2 NO_CONSUME_QUEUE: q's committed offset is above 0, or ``held``, from
    :func:`held_queues`, says so); one whose row for q has null bounds (its files could not give them) has unknown
    bounds for q.

    ``snapshots_after`` (0 = latest) and ``is_latest`` count only the snapshots with known bounds, the ones every
    Min/Max-based output uses; they are null for the others.

    Args:
        consumer_offsets: silver/consumer_offsets.
        queue_bounds: silver/queue_bounds.
        as_of: the reconciliation time; later snapshots are ignored.
        held: :func:`held_queues` (None: only the committed offset tells that a queue held messages).

    Returns:
        One row per (cluster, consumer_group, client_id, topic, broker, queue_id, snapshot_ts), columns
        ``SERIES_COLUMNS``.
    """
    bounds = queue_bounds.where(F.col("snapshot_ts") <= _ts(as_of))
    return ranked(_with_bounds(_offset_rows(consumer_offsets, as_of=as_of), bounds, held))


def series_after(consumer_offsets: DataFrame, queue_bounds: DataFrame, tail: DataFrame, *, since: dt.datetime,
                 as_of: dt.datetime, bounds_at: list[tuple[str, str, dt.datetime]],
                 held: DataFrame | None = None) -> DataFrame:
    """:func:`offset_series` from a previous run's :func:`tail` (its time ``since``) and the snapshots after it.

    Reads the offsets and bounds of ``(since, as_of]`` and, for a broadcast client's snapshot whose broker has taken
    none with bounds since, the bounds snapshot ``bounds_at`` names (each broker's newest at or before ``since``,
    :func:`bounds_times`). Every row the outputs read is the full series' (``tail`` holds each key's last known
    snapshots and its newest): the latest, the newest, the window, the samples, ``snapshots_after`` of those; the
    older snapshots are left out, so the work is that of what is new, not of the lake's age.
    """
    after = F.col("snapshot_ts") > _ts(since)
    carried = F.lit(False)
    for cluster, broker, ts in bounds_at:
        carried = carried | ((F.col("cluster") == cluster) & (F.col("broker") == broker)
                             & (F.col("snapshot_ts") == _ts(ts)))
    bounds = queue_bounds.where((after & (F.col("snapshot_ts") <= _ts(as_of))) | carried)
    new = _with_bounds(_offset_rows(consumer_offsets, as_of=as_of, after=since), bounds, held)
    return ranked(new.unionByName(tail.select(*new.columns)))


def bounds_times(queue_bounds: DataFrame, *, as_of: dt.datetime, since: dt.datetime | None = None,
                 bounds_at: list[tuple[str, str, dt.datetime]] = ()) -> DataFrame:
    """(cluster, broker, snapshot_ts): each broker's newest snapshot with queue bounds at or before ``as_of``; from
    the bounds after ``since`` and the previous run's ``bounds_at`` when given (what :func:`series_after` reads)."""
    b = queue_bounds.where(F.col("snapshot_ts") <= _ts(as_of))
    if since is not None:
        b = b.where(F.col("snapshot_ts") > _ts(since))
    times = b.select("cluster", "broker", "snapshot_ts")
    if bounds_at:
        spark = queue_bounds.sparkSession
        times = times.unionByName(spark.createDataFrame(
            [(c, b_, _naive_utc(t)) for c, b_, t in bounds_at], "cluster string, broker string, snapshot_ts timestamp"))
    return times.groupBy("cluster", "broker").agg(F.max("snapshot_ts").alias("snapshot_ts"))


def _naive_utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo is not None else value


def _offset_rows(consumer_offsets: DataFrame, *, as_of: dt.datetime, after: dt.datetime | None = None,
                 since: dt.datetime | None = None) -> DataFrame:
    """(SERIES_KEY, snapshot_ts, committed_offset) of the snapshots in ``(after, as_of]`` (or ``[since, as_of]``),
    rules 1 and 2; a key's one value per snapshot."""
    keep = ((F.col("snapshot_ts") <= _ts(as_of)) & F.col("committed_offset").isNotNull()
            & ~F.col("topic").contains("@") & ~F.col("consumer_group").contains("@"))
    if after is not None:
        keep = keep & (F.col("snapshot_ts") > _ts(after))
    if since is not None:
        keep = keep & (F.col("snapshot_ts") >= _ts(since))
    return (
        consumer_offsets.where(keep)
        .select("cluster", "consumer_group", F.coalesce(F.col("client_id"), F.lit("")).alias("client_id"),
                "topic", "broker", "queue_id", "snapshot_ts", F.col("committed_offset").cast("long").alias("c"))
        .groupBy(*SERIES_KEY, "snapshot_ts").agg(F.max("c").alias("committed_offset"))
    )


def commits(consumer_offsets: DataFrame, *, as_of: dt.datetime, since: dt.datetime | None) -> DataFrame:
    """(SERIES_KEY, snapshot_ts, committed_offset) of the snapshots in ``[since, as_of]``: what the replay compares
    (jobs.rules.replay.agreement). A snapshot before the first delivery a run reads has no ProcessQueue in its replay
    and is never compared, so a horizon run reads the offsets from there on; ``since`` None: none."""
    rows = _offset_rows(consumer_offsets, as_of=as_of, since=since)
    return rows if since is not None else rows.where(F.lit(False))


def _with_bounds(offsets: DataFrame, bounds: DataFrame, held: DataFrame | None = None) -> DataFrame:
    """``offsets`` with ``min_offset``, ``max_offset`` and ``bounds_known`` from ``bounds`` (rules 4, 5); ``held``:
    :func:`held_queues`."""
    with_bounds = bounds.select("cluster", "broker", F.col("snapshot_ts").alias("b_ts")).distinct()
    # Which broker snapshot gives the bounds: the same one (broker rows), the latest at or before (client rows).
    # Not a join of every snapshot with every bounds snapshot of its broker and a filter: that is quadratic in the
    # lake's age (2,880 x 2,880 pairs a broker after 30 days of 15-minute snapshots). One pass over each broker's
    # times in order carries the newest bounds time so far (bounds sort before a snapshot of the same time); a
    # broker row keeps it only when it is its own time.
    snaps = offsets.select("cluster", "broker", "snapshot_ts",
                           (F.col("client_id") != "").alias("is_client")).distinct()
    events = (snaps.select("cluster", "broker", "snapshot_ts", "is_client", F.lit(1).alias("_ord"),
                           F.lit(None).cast("timestamp").alias("_b"))
              .unionByName(with_bounds.select("cluster", "broker", F.col("b_ts").alias("snapshot_ts"),
                                              F.lit(None).cast("boolean").alias("is_client"), F.lit(0).alias("_ord"),
                                              F.col("b_ts").alias("_b"))))
    upto = Window.partitionBy("cluster", "broker").orderBy("snapshot_ts", "_ord").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    source = (events.withColumn("b_ts", F.max("_b").over(upto))
              .where((F.col("_ord") == 1) & F.col("b_ts").isNotNull()
                     & (F.col("is_client") | (F.col("b_ts") == F.col("snapshot_ts"))))
              .select("cluster", "broker", "snapshot_ts", "is_client", "b_ts"))
    b = bounds.select("cluster", "broker", F.col("snapshot_ts").alias("b_ts"), "topic", "queue_id",
                      F.col("min_offset").cast("long").alias("_min"), F.col("max_offset").cast("long").alias("_max"),
                      F.lit(True).alias("_row"))
    joined = (
        offsets.withColumn("is_client", F.col("client_id") != "")
        .join(source, on=["cluster", "broker", "snapshot_ts", "is_client"], how="left")
        .join(b, on=["cluster", "broker", "b_ts", "topic", "queue_id"], how="left")
    )
    if held is not None:
        joined = joined.join(held.select("cluster", "broker", "topic", "queue_id", F.col("held_from").alias("_held")),
                             on=["cluster", "broker", "topic", "queue_id"], how="left")
    else:
        joined = joined.withColumn("_held", F.lit(None).cast("timestamp"))
    # rule 5a: a row of q with null bounds says the snapshot's files could not give them (a 0-byte consume queue
    # file): unknown, not the empty queue that no row for q means. Without consume queue data for q (no row, or no
    # data at all in the snapshot), q is the empty queue (Min = Max = 0, as the broker answers) unless it held
    # messages by then (spec §4.2 NO_CONSUME_QUEUE): a committed offset above 0, an earlier snapshot with entries, a
    # record of q held by a snapshot at or before it. The broker keeps at least the newest file of every queue that
    # ever held a message, so Min = Max = 0 there would be a guess, and an ABOVE_MAX reset of the group to 0.
    held_by_then = (F.col("committed_offset") > 0) | (F.col("_held").isNotNull()
                                                       & (F.col("_held") <= F.col("snapshot_ts")))
    no_data = F.col("_row").isNull()
    unknown = (F.col("_row").isNotNull() & F.col("_max").isNull()) | (no_data & held_by_then)
    has_bounds = ~unknown  # a row for q comes from a bounds snapshot; without one, no data for q
    return joined.select(
        *SERIES_KEY, "snapshot_ts", "committed_offset",
        F.when(has_bounds, F.coalesce(F.col("_min"), F.lit(0).cast("long"))).alias("min_offset"),
        F.when(has_bounds, F.coalesce(F.col("_max"), F.lit(0).cast("long"))).alias("max_offset"),
        has_bounds.alias("bounds_known"),
    )


def ranked(rows: DataFrame) -> DataFrame:
    """``snapshots_after`` and ``is_latest`` of each key's snapshots with known bounds (counted from the newest)."""
    # One sort, not two: the count of the key's snapshots gives ``after`` (a key has one row per snapshot).
    w = Window.partitionBy(key_hash(), *SERIES_KEY, "bounds_known")
    index = F.row_number().over(w.orderBy("snapshot_ts"))
    after = (F.count(F.lit(1)).over(w) - index).cast("int")
    return rows.select(
        *SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset", "bounds_known",
        F.when(known_col(), after).alias("snapshots_after"),
        (known_col() & (after == 0)).alias("is_latest"),
    )


TAIL_COLUMNS = SERIES_KEY + ["snapshot_ts", "committed_offset", "min_offset", "max_offset", "bounds_known"]


def unknown_newest(series: DataFrame) -> DataFrame:
    """Each key's newest snapshot when its bounds are unknown: the part of :func:`tail` the status samples
    (jobs.rules.status.status_samples, the last ``max(window, 48)`` known snapshots) do not hold."""
    return newest(series).where(~known_col()).select(*TAIL_COLUMNS)


def tail(series: DataFrame, *, keep: int) -> DataFrame:
    """Each key's last ``keep`` snapshots with known bounds and its newest snapshot: all a later run reads of the
    snapshots up to this series' time (:func:`series_after`). A run stores it as its status samples and
    :func:`unknown_newest` (jobs.reconcile.offset_state.tail_of)."""
    w = Window.partitionBy(key_hash(), *SERIES_KEY)
    return (series.withColumn("_newest", F.max("snapshot_ts").over(w))
            .where((known_col() & (F.col("snapshots_after") < F.lit(keep)))
                   | (F.col("snapshot_ts") == F.col("_newest")))
            .select(*TAIL_COLUMNS))


def key_hash() -> Column:
    """A hash of the series key, put first in a window's partition over the series: the engine then sorts on a number
    before the key's six columns (Sail, with one sort instead of two: 32.7 -> 13.4 s for the series of 30 days of
    15-minute snapshots of 3,192 keys, tests/benchmarks/bench_history.py).
    The partitions are the keys' all the same, so the rows are too, whatever the hash."""
    return F.xxhash64(*SERIES_KEY)


def known_col() -> Column:
    return F.col("bounds_known")


def known(series: DataFrame) -> DataFrame:
    """The snapshots with known bounds: the ones Min/Max-based outputs, REWIND and the status use (rule 5)."""
    return series.where(known_col())


def latest(series: DataFrame) -> DataFrame:
    """Each key's latest snapshot with known bounds: S of the outputs that need Min_S/Max_S (rules 2, 5)."""
    return series.where(F.col("is_latest"))


def newest(series: DataFrame) -> DataFrame:
    """Each key's newest snapshot, bounds known or not: S of the outputs that need only C_S and t_S (rule 2).

    Why not :func:`latest`: a newest snapshot without ``consumequeue/`` still has the committed offset and the
    time, and going back to an older snapshot would judge the consumer by a stale offset.
    """
    w = Window.partitionBy(key_hash(), *SERIES_KEY)
    return (series.withColumn("_newest", F.max("snapshot_ts").over(w))  # a column first: no window in a filter
            .where(F.col("snapshot_ts") == F.col("_newest")).drop("_newest"))


def broadcast_groups(series: DataFrame) -> DataFrame:
    """(cluster, consumer_group) of broadcast groups: those with clients' offsets.json rows (rule 4)."""
    return series.where(F.col("client_id") != "").select("cluster", "consumer_group").distinct()


def window_end(series: DataFrame) -> DataFrame:
    """(cluster, t_end): the latest snapshot time per cluster (t_S of rule 8)."""
    return series.groupBy("cluster").agg(F.max("snapshot_ts").alias("t_end"))


def deliveries_in_window(deliveries: DataFrame, series: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """Deliveries that started at or before t_S (and ``as_of``), with ``is_broadcast`` (rules 4, 8, 9).

    A clustering group's deliveries get ``client_id = ''`` whatever the trace says; a broadcast group's keep
    the client resolved from the born host.
    """
    d = (
        deliveries.join(window_end(series), on="cluster", how="inner")
        .where((F.col("start_ts") <= F.col("t_end")) & (F.col("start_ts") <= _ts(as_of)))
        .drop("t_end")
    )
    return with_clients(d, series)


def with_clients(deliveries: DataFrame, series: DataFrame) -> DataFrame:
    """``deliveries`` with ``is_broadcast`` and ``client_id`` as the outputs key them (rules 4, 9): a clustering
    group's ``''`` whatever the trace says, a broadcast group's the client resolved from the born host."""
    bcast = broadcast_groups(series).withColumn("is_broadcast", F.lit(True))
    d = (deliveries.join(bcast, on=["cluster", "consumer_group"], how="left")
         .withColumn("is_broadcast", F.coalesce(F.col("is_broadcast"), F.lit(False))))
    return d.withColumn("client_id", F.when(F.col("is_broadcast"), F.coalesce(F.col("client_id"), F.lit("")))
                        .otherwise(F.lit("")))


def messages_as_of(messages: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """The stored records an as-of run may see: those first held by a snapshot at or before ``as_of``.

    Snapshot membership, not store time: a snapshot folder is named to the second and taken while the broker
    writes, so it can hold records stored after its name. Records without a snapshot (null) are always seen.
    """
    return messages.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") <= _ts(as_of)))


# What a delivery knows from its SubAfter record.
AFTER_COLUMNS = ("end_ts", "success", "context_code", "cost_time_ms", "after_snapshot_ts")
# What a delivery knows from the copy cleanExpireMsg sent back (rule 12a).
SENT_BACK_COLUMNS = ("sent_back_ts", "sent_back_snapshot_ts")


def deliveries_as_of(deliveries: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """The deliveries an as-of run may see (rule 0), as its snapshots held their trace records.

    A SubBefore first held by a later snapshot is not seen; a SubAfter first held by a later snapshot is not seen
    yet, so its delivery is in flight as of then. A null snapshot (a tabular export's record) is always seen.
    """
    cut = _ts(as_of)
    after_seen = F.col("after_snapshot_ts").isNull() | (F.col("after_snapshot_ts") <= cut)
    back_seen = F.col("sent_back_snapshot_ts").isNull() | (F.col("sent_back_snapshot_ts") <= cut)
    seen = deliveries.where(F.col("first_snapshot_ts").isNull() | (F.col("first_snapshot_ts") <= cut))
    return seen.select(*[F.when(after_seen, F.col(c)).alias(c) if c in AFTER_COLUMNS else
                         F.when(back_seen, F.col(c)).alias(c) if c in SENT_BACK_COLUMNS else F.col(c)
                         for c in deliveries_schema.TABLE.columns])


def relevant_messages(messages: DataFrame, deliveries: DataFrame, consumer_offsets: DataFrame,
                      small: Callable[[DataFrame, str], DataFrame] = lambda df, _name: df) -> DataFrame:
    """The records some report reads one by one; every other record can be left out without changing a report.

    Kept: every retry/DLQ/schedule/trace record, every copy of a UNIQ_KEY that was delivered or has such a
    copy (``original_copies`` and the DLQ rows look those up), every record of a queue holding one of them
    (the SKIPPED scan reads those queues) and every record at a committed offset of any snapshot (time lag,
    BLOCKING_COMMIT). Untraced healthy traffic, most of a large fleet, is only ever counted through the offsets;
    dropping it before the per-position and per-key windows keeps those windows to the traced part.

    ``small`` computes a small frame once (``jobs._spark.materialize``): the keys, queues and positions the records
    are joined to. The small frame is always the left side of a join, and engines that build the hash table from
    the left input (DataFusion, hence Sail) keep it there only while the statistics say it is the smaller one: a
    filter on ``messages`` (a horizon run's recent part) made its estimate smaller than the keys' and the
    records became the build side (3.5 GiB at 3 M records instead of 0.5). Materialized, their sizes are exact.
    """
    system = is_system_topic_col(F.col("topic"))
    keys = small(
        deliveries.select("cluster", "uniq_key")
        .unionByName(messages.where(system).select("cluster", "uniq_key"))
        .where(F.col("uniq_key").isNotNull()).distinct(), "relevant_keys")
    queues = small(keys.join(messages.select("cluster", "uniq_key", *QUEUE[1:]), on=["cluster", "uniq_key"],
                             how="inner").select(*QUEUE).distinct(), "relevant_queues")
    positions = small(consumer_offsets.select(*QUEUE, F.col("committed_offset").cast("long").alias("_qo"))
                      .distinct(), "relevant_positions")
    flag = lambda df, name: df.withColumn(name, F.lit(True))  # noqa: E731
    m = messages.withColumn("_qo", F.col("queue_offset").cast("long"))
    m = flag(keys, "_k").join(m, on=["cluster", "uniq_key"], how="right")
    m = flag(queues, "_q").join(m, on=QUEUE, how="right")
    return (
        flag(positions, "_p").join(m, on=[*QUEUE, "_qo"], how="right")
        .where(system | F.col("_k").isNotNull() | F.col("_q").isNotNull() | F.col("_p").isNotNull())
        .select(*messages.columns)
    )


def original_copies(messages: DataFrame) -> DataFrame:
    """Every original stored copy of a UNIQ_KEY (rule 7), ``copy_rank`` 1 = the lowest (broker, physical_offset).

    Columns: cluster, uniq_key, topic, broker, queue_id, queue_offset, keys, store_ts, copy_rank.
    """
    # (messages of one INNER_BATCH record share its physical offset: then the lower queue offset)
    w = Window.partitionBy("cluster", "uniq_key").orderBy("broker", "physical_offset", "queue_offset")
    return (
        messages.where(F.col("uniq_key").isNotNull() & ~is_system_topic_col(F.col("topic")))
        .withColumn("copy_rank", F.row_number().over(w))
        .select("cluster", "uniq_key", "topic", "broker", "queue_id", F.col("queue_offset").cast("long"),
                "keys", "store_ts", "copy_rank")
    )


def first_original(messages: DataFrame) -> DataFrame:
    """The one original copy per UNIQ_KEY used where a single copy is needed (rule 7)."""
    return original_copies(messages).where("copy_rank = 1").drop("copy_rank")


def message_at(messages: DataFrame) -> DataFrame:
    """The message stored at each queue position (cluster, topic, broker, queue_id, queue_offset).

    When a position holds several records (a recreated queue) the newest write (highest physical offset) wins.
    Columns: cluster, topic, broker, queue_id, queue_offset, uniq_key, keys, store_ts.
    """
    w = Window.partitionBy(*QUEUE, "queue_offset").orderBy(F.col("physical_offset").desc())
    return (
        messages.where(F.col("queue_offset").isNotNull())
        .withColumn("_rn", F.row_number().over(w))
        .where("_rn = 1")
        .select(*QUEUE, F.col("queue_offset").cast("long"), "uniq_key", "keys", "store_ts")
    )


def copies_in_flight(messages: DataFrame) -> DataFrame:
    """(cluster, consumer_group, uniq_key) with a copy in ``%RETRY%G``, ``%DLQ%G`` or waiting in
    ``SCHEDULE_TOPIC_XXXX`` with ``REAL_TOPIC = %RETRY%G`` (rule 15): the message is not lost."""
    real = F.col("properties").getItem("REAL_TOPIC")
    target = (
        F.when(F.col("topic").startswith(RETRY_PREFIX), F.col("topic"))
        .when(F.col("topic").startswith(DLQ_PREFIX), F.concat(F.lit(RETRY_PREFIX),
                                                               F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})")))
        .when((F.col("topic") == SCHEDULE_TOPIC) & real.startswith(RETRY_PREFIX), real)
    )
    return (
        messages.where(F.col("uniq_key").isNotNull())
        .select("cluster", target.alias("_retry"), "uniq_key")
        .where(F.col("_retry").isNotNull())
        .select("cluster", F.expr(f"substring(_retry, {len(RETRY_PREFIX) + 1})").alias("consumer_group"), "uniq_key")
        .distinct()
    )


def decreases(series: DataFrame) -> DataFrame:
    """Every ``C_{s+1} < C_s`` between consecutive snapshots of a key (rules 3, 11).

    REWIND needs no Min/Max, so every snapshot with a committed offset counts, bounds known or not (rule 3).
    Columns: ``SERIES_KEY`` + prev_ts, prev_offset (t_s, C_s) and snapshot_ts, committed_offset (t_{s+1}, C_{s+1}).
    """
    w = Window.partitionBy(key_hash(), *SERIES_KEY).orderBy("snapshot_ts")
    return (
        series
        .select(*SERIES_KEY, "snapshot_ts", "committed_offset",
                F.lag("snapshot_ts").over(w).alias("prev_ts"), F.lag("committed_offset").over(w).alias("prev_offset"))
        .where(F.col("committed_offset") < F.col("prev_offset"))
        .select(*SERIES_KEY, "prev_ts", "prev_offset", "snapshot_ts", "committed_offset")
    )


def decreases_after(series: DataFrame, tail: DataFrame, *, since: dt.datetime) -> DataFrame:
    """The :func:`decreases` whose later snapshot is after ``since``: from each key's newest snapshot in ``tail`` (a
    previous run's, as of ``since``) on. With that run's decreases, every decrease of the full series."""
    cols = [*SERIES_KEY, "snapshot_ts", "committed_offset"]
    return decreases(newest(tail).select(*cols).unionByName(
        series.where(F.col("snapshot_ts") > _ts(since)).select(*cols)))
