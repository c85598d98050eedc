"""The same hours on a young and an old lake (issue 39): does an hourly run cost more when the lake holds more history?

One simulated source (``mixed``, ``--rate`` messages an hour, a snapshot every ``--every`` minutes, ``--hours``
virtual hours) is fed by ``bench_soak.feed_setup`` and ``feed_hour`` into several lakes, each of its own:

* for every history in ``--histories`` (hours, e.g. ``10,40``): the pipeline deployed ``history`` hours before hour
  ``--measure-from``: those hours are fed as a backfill (an ingest every 5 hours, then validate, reconcile and
  maintain, not counted), then the hours from ``--measure-from`` to the end hour by hour as the schedule runs them
  (ingest, validate --layer silver, reconcile), each step in a process of its own (CPU, wall, peak RSS);
* so the measured hours are the same snapshots on both lakes; only what the lake held before them differs (the
  rows of silver/messages are printed). Every lake's backfill runs first; then each measured hour runs on every
  lake before the next hour (the lakes' order turned by one each hour), so a change of the machine's speed during
  the benchmark falls on every lake alike.

With ``--lean``, a third lake, ``lean``: fed from the oldest lake's first hour like it, except that the bulk
brokers' folders (``--bulk-brokers``) land from the youngest lake's first hour only. It holds about the youngest
lake's records but the oldest lake's consumer history (the small brokers' records, traces and offsets of every hour),
so it finds what the oldest lake finds: its last report is compared with the oldest lake's, and the ratio of the
oldest lake's CPU to the lean lake's is what the history's *records* cost, apart from what more findings cost (a
young lake never saw the older hours' deliveries, DLQ copies and stalled groups' records, so it reports less; the
lean lake differs only where a committed offset points into the bulk hours it never saw: the time lag of those
queues).

It prints per history and hour each step's wall and CPU seconds and peak RSS, the ratio of the measured hours' CPU
on the oldest lake to the youngest's (issue 39's target: <= 1.15 for 40 M against 10 M records), whether every step
stayed under 1.5 GiB, and whether the last report of the lake fed from hour 1 equals ``_truth`` (a lake deployed
later never saw the first hours: not compared).

    .venv/bin/python tests/benchmarks/bench_age.py --hours 43 --measure-from 41 --histories 10,40 \\
        --rate 1000000 --every 30 [--seed 7] [--workdir /tmp/rmq-bench-age] [--stages simulate,feed|report] \\
        [--keep-backfill DIR | --from-backfill DIR]

``--keep-backfill DIR`` keeps a copy of every lake as its backfill left it; ``--from-backfill DIR`` (same source and
options) starts every lake from that copy, so a run measures the same hours again in about 10 minutes, not 30. The
kept lakes were backfilled by the code of the run that kept them: a change to what the backfill writes needs a new
copy.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.benchmarks import bench_soak  # noqa: E402

GiB = bench_soak.GiB
TARGET_RATIO = 1.15
TARGET_RSS = 1.5 * GiB
STEPS = bench_soak.STEPS


def setup_history(a: argparse.Namespace, work: Path, source: Path, history: int,
                  lean_from: int | None = None) -> dict[str, Any]:
    """bench_soak's set-up of ``work/history-H``: hours measure_from - H .. measure_from - 1 as a backfill; with
    ``lean_from`` (the lean lake, ``work/history-lean``), the bulk brokers' folders before that hour left out. The
    measured hours are fed by :func:`feed_hours`."""
    lake_dir = work / (f"history-{history}" if lean_from is None else "history-lean")
    lake_dir.mkdir(parents=True, exist_ok=True)
    os.environ["SOAK_WORKDIR"] = str(lake_dir)
    ns = argparse.Namespace(retention_h=a.retention_h, until_hour=0, maintain_every=0,
                            start_hour=a.measure_from - history, prefill_hours=a.measure_from - 1,
                            prefill_step=a.prefill_step)
    if ns.start_hour < 1:
        raise SystemExit(f"--histories {history}: the source starts at hour 1; give --measure-from >= {history + 1}")
    if lean_from is not None:
        first = min(ts for ts, _ in bench_soak.snapshot_folders(source)).replace(minute=0, second=0)
        since = first + dt.timedelta(hours=lean_from - 1)
        bulk = tuple(f"broker={b}" for b in a.bulk_brokers.split(","))
        ns.skip_folder = lambda ts, p: ts <= since and any(part.startswith(bulk) for part in p.parts)
    figs: dict[str, Any] = {"history_hours": history if lean_from is None else "lean", "lean_from": lean_from}
    if a.from_backfill:
        ns.restore = lambda *_args: restore_backfill(Path(a.from_backfill) / lake_dir.name, lake_dir, figs)
    plan = bench_soak.feed_setup(ns, lake_dir, source, figs)
    return {"dir": lake_dir, "ns": ns, "plan": plan, "figs": figs}


KEPT = ("lake", "landing", "reports")


def _copy_lake(src: Path, dest: Path) -> None:
    """The ``KEPT`` folders of ``src`` into ``dest``: the landing zone hard-linked (the snapshots are never
    rewritten), the rest copied (the lake's tables and reports change in the measured hours)."""
    for name in KEPT:
        subprocess.run(["cp", "-al" if name == "landing" else "-a", str(src / name), str(dest / name)], check=True)


def keep_backfill(lakes: list[dict[str, Any]], keep: Path) -> None:
    """A copy of every lake as its backfill left it (the landing zone hard-linked) and the backfill's figures, so
    that ``--from-backfill`` measures the same hours again without feeding the backfill (20 of bench_age's 30
    minutes)."""
    for x in lakes:
        dest = keep / x["dir"].name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        _copy_lake(x["dir"], dest)
        (dest / "backfill.json").write_text(json.dumps(x["figs"]["backfill"], indent=2, default=str))
        bench_soak.say(f"{x['dir'].name}: backfill kept in {dest}")


def restore_backfill(kept: Path, lake_dir: Path, figs: dict[str, Any]) -> None:
    """``lake_dir`` as :func:`keep_backfill` kept it, in place of feeding the backfill."""
    if not (kept / "backfill.json").exists():
        raise SystemExit(f"--from-backfill: {kept}/backfill.json not found: run once with --keep-backfill first")
    for name in KEPT:
        shutil.rmtree(lake_dir / name, ignore_errors=True)
    _copy_lake(kept, lake_dir)
    figs["backfill"] = {**json.loads((kept / "backfill.json").read_text()), "restored_from": str(kept)}
    bench_soak.say(f"{lake_dir.name}: backfill restored from {kept}")


def feed_hours(lakes: list[dict[str, Any]]) -> None:
    """The measured hours on every lake, interleaved: each hour runs on every lake before the next hour, the lakes'
    order turned by one each hour. Fed lake after lake, two runs at stop 64 gave 1.17 and 1.27 with the same ingest
    and validate code: in the second, the machine ran about 15% slower while the later lakes' hours ran, on the
    validate step too, which does not grow with history."""
    hours = lakes[0]["plan"]["hours"]
    assert all(x["plan"]["hours"] == hours for x in lakes), [x["plan"]["hours"] for x in lakes]
    for i, h in enumerate(hours):
        for x in lakes[i % len(lakes):] + lakes[:i % len(lakes)]:
            os.environ["SOAK_WORKDIR"] = str(x["dir"])
            bench_soak.say(f"{x['dir'].name}:")
            bench_soak.feed_hour(x["ns"], x["dir"], x["plan"], h, x["figs"])
    for x in lakes:
        x["figs"]["meta"] = x["plan"]["meta"]
        (x["dir"] / "figures.json").write_text(json.dumps(x["figs"], indent=2, default=str))


def report_differences(left: str, right: str) -> dict[str, tuple[int, dict[str, int]]]:
    """Per report CSV of ``left``'s folder: how many rows one folder's file has that the other's has not (0: the same
    rows) and, when both hold as many rows, per column how many differ once both are sorted (a report's key columns
    come first, so the rows pair by key)."""
    import csv

    out = {}
    for f in sorted(Path(left).glob("*.csv")):
        g = Path(right) / f.name
        a = list(csv.DictReader(f.open())) if f.exists() else []
        b = list(csv.DictReader(g.open())) if g.exists() else []
        rows_a, rows_b = ({tuple(r.values()) for r in t} for t in (a, b))
        cols: dict[str, int] = {}
        if a and len(a) == len(b):
            for x, y in zip(sorted(a, key=lambda r: tuple(r.values())), sorted(b, key=lambda r: tuple(r.values()))):
                for c in x:
                    if x[c] != y.get(c):
                        cols[c] = cols.get(c, 0) + 1
        out[f.name] = (max(len(rows_a - rows_b), len(rows_b - rows_a)), cols)
    return out


def report(all_figs: dict[int, dict[str, Any]], source: Path, lean: dict[str, Any] | None = None) -> bool:
    from tests.exactness import compare

    print(f"\n{'history':>7} {'lake msgs':>11} {'hour':>4}" + "".join(
        f" {s + ' s':>12} {'cpu s':>6} {'GiB':>5}" for s in STEPS) + f" {'cpu s':>7}")
    cpu: dict[Any, float] = {}
    worst: tuple = (0, 0, 0, "")
    for history, figs in [*sorted(all_figs.items()), *([("lean", lean)] if lean else [])]:
        cpu[history] = 0.0
        held = figs["backfill"]["messages"]
        for r in figs["hours"]:
            total = sum(r[s]["cpu_s"] for s in STEPS)
            cpu[history] += total
            print(f"{history:>7} {held:>11,} {r['hour']:>4}" + "".join(
                f" {r[s]['wall_s']:>12.1f} {r[s]['cpu_s']:>6.1f} {r[s]['peak_rss'] / GiB:>5.2f}" for s in STEPS)
                + f" {total:>7.1f}")
            held += r["messages"]
            worst = max([worst, *((r[s]["peak_rss"], history, r["hour"], s) for s in STEPS)], key=lambda w: w[0])
    young, old = min(all_figs), max(all_figs)
    ratio = cpu[old] / cpu[young] if cpu[young] else float("inf")
    print(f"measured hours' CPU, {old} h of history / {young} h: {cpu[old]:.1f} / {cpu[young]:.1f} s = {ratio:.3f} "
          f"(target <= {TARGET_RATIO})")
    if lean:
        held = {h: f["backfill"]["messages"] for h, f in [*all_figs.items(), ("lean", lean)]}
        lean_ratio = cpu[old] / cpu["lean"] if cpu["lean"] else float("inf")
        print(f"measured hours' CPU, {old} h of history / the lean lake ({held[old]:,} / {held['lean']:,} records "
              f"before): {cpu[old]:.1f} / {cpu['lean']:.1f} s = {lean_ratio:.3f}; the lean lake / {young} h: "
              f"{cpu['lean'] / cpu[young]:.3f} (what the older consumer history and its findings cost)")
        diff = report_differences(all_figs[old]["hours"][-1]["report_dir"], lean["hours"][-1]["report_dir"])
        print("last report, the lean lake against the oldest: " + ", ".join(
            f"{name} " + ("same" if n == 0 else f"{n} row(s) differ ("
                          + ", ".join(f"{c} in {k}" for c, k in sorted(cols.items())) + ")")
            for name, (n, cols) in diff.items()))
    under = worst[0] < TARGET_RSS
    print(f"largest peak RSS: {worst[0] / GiB:.2f} GiB (history {worst[1]} h, hour {worst[2]}, {worst[3]}); "
          f"every step < {TARGET_RSS / GiB:g} GiB: {under}")
    truth_ok = True
    for history, figs in sorted(all_figs.items()):  # not the lean lake: it never saw the bulk brokers' early hours
        if figs["backfill"]["start_hour"] > 1:  # the truth is the whole source's: this lake never saw its first hours
            print(f"history {history} h: last report not compared with the truth (hours before "
                  f"{figs['backfill']['start_hour']} never landed)")
            continue
        diffs = compare(figs["hours"][-1]["report_dir"], source / "_truth")
        print(f"history {history} h: last report equals the truth: {not diffs}"
              + ("" if not diffs else f" ({len(diffs)} difference(s), first: {diffs[0]})"))
        truth_ok &= not diffs
    return ratio <= TARGET_RATIO and under and truth_ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--hours", type=int, default=43)
    p.add_argument("--measure-from", type=int, default=41, help="the first measured hour (the same on every lake)")
    p.add_argument("--histories", default="10,40", help="hours of history before --measure-from, one lake each")
    p.add_argument("--rate", type=int, default=1_000_000)
    p.add_argument("--every", type=int, default=30, choices=[15, 30])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--retention-h", type=float, default=None)
    p.add_argument("--prefill-step", type=int, default=5)
    p.add_argument("--workdir", default="/tmp/rmq-bench-age")
    p.add_argument("--stages", default="simulate,feed")
    p.add_argument("--keep-backfill", metavar="DIR", help="keep a copy of every lake as its backfill left it")
    p.add_argument("--from-backfill", metavar="DIR",
                   help="start every lake from the copy --keep-backfill kept (same source and options)")
    p.add_argument("--lean", action="store_true",
                   help="also a lake fed from the oldest lake's first hour whose bulk brokers land from the "
                        "youngest lake's first hour (the oldest lake's findings on the youngest lake's records)")
    p.add_argument("--bulk-brokers", default=",".join(f"broker-bulk-{i:02d}" for i in range(6)))
    a = p.parse_args(argv)
    work = bench_soak.workdir(a.workdir)
    source = work / "source"
    stages = a.stages.split(",")
    if "simulate" in stages:
        (work / "simulate.json").write_text(json.dumps(bench_soak.simulate(a, source), indent=2))
    if "feed" not in stages and "report" not in stages:
        return 0
    histories = sorted(int(h) for h in a.histories.split(","))
    if "feed" in stages:
        lakes = [setup_history(a, work, source, history) for history in histories]
        if a.lean:
            lakes.append(setup_history(a, work, source, max(histories), lean_from=a.measure_from - min(histories)))
        if a.keep_backfill:
            keep_backfill(lakes, Path(a.keep_backfill))
        feed_hours(lakes)
    all_figs: dict[int, dict[str, Any]] = {
        history: json.loads((work / f"history-{history}" / "figures.json").read_text()) for history in histories}
    lean = json.loads((work / "history-lean" / "figures.json").read_text()) if a.lean else None
    ok = report(all_figs, source, lean)
    print(f"targets met: {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
