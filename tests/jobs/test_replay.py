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

from jobs import replay
from jobs.snapshots import SERIES_KEY

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, tzinfo=UTC)
KEY = ("c", "G", "", "T", "b", 0)


def S(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def _timeline(spark: Any, rows: list[tuple]) -> Any:
    """Timeline rows (host, lifetime, offset, start s, left s or None) -> the commit_timeline frame."""
    out = []
    for host, life in sorted({(r[0], r[1]) for r in rows}):
        mine = sorted((r for r in rows if (r[0], r[1]) == (host, life)), key=lambda r: r[2])
        d: Optional[float] = None
        in_flight = False
        for i, (_, _, o, start, left) in enumerate(mine):
            in_flight = in_flight or left is None
            d = None if in_flight else max(d or 0.0, left)
            nxt = mine[i + 1] if i + 1 < len(mine) else None
            out.append((*KEY[:3], host, *KEY[3:], life, i == 0, o, nxt and nxt[2], nxt and S(nxt[3]), S(start),
                        None if left is None else S(left), in_flight, None if d is None else S(d)))
    cols = replay.TIMELINE_KEY + ["lifetime", "lifetime_start", "queue_offset", "next_offset", "next_start_ts",
                                  "start_ts", "left_ts", "in_flight_upto", "d_ts"]
    schema = ("cluster string, consumer_group string, client_id string, client_host string, topic string, "
              "broker string, queue_id int, lifetime long, lifetime_start boolean, queue_offset long, "
              "next_offset long, next_start_ts timestamp, start_ts timestamp, left_ts timestamp, "
              "in_flight_upto boolean, d_ts timestamp")
    assert len(cols) == len(schema.split(","))
    return replay.with_queue_ids(spark.createDataFrame(out, schema))


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


def test_commits_at_each_snapshot_exact(spark: Any) -> None:
    """Host A pulls 0-4 at 1-5 s; 1 hangs until 40 s, the rest leave 1 s after their start. A restarts
    (lifetime 1) at 50 s from offset 1 (a lower offset) and consumes 1-2 quickly; 5 stays in flight."""
    tl = _timeline(spark, [
        ("A", 0, 0, 1, 2), ("A", 0, 1, 2, 40), ("A", 0, 2, 3, 4), ("A", 0, 3, 4, 5), ("A", 0, 4, 5, 6),
        ("A", 1, 1, 50, 51), ("A", 1, 2, 50, 52), ("A", 1, 5, 55, None),
    ])
    series = _series(spark, [(0.5, 0), (3, 0), (20, 1), (45, 5), (60, 5), (70, 3)])
    got = sorted((r[0].replace(tzinfo=UTC), *r[1:]) for r in replay.replayed_commits(tl, series)
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
@pytest.mark.parametrize("scenario,seed,snapshots", [("mixed", 1, 1344), ("rebalance", 7, 16)])
def test_replayed_commits_equal_the_definition_on_simulated_fleets(tmp_path: pathlib.Path, spark: Any,
                                                                   scenario: str, seed: int, snapshots: int) -> None:
    """Every (G, client, q, snapshot) the replay covers, on the 6-hour mixed fleet and on a rebalance."""
    from jobs import _delta, ingest, simulate
    from jobs.snapshots import offset_series
    from schemas import consumer_offsets, deliveries, queue_bounds

    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    simulate.run(scenario, str(landing), seed=seed)
    ingest.run(str(landing), lake)
    as_of = _delta.read(spark, lake, consumer_offsets.TABLE).agg({"snapshot_ts": "max"}).collect()[0][0]
    series = offset_series(_delta.read(spark, lake, consumer_offsets.TABLE),
                                     _delta.read(spark, lake, queue_bounds.TABLE), as_of=as_of)
    tl = replay.commit_timeline(_delta.read(spark, lake, deliveries.TABLE), as_of=as_of)
    cols = SERIES_KEY + ["snapshot_ts", "lower", "upper", "committed_offset"]
    got = {tuple(r) for r in replay.replayed_commits(tl, series).select(*cols).toPandas()
           .itertuples(index=False)}
    want = _oracle(tl.toPandas(), series.select(*SERIES_KEY, "snapshot_ts", "committed_offset").toPandas())
    assert len(want) == snapshots
    assert got == want
