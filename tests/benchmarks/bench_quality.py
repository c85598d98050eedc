"""Silver validation benchmark (issue 12, item 2): the increment on the engine vs the old whole-table pandas path.

Usage::

    .venv/bin/python tests/benchmarks/bench_quality.py --scale 13 [--seed 7] [--workdir /tmp/rmq-bench-quality]
        [--stages simulate,ingest,new,old] [--cleanup]

What it does:

1. ``simulate``: ``rmq-recon simulate --scenario mixed --scale N`` into ``<workdir>/landing`` (scale 13 is about
   1.25 M messages, scale 103 about 10 M);
2. ``ingest``: ``rmq-recon ingest`` into ``<workdir>/lake`` (one run: its increment is every silver row);
3. ``new``: ``jobs.ops.quality.validate_layer(lake, "silver")`` as the snapshot DAG's ``validate_silver`` task runs it
   (GE Spark suites on the rows the ingest added, the key rule as an engine query, results MERGEd into
   ``gold/validation_results``, Data Docs written), in a fresh process;
4. ``old``: what ``jobs/ops/quality.py`` did before (every silver table read whole into pandas with delta-rs, each suite
   on it with GE's pandas datasource, Data Docs written), in a fresh process;
5. prints wall time and peak RSS (the child's ``ru_maxrss`` from ``os.wait4``: the embedded Sail engine runs inside
   that process) of both, the targets (<= 20 s, < 1.5 GiB), and checks both found the same failed expectations and
   the same row count per table; writes ``<workdir>/figures.json``.

The machine (2 cores) may be shared with other work: the load average is printed with the figures.
This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GiB = 1 << 30
TARGET_S = 20.0
TARGET_RSS = 1.5 * GiB
STAGES = ["simulate", "ingest", "new", "old"]
T0 = time.time()


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')} +{time.time() - T0:7.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------- children


def child_new(a: dict[str, Any]) -> dict[str, Any]:
    from jobs.ops import quality

    out = quality.validate_layer(a["lake"], "silver", fail=False)
    return {t: {"rows": v["rows"], "failed": v["failed"]} for t, v in out["tables"].items()}


def child_old(a: dict[str, Any]) -> dict[str, Any]:
    """The previous jobs/ops/quality.py: whole tables into pandas, GE's pandas datasource, every expectation."""
    import great_expectations as gx

    import schemas
    from expectations import SILVER, SUITES
    from expectations.runner import ephemeral_context
    from jobs.lake import _delta

    by_name = {t.qualified: t for t in schemas.ALL_TABLES}
    ctx = ephemeral_context(tempfile.mkdtemp(prefix="old-docs-"))
    source = ctx.data_sources.add_pandas("lake")
    out = {}
    for name in SILVER:
        if not _delta.exists(a["lake"], by_name[name]):
            continue
        df = _delta.read_pandas(a["lake"], by_name[name])
        suite = ctx.suites.add(SUITES[name]())
        batch = source.add_dataframe_asset(name.replace("/", "_")).add_batch_definition_whole_dataframe("whole")
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=suite.name, data=batch, suite=suite))
        cp = ctx.checkpoints.add(gx.Checkpoint(name=suite.name, validation_definitions=[vd], result_format="SUMMARY",
                                               actions=[gx.checkpoint.UpdateDataDocsAction(name="docs")]))
        (res,) = cp.run(batch_parameters={"dataframe": df}).run_results.values()
        failed = []
        for r in res.results:
            if not r.success:
                kw = r.expectation_config.kwargs
                col = kw.get("column") or (f"{kw['column_A']},{kw['column_B']}" if kw.get("column_A") else "") or \
                    ",".join(kw.get("column_list") or [])
                failed.append(f"{r.expectation_config.type}({col})" if col else r.expectation_config.type)
        out[name] = {"rows": len(df), "failed": sorted(failed)}
        del df
    return out


CHILDREN = {"new": child_new, "old": child_old}


def child_main(stage: str, args_json: str, out: str) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = CHILDREN[stage](json.loads(args_json))
    Path(out).write_text(json.dumps(result, default=str))


# ------------------------------------------------------------------------------------------------- parent


def run_child(stage: str, args: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Run one stage in a fresh interpreter: its result, wall time and peak RSS (ru_maxrss of the child)."""
    out = workdir / f".child-{stage}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--child-args", json.dumps(args),
           "--child-out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not out.exists():
        raise SystemExit(f"{stage}: child failed with exit code {code}")
    result = json.loads(out.read_text())
    out.unlink()
    fig = {"wall_s": round(wall, 2), "peak_rss": usage.ru_maxrss * 1024,
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "tables": result}
    say(f"{stage}: {wall:.1f} s, peak RSS {fig['peak_rss'] / GiB:.2f} GiB, CPU {fig['cpu_s']} s")
    return fig


def cli(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=str(ROOT), check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=int, default=13)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", default="/tmp/rmq-bench-quality")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--cleanup", action="store_true", help="delete the workdir at the end")
    p.add_argument("--child")
    p.add_argument("--child-args")
    p.add_argument("--child-out")
    a = p.parse_args(argv)
    if a.child:
        child_main(a.child, a.child_args, a.child_out)
        return 0
    os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    landing, lake = work / "landing", work / "lake"
    figs_path = work / "figures.json"
    figs: dict[str, Any] = json.loads(figs_path.read_text()) if figs_path.exists() else {}
    stages = a.stages.split(",")
    if "simulate" in stages:
        shutil.rmtree(landing, ignore_errors=True)
        figs["simulate_s"] = cli("simulate", "--scenario", "mixed", "--scale", str(a.scale), "--seed", str(a.seed),
                                 "--out", str(landing))
        say(f"simulate: {figs['simulate_s']} s")
    if "ingest" in stages:
        shutil.rmtree(lake, ignore_errors=True)
        figs["ingest_s"] = cli("ingest", "--landing", str(landing), "--lake", str(lake))
        say(f"ingest: {figs['ingest_s']} s")
    for stage in ("new", "old"):
        if stage in stages:
            figs[stage] = run_child(stage, {"lake": str(lake)}, work)
    figs["scale"], figs["load_avg"] = a.scale, os.getloadavg()
    figs_path.write_text(json.dumps(figs, indent=2))
    print(f"\nsilver validation, mixed --scale {a.scale} (load {figs['load_avg'][0]:.1f}, {os.cpu_count()} cores)")
    print(f"{'path':<34}{'wall s':>9}{'peak RSS GiB':>14}{'rows':>12}")
    for stage, label in (("new", "increment on the engine (new)"), ("old", "whole tables in pandas (old)")):
        if stage in figs:
            f = figs[stage]
            rows = sum(t["rows"] for t in f["tables"].values())
            print(f"{label:<34}{f['wall_s']:>9.1f}{f['peak_rss'] / GiB:>14.2f}{rows:>12,}")
    if "new" in figs:
        ok = figs["new"]["wall_s"] <= TARGET_S and figs["new"]["peak_rss"] < TARGET_RSS
        print(f"target <= {TARGET_S:g} s and < {TARGET_RSS / GiB:g} GiB: {'PASS' if ok else 'MISS'}")
    if "new" in figs and "old" in figs:
        same = {t: v for t, v in figs["new"]["tables"].items() if v["rows"]} == figs["old"]["tables"]
        print(f"same rows and failed expectations per table as the old path: {same}")
    if a.cleanup:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
