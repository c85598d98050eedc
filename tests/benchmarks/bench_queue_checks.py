"""The ingest's queue checks on one consume queue file of a real broker's size (issue 37: a run costs what is new):
milliseconds per copy, an export's file against the same bytes as a store copy, within one run and a run each.

Usage::

    .venv/bin/python tests/benchmarks/bench_queue_checks.py [--capacity 300000] [--entries 100000] [--gain 250]
        [--exports 4] [--oldest 5000]

A queue file of ``--capacity`` entries (5.7 MiB at the broker's default 300,000) holding ``--entries``, exported
``--exports`` times through the exporter, each time ``--gain`` entries more; the oldest commitlog segment starts at
entry ``--oldest`` (inside the file, as on a broker that deleted a segment), and so does the range the records are
checked against, as in a scheduled run. Each copy goes through the ingest's queue checks
(``jobs.ingest.bounds._queue_bounds``) as an export's file and as a store copy of the same bytes, with the ledger
entries of the copy before: as one run leaves them, or as the ledger table keeps them for the next run (``a run
each``: no pieces, no prefix hash). Prints the milliseconds of each copy and the bytes read; both paths' rows are
checked equal (bounds, dangling entries, the ledger's summary).

This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import struct
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def measure(capacity: int, entries: int, gain: int, exports: int, oldest: int, runs: bool) -> dict[str, list]:
    import numpy as np
    import pytest

    from export import test_export_queues as helpers
    from jobs.ingest import bounds
    from jobs.ingest.known_records import _SnapshotRecords

    helpers.SIZE = capacity * 20
    lo = 1000 + 100 * oldest
    mp = pytest.MonkeyPatch()
    try:
        run = helpers.Bounds(pathlib.Path(tempfile.mkdtemp(prefix="rmq-bench-queue-checks-")), mp, oldest=lo)
        offs = np.arange(lo, 1000 + 100 * (entries + gain * exports), 100, dtype=np.int64)
        run.known = _SnapshotRecords(offs, np.full(len(offs), 100, np.int32), (lo, int(offs[-1]) + 100))
        took: dict[str, list] = {"export": [], "copy": []}
        real = bounds._queue_bounds

        def timed(snap, topic, qid, fs, *a, **k):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return real(snap, topic, qid, fs, *a, **k)
            finally:
                took["export" if fs[0].pieces is not None else "copy"].append((time.perf_counter() - t0) * 1000)

        mp.setattr(bounds, "_queue_bounds", timed)
        with open(run.host.file, "r+b") as fh:
            fh.write(b"".join(struct.pack(">qiq", 1000 + 100 * i, 100, 7) for i in range(entries)))
        n, read = entries, {"export": [], "copy": []}
        for k in range(exports):
            if k:
                with open(run.host.file, "r+b") as fh:
                    fh.seek(20 * n)
                    fh.write(b"".join(struct.pack(">qiq", 1000 + 100 * i, 100, 7) for i in range(n, n + gain)))
                n += gain
            _, got = run.export()
            helpers._same(got)
            assert got["export"]["bounds"] == [(oldest, n)], got["export"]["bounds"]
            for name in ("export", "copy"):
                read[name].append(sum((capacity * 20 if e is None else e) - s for s, e in got[name]["reads"]))
            if runs:
                run.prior = {name: {rel: dataclasses.replace(e, pieces=None, prefix_sha256=None)
                                    for rel, e in entries_.items()} for name, entries_ in run.prior.items()}
        return {"ms": took, "read": read}
    finally:
        mp.undo()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capacity", type=int, default=300_000)
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--gain", type=int, default=250)
    p.add_argument("--exports", type=int, default=4)
    p.add_argument("--oldest", type=int, default=5_000)
    a = p.parse_args()
    print(f"a queue file of {a.capacity:,} entries holding {a.entries:,}, +{a.gain} an export, {a.exports} exports; "
          f"the oldest segment starts at entry {a.oldest:,}\n")
    print("| runs | copy | export's file: ms | bytes read | store copy: ms | bytes read |\n|---|---|---|---|---|---|")
    for runs in (False, True):
        got = measure(a.capacity, a.entries, a.gain, a.exports, a.oldest, runs)
        for k in range(a.exports):
            print(f"| {'a run each' if runs else 'one run'} | {k + 1} | {got['ms']['export'][k]:.2f} | "
                  f"{got['read']['export'][k]:,} | {got['ms']['copy'][k]:.2f} | {got['read']['copy'][k]:,} |")


if __name__ == "__main__":
    main()
