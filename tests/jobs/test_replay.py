"""replay.replayed_commits: the as-of form of the spec §4 identity against the definition itself.

The definition (``ProcessQueue.removeMessage``): at time x the client commits the smallest offset it has pulled
that has not left its ProcessQueue, or one past the last pulled offset when all have left; the broker's copy at
t_s lies between the commit at t_s - 10 s and the commit at t_s, in the lifetime active at t_s.
"""
from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any, Optional

import pandas as pd
import pytest

from jobs.rules import replay
from jobs.rules.snapshots import SERIES_KEY

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, tzinfo=UTC)
KEY = ("c", "G", "", "T", "b", 0)


def S(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def _timeline(spark: Any, rows: list[tuple]) -> tuple[Any, Any]:
    """Timeline rows (host, lifetime, offset, start s, left s or None) -> (commit_timeline frame, its queues)."""
    out = []
    for host, life in sorted({(r[0], r[1]) for r in rows}):
        mine = sorted((r for r in rows if (r[0], r[1]) == (host, life)), key=lambda r: r[2])
        d: Optional[float] = None
        in_flight = False
        for i, (_, _, o, start, left) in enumerate(mine):
            prev_d = d
            in_flight = in_flight or left is None
            d = None if in_flight else max(d or 0.0, left)
            out.append((*KEY[:3], host, *KEY[3:], life, i == 0, o, mine[i - 1][2] if i else None, S(start),
                        None if left is None else S(left), None if d is None else S(d),
                        None if prev_d is None or i == 0 else S(prev_d)))
    schema = ("cluster string, consumer_group string, client_id string, client_host string, topic string, "
              "broker string, queue_id int, lifetime long, lifetime_start boolean, queue_offset long, "
              "prev_offset long, start_ts timestamp, left_ts timestamp, d_ts timestamp, prev_d_ts timestamp")
    tl = replay.with_queue_ids(spark.createDataFrame(out, schema))
    return tl.drop(*replay.TIMELINE_KEY), tl.select(*replay.TIMELINE_KEY, "sid", "hid").distinct()


def _series(spark: Any, points: list[tuple[float, int]]) -> Any:
    return spark.createDataFrame([(*KEY, S(t), c) for t, c in points],
                                 "cluster string, consumer_group string, client_id string, topic string, "
                                 "broker string, queue_id int, snapshot_ts timestamp, committed_offset long")


def test_queue_ids_are_dense_and_follow_client_host(spark: Any) -> None:
    """sid numbers the queues, hid the (queue, host) pairs in client_host order within a queue: both exact."""
    rows = [("c", "G", "", h, t, "b", q, i) for i, (h, t, q) in enumerate(
        [("B", "T", 0), ("A", "T", 0), ("A", "T", 0), ("A", "T", 1), ("C", "S", 3)])]
    df = spark.createDataFrame(rows, "cluster string, consumer_group string, client_id string, client_host string, "
                                     "topic string, broker string, queue_id int, n int")
    got = sorted(tuple(r) for r in replay.with_queue_ids(df).select("n", "topic", "queue_id", "client_host", "sid",
                                                                    "hid").collect())
    assert got == [(0, "T", 0, "B", 2, 3), (1, "T", 0, "A", 2, 2), (2, "T", 0, "A", 2, 2), (3, "T", 1, "A", 3, 4),
                   (4, "S", 3, "C", 1, 1)]


def test_host_and_lifetime_pack_exactly_and_refuse_what_does_not_fit(spark: Any) -> None:
    """(hid, lifetime) -> one long -> the same pair; a lifetime of 2^32 or more stops the run with a clear error."""
    from pyspark.sql import functions as F

    pairs = [(1, 0), (7, 2**32 - 1), (2**31 - 1, 12345)]
    df = spark.createDataFrame(pairs, "hid long, lifetime long")
    packed = replay._host_life(F.col("hid"), F.col("lifetime"))
    hid, life = replay._host_life_split(packed)
    assert sorted(tuple(r) for r in df.select(hid, life).collect()) == sorted(pairs)
    with pytest.raises(Exception, match="2\\^32 entries or more"):
        spark.createDataFrame([(1, 2**32)], "hid long, lifetime long").select(packed.alias("p")).collect()


def test_commit_timeline_exact(spark: Any) -> None:
    """Deliveries -> entries, lifetimes, L and D exactly.

    Host A on one queue: 10-12 pulled at 1-3 s, 11 delivered twice (the second delivery is no entry), 12 never
    leaves; A restarts at 20 s from 11 (below 12: a new lifetime) and consumes 11-13, where 13's SubAfter says it
    left before it started (a clock step: it counts as leaving at its start). Host B takes 12-13 at 30 s. A
    retry delivery (retry_times 1) and one started after ``as_of`` are not read.
    """
    def row(host: str, o: int, start: float, end: Optional[float], retry: int = 0, rid: str = "",
            back: Optional[float] = None) -> tuple:
        return ("c", "G", None, host, "T", "b", 0, o, S(start), None if end is None else S(end), retry,
                rid or f"{host}-{o}-{start}", None if back is None else S(back))

    rows = [row("A", 10, 1, 4), row("A", 11, 2, 3), row("A", 11, 2.5, 9), row("A", 12, 3, None),
            row("A", 11, 20, 21), row("A", 12, 20, 25), row("A", 13, 22, 21.5), row("A", 14, 23, 24, retry=1),
            row("B", 12, 30, 31), row("B", 13, 30, None, back=40), row("B", 14, 99, 100)]
    dels = spark.createDataFrame(rows, "cluster string, consumer_group string, client_id string, client_host string, "
                                       "topic string, broker string, queue_id int, queue_offset long, "
                                       "start_ts timestamp, end_ts timestamp, retry_times int, request_id string, "
                                       "sent_back_ts timestamp")
    tl = replay.named(replay.commit_timeline(dels, as_of=S(50)), replay.queues(dels, as_of=S(50)))
    cols = ["client_host", "lifetime", "lifetime_start", "queue_offset", "prev_offset", "start_ts", "left_ts",
            "d_ts", "prev_d_ts"]

    def sec(v: Any) -> Any:
        return (v.replace(tzinfo=UTC) - T0).total_seconds() if isinstance(v, dt.datetime) else v

    got = sorted((tuple(sec(v) for v in r) for r in tl.select(*cols).collect()), key=lambda r: (r[0], r[1], r[3]))
    assert got == [
        # lifetime 0 of A: 11's second delivery is not an entry; 12 in flight pins D from 12 on
        ("A", 0, True, 10, None, 1.0, 4.0, 4.0, None),
        ("A", 0, False, 11, 10, 2.0, 3.0, 4.0, 4.0),
        ("A", 0, False, 12, 11, 3.0, None, None, 4.0),
        # lifetime 3 of A (its first entry is A's fourth): 13 left "at 21.5" before it started: at 22
        ("A", 3, True, 11, None, 20.0, 21.0, 21.0, None),
        ("A", 3, False, 12, 11, 20.0, 25.0, 25.0, 21.0),
        ("A", 3, False, 13, 12, 22.0, 22.0, 25.0, 25.0),
        # B: 13 has no SubAfter; cleanExpireMsg sent it back at 40 (rule 12a): it left then
        ("B", 0, True, 12, None, 30.0, 31.0, 31.0, None),
        ("B", 0, False, 13, 12, 30.0, 40.0, 40.0, 31.0),
    ]


def test_commits_at_each_snapshot_exact(spark: Any) -> None:
    """Host A pulls 0-4 at 1-5 s; 1 hangs until 40 s, the rest leave 1 s after their start. A restarts
    (lifetime 1) at 50 s from offset 1 (a lower offset) and consumes 1-2 quickly; 5 stays in flight."""
    tl = _timeline(spark, [
        ("A", 0, 0, 1, 2), ("A", 0, 1, 2, 40), ("A", 0, 2, 3, 4), ("A", 0, 3, 4, 5), ("A", 0, 4, 5, 6),
        ("A", 1, 1, 50, 51), ("A", 1, 2, 50, 52), ("A", 1, 5, 55, None),
    ])
    series = _series(spark, [(0.5, 0), (3, 0), (20, 1), (45, 5), (60, 5), (70, 3)])
    got = sorted((r[0].replace(tzinfo=UTC), *r[1:]) for r in replay.replayed_commits(*tl, series)
                 .select("snapshot_ts", "lower", "upper", "committed_offset").collect())
    assert got == [
        # t=3: pulled 0-2, 0 left at 2, 1 pinned -> upper 1; t-10 before any pull -> the lifetime's first offset 0
        (S(3), 0, 1, 0),
        # t=20: 1 still pinned at 20 and at 10
        (S(20), 1, 1, 1),
        # t=45: everything left by 40 -> 4 + 1 = 5; at 35 offset 1 still pinned
        (S(45), 1, 5, 5),
        # t=60: lifetime 1 is active (started 50): 1, 2 left; 5 in flight -> 5; at 50 both 1 and 2 pinned -> 1
        (S(60), 1, 5, 5),
        # t=70: 5 still in flight -> 5 at 70 and at 60
        (S(70), 5, 5, 3),
    ]


def _oracle(tl: pd.DataFrame, series: pd.DataFrame) -> set[tuple]:
    """The definition, one snapshot at a time (no identity, no windows)."""
    out = set()
    tl_by_key = {k: g for k, g in tl.groupby(SERIES_KEY, dropna=False)}
    for r in series.itertuples(index=False):
        key = tuple(getattr(r, k) for k in SERIES_KEY)
        ents = tl_by_key.get(key)
        if ents is None:
            continue
        t = r.snapshot_ts
        before = ents[ents["start_ts"] <= t]
        if not len(before):
            continue
        act = before.sort_values(["start_ts", "client_host", "lifetime"]).iloc[-1]
        life = ents[(ents["client_host"] == act["client_host"]) & (ents["lifetime"] == act["lifetime"])]

        def commit(x: pd.Timestamp) -> Optional[int]:
            pulled = life[life["start_ts"] <= x]
            if not len(pulled):
                return None
            pinned = pulled[pulled["left_ts"].isna() | (pulled["left_ts"] > x)]
            return int(pinned["queue_offset"].min()) if len(pinned) else int(pulled["queue_offset"].max()) + 1

        upper = commit(t)
        lower = commit(t - pd.Timedelta(seconds=replay.BROKER_LAG_S))
        out.add((*key, t, int(life["queue_offset"].min()) if lower is None else lower, upper,
                 int(r.committed_offset)))
    return out


@pytest.mark.integration
# mixed: 1248 -> 1296 with the inner batches' two groups (issue 35)
@pytest.mark.parametrize("scenario,seed,snapshots", [("mixed", 1, 1296), ("rebalance", 7, 16)])
def test_replayed_commits_equal_the_definition_on_simulated_fleets(tmp_path: pathlib.Path, spark: Any,
                                                                   scenario: str, seed: int, snapshots: int) -> None:
    """Every (G, client, q, snapshot) the replay covers, on the 6-hour mixed fleet and on a rebalance."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.lake import _delta
    from jobs.rules.snapshots import offset_series
    from schemas import consumer_offsets, deliveries, queue_bounds

    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    simulate.run(scenario, str(landing), seed=seed)
    ingest.run(str(landing), lake)
    as_of = _delta.read(spark, lake, consumer_offsets.TABLE).agg({"snapshot_ts": "max"}).collect()[0][0]
    series = offset_series(_delta.read(spark, lake, consumer_offsets.TABLE),
                                     _delta.read(spark, lake, queue_bounds.TABLE), as_of=as_of)
    dels = _delta.read(spark, lake, deliveries.TABLE)
    tl, names = replay.commit_timeline(dels, as_of=as_of), replay.queues(dels, as_of=as_of)
    cols = SERIES_KEY + ["snapshot_ts", "lower", "upper", "committed_offset"]
    sids = names.select(*SERIES_KEY, "sid").distinct()
    got = {tuple(r) for r in replay.replayed_commits(tl, names, series).drop("cluster", "consumer_group")
           .join(sids, on="sid").select(*cols).toPandas().itertuples(index=False)}
    want = _oracle(replay.named(tl, names).toPandas(),
                   series.select(*SERIES_KEY, "snapshot_ts", "committed_offset").toPandas())
    assert len(want) == snapshots
    assert got == want
