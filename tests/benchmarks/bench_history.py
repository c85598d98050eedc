"""How the reconcile's offset work grows with the lake's age: a full run's, and a scheduled run's that carries the
previous run's offset state (jobs.reconcile.offset_state, docs/semantics.md rule 24).

Synthetic tables of one fleet snapshotted every 15 minutes for 1, 7, 30 and 90 days (the 10 M benchmark's 3,192 keys:
14 brokers, 19 groups, 12 queues of one topic each). Timed, as the reconcile computes them:

* full: the offset series (``snapshots.offset_series``) materialized once, then EXPIRED, REWIND and the corrections;
* carried: the same answers from the state a run 15 minutes earlier left (its tail, decreases and EXPIRED rows,
  computed first and not timed): ``snapshots.series_after`` materialized, the later decreases, EXPIRED merged with the
  earlier rows, the corrections. Both give the same rows (checked here);
* the DLQ rules' retryMaxTimes (``dlq.retry_max_times``): from every subscriptionGroup.json row (19 groups on each of
  the 14 brokers, every snapshot), and carried: the previous run's latest rows (``dlq.latest_subscriptions``, not
  timed) and the rows after its time. Same rows (checked).

It prints seconds and the ratio to one day's.

    .venv/bin/python tests/benchmarks/bench_history.py [--days 1,7,30,90] [--workdir W]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BROKERS, GROUPS, QUEUES = 14, 19, 12
EVERY = dt.timedelta(minutes=15)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def write_tables(folder: Path, days: int, seed: int = 3) -> int:
    """consumer_offsets, queue_bounds and subscription_groups Parquet of ``days`` of snapshots, a file per day;
    returns the offset rows.

    Offsets grow by about 1,000 a snapshot; one group in ten stays 400,000 behind, beyond the 300,000 the queues keep
    (EXPIRED, corrections), and one committed offset in 500 goes back 5,000 (REWIND). Every broker lists every group
    in its subscriptionGroup.json each snapshot; one (group, broker) in 2,000 changes its retryMaxTimes."""
    from jobs.lake import _delta
    from schemas import consumer_offsets, queue_bounds, subscription_groups

    rng = np.random.default_rng(seed)
    co_dir, qb_dir, sg_dir = folder / "consumer_offsets", folder / "queue_bounds", folder / "subscription_groups"
    co_dir.mkdir(parents=True)
    qb_dir.mkdir(parents=True)
    sg_dir.mkdir(parents=True)
    broker_names = np.array([f"broker-{b:02d}" for b in range(BROKERS)])
    retry_max = np.full(BROKERS * GROUPS, 16, dtype=np.int32)
    brokers = np.repeat(np.array([f"broker-{b:02d}" for b in range(BROKERS)]), QUEUES)
    topics = np.array([f"topic-{b:02d}" for b in range(BROKERS)]).repeat(QUEUES)
    qids = np.tile(np.arange(QUEUES, dtype=np.int32), BROKERS)
    per_day = int(dt.timedelta(days=1) / EVERY)
    rows = 0
    for d in range(days):
        co_parts, qb_parts, sg_parts = [], [], []
        for s in range(per_day):
            i = d * per_day + s
            ts = T0 + i * EVERY
            retry_max = np.where(rng.random(len(retry_max)) < 0.0005, rng.integers(1, 17, len(retry_max)),
                                 retry_max).astype(np.int32)
            n = len(retry_max)
            sg_parts.append({"cluster": ["c"] * n, "broker": np.repeat(broker_names, GROUPS), "snapshot_ts": [ts] * n,
                             "consumer_group": np.tile(np.array([f"GID_{g:02d}" for g in range(GROUPS)]), BROKERS),
                             "retry_max_times": retry_max, "retry_queue_nums": np.ones(n, np.int32),
                             "consume_enable": [True] * n, "consume_broadcast_enable": [False] * n,
                             "consume_message_orderly": [False] * n, "consume_timeout_minute": np.full(n, 15, np.int32),
                             "group_retry_policy": [None] * n, "source_file": ["x"] * n, "used_backup": [False] * n})
            max_off = (i + 1) * 1000 + rng.integers(0, 50, len(qids))
            min_off = np.maximum(0, max_off - 300_000)
            qb_parts.append({"cluster": ["c"] * len(qids), "broker": brokers, "snapshot_ts": [ts] * len(qids),
                             "topic": topics, "queue_id": qids, "min_offset": min_off, "max_offset": max_off})
            for g in range(GROUPS):
                lag = 400_000 if g % 10 == 9 else 300 * g + rng.integers(0, 400, len(qids))
                committed = np.maximum(0, max_off - lag)
                committed = np.where(rng.random(len(qids)) < 0.002, committed - 5000, committed)
                co_parts.append({"cluster": ["c"] * len(qids), "broker": brokers, "snapshot_ts": [ts] * len(qids),
                                 "consumer_group": [f"GID_{g:02d}"] * len(qids), "topic": topics, "queue_id": qids,
                                 "client_id": [""] * len(qids), "committed_offset": committed,
                                 "is_retry_topic": [False] * len(qids), "source_file": ["x"] * len(qids),
                                 "used_backup": [False] * len(qids)})
        for parts, schema, out in ((co_parts, consumer_offsets.TABLE, co_dir), (qb_parts, queue_bounds.TABLE, qb_dir),
                                   (sg_parts, subscription_groups.TABLE, sg_dir)):
            arrow = _delta._arrow_schema(schema)
            table = pa.table({f.name: pa.array(np.concatenate([np.asarray(p[f.name], dtype=object if f.name ==
                                                                          "group_retry_policy" else None)
                                                               for p in parts]), type=f.type)
                              for f in arrow}, schema=arrow)
            pq.write_table(table, out / f"day-{d:03d}.parquet")
            if out is co_dir:
                rows += table.num_rows
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", default="1,7,30,90")
    ap.add_argument("--workdir", default="/tmp/bench-history")
    args = ap.parse_args()
    from jobs.lake import _spark
    from jobs.reconcile import offset_state
    from jobs.rules import corrections, dlq, duplicates, snapshots, unconsumed

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    results = []
    with _spark.session() as spark:
        for days in [int(x) for x in args.days.split(",")]:
            folder = work / f"days-{days}"
            t = time.time()
            rows = write_tables(folder, days)
            gen = time.time() - t
            as_of = T0 + dt.timedelta(days=days)
            t = time.time()
            co = spark.read.parquet(str(folder / "consumer_offsets"))
            qb = spark.read.parquet(str(folder / "queue_bounds"))
            series = _spark.materialize(spark, snapshots.offset_series(co, qb, as_of=as_of), str(folder / "series"))
            t_series = time.time() - t
            full = {"EXPIRED": unconsumed.expired(series),
                    "REWIND": duplicates.rewind_ranges(snapshots.decreases(series)),
                    "corrections": corrections.offset_corrections(series)}
            counts = {name: df.count() for name, df in full.items()}
            total = time.time() - t
            # the state the run of the snapshot before the last one left (not timed: that run computed it); the last
            # snapshot is at as_of - 15 minutes
            since = as_of - 2 * EVERY
            before = _spark.materialize(spark, snapshots.offset_series(co, qb, as_of=since), str(folder / "before"))
            tail = _spark.materialize(spark, snapshots.tail(before, keep=offset_state.tail_keep(10)),
                                      str(folder / "tail"))
            falls_before = _spark.materialize(spark, snapshots.decreases(before), str(folder / "falls"))
            expired_before = _spark.materialize(spark, unconsumed.expired(before), str(folder / "expired"))
            bounds_at = [tuple(r) for r in snapshots.bounds_times(qb, as_of=since).collect()]
            t = time.time()
            carried = _spark.materialize(spark, snapshots.series_after(co, qb, tail, since=since, as_of=as_of,
                                                                       bounds_at=bounds_at), str(folder / "carried"))
            t_carried_series = time.time() - t
            falls = falls_before.unionByName(snapshots.decreases_after(carried, tail, since=since))
            inc = {"EXPIRED": unconsumed.expired(carried, expired_before), "REWIND": duplicates.rewind_ranges(falls),
                   "corrections": corrections.offset_corrections(carried)}
            inc_counts = {name: df.count() for name, df in inc.items()}
            t_carried = time.time() - t
            same = all(sorted(full[n].collect()) == sorted(inc[n].collect()) for n in full)
            # retryMaxTimes (the DLQ rules' input): every subscriptionGroup.json row, or the previous run's latest
            # rows (gold/subscription_latest, not timed) and the rows after its time
            sg = spark.read.parquet(str(folder / "subscription_groups"))
            t = time.time()
            rm_full = _spark.materialize(spark, dlq.retry_max_times(sg, as_of=as_of), str(folder / "rm_full"))
            t_rm_full = time.time() - t
            latest = _spark.materialize(spark, dlq.latest_subscriptions(sg, as_of=since), str(folder / "sg_latest"))
            t = time.time()
            rm_carried = _spark.materialize(spark, dlq.retry_max_times(
                offset_state.with_later_subscriptions(latest, sg, since), as_of=as_of), str(folder / "rm_carried"))
            t_rm_carried = time.time() - t
            same = same and sorted(rm_full.collect()) == sorted(rm_carried.collect())
            results.append((days, rows, t_series, total, counts, t_carried_series, t_carried, carried.count(),
                            t_rm_full, t_rm_carried))
            print(f"{days:3d} days: {rows:>11,} offset rows (generated in {gen:.1f} s); full: series {t_series:.1f} s, "
                  f"series + EXPIRED + REWIND + corrections {total:.1f} s; carried: series {t_carried_series:.1f} s "
                  f"({carried.count():,} rows), all {t_carried:.1f} s; rows {counts} {inc_counts}; retryMaxTimes from "
                  f"{sg.count():,} subscription rows {t_rm_full:.2f} s, carried {t_rm_carried:.2f} s "
                  f"({rm_full.count()} rows); same: {same}", flush=True)
            if not same:
                print("carried rows differ from the full run's", file=sys.stderr)
                return 1
            shutil.rmtree(folder, ignore_errors=True)
    base = results[0]
    print("\n| days of 15-minute snapshots | offset rows | full: series | full: with EXPIRED, REWIND, corrections | "
          "/ first | carried: series rows | carried: all | / first | retryMaxTimes: full | carried |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for days, rows, ts, total, _, _, tc, n, rf, rc in results:
        print(f"| {days} | {rows:,} | {ts:.1f} s | {total:.1f} s | {total / base[3]:.1f}x | {n:,} | {tc:.1f} s | "
              f"{tc / base[6]:.1f}x | {rf:.2f} s | {rc:.2f} s |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RUST_LOG", "warn")
    sys.exit(main())
