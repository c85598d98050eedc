"""Soak benchmark (issue 12, item 5): the pipeline fed hour by hour, as the schedule would, over N virtual hours.

Usage::

    .venv/bin/python tests/benchmarks/bench_soak.py --hours 12 --rate 200000 [--every 30] [--seed 7]
        [--workdir /tmp/rmq-bench-soak] [--stages simulate,feed|report] [--maintain-every H] [--cleanup]

    # the issue's target run (48 virtual hours at 1 M messages per hour):
    .venv/bin/python tests/benchmarks/bench_soak.py --hours 48 --rate 1000000 --every 30

What it does:

1. ``simulate``: ``rmq-recon simulate --scenario mixed --hours N --rate M --every E`` into ``<workdir>/source``
   once (the landing zone of every hour and ``_truth/``, the reports as of the last snapshot);
2. ``feed``: for each virtual hour h = 1..N, hard-links the snapshot folders taken in (h-1 h, h h] from the source
   into the live landing zone ``<workdir>/landing`` (what the sync job would have uploaded by then), then runs, each
   in a fresh process as the DAG tasks would: ``rmq-recon ingest``, ``rmq-recon validate --layer silver --run-id
   <that ingest>`` and ``rmq-recon reconcile`` (as of the newest snapshot); ``--maintain-every H`` also runs
   ``rmq-recon maintain`` every H hours (not counted in the hour's pipeline cost);
3. prints per hour the wall time, CPU time and peak RSS of each step (the child's ``ru_maxrss`` and ``ru_utime +
   ru_stime`` from ``os.wait4``: the embedded Sail engine runs inside that process), the ratio of the last hour's
   ingest + validate + reconcile to the 4th hour's (target <= 1.5; in wall time, and in CPU time, which another
   load on the machine changes less), whether every step stayed under 2 GiB, and whether the last hour's report
   folder equals ``_truth`` (``tests/exactness.compare``, as the end-to-end tests use it); writes
   ``<workdir>/figures.json`` after every hour (a rerun with ``--stages feed`` starts again from a fresh lake;
   ``--stages report`` prints the figures of the last feed again).

``--start-hour S --prefill-hours P`` deploy the pipeline at hour S (the folders before it never land) and feed hours
S..P as one backfill (an ingest every ``--prefill-step`` hours, then validate, reconcile and maintain, not counted),
then hour by hour from P + 1: a lake with history that hourly runs did not build (``bench_age.py`` uses it).

The machine may be shared with other work: the load average is printed with each hour.
This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GiB = 1 << 30
TARGET_RATIO = 1.5
TARGET_RSS = 2 * GiB
STEPS = ["ingest", "validate", "reconcile"]
LOG_PREFIX = [""]  # "hour-07-" while hour 7 is fed: every step's output is kept in <workdir>/logs
T0 = time.time()
_TS = re.compile(r"snapshot_ts=(\d{8}T\d{6}Z)$")


def say(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')} +{time.time() - T0:7.1f}s] {msg}", flush=True)


def run_measured(name: str, *args: str, ok_codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """One ``rmq-recon`` command in a fresh process with its own peak RSS (``os.wait4``), output kept in files."""
    work = Path(os.environ["SOAK_WORKDIR"])
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    out_path, err_path = logs / f"{LOG_PREFIX[0]}{name}.out", logs / f"{LOG_PREFIX[0]}{name}.err"
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *args], cwd=str(ROOT),
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in ok_codes:
        sys.stderr.write(err_path.read_text(errors="replace")[-4000:])
        raise SystemExit(f"{name}: rmq-recon {args[0]} failed with exit code {code}")
    try:
        result = json.loads(out_path.read_text() or "null")
    except ValueError:
        result = None
    return {"wall_s": round(wall, 2), "peak_rss": usage.ru_maxrss * 1024,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "code": code, "result": result}


def workdir(path: str) -> Path:
    """The benchmark's folder (made), where :func:`run_measured` keeps each step's output; Sail's log quietened."""
    os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
    work = Path(path).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ["SOAK_WORKDIR"] = str(work)
    return work


def simulate(a: argparse.Namespace, source: Path) -> dict[str, Any]:
    """``mixed`` for ``a.hours`` hours at ``a.rate`` messages an hour, a snapshot every ``a.every`` minutes, into
    ``source`` (emptied first); its wall and CPU seconds, peak RSS and messages stored."""
    shutil.rmtree(source, ignore_errors=True)
    brokers = ["--bulk-brokers", str(a.bulk_brokers)] if getattr(a, "bulk_brokers", None) else []
    sim = run_measured("simulate", "simulate", "--scenario", "mixed", "--hours", str(a.hours), "--rate",
                       str(a.rate), "--every", str(a.every), "--seed", str(a.seed), "--out", str(source), *brokers)
    say(f"simulate: {sim['result']['messages_stored']:,} messages, {sim['result']['snapshots']} snapshots in "
        f"{sim['wall_s']:.0f} s, peak RSS {sim['peak_rss'] / GiB:.2f} GiB")
    return {**{k: sim[k] for k in ("wall_s", "peak_rss", "cpu_s")},
            "messages_stored": sim["result"]["messages_stored"]}


def snapshot_folders(source: Path) -> list[tuple[dt.datetime, Path]]:
    """Every snapshot folder of the source landing zone (broker and clients folders) with its time."""
    out = []
    for cluster in sorted(source.glob("cluster=*")):
        for parent in sorted(p for p in cluster.iterdir() if p.is_dir()):
            for snap in sorted(parent.glob("snapshot_ts=*")):
                m = _TS.search(snap.name)
                if m:
                    out.append((dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc),
                                snap))
    return out


def link_tree(src: Path, dst: Path) -> int:
    """Hard-link every file of ``src`` below ``dst`` (what an upload of that folder leaves); files linked."""
    n = 0
    for d, _, names in os.walk(src):
        target = dst / Path(d).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            os.link(os.path.join(d, name), target / name)
            n += 1
    return n


def feed(a: argparse.Namespace, work: Path, source: Path, figs: dict[str, Any]) -> None:
    plan = feed_setup(a, work, source, figs)
    for h in plan["hours"]:
        feed_hour(a, work, plan, h, figs)
    figs["meta"] = plan["meta"]


def feed_setup(a: argparse.Namespace, work: Path, source: Path, figs: dict[str, Any]) -> dict[str, Any]:
    """A fresh landing zone and lake in ``work``, the backfill fed when ``a`` asks for one; the plan of the hours
    :func:`feed_hour` feeds next (bench_age runs them on several lakes in turn)."""
    landing, lake, reports = work / "landing", work / "lake", work / "reports"
    for p in (landing, lake, reports, work / "logs"):
        shutil.rmtree(p, ignore_errors=True)
    landing.mkdir(parents=True)
    meta = json.loads((source / "_truth" / "scenario.json").read_text())
    skip = getattr(a, "skip_folder", None)  # bench_age's lean lake: some brokers' early folders never land
    folders = [f for f in snapshot_folders(source) if skip is None or not skip(*f)]
    # The reconcile's horizon (a tuning: the crossing checks keep every horizon exact, docs/semantics.md rule 24).
    # A broker deletes a segment fileReservedTime after its LAST write, so it still holds messages stored up to
    # fileReservedTime + the time a segment takes to fill; a horizon as short as the run interval puts every group
    # whose consumer commits the previous hour's tail in full. Default: fileReservedTime + 2 h.
    if a.retention_h is None and meta.get("file_reserved_h") is None:
        raise SystemExit(f"{source}/_truth/scenario.json has no file_reserved_h: give --retention-h")
    retention_h = a.retention_h if a.retention_h is not None else meta["file_reserved_h"] + 2
    figs["retention_h"] = retention_h
    say(f"reconcile horizon: --retention-h {retention_h:g}")
    t0 = min(ts for ts, _ in folders).replace(minute=0, second=0)
    hours = max(1, -(-int((max(ts for ts, _ in folders) - t0).total_seconds()) // 3600))
    figs["hours"] = []
    start, prefill = getattr(a, "start_hour", 1), getattr(a, "prefill_hours", 0)
    if prefill:  # bench_age --from-backfill: a copy of the lake a backfill left
        (getattr(a, "restore", None) or backfill)(a, landing, lake, reports, source, folders, t0, start, prefill,
                                                  retention_h, figs)
    return {"source": source, "folders": folders, "t0": t0, "retention_h": retention_h,
            "hours": list(range(max(start, prefill + 1), (min(hours, a.until_hour) if a.until_hour else hours) + 1)),
            "meta": {k: meta.get(k) for k in ("hours", "rate", "every_min", "messages_stored", "bulk_messages")}}


def feed_hour(a: argparse.Namespace, work: Path, plan: dict[str, Any], h: int, figs: dict[str, Any]) -> None:
    """Hour ``h`` of :func:`feed_setup`'s plan: its snapshot folders land, then ingest, validate and reconcile run as
    the schedule runs them, each measured; the row is added to ``figs`` (and ``work/figures.json``)."""
    landing, lake, reports = work / "landing", work / "lake", work / "reports"
    source, t0, retention_h = plan["source"], plan["t0"], plan["retention_h"]
    lo, hi = t0 + dt.timedelta(hours=h - 1), t0 + dt.timedelta(hours=h)
    fed = [p for ts, p in plan["folders"] if lo < ts <= hi]
    files = sum(link_tree(p, landing / p.relative_to(source)) for p in fed)
    row: dict[str, Any] = {"hour": h, "snapshot_folders": len(fed), "files": files}
    LOG_PREFIX[0] = f"hour-{h:02d}-"
    ing = run_measured("ingest", "ingest", "--landing", str(landing), "--lake", str(lake))
    row["ingest"] = ing
    run_id = (ing["result"] or {}).get("run_id")
    row["validate"] = run_measured("validate", "validate", "--lake", str(lake), "--layer", "silver",
                                   *(["--run-id", run_id] if run_id else []), ok_codes=(0, 1))
    rec = run_measured("reconcile", "reconcile", "--lake", str(lake), "--reports", str(reports),
                       "--retention-h", f"{retention_h:g}")
    row["reconcile"] = rec
    row["report_dir"] = (rec["result"] or {}).get("report_dir")
    row["messages"] = int(((ing["result"] or {}).get("changed_rows") or {}).get("silver/messages", 0))
    if a.maintain_every and h % a.maintain_every == 0:
        row["maintain"] = run_measured("maintain", "maintain", "--lake", str(lake))
    row["load_avg"] = round(os.getloadavg()[0], 1)
    figs["hours"].append(row)
    (work / "figures.json").write_text(json.dumps(figs, indent=2, default=str))
    say(f"hour {h}: " + ", ".join(f"{s} {row[s]['wall_s']:.1f} s / {row[s]['peak_rss'] / GiB:.2f} GiB"
                                 for s in STEPS + (["maintain"] if "maintain" in row else []))
        + f" ({row['messages']:,} messages; load {row['load_avg']})")


def backfill(a: argparse.Namespace, landing: Path, lake: Path, reports: Path, source: Path,
             folders: list[tuple[dt.datetime, Path]], t0: dt.datetime, start: int, until: int, retention_h: float,
             figs: dict[str, Any]) -> None:
    """Hours ``start``..``until`` fed as a deployment's backfill: an ingest every ``--prefill-step`` hours, then one
    validate, reconcile and maintain, none counted as an hour (figures kept under ``backfill``). The folders of the
    hours before ``start`` are never fed: the pipeline was deployed then (the first snapshot holds the store the
    brokers kept)."""
    runs: list[dict[str, Any]] = []
    rows = 0
    for h in range(start, until + 1):
        lo, hi = t0 + dt.timedelta(hours=h - 1), t0 + dt.timedelta(hours=h)
        for _, p in (f for f in folders if lo < f[0] <= hi):
            link_tree(p, landing / p.relative_to(source))
        if (h - start + 1) % a.prefill_step and h != until:
            continue
        LOG_PREFIX[0] = f"backfill-{h:02d}-"
        ing = run_measured("ingest", "ingest", "--landing", str(landing), "--lake", str(lake))
        rows += int(((ing["result"] or {}).get("changed_rows") or {}).get("silver/messages", 0))
        runs.append({"until_hour": h, "ingest": ing})
        say(f"backfill to hour {h}: ingest {ing['wall_s']:.1f} s / {ing['peak_rss'] / GiB:.2f} GiB ({rows:,} "
            f"messages so far)")
    LOG_PREFIX[0] = f"backfill-{until:02d}-"
    steps = {"validate": run_measured("validate", "validate", "--lake", str(lake), "--layer", "silver",
                                      ok_codes=(0, 1)),
             "reconcile": run_measured("reconcile", "reconcile", "--lake", str(lake), "--reports", str(reports),
                                       "--retention-h", f"{retention_h:g}"),
             "maintain": run_measured("maintain", "maintain", "--lake", str(lake))}
    figs["backfill"] = {"start_hour": start, "until_hour": until, "messages": rows, "ingests": runs,
                        **{k: {m: v[m] for m in ("wall_s", "cpu_s", "peak_rss", "code")} for k, v in steps.items()}}
    say(f"backfill of hours {start}-{until}: {rows:,} messages in {len(runs)} ingest(s); "
        + ", ".join(f"{k} {v['wall_s']:.1f} s" for k, v in steps.items()))


def report(figs: dict[str, Any], source: Path) -> bool:
    from tests.exactness import compare

    rows = figs["hours"]
    head = f"{'hour':>4} {'messages':>9}" + "".join(f" {s + ' s':>12} {'cpu s':>6} {'GiB':>5}" for s in STEPS) + \
        f" {'total s':>8} {'cpu s':>6} {'load':>5}"
    print("\n" + head)
    for r in rows:
        total, cpu = (sum(r[s][k] for s in STEPS) for k in ("wall_s", "cpu_s"))
        print(f"{r['hour']:>4} {r['messages']:>9,}" + "".join(
            f" {r[s]['wall_s']:>12.1f} {r[s]['cpu_s']:>6.1f} {r[s]['peak_rss'] / GiB:>5.2f}" for s in STEPS)
            + f" {total:>8.1f} {cpu:>6.1f} {r['load_avg']:>5}")
    ok = True
    if len(rows) >= 4 and "backfill" not in figs:
        for key, label in (("wall_s", "wall"), ("cpu_s", "CPU")):
            fourth, last = (sum(rows[i][s][key] for s in STEPS) for i in (3, -1))
            ratio = last / fourth if fourth else float("inf")
            figs[f"ratio_last_to_4th_{label.lower()}"] = round(ratio, 3)
            print(f"last hour / 4th hour, ingest + validate + reconcile, {label}: {last:.1f} s / {fourth:.1f} s = "
                  f"{ratio:.2f} (target <= {TARGET_RATIO})")
            ok &= ratio <= TARGET_RATIO  # both: wall time alone passes when the 4th hour ran on a busier machine
    worst = max(((r[s]["peak_rss"], r["hour"], s) for r in rows for s in STEPS), default=(0, 0, ""))
    under = worst[0] < TARGET_RSS
    print(f"largest peak RSS: {worst[0] / GiB:.2f} GiB ({worst[2]}, hour {worst[1]}); every step < 2 GiB: {under}")
    if any("maintain" in r for r in rows):
        print("maintain: " + ", ".join(f"hour {r['hour']} {r['maintain']['wall_s']:.1f} s / "
                                       f"{r['maintain']['peak_rss'] / GiB:.2f} GiB" for r in rows if "maintain" in r))
    failed_validation = [r["hour"] for r in rows if r["validate"]["code"] != 0]
    if failed_validation:
        print(f"silver validation failed in hours {failed_validation}")
    diffs = compare(rows[-1]["report_dir"], source / "_truth") if rows else ["no hour ran"]
    figs["final_equals_truth"] = not diffs
    print(f"final reports equal the truth: {not diffs}" + ("" if not diffs else "\n  " + "\n  ".join(diffs[:20])))
    return ok and under and not diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--hours", type=int, default=12)
    p.add_argument("--rate", type=int, default=200_000, help="bulk messages per virtual hour")
    p.add_argument("--every", type=int, default=30, choices=[15, 30], help="minutes between snapshots")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", default="/tmp/rmq-bench-soak")
    p.add_argument("--stages", default="simulate,feed")
    p.add_argument("--maintain-every", type=int, default=0, help="run rmq-recon maintain every H hours (0: never)")
    p.add_argument("--retention-h", type=float, default=None,
                   help="the reconcile's --retention-h (default: the simulated brokers' fileReservedTime from "
                        "_truth/scenario.json, plus 2 h)")
    p.add_argument("--until-hour", type=int, default=0,
                   help="feed only the first H virtual hours (0: all); the lake is left as that hour left it")
    p.add_argument("--start-hour", type=int, default=1,
                   help="the first virtual hour fed (the pipeline deployed then; earlier snapshots never land)")
    p.add_argument("--prefill-hours", type=int, default=0,
                   help="feed hours --start-hour..H as one backfill (an ingest every --prefill-step hours, then "
                        "validate, reconcile and maintain), not counted; hourly runs follow (0: none)")
    p.add_argument("--prefill-step", type=int, default=5, help="virtual hours per backfill ingest")
    p.add_argument("--cleanup", action="store_true", help="delete the workdir at the end")
    a = p.parse_args(argv)
    work = workdir(a.workdir)
    source = work / "source"
    figs: dict[str, Any] = {"args": vars(a)}
    stages = a.stages.split(",")
    if "simulate" in stages:
        figs["simulate"] = simulate(a, source)
    if "feed" in stages or "report" in stages:
        if "feed" in stages:
            feed(a, work, source, figs)
        else:  # print the figures of an earlier feed again
            figs = json.loads((work / "figures.json").read_text())
        ok = report(figs, source)
        (work / "figures.json").write_text(json.dumps(figs, indent=2, default=str))
        print(f"targets met: {ok}")
    if a.cleanup:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
