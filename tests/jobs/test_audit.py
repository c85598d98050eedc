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
