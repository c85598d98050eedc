"""What the daily gold retention costs as the kept history grows: it should cost one day's rows, not the table's.

A synthetic gold/status_samples (the largest gold table: max(window, 48) rows a key a run) and its ledger rows:
``--rows`` rows a run (default 15,322: a tenth of the 10 M benchmark's 3,192 keys x 48), a run every 15 minutes,
``D + 1`` days of runs written a commit a run and compacted after each day, as the daily maintenance leaves them. Then
``jobs.ops.retention.prune`` with a retention of ``D`` days, which removes the oldest day (96 runs), timed, and a
compaction after it. The table grows with ``D``; the day pruned does not.

It prints, per ``D``: table rows, prune seconds, files rewritten, and the ratio to the smallest ``D``'s.

    .venv/bin/python tests/benchmarks/bench_retention.py [--days 1,3,7,14] [--rows 15322] [--workdir W]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

UTC = dt.timezone.utc
EVERY = dt.timedelta(minutes=15)
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
PER_DAY = int(dt.timedelta(days=1) / EVERY)


def run_id(ts: dt.datetime) -> str:
    """An Airflow scheduled run id as the reconcile stores it (``sanitize_run_id``)."""
    from jobs.reconcile.reconcile import sanitize_run_id

    return sanitize_run_id(f"scheduled__{ts.isoformat()}")


def build(lake: str, days: int, rows: int, target: int) -> int:
    """``days`` days of runs, a commit a run, compacted after each day; returns the status sample rows."""
    from deltalake import DeltaTable, write_deltalake

    from jobs.lake import _delta
    from schemas import reconcile_runs, status_samples

    schema = _delta._arrow_schema(status_samples.TABLE)  # noqa: SLF001
    ledger_schema = _delta._arrow_schema(reconcile_runs.TABLE)  # noqa: SLF001
    keys = np.arange(rows)
    groups = pa.array([f"g{k % 19}" for k in keys])
    topics = pa.array([f"t{k % 14}" for k in keys])
    brokers = pa.array([f"b{k % 14}" for k in keys])
    total = 0
    for d in range(days):
        ledger = []
        for s in range(PER_DAY):  # a commit a run, as each reconcile writes
            ts = T0 + (d * PER_DAY + s) * EVERY
            rid = run_id(ts)
            n = len(keys)
            write_deltalake(status_samples.TABLE.path(lake), pa.table({
                "cluster": pa.array(["c1"] * n), "consumer_group": groups, "client_id": pa.nulls(n, pa.string()),
                "topic": topics, "broker": brokers, "queue_id": pa.array(keys % 12, pa.int32()),
                "snapshot_ts": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
                "committed_offset": pa.array(keys * 1000 + s), "min_offset": pa.array(keys * 0),
                "max_offset": pa.array(keys * 1000 + s + 7), "lag": pa.array(np.full(n, 7)),
                "in_window": pa.array(np.ones(n, bool)), "run_id": pa.array([rid] * n)}, schema=schema),
                mode="append")
            ledger.append({"run_id": rid, "as_of": ts, "completed_at": ts + dt.timedelta(minutes=2),
                           "table_versions": []})
            total += n
        write_deltalake(reconcile_runs.TABLE.path(lake), pa.Table.from_pylist(
            [{f.name: r.get(f.name) for f in ledger_schema} for r in ledger], schema=ledger_schema), mode="append")
        for t in (status_samples.TABLE, reconcile_runs.TABLE):  # the daily maintenance
            DeltaTable(t.path(lake)).optimize.compact(target_size=target)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", default="1,3,7,14", help="retention days to measure (comma separated)")
    ap.add_argument("--rows", type=int, default=15_322, help="status sample rows a run")
    ap.add_argument("--target-mb", type=float, default=None,
                    help="compaction target (default: delta-rs's 100 MB scaled by --rows / 153,216, the rows a run "
                         "at 3,192 keys, so a file holds as many runs as in production)")
    ap.add_argument("--workdir", default="/tmp/bench-retention")
    a = ap.parse_args()

    from deltalake import DeltaTable

    from jobs.ops import retention
    from schemas import status_samples

    full_run = 3_192 * 48
    target = int((a.target_mb * 2**20) if a.target_mb else 100 * 2**20 * a.rows / full_run)
    print(f"compaction target {target / 2**20:.1f} MB ({a.rows:,} rows a run; delta-rs's default 100 MB at "
          f"{full_run:,})", flush=True)
    out = []
    for days in [int(d) for d in a.days.split(",")]:
        work = Path(a.workdir) / f"d{days}"
        shutil.rmtree(work, ignore_errors=True)
        lake = str(work / "lake")
        t0 = time.time()
        rows = build(lake, days + 1, a.rows, target)
        built = time.time() - t0
        # the oldest day's runs completed at T0 + 00:02 .. 23:47, the next day's from 24:02; now = a minute after the
        # newest run completed, so the cutoff (now - D days) is T0 + 23:48
        now = T0 + dt.timedelta(days=days + 1) - EVERY + dt.timedelta(minutes=3)
        t0 = time.time()
        result = retention.prune(lake, days=days, keep_runs=30, keep_validations=30, now=now, say=lambda _: None)
        pruned = time.time() - t0
        deleted = result["rows"].get(status_samples.TABLE.qualified, 0)
        table = DeltaTable(status_samples.TABLE.path(lake))
        last = table.history(1)[0]
        rewritten = int(last.get("operationMetrics", {}).get("num_removed_files", 0)) if result["runs"] else 0
        left = table.to_pyarrow_dataset().count_rows()
        expected = (days * PER_DAY) * a.rows
        if (len(result["runs"]), deleted, left) != (PER_DAY, PER_DAY * a.rows, expected):
            print(f"FAIL: D={days}: pruned {len(result['runs'])} runs, {deleted} rows, {left} left; expected "
                  f"{PER_DAY} runs, {PER_DAY * a.rows} rows, {expected} left", file=sys.stderr)
            return 1
        files = len(table.file_uris())
        size = sum(table.get_add_actions(flatten=True).column("size_bytes").to_pylist())
        out.append((days, rows, pruned, rewritten, files))
        print(f"D={days}: {rows:,} rows ({built:.1f} s to build, {size / 2**20 / days:.1f} MB a day in live files), "
              f"prune of one day {pruned:.2f} s, {deleted:,} rows deleted, {rewritten} of the table's files "
              f"rewritten ({files} live after)", flush=True)
    base = out[0][2]
    print("\n| retention days | status sample rows | prune one day | files rewritten | live files after | vs smallest |")
    print("|---|---|---|---|---|---|")
    for days, rows, pruned, rewritten, files in out:
        print(f"| {days} | {rows:,} | {pruned:.2f} s | {rewritten} | {files} | {pruned / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
