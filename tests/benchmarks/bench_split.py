"""Decode of a full 1 GiB commitlog segment, whole and in pieces (issue 13: segments split at 64-256 MiB).

Usage::

    .venv/bin/python tests/benchmarks/bench_split.py [--dir /tmp/rmq-bench-commitlog] [--workdir W] [--runs 3]
        [--split-mb 256]

The landing zone is one broker snapshot holding a full 1 GiB segment (the synthetic log of
``bench_commitlog_decode.py``: real producers' message shapes, written with the project's ``CommitLogWriter``) and
the first 16 MiB of the next one, as a broker leaves them after a roll. Each run is a fresh process that runs
ingest's decode step (``jobs.ingest.decode.decode_commitlogs``: plan, ``mapInArrow`` decode tasks on embedded Sail,
the staging folder) pinned to 1 or 2 CPUs (``taskset``, ``SAIL_EXECUTION__DEFAULT_PARALLELISM``), with
``RMQ_RECON_DECODE_SPLIT_MB=0`` (the segment is one task) and ``--split-mb`` (it is cut in pieces). Outside the timed
region each run checks what it staged: the records' count, physical offsets (count, sum, lowest, highest) and the
segments' new ledger state, which must be the same in every run. Medians of ``--runs``, runs interleaved.

This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
MIB = 1 << 20
SNAPSHOT = "cluster=c/broker=b/snapshot_ts=20260105T000000Z"
TARGET_SPEEDUP = 1.7  # issue 13: 2 cores >= 1.7x the throughput of 1 core


def child(workdir: str) -> dict[str, Any]:
    """One decode step in this process; what it took and what it staged."""
    import datetime as dt
    import resource

    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    from jobs.ingest import ingest, landing
    from jobs.lake import _spark

    land, lake = os.path.join(workdir, "landing"), os.path.join(workdir, "lake")
    shutil.rmtree(lake, ignore_errors=True)
    snaps, problems, _ = landing.discover(land)
    assert not problems, problems
    out = ingest.Extracted()
    state: dict = {}
    with _spark.session() as spark:
        spark.range(1).count()  # the engine is up before the clock starts
        t0, c0 = time.perf_counter(), time.process_time()
        staged = ingest.decode_commitlogs(spark, lake, snaps, state, out, dt.datetime.now(dt.timezone.utc))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    t = pads.dataset(staged.staging, format="parquet").to_table(columns=["kind", "physical_offset"],
                                                                 filter=pc.field("kind") == "message")
    phys = t.column("physical_offset")
    return {"wall": wall, "cpu": cpu, "messages": staged.messages, "problems": len(out.problems),
            "offsets": [len(phys), pc.sum(phys).as_py(), pc.min(phys).as_py(), pc.max(phys).as_py()],
            "state": sorted([k[2], s.decoded_to, s.complete] for k, s in state.items()),
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(workdir: Path, split_mb: str, cpus: int, remote: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_LOG": "warn", "RMQ_RECON_DECODE_SPLIT_MB": split_mb,
           "SAIL_EXECUTION__DEFAULT_PARALLELISM": str(cpus)}
    if remote:  # the standalone cluster (no Delta jars there): the staging folder is Parquet anyway
        env.update(SPARK_REMOTE=remote, RMQ_RECON_ENGINE="connect", RMQ_RECON_FORMAT="parquet")
    cpu_list = ",".join(str(i) for i in range(min(cpus, os.cpu_count() or 1)))
    p = subprocess.run(["taskset", "-c", cpu_list, sys.executable, __file__, "--child", str(workdir)], env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"decode run failed (split {split_mb} MiB, {cpus} CPU): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def prepare(args: argparse.Namespace, workdir: Path) -> None:
    """The synthetic 1 GiB segments (bench_commitlog_decode's cache) as a landing-zone snapshot."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_commitlog_decode as bcd

    manifest = bcd.prepare(argparse.Namespace(gib=2.0, segment_mib=1024, dir=args.dir, small_segment_mib=256))
    first, second = manifest["layout"][0], manifest["layout"][1]
    seg_dir = workdir / "landing" / SNAPSHOT / "store" / "commitlog"
    shutil.rmtree(workdir / "landing", ignore_errors=True)
    seg_dir.mkdir(parents=True)
    os.link(os.path.join(manifest["log_dir"], first["name"]), seg_dir / first["name"])
    with open(os.path.join(manifest["log_dir"], second["name"]), "rb") as src:
        (seg_dir / second["name"]).write_bytes(src.read(16 * MIB))  # the newest segment, still being written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/rmq-bench-commitlog", help="cache of bench_commitlog_decode's logs")
    ap.add_argument("--workdir", default="/tmp/rmq-bench-split")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--split-mb", default="256")
    ap.add_argument("--cluster", action="store_true",
                    help="also decode on infra/spark-cluster.sh with 2 workers of 1 core, whole and in pieces")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(args, workdir)
    configs = [("whole", "0", 1), ("whole", "0", 2), ("pieces", args.split_mb, 1), ("pieces", args.split_mb, 2)]
    results: dict[tuple[str, int], list[dict[str, Any]]] = {(m, c): [] for m, _, c in configs}
    for r in range(args.runs):
        for mode, split_mb, cpus in configs:
            res = run_child(workdir, split_mb, cpus)
            results[(mode, cpus)].append(res)
            print(f"run {r + 1}/{args.runs}: {mode:6s} {cpus} CPU: {res['wall']:.2f} s "
                  f"({res['messages']:,} messages)", flush=True)
    checks = {json.dumps([x["messages"], x["problems"], x["offsets"], x["state"]])
              for rs in results.values() for x in rs}
    if len(checks) != 1:
        raise SystemExit(f"the runs staged different records or states: {sorted(checks)}")
    some = next(iter(results.values()))[0]
    med = {k: statistics.median(x["wall"] for x in rs) for k, rs in results.items()}
    print(f"\n{some['messages']:,} records, physical offsets {some['offsets'][2]:,}..{some['offsets'][3]:,}, the same "
          f"in every run; state {some['state']}\n")
    print("| decode of a full 1 GiB segment + 16 MiB | 1 CPU | 2 CPUs | 2 CPUs / 1 CPU | peak RSS (2 CPUs) |")
    print("|---|---|---|---|---|")
    for mode in ("whole", "pieces"):
        rss = max(x["maxrss_mib"] for x in results[(mode, 2)])
        print(f"| {mode} ({'one task' if mode == 'whole' else args.split_mb + ' MiB pieces'}) | "
              f"{med[(mode, 1)]:.2f} s | {med[(mode, 2)]:.2f} s | {med[(mode, 1)] / med[(mode, 2)]:.2f}x "
              f"(target >= {TARGET_SPEEDUP}x) | {rss:.0f} MiB |")
    print(f"\npieces vs whole on 2 CPUs: {med[('whole', 2)] / med[('pieces', 2)]:.2f}x faster")
    if args.cluster:
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_pipeline

        walls: dict[str, list[float]] = {"whole": [], "pieces": []}
        with bench_pipeline._cluster(workdir, 2) as (url, _pids):
            for r in range(args.runs):
                for mode, split_mb in (("whole", "0"), ("pieces", args.split_mb)):
                    res = run_child(workdir, split_mb, 2, remote=url)
                    if json.dumps([res["messages"], res["problems"], res["offsets"], res["state"]]) not in checks:
                        raise SystemExit(f"the cluster staged other records or states ({mode}): {res}")
                    walls[mode].append(res["wall"])
                    print(f"cluster run {r + 1}/{args.runs}: {mode:6s}: {res['wall']:.2f} s", flush=True)
        w, p = statistics.median(walls["whole"]), statistics.median(walls["pieces"])
        print(f"\nstandalone cluster, 2 workers x 1 core: whole {w:.2f} s, pieces {p:.2f} s: {w / p:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
