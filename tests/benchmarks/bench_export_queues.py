"""The exporter's memory against a broker's number of consume queue files (issue 37: peak RSS < 300 MiB, whatever
the store's size).

Usage::

    .venv/bin/python tests/benchmarks/bench_export_queues.py [--files 9792] [--runs 34] [--workdir W]

A store of ``--files`` queue files (topics of 4 queues; each file preallocated at 120,000 bytes, as ``mixed`` makes
them, and holding 3,000 entries) and one small commitlog segment. One process exports it ``--runs`` times, as
``rmq-recon export --every`` would, after giving every file one more entry before each run: the worst case for the
host state, whose pieces grow by one per file and run until a file ships whole again. Run twice, each in a fresh
process: with the pieces capped (``queues.PIECES_BUDGET``, the default) and without a cap (every file up to
``queues.MAX_PIECES``, as before stop 69). Prints per run: CPU, the most pieces of a file, the state's size, the peak
RSS so far.

This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
FILE_SIZE, ENTRIES = 120_000, 3_000


def build(store: Path, files: int) -> list[Path]:
    """The store: ``files`` queue files of ENTRIES entries each (written sparse: the rest of the file a hole)."""
    from jobs.formats import commitlog_encode

    shutil.rmtree(store, ignore_errors=True)
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / f"{0:020d}").write_bytes(commitlog_encode.encode_message(
        topic="T00000", queue_id=0, queue_offset=0, physical_offset=0, body=b"x", properties={},
        born_ts_ms=1_767_225_600_000, store_ts_ms=1_767_225_600_000, born_host=("10.0.0.1", 40000),
        store_host=("10.0.0.2", 10911)))
    out = []
    entries = b"".join(struct.pack(">qiq", 100 * i, 100, 7) for i in range(ENTRIES))
    for i in range(files):
        d = store / "consumequeue" / f"T{i // 4:05d}" / str(i % 4)
        d.mkdir(parents=True)
        p = d / f"{0:020d}"
        with open(p, "wb") as fh:
            fh.write(entries)
            fh.truncate(FILE_SIZE)
        out.append(p)
    return out


def child(workdir: Path, files: int, runs: int, capped: bool) -> None:
    from jobs import export

    export.host_process()
    from jobs.export import queues, store

    if not capped:
        queues.PIECES_BUDGET = queues.MAX_PIECES * files
    paths = build(workdir / "store", files)
    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    state = out / "state" / "cluster=C" / "broker=b.json"
    for r in range(runs):
        if r:
            for p in paths:  # one more entry in every file
                with open(p, "r+b") as fh:
                    fh.seek(20 * (ENTRIES + r - 1))
                    fh.write(struct.pack(">qiq", 1 << 40, 100, 7))
        c = time.process_time()
        m = store.export_store(str(workdir / "store"), str(out / "to"), cluster="C", broker="b",
                               snapshot_ts=t0 + dt.timedelta(minutes=15 * r), state_dir=str(out / "state"),
                               say=lambda _: None)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        print(json.dumps({"run": r + 1, "cpu_s": round(time.process_time() - c, 2),
                          "pieces": max(len(q["pieces"]) for q in m["queues"]),
                          "state_kib": state.stat().st_size >> 10, "peak_mib": peak}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=9_792)
    p.add_argument("--runs", type=int, default=34)
    p.add_argument("--workdir", default="/tmp/rmq-bench-export-queues")
    p.add_argument("--child", choices=("capped", "uncapped"))
    a = p.parse_args()
    work = Path(a.workdir)
    if a.child:
        child(work / a.child, a.files, a.runs, a.child == "capped")
        return
    from jobs.export import queues

    print(f"{a.files:,} queue files, {a.runs} runs in one process, every file one entry more before each run; "
          f"cap: {queues.PIECES_BUDGET:,} pieces in all ({queues.max_pieces(a.files)} a file)\n")
    print("| pieces | run | CPU s | most pieces of a file | state KiB | peak RSS so far |\n|---|---|---|---|---|---|")
    peaks = {}
    for mode in ("uncapped", "capped"):
        proc = subprocess.run([sys.executable, __file__, "--child", mode, "--files", str(a.files), "--runs",
                               str(a.runs), "--workdir", str(work)], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if proc.returncode:
            raise SystemExit(f"bench_export_queues: the {mode} run failed: {proc.stderr.strip()[-2000:]}")
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        for r in rows:
            if r["run"] % 4 == 1 or r["run"] == len(rows):
                print(f"| {mode} | {r['run']} | {r['cpu_s']} | {r['pieces']} | {r['state_kib']:,} | "
                      f"{r['peak_mib']} MiB |")
        peaks[mode] = rows[-1]["peak_mib"]
    shutil.rmtree(work, ignore_errors=True)
    print(f"\npeak RSS: {peaks['uncapped']} MiB uncapped, {peaks['capped']} MiB capped (target < 300)")


if __name__ == "__main__":
    main()
