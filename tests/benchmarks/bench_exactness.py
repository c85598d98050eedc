"""Benchmark-size exactness (issue 33): ``mixed`` at several scales and seeds, simulate -> ingest -> reconcile through
the command line as a user runs it, each report compared with the simulator's ``_truth/`` (causes included).

Usage::

    .venv/bin/python tests/benchmarks/bench_exactness.py [--scales 10,13,16] [--seeds 2,5,11]
        [--workdir /tmp/rmq-exact] [--keep] [--env NAME=VALUE ...]

Tests at demo size hide engine failures: run this before an engine setting becomes a default (``--env`` sets it for
every step, e.g. ``--env SAIL_PARQUET__PUSHDOWN_FILTERS=true``) and before resolving an issue that touches the
pipeline. Prints a row per (scale, seed) with the messages stored, each step's wall time and the differences from
the truth, and exits 1 when any step failed or any report differs (0 when all equal the truth).
Each landing zone and lake is removed after its row unless ``--keep``. Not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLI = [sys.executable, "-m", "jobs.cli"]


def step(name: str, args: list[str], env: dict[str, str], log: Path) -> tuple[float, dict[str, Any] | None, str]:
    """Run one CLI step; (seconds, its JSON result or None, the last stderr line when it failed)."""
    t0 = time.time()
    with open(log, "w") as err:
        p = subprocess.run([*CLI, name, *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    seconds = time.time() - t0
    if p.returncode != 0:
        lines = log.read_text().strip().splitlines()
        return seconds, None, f"exit {p.returncode}: {lines[-1] if lines else ''}"
    return seconds, json.loads(p.stdout), ""


def one(scale: int, seed: int, work: Path, env: dict[str, str]) -> dict[str, Any]:
    from tests.exactness import compare

    land, lake, reports = work / "landing", work / "lake", work / "reports"
    row: dict[str, Any] = {"scale": scale, "seed": seed}
    for name, args in (
        ("simulate", ["--scenario", "mixed", "--scale", str(scale), "--seed", str(seed), "--out", str(land)]),
        ("ingest", ["--landing", str(land), "--lake", str(lake)]),
        ("reconcile", ["--lake", str(lake), "--reports", str(reports)]),
    ):
        print(f"  {name} (scale {scale}, seed {seed}) ...", flush=True)
        row[name], result, failure = step(name, args, env, work / f"{name}.log")
        if failure:
            row["failure"] = f"{name} {failure}"
            return row
        if name == "ingest":
            row["messages"] = int(result["changed_rows"].get("silver/messages", 0))
        if name == "reconcile":
            row["diffs"] = compare(result["report_dir"], land / "_truth", strict_cause=True)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", default="10,13,16")
    p.add_argument("--seeds", default="2,5,11")
    p.add_argument("--workdir", default="/tmp/rmq-exact")
    p.add_argument("--keep", action="store_true", help="keep each landing zone, lake and report folder")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="set for every step")
    a = p.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for item in a.env:
        name, _, value = item.partition("=")
        env[name] = value
    rows = []
    for scale in [int(s) for s in a.scales.split(",")]:
        for seed in [int(s) for s in a.seeds.split(",")]:
            work = Path(a.workdir) / f"scale{scale}-seed{seed}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            row = one(scale, seed, work, env)
            rows.append(row)
            verdict = row.get("failure") or (f"{len(row['diffs'])} difference(s)" if row["diffs"] else "equal to the truth")
            print(f"scale {scale} seed {seed}: {verdict}", flush=True)
            for d in row.get("diffs", [])[:10]:
                print(f"    {d}")
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'scale':>5} {'seed':>5} {'messages':>10} {'simulate s':>10} {'ingest s':>9} {'reconcile s':>11}  result")
    bad = 0
    for r in rows:
        ok = not r.get("failure") and not r.get("diffs")
        bad += not ok
        result = r.get("failure") or ("equal to the truth" if ok else f"{len(r['diffs'])} difference(s)")
        print(f"{r['scale']:>5} {r['seed']:>5} {r.get('messages', 0):>10,} {r.get('simulate', 0):>10.1f} "
              f"{r.get('ingest', 0):>9.1f} {r.get('reconcile', 0):>11.1f}  {result}")
    if a.env:
        print("with " + " ".join(a.env))
    print(f"{len(rows) - bad} of {len(rows)} pipelines equal the truth")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
