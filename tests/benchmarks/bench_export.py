"""Store copies against exports (issue 37): what each layout ships, what the exporter costs on the host, what each
costs the ingest, and whether both land the same rows.

One simulated source (``mixed``, ``--rate`` messages an hour, a snapshot every ``--every`` minutes, ``--hours``
virtual hours): its snapshot folders are the store copies a sync job uploads. The same broker histories are then
replayed in time order through ``rmq-recon export`` (one process per export, as a timer runs it; one host state per
broker) into a second landing zone. Printed:

* bytes shipped per hour by each layout, counted as a sync job uploads them to S3: whole objects, every folder in
  full (no hard links), and the exports' share of the copies' (target <= 10%);
* the exporter's CPU seconds and peak RSS per run (``os.wait4``), per million messages (target <= 2 s), a line fitted
  through the runs (per run + per million), and a run with nothing new to decode; the largest peak RSS (target <
  300 MiB);
* the same as one long-lived process per broker (``--every``), and per broker its start-up and first run (paid once
  by a process that runs for months) apart from its steady state: CPU per million messages, a run with nothing new;
* one ingest of each landing zone: wall and CPU seconds, peak RSS (target for the exports: <= 10 s on 10 M messages);
* whether the two lakes hold the same rows (silver tables, trace records, quarantine; by the engine, both ways).

    .venv/bin/python tests/benchmarks/bench_export.py [--hours 6] [--rate 1000000] [--every 15] [--seed 7]
        [--bulk-brokers N] [--workdir /tmp/rmq-bench-export] [--stages simulate,export,loop,ingest,compare]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.benchmarks import bench_soak  # noqa: E402

MiB = 1 << 20
say = bench_soak.say


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def export_all(source: Path, dest: Path, state: Path) -> list[dict[str, Any]]:
    """Every source folder through ``rmq-recon export`` in time order; per run its figures."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    runs = []
    folders = sorted(bench_soak.snapshot_folders(source), key=lambda x: (x[0], str(x[1])))
    for i, (ts, folder) in enumerate(folders):
        cluster = folder.parent.parent.name.removeprefix("cluster=")
        stamp = ts.strftime("%Y%m%dT%H%M%SZ")
        if folder.parent.name == "clients":
            args = ["--client-offsets", str(folder)]
            broker = ""
        else:
            broker = folder.parent.name.removeprefix("broker=")
            args = ["--store", str(folder / "store"), "--broker", broker, "--state", str(state)]
        r = bench_soak.run_measured(f"export-{broker or 'clients'}-{stamp}", "export", *args, "--to", str(dest),
                                    "--cluster", cluster, "--snapshot-ts", stamp)
        out = dest / f"cluster={cluster}" / (f"broker={broker}" if broker else "clients") / f"snapshot_ts={stamp}"
        counts = (r["result"] or {}).get("counts", {}) if broker else {}
        runs.append({"broker": broker, "ts": stamp, "cpu_s": r["cpu_s"], "wall_s": r["wall_s"],
                     "peak_rss": r["peak_rss"], "messages": counts.get("message", 0), "bytes": folder_bytes(out),
                     "part_bytes": folder_bytes(out / "store-export") - pack_bytes(out) if broker else 0,
                     "pack_bytes": pack_bytes(out) if broker else 0,
                     "copy_bytes": folder_bytes(folder)})
        if i % 10 == 0 or i == len(folders) - 1:
            say(f"export {i + 1}/{len(folders)}: {out.name} of {broker or 'clients'}: {r['cpu_s']} s CPU, "
                f"peak RSS {r['peak_rss'] / MiB:.0f} MiB, {counts.get('message', 0):,} messages")
    return runs


def pack_bytes(folder: Path) -> int:
    """The consume queue bytes an export shipped (``store-export/queues.bin``, jobs.export.queues)."""
    p = folder / "store-export" / "queues.bin"
    return p.stat().st_size if p.exists() else 0


def loop_all(source: Path, dest: Path, state: Path) -> list[dict[str, Any]]:
    """Each broker's folders replayed in one long-lived process, as ``rmq-recon export --every`` runs them
    (jobs.export.loop: ``export_store`` at each tick in one process): per broker the process's CPU seconds and peak
    RSS (``os.wait4``) and each run's CPU seconds (process time around the call)."""
    import os
    import subprocess

    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    by_broker: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for ts, folder in sorted(bench_soak.snapshot_folders(source), key=lambda x: (x[0], str(x[1]))):
        if folder.parent.name != "clients":
            key = (folder.parent.parent.name.removeprefix("cluster="), folder.parent.name.removeprefix("broker="))
            by_broker.setdefault(key, []).append((ts.strftime("%Y%m%dT%H%M%SZ"), str(folder / "store")))
    out = []
    for (cluster, broker), items in sorted(by_broker.items()):
        spec = json.dumps({"cluster": cluster, "broker": broker, "to": str(dest), "state": str(state),
                           "items": items})
        proc = subprocess.Popen([sys.executable, __file__, "--replay", spec], cwd=str(ROOT), stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = proc.stdout.read().decode().splitlines() if proc.stdout else []
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"replay of {broker} failed")
        runs = [json.loads(ln) for ln in lines]
        out.append({"broker": broker, "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                    "peak_rss": usage.ru_maxrss * 1024, "runs": runs})
        say(f"loop of {broker}: {len(runs)} runs, {out[-1]['cpu_s']} s CPU in all, "
            f"peak RSS {out[-1]['peak_rss'] / MiB:.0f} MiB, {sum(r['messages'] for r in runs):,} messages")
    return out


def replay(spec: str) -> int:
    """(In the child of :func:`loop_all`.) One broker's store copies through ``export_store`` in this process."""
    import datetime as dt
    import time

    from jobs import export

    export.host_process()  # as `rmq-recon export` sets up its process
    from jobs.export import store

    a = json.loads(spec)
    for stamp, path in a["items"]:
        t0 = time.process_time()
        at = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        m = store.export_store(path, a["to"], cluster=a["cluster"], broker=a["broker"], snapshot_ts=at,
                               state_dir=a["state"], say=lambda _: None)
        print(json.dumps({"ts": stamp, "cpu_s": round(time.process_time() - t0, 3),
                          "messages": m["counts"].get("message", 0)}), flush=True)
    return 0


def idle_cost(work: Path, source: Path, state: Path) -> dict[str, Any]:
    """An export with nothing new to decode: the last broker folder exported again a minute later, from a copy of
    the host state its export left (the listing, the configs and the queue files, no commitlog record)."""
    import datetime as dt

    ts, folder = max((x for x in bench_soak.snapshot_folders(source) if x[1].parent.name != "clients"),
                     key=lambda x: x[0])
    cluster = folder.parent.parent.name.removeprefix("cluster=")
    broker = folder.parent.name.removeprefix("broker=")
    idle = work / "idle-state"
    shutil.rmtree(idle, ignore_errors=True)
    shutil.copytree(state, idle)
    stamp = (ts + dt.timedelta(minutes=1)).strftime("%Y%m%dT%H%M%SZ")
    r = bench_soak.run_measured("export-idle", "export", "--store", str(folder / "store"), "--broker", broker,
                                "--cluster", cluster, "--to", str(work / "idle-to"), "--state", str(idle),
                                "--snapshot-ts", stamp)
    out = work / "idle-to" / f"cluster={cluster}" / f"broker={broker}" / f"snapshot_ts={stamp}"
    manifest = json.loads((out / "store-export" / "manifest.json").read_text())
    assert manifest["counts"].get("message", 0) == 0, manifest["counts"]  # nothing new: the baseline holds
    shutil.rmtree(work / "idle-to", ignore_errors=True)
    shutil.rmtree(idle, ignore_errors=True)
    return {"cpu_s": r["cpu_s"], "peak_rss": r["peak_rss"]}


def ingest(work: Path, landing: Path, name: str) -> dict[str, Any]:
    lake = work / f"lake-{name}"
    shutil.rmtree(lake, ignore_errors=True)
    r = bench_soak.run_measured(f"ingest-{name}", "ingest", "--landing", str(landing), "--lake", str(lake))
    say(f"ingest of the {name}: {r['wall_s']:.1f} s wall, {r['cpu_s']} s CPU, peak RSS {r['peak_rss'] / MiB:.0f} MiB")
    return {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "peak_rss": r["peak_rss"]}


def compare(work: Path) -> dict[str, int]:
    """Rows one lake holds and the other does not, per table (both ways, in the engine)."""
    from pyspark.sql import functions as F

    from faults.test_kill_rerun import LEDGERS, VOLATILE
    from jobs.lake import _delta, _spark
    from schemas import ALL_TABLES

    out = {}
    with _spark.session() as spark:
        for t in ALL_TABLES:
            if not (t.layer == "silver" or t.qualified in ("bronze/quarantine", "bronze/trace_records")):
                continue
            if t.qualified in LEDGERS:
                continue
            a_has, b_has = (_delta.exists(str(work / f"lake-{n}"), t) for n in ("copies", "exports"))
            if not (a_has or b_has):
                continue
            if a_has != b_has:
                out[t.qualified] = -1
                continue
            # (a map column cannot be compared by a set operation: its entries, sorted, can)
            maps = {f.name for f in t.schema.fields if f.dataType.typeName() == "map"}
            cols = [F.array_sort(F.map_entries(c)).alias(c) if c in maps else F.col(c)
                    for c in t.columns if c not in VOLATILE]
            a = _delta.read(spark, str(work / "lake-copies"), t).select(*cols)
            b = _delta.read(spark, str(work / "lake-exports"), t).select(*cols)
            out[t.qualified] = a.exceptAll(b).count() + b.exceptAll(a).count()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=int, default=6)
    p.add_argument("--rate", type=int, default=1_000_000)
    p.add_argument("--every", type=int, default=15, choices=[15, 30])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--bulk-brokers", type=int, default=None,
                   help="the bulk traffic on this many brokers (1: one broker storing --rate messages an hour, the "
                        "issue's exporter case; default: mixed's fleet, a broker per 1 M messages of 6 hours)")
    p.add_argument("--workdir", default="/tmp/rmq-bench-export")
    p.add_argument("--stages", default="simulate,export,loop,ingest,compare")
    p.add_argument("--replay", default=None, help=argparse.SUPPRESS)  # (loop_all's child)
    a = p.parse_args(argv)
    if a.replay:
        return replay(a.replay)
    sys.path.insert(0, str(ROOT / "tests"))
    work = bench_soak.workdir(a.workdir)
    source = work / "source"
    stages = set(a.stages.split(","))
    figs: dict[str, Any] = json.loads((work / "figures.json").read_text()) if (work / "figures.json").exists() else {}
    if "simulate" in stages:
        figs["simulate"] = bench_soak.simulate(a, source)
    if "export" in stages:
        figs["runs"] = export_all(source, work / "exported", work / "state")
        figs["idle"] = idle_cost(work, source, work / "state")
    if "loop" in stages:
        figs["loop"] = loop_all(source, work / "exported-loop", work / "state-loop")
    if "ingest" in stages:
        figs["ingest"] = {name: ingest(work, landing, name)
                          for name, landing in (("copies", source), ("exports", work / "exported"))}
    if "compare" in stages:
        figs["differing_rows"] = compare(work)
    (work / "figures.json").write_text(json.dumps(figs, indent=2, default=str))
    return report(figs, a)


def _report_runs(figs: dict[str, Any], a: argparse.Namespace) -> None:
    import numpy as np

    runs = figs["runs"]
    idle = f"{figs['idle']['cpu_s']} s" if "idle" in figs else "not measured"
    copies = sum(r["copy_bytes"] for r in runs)
    exports = sum(r["bytes"] for r in runs)
    msgs = sum(r["messages"] for r in runs)
    brokers = [r for r in runs if r["broker"]]
    cpu = sum(r["cpu_s"] for r in brokers)
    rss = max(r["peak_rss"] for r in runs)
    # a run's CPU = what every run pays (start-up, the decoder's compiled kernels, the listing and the files) + a
    # cost per message: a least-squares line through the broker runs
    m = np.array([r["messages"] for r in brokers], float) / 1e6
    per_run, per_million = np.linalg.lstsq(np.vstack([np.ones_like(m), m]).T,
                                           np.array([r["cpu_s"] for r in brokers]), rcond=None)[0]
    parts = sum(r.get("part_bytes", 0) for r in runs)
    packs = sum(r.get("pack_bytes", 0) for r in runs)
    print(f"\n{a.hours} h at {a.rate:,} messages an hour, a snapshot every {a.every} min: {len(runs)} folders, "
          f"{msgs:,} messages exported")
    print("\n| layout | bytes shipped | per hour | share |")
    print("|---|---|---|---|")
    print(f"| store copies | {copies / MiB:,.0f} MiB | {copies / a.hours / MiB:,.0f} MiB | 100% |")
    print(f"| exports | {exports / MiB:,.0f} MiB | {exports / a.hours / MiB:,.0f} MiB | "
          f"{100 * exports / copies:.1f}% (target <= 10%) |")
    print(f"of the exports: the decoded records and manifests {parts / MiB:,.0f} MiB ({100 * parts / copies:.1f}% of "
          f"the copies), the consume queues' new bytes {packs / MiB:,.0f} MiB ({100 * packs / copies:.1f}%), the "
          f"config files the rest ({(exports - parts - packs) / MiB:,.0f} MiB)")
    print(f"\nexporter: {len(brokers)} broker runs, {cpu:.1f} s CPU in all = {cpu / max(msgs, 1) * 1e6:.2f} s per "
          f"million messages (target <= 2); per run {per_run:.2f} s + {per_million:.2f} s per million messages "
          f"(a run with nothing new to decode: {idle}); largest peak RSS {rss / MiB:.0f} MiB "
          f"(target < 300)")


def report(figs: dict[str, Any], a: argparse.Namespace) -> int:
    import numpy as np

    if "runs" in figs:
        _report_runs(figs, a)
    if "loop" in figs:
        lp = figs["loop"]
        lcpu, lmsgs = sum(b["cpu_s"] for b in lp), sum(r["messages"] for b in lp for r in b["runs"])
        each = [r for b in lp for r in b["runs"]]
        lm = np.array([r["messages"] for r in each], float) / 1e6
        l_run, l_million = np.linalg.lstsq(np.vstack([np.ones_like(lm), lm]).T,
                                           np.array([r["cpu_s"] for r in each]), rcond=None)[0]
        start = lcpu - sum(r["cpu_s"] for r in each)
        print(f"exporter as one long-lived process per broker (--every): {len(lp)} processes, {len(each)} runs, "
              f"{lcpu:.1f} s CPU in all = {lcpu / max(lmsgs, 1) * 1e6:.2f} s per million messages (target <= 2), "
              f"of which start-up {start:.1f} s; per run {l_run:.2f} s + {l_million:.2f} s per million; largest peak "
              f"RSS {max(b['peak_rss'] for b in lp) / MiB:.0f} MiB (target < 300)")
        # per broker: a --every process runs for months, so its start-up (imports) and first run (the decoder's
        # kernels loaded from their cache) are paid once; what recurs is the steady state, runs 2..n
        print("\n| broker (--every) | messages | CPU s | start-up + first run s | steady s per million | "
              "steady s per run with nothing new | peak RSS |")
        print("|---|---|---|---|---|---|---|")
        for b in lp:
            rs = b["runs"]
            n = sum(r["messages"] for r in rs[1:])
            steady = sum(r["cpu_s"] for r in rs[1:])
            idle = [r["cpu_s"] for r in rs[1:] if not r["messages"]]
            once = b["cpu_s"] - steady
            print(f"| {b['broker']} | {sum(r['messages'] for r in rs):,} | {b['cpu_s']:.2f} | {once:.2f} | "
                  f"{steady / n * 1e6:.2f} | {format(min(idle), '.3f') if idle else '-'} | "
                  f"{b['peak_rss'] / MiB:.0f} MiB |" if n else
                  f"| {b['broker']} | 0 | {b['cpu_s']:.2f} | {once:.2f} | - | - | {b['peak_rss'] / MiB:.0f} MiB |")
    if "ingest" in figs:
        print("\n| ingest of | wall s | CPU s | peak RSS |")
        print("|---|---|---|---|")
        for name, r in figs["ingest"].items():
            print(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']} | {r['peak_rss'] / MiB:,.0f} MiB |")
    ok = True
    if "differing_rows" in figs:
        bad = {t: n for t, n in figs["differing_rows"].items() if n}
        ok = not bad
        print(f"\nlakes: {'the same rows' if ok else 'DIFFER: ' + json.dumps(bad)} "
              f"({len(figs['differing_rows'])} tables compared)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
