"""What a look-up by UNIQ_KEY costs as the lake's history grows: through silver/key_index, and by the key column
(issue 39). ``jobs.lake.lookups.copies_of`` as a run calls it, on the embedded engine.

Synthetic history of ``--histories`` million records (9 brokers, 300-byte records, one 1 M-record file an hour as an
ingest run writes it, sorted by (cluster, broker, physical_offset); the index one file an hour sorted by its hash, as
the ingest's update writes it). The keys looked up are what a scheduled run asks for: ``--keys`` keys, 99% of them
stored in the last hour (recent deliveries) and 1% a contiguous block of one old hour (a consumer lagging behind).
Timed, each the median of ``--rounds`` after one warm-up:

* ``hits``: what finds the copies' positions: the keys' hashes searched in the index's segments
  (``jobs.lake.point_index``, in the driver: the hashes collected, the hits sent back as a DataFrame), the keys'
  hashes joined with the index's five columns, or the keys joined with silver/messages' (cluster, uniq_key,
  position) columns;
* ``copies``: ``copies_of`` whole (the hits, then the records read by position, then the collision check).

Every way finds the same rows (checked). Prints seconds, the growth from the smallest history to the largest, and
what building the segments cost (hour by hour, merged as the ingests merge them).

    .venv/bin/python tests/benchmarks/bench_lookups.py [--histories 10,40] [--keys 10000] [--workdir W]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HOUR_ROWS = 1_000_000
BROKERS = 9


def write_history(spark, folder: Path, millions: int) -> None:  # noqa: ANN001
    """messages and index Parquet of ``millions`` hours, a file an hour each (what ingest runs leave)."""
    from pyspark.sql import functions as F

    from jobs.lake import lookups

    for h in range(millions):
        lo = h * HOUR_ROWS
        rows = spark.range(lo, lo + HOUR_ROWS).select(
            F.lit("c").alias("cluster"),
            F.concat(F.lit("broker-"), (F.col("id") % BROKERS).cast("string")).alias("broker"),
            ((F.col("id") / BROKERS).cast("long") * 300).alias("physical_offset"),
            F.concat(F.lit("topic-"), (F.col("id") % 97).cast("string")).alias("topic"),
            (F.col("id") % 8).cast("int").alias("queue_id"),
            (F.col("id") / 776).cast("long").alias("queue_offset"),
            F.upper(F.md5(F.col("id").cast("string"))).alias("uniq_key"),
            F.lit(0).alias("reconsume_times"))
        rows.coalesce(1).sortWithinPartitions("cluster", "broker", "physical_offset") \
            .write.mode("append").parquet(str(folder / "messages"))
        lookups.index_rows(rows).coalesce(1).sortWithinPartitions("cluster", "key_hash") \
            .write.mode("append").parquet(str(folder / "index"))
        print(f"  history: hour {h + 1} of {millions} written", flush=True)


def lookup_keys(spark, millions: int, n: int):  # noqa: ANN001, ANN202
    """99% of the keys among the last hour's records, 1% a contiguous block of hour ``millions // 3``."""
    from pyspark.sql import functions as F

    recent, old = n - n // 100, n // 100
    last = (millions - 1) * HOUR_ROWS
    ids = list(range(last, last + HOUR_ROWS, HOUR_ROWS // recent))[:recent]
    start = (millions // 3) * HOUR_ROWS + 12_345
    ids += list(range(start, start + old))
    return spark.createDataFrame([(i,) for i in ids], "id long").select(
        F.lit("c").alias("cluster"), F.upper(F.md5(F.col("id").cast("string"))).alias("uniq_key"))


def timed(fn, rounds: int) -> tuple[float, int]:  # noqa: ANN001
    fn()
    times, n = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--histories", default="10,40", help="million records of history, comma-separated")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/rmq-bench-lookups")
    args = ap.parse_args()
    from pyspark.sql import functions as F

    from jobs.lake import _spark, lookups

    out = []
    with _spark.session() as spark:
        for m in [int(x) for x in args.histories.split(",")]:
            folder = Path(args.workdir) / f"h{m}"
            if not (folder / "index").exists():
                shutil.rmtree(folder, ignore_errors=True)
                write_history(spark, folder, m)
            messages = spark.read.parquet(str(folder / "messages"))
            index = spark.read.parquet(str(folder / "index"))
            keys = lookup_keys(spark, m, args.keys)
            keys.write.mode("overwrite").parquet(str(folder / "keys"))
            keys = spark.read.parquet(str(folder / "keys"))
            n = 0

            def small(df, name):  # noqa: ANN001, ANN202
                nonlocal n
                n += 1
                return _spark.materialize(spark, df, str(folder / "tmp" / f"{name}-{n}"))

            from jobs.lake import point_index

            # the segments as hourly ingests leave them (a segment an hour, merges up to INGEST_MERGE_ROWS), with a
            # maintenance (every merge due) once a day
            shutil.rmtree(folder / "segs", ignore_errors=True)
            t0 = time.perf_counter()
            hourly: list[float] = []
            daily: list[float] = []
            import pyarrow.parquet as pq

            hours: list[list[str]] = [[]]
            rows = 0
            for f in sorted((folder / "index").glob("*.parquet"), key=lambda x: x.stat().st_mtime_ns):
                hours[-1].append(str(f))  # the files of an hour's write, in the order they were written
                rows += pq.ParquetFile(f).metadata.num_rows
                if rows % HOUR_ROWS == 0:
                    hours.append([])
            for h, fs in enumerate(x for x in hours if x):
                t1 = time.perf_counter()
                point_index.build(folder / "segs", h - 1, h, fs, "bench")
                point_index.settle(folder / "segs", point_index.chain(folder / "segs", "bench"), "bench",
                                   point_index.INGEST_MERGE_ROWS)
                hourly.append(time.perf_counter() - t1)
                if h % 24 == 23:
                    t1 = time.perf_counter()
                    point_index.settle(folder / "segs", point_index.chain(folder / "segs", "bench"), "bench")
                    daily.append(time.perf_counter() - t1)
            built_s = time.perf_counter() - t0
            print(f"  segment upkeep: hourly median {statistics.median(hourly):.2f} s, max {max(hourly):.2f} s; "
                  f"daily {', '.join(f'{x:.1f}' for x in daily) or '-'} s", flush=True)
            segs = point_index.chain(folder / "segs", "bench")
            runs_mib = sum(x.path.stat().st_size for x in segs) / 2**20
            print(f"  segments: {[x.rows for x in segs]} rows", flush=True)
            point = point_index.PointIndex(index, folder / "segs", m - 1)

            def hits_point() -> int:
                return point.hits(keys.select("cluster", lookups.key_hash(F.col("uniq_key")).alias("key_hash"))).count()

            def hits_index() -> int:
                hashed = keys.select("cluster", lookups.key_hash(F.col("uniq_key")).alias("key_hash"))
                return hashed.join(index, on=["cluster", "key_hash"]).count()

            def hits_column() -> int:
                return keys.join(messages.select("cluster", "uniq_key", *lookups.RECORD_KEY[1:]),
                                 on=["cluster", "uniq_key"]).count()

            def copies(with_index: Any):  # noqa: ANN202
                return lambda: lookups.copies_of(messages, keys, with_index, small, "c").count()

            row = {"history_M": m, "built_s": built_s, "runs_mib": runs_mib}
            row["hits_point_s"], p = timed(hits_point, args.rounds)
            row["copies_point_s"], q = timed(copies(point), args.rounds)
            row["hits_index_s"], a = timed(hits_index, args.rounds)
            row["hits_column_s"], b = timed(hits_column, args.rounds)
            row["copies_index_s"], c = timed(copies(index), args.rounds)
            row["copies_column_s"], d = timed(copies(None), args.rounds)
            want = sorted(tuple(r) for r in lookups.copies_of(messages, keys, None, small, "w").collect())
            got = sorted(tuple(r) for r in lookups.copies_of(messages, keys, index, small, "g").collect())
            by_runs = sorted(tuple(r) for r in lookups.copies_of(messages, keys, point, small, "p").collect())
            assert a == b == c == d == p == q == args.keys and got == want == by_runs, (a, b, c, d, p, q, len(got),
                                                                                          len(want), len(by_runs))
            shutil.rmtree(folder / "tmp", ignore_errors=True)
            out.append(row)
            print(f"history {m} M records: segments built in {built_s:.1f} s ({runs_mib:.0f} MiB); {args.keys} keys: "
                  f"hits {row['hits_point_s']:.3f} s by the segments, copies_of {row['copies_point_s']:.3f} s",
                  flush=True)
            print(f"history {m} M records, {args.keys} keys: hits {row['hits_index_s']:.3f} s by the index, "
                  f"{row['hits_column_s']:.3f} s by the key column; copies_of {row['copies_index_s']:.3f} s / "
                  f"{row['copies_column_s']:.3f} s", flush=True)
    print("\n| history (M records) | hits: segments | hits: index join | hits: key column | copies_of: segments |"
          " copies_of: index join | copies_of: key column | segments: build s / MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['history_M']} | {r['hits_point_s']:.3f} s | {r['hits_index_s']:.3f} s | {r['hits_column_s']:.3f} s"
              f" | {r['copies_point_s']:.3f} s | {r['copies_index_s']:.3f} s | {r['copies_column_s']:.3f} s | "
              f"{r['built_s']:.1f} / {r['runs_mib']:.0f} |")
    if len(out) > 1:
        a, b = out[0], out[-1]
        print(f"growth {a['history_M']} -> {b['history_M']} M: hits through the segments "
              f"{b['hits_point_s'] / a['hits_point_s']:.2f}x, copies_of through them "
              f"{b['copies_point_s'] / a['copies_point_s']:.2f}x")
        print(f"growth {a['history_M']} -> {b['history_M']} M: copies_of through the index "
              f"{b['copies_index_s'] / a['copies_index_s']:.2f}x, by the key column "
              f"{b['copies_column_s'] / a['copies_column_s']:.2f}x")


if __name__ == "__main__":
    main()
