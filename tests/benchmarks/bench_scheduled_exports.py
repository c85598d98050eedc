"""Exports ingested as the scheduled DAG takes them (a snapshot time a run) against one run: the export queue files
the queue checks read whole or in part, the time, and both lakes' rows (issue 37: a run costs what is new).

Usage::

    .venv/bin/python tests/benchmarks/bench_scheduled_exports.py [--scenario mixed] [--seed 1] [--workdir W]

Simulates ``--scenario`` as store copies, replays them through the exporters (``tests/export/test_export_parity``'s
``export_history``), then ingests the exports into one lake in one run and into another a snapshot time a run.
Prints, per mode: runs, seconds, the export queue files read whole (``bounds.read_file`` from byte 0 to the end) and
the reads of a part (from where a copy's entries ended, and a search's reads); then whether the two
lakes hold the same rows (silver, quarantine, trace records). Exits 1 when they differ.

This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import shutil
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="mixed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default="/tmp/rmq-bench-scheduled-exports")
    a = p.parse_args()

    from export.test_export_parity import compared, export_history, folders
    from jobs import simulate
    from jobs.ingest import bounds, ingest

    work = pathlib.Path(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    simulate.run(a.scenario, str(work / "copies"), seed=a.seed)
    n = export_history(work / "copies", work / "exported", work / "state")
    times = sorted({ts for _, _, ts, _ in folders(work / "exported")})
    print(f"{a.scenario} seed {a.seed}: {n} export folders, {len(times)} snapshot times\n")

    reads: collections.Counter[str] = collections.Counter()
    real = bounds.read_file

    def counted(f, start=0, end=None):  # type: ignore[no-untyped-def]
        if f.pieces is not None:
            reads["whole" if start == 0 and end is None else "part"] += 1
        return real(f, start, end)

    bounds.read_file = counted
    print("| ingest | runs | s | export queue files read whole | reads of a part |\n|---|---|---|---|---|")
    for mode, globs in (("one run", [None]),
                        ("a run each", [f"*/snapshot_ts={ts:%Y%m%dT%H%M%SZ}" for ts in times])):
        reads.clear()
        lake = work / mode.replace(" ", "-")
        t0 = time.monotonic()
        for glob in globs:
            ingest.run(str(work / "exported"), str(lake), snapshot_glob=glob)
        print(f"| {mode} | {len(globs)} | {time.monotonic() - t0:.1f} | {reads['whole']} | {reads['part']} |")
    one, each = compared(work / "one-run"), compared(work / "a-run-each")
    differ = [t for t in one if one[t] != each.get(t)]
    said = "the same rows" if not differ else "DIFFER in " + ", ".join(differ)
    print(f"\nlakes: {said} ({len(one)} tables compared)")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
