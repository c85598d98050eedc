"""gold/audit_hours' hour stats (jobs.rules.audit): a run's stats are the previous run's plus those of the records it
did not see, exactly (the horizon carries them: jobs.reconcile.horizon.audit_frame)."""
from __future__ import annotations

import datetime as dt

from pyspark.sql import functions as F

from jobs.rules import audit, snapshots
from schemas import messages as M

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)


def T(minute: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def rec(qo: int, stored: int, held: int, *, topic: str = "T", q: int = 0) -> tuple:
    """A record at queue offset ``qo`` stored at minute ``stored``, first held by the snapshot at minute ``held``."""
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker="b", physical_offset=qo * 100 + q, topic=topic, queue_id=q, queue_offset=qo,
             store_ts=T(stored), first_snapshot_ts=T(held), properties={})
    return tuple(r[c] for c in M.TABLE.columns)


RECORDS = [
    rec(0, 5, 30), rec(1, 50, 60), rec(2, 59, 60),  # hour 0
    rec(3, 61, 60),  # stored after its snapshot's name (the folder was copied while the broker wrote): hour 1
    rec(4, 70, 90), rec(5, 130, 150),  # hours 1 and 2
    rec(9, 20, 150),  # an hour-0 record first held late (a snapshot copied after a gap)
    rec(0, 140, 150, q=1),  # a queue that starts storing late
    rec(7, 100, 120, topic="%RETRY%G"),  # system topics are not audited
    rec(8, 200, 210),  # after both as-of times
]


def _rows(df) -> list[tuple]:  # noqa: ANN001
    return sorted((r["queue_id"], r["hour"].replace(tzinfo=UTC) if r["hour"].tzinfo is None else r["hour"],
                   r["first_offset"], r["last_offset"], r["stored"]) for r in df.collect())


def test_stored_hours_are_offset_intervals_per_queue_and_store_hour(spark) -> None:  # noqa: ANN001
    m = snapshots.messages_as_of(spark.createDataFrame(RECORDS, M.TABLE.schema), as_of=T(180))
    h = [T(0), T(60), T(120)]
    assert _rows(audit.stored_hours(m, as_of=T(180))) == [
        (0, h[0], 0, 9, 4), (0, h[1], 3, 4, 2), (0, h[2], 5, 5, 1), (1, h[2], 0, 0, 1)]
    # the window: the last 2 store hours up to the newest one (hour 2), not up to the as-of time
    assert _rows(audit.stored_hours(m, as_of=T(600), hours=2)) == [
        (0, h[1], 3, 4, 2), (0, h[2], 5, 5, 1), (1, h[2], 0, 0, 1)]


def test_the_previous_runs_stats_plus_the_records_it_did_not_see_are_the_stats_of_all(spark) -> None:  # noqa: ANN001
    records = spark.createDataFrame(RECORDS, M.TABLE.schema)
    since, as_of = T(60), T(180)
    then = audit.hour_stats(snapshots.messages_as_of(records, as_of=since).where(F.col("store_ts") <= since))
    now = snapshots.messages_as_of(records, as_of=as_of)
    new = audit.seen_between(now, since=since, as_of=as_of)
    # the new records: first held after P's time, or stored after it (rec 3, held by the 00:60 snapshot); not rec 8
    # (stored after as-of); the retry record too (hour_stats leaves system topics out)
    assert sorted(r["queue_offset"] for r in new.collect()) == [0, 3, 4, 5, 7, 9]
    carried = audit.combine(then, audit.hour_stats(new))
    assert _rows(carried) == _rows(audit.hour_stats(now.where(F.col("store_ts") <= as_of)))
    assert _rows(then) == [(0, T(0), 0, 2, 3)]


def test_delivered_counts_each_offset_in_every_hour_whose_interval_holds_it(spark) -> None:  # noqa: ANN001
    """Placed by the nearest interval start where a key's hours are disjoint, joined on the range where they overlap
    (a store clock that went back): both count what the range join counts."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    key = lambda g, client: ("c", g, client, "T", "b", 0)  # noqa: E731
    cols = [StructField(k, LongType() if k == "queue_id" else StringType()) for k in snapshots.SERIES_KEY]
    h = [T(0), T(60), T(120)]
    intervals = [
        (key("A", ""), h[0], 0, 99), (key("A", ""), h[1], 150, 199), (key("A", ""), h[2], 200, 200),  # a gap
        (key("B", ""), h[0], 0, 99), (key("B", ""), h[1], 50, 149),  # overlapping: 50-99 in both hours
        (key("N", None), h[0], 0, 99),  # a null key column matches nothing, as in an equi-join
    ]
    offsets = {"A": [0, 0, 99, 120, 150, 199, 200, 201, 5000], "B": [10, 60, 99, 100, 149, 150], "N": [1]}
    per_key = spark.createDataFrame(
        [(*k, t, lo, hi) for k, t, lo, hi in intervals],
        StructType([*cols, StructField("hour", TimestampType()), StructField("first_offset", LongType()),
                    StructField("last_offset", LongType())]))
    seen = spark.createDataFrame([(*key(g, None if g == "N" else ""), o) for g, os in offsets.items() for o in os],
                                 StructType([*cols, StructField("_o", LongType())])).distinct()
    got = sorted((r["consumer_group"], r["hour"].replace(tzinfo=UTC) if r["hour"].tzinfo is None else r["hour"],
                  r["delivered"]) for r in audit.delivered_per_hour(per_key, seen).collect())
    brute = sorted((k[1], t, len({o for o in offsets[k[1]] if lo <= o <= hi}))
                   for k, t, lo, hi in intervals if k[2] is not None)
    brute = [r for r in brute if r[2]]
    assert got == brute == [("A", h[0], 2), ("A", h[1], 2), ("A", h[2], 1), ("B", h[0], 3), ("B", h[1], 4)]


def test_audit_rows_count_each_keys_distinct_delivered_offsets_per_stored_hour(spark) -> None:  # noqa: ANN001
    """One row per series key and hour its queue stored; ``delivered``: the key's own distinct offsets in the hour's
    interval (a broadcast client's apart from another's, a redelivery once, system topics and other keys' not)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from schemas import audit_hours

    key_cols = [StructField(k, LongType() if k == "queue_id" else StringType()) for k in snapshots.SERIES_KEY]
    series = spark.createDataFrame([
        ("c", "G", "", "T", "b", 0), ("c", "G", "", "T", "b", 0),  # a key twice (the series has one row a snapshot)
        ("c", "B", "c1", "T", "b", 0), ("c", "B", "c2", "T", "b", 0),  # a broadcast group's two clients
        ("c", "G", "", "T", "b", 1),  # a queue with no delivery
        ("c", "H", None, "T", "b", 0),  # a key with a null column: no delivery matches it
    ], StructType(key_cols))
    h = [T(0), T(60)]
    stats = spark.createDataFrame(
        [("c", "T", "b", 0, h[0], 0, 9, 10), ("c", "T", "b", 0, h[1], 10, 19, 10), ("c", "T", "b", 1, h[1], 0, 4, 5),
         ("c", "U", "b", 0, h[0], 0, 9, 10)],  # a queue no key consumes
        StructType([StructField(k, LongType() if k == "queue_id" else StringType()) for k in snapshots.QUEUE]
                   + [StructField("hour", TimestampType()), StructField("first_offset", LongType()),
                      StructField("last_offset", LongType()), StructField("stored", LongType())]))
    dels = [("G", "", "T", 0, o) for o in (0, 0, 5, 9, 10, 25)]  # 0 twice; 25 past every hour
    dels += [("B", "c1", "T", 0, o) for o in (1, 2, 11)] + [("B", "c2", "T", 0, 2)]
    dels += [("G", "", "%RETRY%G", 0, 3), ("X", "", "T", 0, 4), ("H", None, "T", 0, 6), ("G", "", "T", 0, None)]
    deliveries = spark.createDataFrame([("c", g, cl, t, "b", q, o) for g, cl, t, q, o in dels],
                                       StructType([*key_cols, StructField("queue_offset", LongType())]))
    got = audit.audit_rows(series, deliveries, stats)
    assert got.columns == audit_hours.COLUMNS
    rows = sorted((r["consumer_group"], r["client_id"], r["queue_id"], r["hour"].replace(tzinfo=UTC)
                   if r["hour"].tzinfo is None else r["hour"], r["first_offset"], r["last_offset"], r["stored"],
                   r["delivered"]) for r in got.collect())
    assert rows == sorted([
        ("B", "c1", 0, h[0], 0, 9, 10, 2), ("B", "c1", 0, h[1], 10, 19, 10, 1),
        ("B", "c2", 0, h[0], 0, 9, 10, 1), ("B", "c2", 0, h[1], 10, 19, 10, 0),
        ("G", "", 0, h[0], 0, 9, 10, 3), ("G", "", 0, h[1], 10, 19, 10, 1), ("G", "", 1, h[1], 0, 4, 5, 0),
        ("H", None, 0, h[0], 0, 9, 10, 0), ("H", None, 0, h[1], 10, 19, 10, 0),
    ], key=lambda r: tuple("" if v is None else v for v in r))
