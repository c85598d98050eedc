"""Pipeline benchmark (issues 4 and 5): ``mixed`` at N messages -> ingest -> reconcile, and the replay on three engines.

Usage::

    .venv/bin/python tests/benchmarks/bench_pipeline.py --messages 10000000 [--seed 1] [--workdir /tmp/rmq-bench]
        [--stages simulate,ingest,reconcile,replay] [--repeats 3] [--scale N] [--replay-copies N] [--cleanup]

What it does:

1. ``simulate``: runs ``jobs.simulate.run("mixed", landing, seed, scale)`` at the scale that stores at least
   ``--messages`` (``plan_scale``: the event-loop part up to scale 3, then ``BULK_UNIT_MESSAGES`` of vectorised
   bulk traffic per unit, ``jobs.simulate.bulk``) and prints wall time, messages stored (and how many are bulk),
   messages/s, landing-zone bytes (logical and on disk) and files.
2. ``ingest`` and ``reconcile``: ``jobs.ingest.ingest.run(landing, lake)`` then
   ``jobs.reconcile.reconcile.run(lake, reports)``, each in a fresh process; wall time and peak RSS per stage (the
   child's ``ru_maxrss`` from ``os.wait4``, and the sampled RSS of its whole process tree), and the total.
3. ``replay``: exports silver/deliveries, silver/consumer_offsets and silver/queue_bounds from the lake with
   delta-rs into Parquet once, computes ``jobs.rules.snapshots.offset_series`` from them once (Sail, as the reconcile
   job does, as of the newest snapshot) into Parquet, then times
   ``replay.agreement(deliveries, series, as_of=as_of)``, as the reconcile job does (collected, so fully computed) on
   (a) Sail, (b) classic local Spark (``jobs.lake._spark.session("classic")``) and (c) the same replay written in
   DuckDB SQL, all reading the same Parquet files, each engine in its own process: one warm-up, then
   ``--repeats`` timed runs; medians and the ratios Sail/DuckDB and classic/Sail. The three must return the same
   (cluster, consumer_group, compared, agreeing) rows, and the same as the reconcile stage's summary.json.
4. ``scaling`` (issue 13): ingest of the same landing zone, each into a fresh Parquet lake, on the standalone cluster
   (``infra/spark-cluster.sh``) with 1 worker of 1 core and with 2 workers of 1 core each, and on a Sail server
   process (``sail spark server``) with 1 and 2 task slots (``SAIL_EXECUTION__DEFAULT_PARALLELISM``, pinned to as
   many CPUs with ``taskset``); the job connects to each with ``RMQ_RECON_ENGINE=connect``. Per run: wall time, the
   driver's (the job process's) peak RSS and, separately, the engine's (its processes' trees, sampled); the
   speed-ups 2 cores / 1 core, cluster / Sail, and whether all the ingests changed the same rows. The Sail ingests
   run ``--sail-repeats`` times each (default 3), alternated, and their medians are compared (one run of a 10-15 s
   ingest varies by a second or more on this shared machine); the cluster's once each. On the cluster and the Sail
   server each start runs the ingest twice, into a fresh lake each time: cold (the engine's first job) and warm (the
   same job again on the same engine, as a deployment's long-lived engine runs it: the JVMs' code compiled, Python
   workers and decode helpers started); the ratios are given for both. Beside them, as often, the
   default deployment: embedded Sail in the job's own process, the whole process (driver, engine, decode helpers)
   pinned to 1 and to 2 CPUs with ``taskset``, as on a 1- or 2-core worker.
5. Prints the figures table with PASS/MISS per target and writes it to ``<workdir>/figures.md`` (and
   ``figures.json``). ``--stages`` runs a subset; figures of earlier stages are taken from ``figures.json``.

DuckDB is a benchmark-only dependency, pinned in requirements.lock (``make install`` installs it). The machine (2 cores, 24 GiB) may be
shared with other workloads: the load average is printed with the figures, and the ratios come from one run.
This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from jobs.simulate import tree_size  # noqa: E402 - after the project root is on sys.path

GiB = 1 << 30
MiB = 1 << 20
STAGES = ["simulate", "ingest", "reconcile", "replay", "scaling"]
ENGINES = ["sail", "classic", "duckdb"]
TARGET_MESSAGES = 10_000_000
TARGET_SIMULATE_S = 600.0  # issue 4: 10 M messages generated in under 10 minutes
TARGET_RUN_S = 600.0  # issue 5: the whole run (simulate + ingest + reconcile) in under 10 minutes
TARGET_RSS = 8 * GiB  # issue 5: peak RSS under 8 GiB
TARGET_SAIL_VS_DUCKDB = 1.0  # Sail at least as fast as DuckDB: sail / duckdb <= 1
TARGET_CLASSIC_VS_SAIL = 5.0  # Sail at least 5x faster than classic local Spark: classic / sail >= 5
T_START = time.time()


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')} +{time.time() - T_START:7.1f}s] {msg}", flush=True)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f} s"


# ------------------------------------------------------------------------------------------------ children
#
# Every stage runs in a fresh interpreter (``--child STAGE``) so that its peak RSS is its own. The child prints
# its progress to the shared stdout and writes its result as JSON to ``--child-out``.


def child_simulate(a: dict[str, Any]) -> dict[str, Any]:
    from jobs import simulate

    out = a["out"]
    if os.path.exists(out):
        shutil.rmtree(out)
    return simulate.run("mixed", out, seed=a["seed"], scale=a["scale"])


def _throttled(prefix: str, keep: Callable[[str], bool], every_s: float = 10.0) -> Callable[[str], None]:
    last = [0.0]

    def progress(line: str) -> None:
        now = time.time()
        if keep(line) or now - last[0] >= every_s:
            last[0] = now
            print(f"    {prefix} {time.strftime('%H:%M:%S')} {line}", flush=True)

    return progress


def child_ingest(a: dict[str, Any]) -> dict[str, Any]:
    from jobs.ingest import ingest

    if os.path.exists(a["lake"]):
        shutil.rmtree(a["lake"])
    keep = lambda line: any(s in line for s in ("done", " snapshot(s) under ", "ingest: [", "decoded", "loaded",  # noqa: E731
                                                "queue bounds", "deliveries"))
    return ingest.run(a["landing"], a["lake"], progress=_throttled("ingest", keep))


def child_reconcile(a: dict[str, Any]) -> dict[str, Any]:
    from jobs.reconcile import reconcile

    if os.path.exists(a["reports"]):
        shutil.rmtree(a["reports"])
    summary = reconcile.run(a["lake"], a["reports"], progress=_throttled("reconcile", lambda line: True, 0))
    return {"seconds": summary["seconds"], "report_dir": summary["report_dir"], "run_id": summary["run_id"],
            "as_of": summary["as_of"], "tables": summary["tables"]}


def child_export(a: dict[str, Any]) -> dict[str, Any]:
    """silver tables -> Parquet (delta-rs), and the offset series (Sail, offset_series) -> Parquet."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from jobs.lake import _delta, _spark
    from jobs.rules import snapshots
    from jobs.reconcile.reconcile import parse_as_of
    from schemas import consumer_offsets, deliveries, queue_bounds

    out = Path(a["dir"])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rows: dict[str, int] = {}
    t0 = time.perf_counter()
    for table in (deliveries.TABLE, consumer_offsets.TABLE, queue_bounds.TABLE):
        if not _delta.exists(a["lake"], table):
            raise SystemExit(f"{table.path(a['lake'])} does not exist: run the ingest stage first")
        src = DeltaTable(table.path(a["lake"]), storage_options=_delta.storage_options() or None).to_pyarrow_dataset()
        ds.write_dataset(src.scanner(columns=list(table.columns)), out / table.name, format="parquet",
                         max_rows_per_file=2_000_000, max_rows_per_group=262_144, min_rows_per_group=65_536,
                         basename_template="part-{i}.parquet", existing_data_behavior="delete_matching")
        rows[table.name] = ds.dataset(out / table.name, format="parquet").count_rows()
        print(f"    export  {table.qualified}: {rows[table.name]} rows", flush=True)
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _spark.session("sail") as spark:
        co = spark.read.parquet(str(out / consumer_offsets.TABLE.name))
        qb = spark.read.parquet(str(out / queue_bounds.TABLE.name))
        latest = co.agg({"snapshot_ts": "max"}).collect()[0][0]
        as_of = parse_as_of(latest)
        assert as_of is not None
        series = snapshots.offset_series(co, qb, as_of=as_of).select(*snapshots.SERIES_KEY, "snapshot_ts",
                                                                      "committed_offset")
        tbl = series.toArrow()
    # Timestamps as UTC instants (isAdjustedToUTC) so every engine reads them as the same instants.
    fields = []
    for f in tbl.schema:
        fields.append(pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f)
    tbl = tbl.cast(pa.schema(fields))
    (out / "series").mkdir()
    pq.write_table(tbl, out / "series" / "part-0.parquet")
    rows["series"] = tbl.num_rows
    if a.get("copies", 1) > 1:
        for name in ("deliveries", "series"):
            rows[name] = _replicate(out / name, a["copies"])
    files, logical, _ = tree_size(out)
    return {"rows": rows, "as_of": as_of.isoformat(), "export_s": round(export_s, 2),
            "series_s": round(time.perf_counter() - t0, 2), "parquet_bytes": logical, "parquet_files": files}


COPY_MARK = "#copy"


def _replicate(folder: Path, copies: int) -> int:
    """The replay input ``copies`` times over, copy i >= 1 of group G named G#copy<i>: the same work per group.

    Why: at 10 M messages the traced share is 175,837 deliveries, where fixed costs weigh; ``--replay-copies``
    shows how the engines compare on more rows of the same shape (each copy must give its original's numbers).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    tbl = ds.dataset(folder, format="parquet").to_table()
    col = tbl.schema.get_field_index("consumer_group")
    parts = [tbl] + [tbl.set_column(col, "consumer_group",
                                    pc.binary_join_element_wise(tbl["consumer_group"], pa.scalar(f"{COPY_MARK}{i}"), ""))
                     for i in range(1, copies)]
    shutil.rmtree(folder)
    folder.mkdir()
    out = pa.concat_tables(parts)
    pq.write_table(out, folder / "part-0.parquet", row_group_size=262_144)
    return out.num_rows


def _agreement_rows(rows: list[Any]) -> list[list[Any]]:
    return sorted([[r[0], r[1], int(r[2]), int(r[3])] for r in rows])


def _time_runs(label: str, fn: Callable[[], list[list[Any]]], repeats: int) -> tuple[list[float], float, list[list[Any]]]:
    t0 = time.perf_counter()
    first = fn()
    warm = time.perf_counter() - t0
    print(f"    replay  {label}: warm-up {warm:.2f} s ({len(first)} groups)", flush=True)
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        rows = fn()
        times.append(time.perf_counter() - t0)
        print(f"    replay  {label}: run {i + 1}/{repeats} {times[-1]:.2f} s", flush=True)
        if rows != first:
            raise SystemExit(f"{label}: run {i + 1} returned different rows than the warm-up")
    return times, warm, first


def child_replay_spark(a: dict[str, Any]) -> dict[str, Any]:
    from jobs.lake import _spark
    from jobs.rules import replay
    from jobs.reconcile.reconcile import parse_as_of

    d = Path(a["dir"])
    as_of = parse_as_of(a["as_of"])
    if a["engine"] == "classic":  # no console progress bars from the JVM in the benchmark's output
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    t0 = time.perf_counter()
    with _spark.session(a["engine"]) as spark:
        started = time.perf_counter() - t0

        def run() -> list[list[Any]]:
            dels = spark.read.parquet(str(d / "deliveries"))
            series = spark.read.parquet(str(d / "series"))
            # as the reconcile job runs it: one plan that reads the timeline once
            agreement = replay.agreement(dels, series, as_of=as_of)
            return _agreement_rows(agreement.select("cluster", "consumer_group", "compared", "agreeing").collect())

        times, warm, rows = _time_runs(a["engine"], run, a["repeats"])
    return {"engine": a["engine"], "session_start_s": round(started, 2), "warmup_s": warm, "times_s": times,
            "median_s": statistics.median(times), "rows": rows}


# The replay of jobs/rules/replay.py (commit_timeline + replayed_commits + agreement) in DuckDB SQL, in the same as-of
# form. Times are compared as epoch microseconds, which is what Spark's timestamps are.
K = "cluster, consumer_group, client_id, client_host, topic, broker, queue_id"
SK = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
BY_TIME = "ORDER BY start_us ASC NULLS FIRST, queue_offset ASC NULLS FIRST, left_us ASC NULLS FIRST"
REPLAY_SQL = """
WITH d0 AS (
    SELECT cluster, consumer_group, coalesce(client_id, '') AS client_id, coalesce(client_host, '') AS client_host,
           topic, broker, queue_id, CAST(queue_offset AS BIGINT) AS queue_offset,
           epoch_us(start_ts) AS start_us, epoch_us(end_ts) AS left_us
    FROM read_parquet('{deliveries}')
    WHERE retry_times = 0 AND queue_offset IS NOT NULL AND start_ts IS NOT NULL AND epoch_us(start_ts) <= {as_of_us}
      AND cluster IS NOT NULL AND consumer_group IS NOT NULL AND topic IS NOT NULL AND broker IS NOT NULL
      AND queue_id IS NOT NULL
),
-- dense integer ids of the queues (sid) and of queue + host (hid, in client_host order within a sid)
ids AS (
    SELECT {K}, dense_rank() OVER (ORDER BY {SK}) AS sid, row_number() OVER (ORDER BY {SK}, client_host) AS hid
    FROM (SELECT DISTINCT {K} FROM d0)
),
-- a delivery cannot leave before it started (a clock step): D(o) >= start keeps the breakpoints in order
d AS (
    SELECT sid, hid, queue_offset, start_us,
           CASE WHEN left_us IS NOT NULL THEN greatest(left_us, start_us) END AS left_us
    FROM ids JOIN d0 USING ({K})
),
-- a ProcessQueue lifetime restarts where the host delivers an offset below the one it delivered just before; the
-- first delivery of each offset in a lifetime is its entry (the deliveries of one offset are consecutive)
marked AS (SELECT *, lag(queue_offset) OVER (PARTITION BY hid {BY_TIME}) AS prev FROM d),
entries0 AS (
    SELECT *, prev IS NULL OR queue_offset < prev AS restart,
           CASE WHEN prev IS NULL OR queue_offset < prev THEN row_number() OVER (PARTITION BY hid {BY_TIME}) - 1 END AS mark
    FROM marked WHERE prev IS NULL OR queue_offset <> prev
),
-- each entry's lifetime: the mark of the lifetime's first entry, carried forward
entries AS (
    SELECT *, coalesce(mark, lag(mark IGNORE NULLS) OVER (PARTITION BY hid {BY_TIME})) AS lifetime FROM entries0
),
-- D of the previous entry in the lifetime: running max of (lifetime, time left) over the earlier entries, packed
-- in one number as jobs/rules/replay.py does; D(o) = max(that, L(o)); NEVER while some offset <= o is in flight
prior AS (
    SELECT *, CASE WHEN earlier >= 0 THEN earlier END AS before
    FROM (
        SELECT *, max(CAST(lifetime AS HUGEINT) * {life_scale} + coalesce(left_us + {us_shift}, {never_us})) OVER (
                      PARTITION BY hid {BY_TIME} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                  - CAST(lifetime AS HUGEINT) * {life_scale} AS earlier
        FROM entries)
),
timeline AS (
    SELECT sid, hid, lifetime, restart AS lifetime_start, queue_offset, CASE WHEN NOT restart THEN prev END AS prev_offset,
           start_us, CASE WHEN latest <> {never_us} THEN CAST(latest - {us_shift} AS BIGINT) END AS d_us,
           CASE WHEN before <> {never_us} THEN CAST(before - {us_shift} AS BIGINT) END AS prev_d_us
    FROM (SELECT *, greatest(before, coalesce(left_us + {us_shift}, {never_us})) AS latest FROM prior)
),
s AS (
    SELECT sid, epoch_us(snapshot_ts) AS t_us, committed_offset, cluster, consumer_group
    FROM (SELECT DISTINCT {SK}, sid FROM ids) JOIN read_parquet('{series}') USING ({SK})
),
-- the active ProcessQueue at t_s: the (host, lifetime) of the latest entry started at or before it, in the order
-- (start, hid, lifetime), (hid, lifetime) packed in one BIGINT as jobs/rules/replay.py does: the entry before each
-- snapshot row
active AS (
    SELECT sid, t_us, a >> {life_bits} AS hid, a & {life_mask} AS lifetime
    FROM (
        SELECT sid, k AS t_us, m, lag(e IGNORE NULLS) OVER (PARTITION BY sid ORDER BY k, m, e) AS a
        FROM (SELECT sid, start_us AS k, 0 AS m, (hid << {life_bits}) + lifetime AS e
              FROM timeline
              UNION ALL SELECT sid, t_us, 1, NULL FROM s))
    WHERE m = 1 AND a IS NOT NULL
),
-- probes at t_s (upper) and t_s - 10 s (lower) in that lifetime
probes AS (
    SELECT hid, lifetime, sid, t_us, t_us AS x, false AS is_lower FROM active
    UNION ALL SELECT hid, lifetime, sid, t_us, t_us - {lag_us}, true FROM active
),
-- the commit's breakpoints per lifetime: o + 1 at D(o); o at max(D of the previous entry, start of o), or o
-- before everything (k NULL, sorted first) for the lifetime's first entry, left out where it repeats the one at
-- D of the previous entry. Their values rise along (k, v): the commit at x is the last breakpoint value at or
-- before x (breakpoints before probes at the same time)
points AS (
    SELECT hid, lifetime, d_us AS k, queue_offset + 1 AS v FROM timeline WHERE d_us IS NOT NULL
    UNION ALL SELECT hid, lifetime, CASE WHEN NOT lifetime_start THEN greatest(prev_d_us, start_us) END, queue_offset
    FROM timeline
    WHERE lifetime_start OR (prev_d_us IS NOT NULL AND queue_offset <> prev_offset + 1)
),
commits AS (
    SELECT sid, t_us, max(CASE WHEN NOT is_lower THEN c END) AS upper, max(CASE WHEN is_lower THEN c END) AS lower
    FROM (
        SELECT sid, t_us, is_lower, m,
               lag(v IGNORE NULLS) OVER (PARTITION BY hid, lifetime ORDER BY k ASC NULLS FIRST, m, v) AS c
        FROM (SELECT hid, lifetime, k, 0 AS m, v, NULL::BIGINT AS sid, NULL::BIGINT AS t_us, NULL::BOOLEAN AS is_lower
              FROM points
              UNION ALL SELECT hid, lifetime, x, 1, NULL, sid, t_us, is_lower FROM probes))
    WHERE m = 1
    GROUP BY ALL
)
SELECT cluster, consumer_group, count(*) AS compared,
       sum(CASE WHEN committed_offset >= lower AND committed_offset <= upper THEN 1 ELSE 0 END) AS agreeing,
       sum(CASE WHEN committed_offset >= lower AND committed_offset <= upper THEN 1 ELSE 0 END) / count(*) AS ratio
FROM commits JOIN s USING (sid, t_us)
GROUP BY cluster, consumer_group
"""


def replay_sql(deliveries_glob: str, series_glob: str, as_of_us: int, lag_s: int) -> str:
    from jobs.rules import replay

    def huge(n: int) -> str:
        return f"{n}::HUGEINT"

    return REPLAY_SQL.format(
        deliveries=deliveries_glob, series=series_glob, as_of_us=as_of_us, lag_us=lag_s * 1_000_000, K=K,
        BY_TIME=BY_TIME, SK=", ".join(SK), life_scale=huge(replay.LIFE_SCALE), us_shift=huge(replay.US_SHIFT),
        never_us=huge(replay.NEVER_US), life_bits=replay.LIFE_BITS, life_mask=2**replay.LIFE_BITS - 1)


def child_replay_duckdb(a: dict[str, Any]) -> dict[str, Any]:
    try:
        import duckdb
    except ImportError:
        raise SystemExit("duckdb is a benchmark-only dependency: .venv/bin/pip install duckdb")
    from jobs.rules.replay import BROKER_LAG_S
    from jobs.reconcile.reconcile import parse_as_of

    d = Path(a["dir"])
    as_of = parse_as_of(a["as_of"])
    assert as_of is not None
    as_of_us = int(as_of.timestamp()) * 1_000_000 + as_of.microsecond
    sql = replay_sql(str(d / "deliveries" / "*.parquet"), str(d / "series" / "*.parquet"), as_of_us, BROKER_LAG_S)
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 2}")
    started = time.perf_counter() - t0

    def run() -> list[list[Any]]:
        return _agreement_rows(con.execute(sql).fetchall())

    times, warm, rows = _time_runs("duckdb", run, a["repeats"])
    con.close()
    return {"engine": "duckdb", "duckdb_version": duckdb.__version__, "session_start_s": round(started, 2),
            "warmup_s": warm, "times_s": times, "median_s": statistics.median(times), "rows": rows}


CHILDREN: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "simulate": child_simulate, "ingest": child_ingest, "reconcile": child_reconcile, "export": child_export,
    "replay_spark": child_replay_spark, "replay_duckdb": child_replay_duckdb,
}


def child_main(stage: str, args_json: str, out: str) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = CHILDREN[stage](json.loads(args_json))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)


# ------------------------------------------------------------------------------------------------- parent


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(label: str, stage: str, args: dict[str, Any], workdir: Path, *, env: dict[str, str] | None = None,
              engine_pids: Callable[[], list[int]] | None = None, cpus: str | None = None) -> dict[str, Any]:
    """Run one stage in a fresh interpreter; returns its result plus wall_s, maxrss (wait4) and tree_peak_rss.

    ``env``: extra environment of the child. ``engine_pids``: the processes of an engine outside the child (a Spark
    Connect server, a cluster's JVMs), whose summed RSS is sampled too (``engine_peak_rss``). ``cpus``: the child
    and everything it starts pinned to these CPUs (``taskset -c``).
    """
    out = workdir / f".child-{label}.json"
    if out.exists():
        out.unlink()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--child-args", json.dumps(args),
           "--child-out", str(out)]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus] + cmd
    say(f"{label}: start ({stage} {json.dumps(args)})")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env={**os.environ, **(env or {})})
    peak = [0]
    engine_peak = [0]
    done = threading.Event()

    def sample() -> None:
        last_note = time.perf_counter()
        while not done.wait(0.5):
            rss = _tree_rss(proc.pid)
            peak[0] = max(peak[0], rss)
            if engine_pids is not None:
                engine_peak[0] = max(engine_peak[0], sum(_tree_rss(pid) for pid in engine_pids()))
            if time.perf_counter() - last_note >= 30:
                last_note = time.perf_counter()
                say(f"{label}: running {time.perf_counter() - t0:.0f} s, RSS {fmt_bytes(rss)} "
                    f"(peak {fmt_bytes(peak[0])}), load {os.getloadavg()[0]:.1f}")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{label}: child failed with exit code {proc.returncode}")
    result = json.loads(out.read_text())
    out.unlink()
    result.update({"wall_s": round(wall, 2), "maxrss": usage.ru_maxrss * 1024, "tree_peak_rss": peak[0],
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 1)})
    if engine_pids is not None:
        result["engine_peak_rss"] = engine_peak[0]
    say(f"{label}: done in {wall:.1f} s, peak RSS {fmt_bytes(result['maxrss'])} (ru_maxrss), "
        f"{fmt_bytes(peak[0])} (process tree, sampled), CPU {result['cpu_s']} s")
    return result


def peak_rss(r: dict[str, Any]) -> int:
    return max(int(r.get("maxrss") or 0), int(r.get("tree_peak_rss") or 0))


def plan_scale(messages: int) -> int:
    """The ``mixed`` scale that stores at least ``messages``: the event-loop part stores ~90k per unit up to scale 3
    (269,928 at scale 3, seed 1), each unit past 3 adds ``BULK_UNIT_MESSAGES`` of bulk traffic (Poisson counts
    around that mean), and the plan keeps a 0.5% margin."""
    from jobs.simulate.mixed import ANOMALY_SCALE_MAX, BULK_UNIT_MESSAGES

    anomaly = ANOMALY_SCALE_MAX * 86_000
    if messages * 1.005 <= anomaly:
        return max(1, math.ceil(messages * 1.005 / 86_000))
    return ANOMALY_SCALE_MAX + math.ceil((messages * 1.005 - anomaly) / BULK_UNIT_MESSAGES)


def stage_simulate(args: argparse.Namespace, workdir: Path, fig: dict[str, Any]) -> None:
    landing = workdir / "landing"
    scale = args.scale if args.scale is not None else plan_scale(args.messages)
    plan: dict[str, Any] = {"requested_messages": args.messages}
    plan["scale"] = scale
    say(f"simulate: scale {scale} for {args.messages:,} messages")
    r = run_child("simulate", "simulate", {"out": str(landing), "seed": args.seed, "scale": scale}, workdir)
    files, logical, disk = tree_size(landing)
    truth = tree_size(landing / "_truth")
    fig["simulate"] = {
        "scale": scale, "seed": args.seed, "messages_stored": r["messages_stored"], "snapshots": r["snapshots"],
        "wall_s": r["wall_s"], "generation_s": r["generation_s"], "simulate_s": r["simulate_s"],
        "messages_per_s": r["messages_stored"] / r["wall_s"], "landing_files": files, "landing_bytes": logical,
        "landing_bytes_on_disk": disk, "truth_bytes": truth[1], "maxrss": r["maxrss"],
        "tree_peak_rss": r["tree_peak_rss"], "cpu_s": r["cpu_s"], "plan": plan,
        "bulk_messages": r.get("bulk_messages"),
    }
    say(f"simulate: scale {scale}: {r['messages_stored']} messages stored in {r['wall_s']:.1f} s "
        f"({r['messages_stored'] / r['wall_s']:.0f} messages/s); landing zone {files} files, {logical} bytes "
        f"({fmt_bytes(logical)}; {fmt_bytes(disk)} on disk, hard links counted once)")


def stage_ingest(args: argparse.Namespace, workdir: Path, fig: dict[str, Any]) -> None:
    landing, lake = workdir / "landing", workdir / "lake"
    if not landing.exists():
        raise SystemExit(f"{landing} does not exist: run the simulate stage first")
    r = run_child("ingest", "ingest", {"landing": str(landing), "lake": str(lake)}, workdir)
    files, logical, _ = tree_size(lake)
    fig["ingest"] = {"wall_s": r["wall_s"], "job_s": r["seconds"], "maxrss": r["maxrss"],
                     "tree_peak_rss": r["tree_peak_rss"], "cpu_s": r["cpu_s"], "changed_rows": r["changed_rows"],
                     "quarantined": r["quarantined"], "lake_files": files, "lake_bytes": logical}
    say(f"ingest: {r['wall_s']:.1f} s, peak RSS {fmt_bytes(peak_rss(r))}; lake {files} files, {fmt_bytes(logical)}; "
        f"rows {r['changed_rows']}")


# The scaling run (issue 13.5): the same ingest on the standalone cluster with 1 and 2 one-core workers and on a Sail
# server with 1 and 2 task slots (pinned to as many CPUs); Parquet everywhere (the cluster has no Delta jars).
SCALING = [("cluster", 1), ("cluster", 2), ("sail", 1), ("sail", 2)]
# Also the default deployment, embedded Sail in the job's process, with the whole process pinned to 1 and 2 CPUs
# (the "1 core" of a Sail server above gives its engine 1 CPU while the driver runs on the other).
EMBEDDED = [("embedded", 1), ("embedded", 2)]
TARGET_SCALING = 1.7  # 2 cores >= 1.7x 1 core
TARGET_DRIVER_RSS = GiB  # the client's peak RSS at 10 M messages


@contextmanager
def _cluster(workdir: Path, workers: int) -> Iterator[tuple[str, Callable[[], list[int]]]]:
    """``infra/spark-cluster.sh`` with ``workers`` workers of 1 core; yields its URL and its processes."""
    state = workdir / f"spark-cluster-{workers}"
    env = {**os.environ, "SPARK_CLUSTER_DIR": str(state), "SPARK_WORKERS": str(workers), "SPARK_WORKER_CORES": "1",
           "PYTHON": sys.executable}
    script = str(ROOT / "infra" / "spark-cluster.sh")
    r = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"spark cluster of {workers} worker(s) did not start: {r.stderr[-2000:]}")
    url = r.stdout.strip().rsplit("=", 1)[1]
    names = ["master", "connect"] + ["worker" if w == 1 else f"worker{w}" for w in range(1, workers + 1)]

    def pids() -> list[int]:
        return [int((state / f"{n}.pid").read_text()) for n in names if (state / f"{n}.pid").exists()]

    try:
        yield url, pids
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=300)


@contextmanager
def _sail_server(workdir: Path, slots: int) -> Iterator[tuple[str, Callable[[], list[int]]]]:
    """A Sail Spark Connect server in its own process with ``slots`` task slots, pinned to as many CPUs."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAIL_EXECUTION__DEFAULT_PARALLELISM": str(slots),
           "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    cpus = ",".join(str(i) for i in range(min(slots, os.cpu_count() or 1)))
    log = open(workdir / f"sail-{slots}.log", "w")
    proc = subprocess.Popen(["taskset", "-c", cpus, str(Path(sys.executable).parent / "sail"), "spark", "server",
                             "--ip", "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"sail server with {slots} slot(s) did not start (log {log.name})")
                time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}", lambda: [proc.pid]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def stage_scaling(workdir: Path, fig: dict[str, Any], sail_repeats: int = 3) -> None:
    """Ingest the landing zone on each engine of :data:`SCALING`, each into a fresh Parquet lake and a fresh engine.

    The Sail configurations run ``sail_repeats`` times each, alternating (1, 2, 1, 2, ...): on this shared 2-core
    machine one run of a 10-15 s ingest varies by a second or more; the figures are the medians (and the range)."""
    landing = workdir / "landing"
    if not landing.exists():
        raise SystemExit(f"{landing} does not exist: run the simulate stage first")
    samples: dict[str, list[dict[str, Any]]] = {}
    order = [c for c in SCALING if c[0] == "cluster"] + [c for _ in range(max(1, sail_repeats))
                                                        for c in SCALING + EMBEDDED if c[0] != "cluster"]

    def record(name: str, r: dict[str, Any]) -> None:
        samples.setdefault(name, []).append({
            "wall_s": r["wall_s"], "job_s": r["seconds"], "driver_peak_rss": r["maxrss"],
            "engine_peak_rss": r.get("engine_peak_rss"), "cpu_s": r["cpu_s"], "changed_rows": r["changed_rows"],
            "quarantined": r["quarantined"]})
        say(f"scaling {name}: ingest {r['wall_s']:.1f} s; driver peak RSS {fmt_bytes(r['maxrss'])}, engine peak RSS "
            f"{fmt_bytes(r.get('engine_peak_rss'))}")

    for engine, n in order:
        name = f"{engine}-{n}"
        lake = workdir / f"lake-{name}"
        shutil.rmtree(lake, ignore_errors=True)
        if engine == "embedded":  # the job's own process and all it starts on n CPUs, as on an n-core worker
            env = {"RMQ_RECON_ENGINE": "sail", "RMQ_RECON_FORMAT": "parquet", "SAIL_EXECUTION__DEFAULT_PARALLELISM":
                   str(n)}
            record(name, run_child(f"ingest {name}", "ingest", {"landing": str(landing), "lake": str(lake)}, workdir,
                                   env=env, cpus=",".join(str(i) for i in range(n))))
        else:
            setup = _cluster(workdir, n) if engine == "cluster" else _sail_server(workdir, n)
            with setup as (url, pids):
                env = {"SPARK_REMOTE": url, "RMQ_RECON_ENGINE": "connect", "RMQ_RECON_FORMAT": "parquet"}
                # cold: the engine's first job; warm: the same ingest again into a fresh lake on the same engine,
                # as a deployment's long-lived engine runs it every 15 minutes (the JVMs' code compiled, the Python
                # workers and decode helpers started)
                for label in (name, f"{name}-warm"):
                    shutil.rmtree(lake, ignore_errors=True)
                    record(label, run_child(f"ingest {label}", "ingest", {"landing": str(landing), "lake": str(lake)},
                                            workdir, env=env, engine_pids=pids))
        shutil.rmtree(lake, ignore_errors=True)
    runs: dict[str, dict[str, Any]] = {}
    for name, ss in samples.items():
        walls = sorted(x["wall_s"] for x in ss)
        runs[name] = {**ss[0], "wall_s": statistics.median(walls), "wall_s_all": [x["wall_s"] for x in ss],
                      "driver_peak_rss": max(x["driver_peak_rss"] for x in ss),
                      "engine_peak_rss": max((x["engine_peak_rss"] or 0) for x in ss) or None}
    rows = {json.dumps(x["changed_rows"], sort_keys=True) for ss in samples.values() for x in ss}
    w = lambda name: runs[name]["wall_s"]  # noqa: E731
    fig["scaling"] = {"runs": runs, "identical_rows": len(rows) == 1, "sail_repeats": max(1, sail_repeats),
                      "cluster_speedup": w("cluster-1") / w("cluster-2"),
                      "sail_speedup": w("sail-1") / w("sail-2"),
                      "cluster_over_sail": w("cluster-2") / w("sail-2"),
                      "cluster_speedup_warm": w("cluster-1-warm") / w("cluster-2-warm"),
                      "sail_speedup_warm": w("sail-1-warm") / w("sail-2-warm"),
                      "cluster_over_sail_warm": w("cluster-2-warm") / w("sail-2-warm"),
                      "embedded_speedup": w("embedded-1") / w("embedded-2")}


def stage_reconcile(workdir: Path, fig: dict[str, Any]) -> None:
    lake, reports = workdir / "lake", workdir / "reports"
    r = run_child("reconcile", "reconcile", {"lake": str(lake), "reports": str(reports)}, workdir)
    fig["reconcile"] = {"wall_s": r["wall_s"], "job_s": r["seconds"], "maxrss": r["maxrss"],
                        "tree_peak_rss": r["tree_peak_rss"], "cpu_s": r["cpu_s"], "run_id": r["run_id"],
                        "as_of": r["as_of"], "report_dir": r["report_dir"],
                        "rows": {k: v["rows"] for k, v in r["tables"].items()}}
    say(f"reconcile: {r['wall_s']:.1f} s, peak RSS {fmt_bytes(peak_rss(r))}; rows {fig['reconcile']['rows']}")


def stage_replay(args: argparse.Namespace, workdir: Path, fig: dict[str, Any]) -> None:
    lake, rdir = workdir / "lake", workdir / "replay"
    ex = run_child("export", "export", {"lake": str(lake), "dir": str(rdir), "copies": args.replay_copies}, workdir)
    say(f"replay: exported {ex['rows']} rows ({fmt_bytes(ex['parquet_bytes'])} Parquet) in {ex['export_s']} s, "
        f"series in {ex['series_s']} s; as of {ex['as_of']}")
    results: dict[str, dict[str, Any]] = {}
    for engine in args.engines:
        stage = "replay_duckdb" if engine == "duckdb" else "replay_spark"
        results[engine] = run_child(f"replay {engine}", stage,
                                    {"engine": engine, "dir": str(rdir), "as_of": ex["as_of"],
                                     "repeats": args.repeats}, workdir)
        say(f"replay {engine}: median {results[engine]['median_s']:.2f} s of {len(results[engine]['times_s'])} "
            f"runs {[round(t, 2) for t in results[engine]['times_s']]}")
    # Same answer everywhere, or the timing is worthless.
    ref_engine = args.engines[0]
    ref = results[ref_engine]["rows"]
    mismatches = []
    for engine, r in results.items():
        if r["rows"] != ref:
            a, b = {tuple(x[:2]): x[2:] for x in ref}, {tuple(x[:2]): x[2:] for x in r["rows"]}
            diff = [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            mismatches.append(f"{engine} vs {ref_engine}: {len(diff)} group(s) differ, e.g. {diff[:5]}")
    recon_check = None
    summary_path = Path(fig.get("reconcile", {}).get("report_dir", "")) / "summary.json"
    if fig.get("reconcile") and summary_path.exists() and fig["reconcile"].get("as_of"):
        summary = json.loads(summary_path.read_text())
        recon = sorted([[g, v["replay_agreement"]["compared"], v["replay_agreement"]["agreeing"]]
                        for g, v in summary["groups"].items() if "replay_agreement" in v])
        mine = sorted([[x[1], x[2], x[3]] for x in ref if COPY_MARK not in x[1]])
        recon_check = recon == mine
        if not recon_check:
            mismatches.append(f"{ref_engine} vs the reconcile stage's summary.json: {len(recon)} vs {len(mine)} groups")
    if args.replay_copies > 1:  # every copy of a group gives the original's numbers
        originals = {x[1]: x[2:] for x in ref if COPY_MARK not in x[1]}
        wrong = [x for x in ref if originals.get(x[1].split(COPY_MARK)[0]) != x[2:]]
        if wrong or len(ref) != len(originals) * args.replay_copies:
            mismatches.append(f"{len(wrong)} copied group(s) differ from their original, e.g. {wrong[:3]}")
    for m in mismatches:
        say(f"REPLAY MISMATCH: {m}")
    med = {e: r["median_s"] for e, r in results.items()}
    fig["replay"] = {
        "export": {k: ex[k] for k in ("rows", "as_of", "export_s", "series_s", "parquet_bytes", "parquet_files")},
        "engines": {e: {k: r[k] for k in ("median_s", "times_s", "warmup_s", "session_start_s", "maxrss",
                                          "tree_peak_rss", "cpu_s") if k in r}
                    for e, r in results.items()},
        "groups": len(ref), "compared": sum(x[2] for x in ref), "agreeing": sum(x[3] for x in ref),
        "identical": not mismatches, "matches_reconcile": recon_check, "mismatches": mismatches,
        "sail_over_duckdb": med["sail"] / med["duckdb"] if "sail" in med and "duckdb" in med else None,
        "classic_over_sail": med["classic"] / med["sail"] if "sail" in med and "classic" in med else None,
        "repeats": args.repeats, "copies": args.replay_copies,
    }


# ---------------------------------------------------------------------------------------------- figures


def _status(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def figures_table(fig: dict[str, Any]) -> str:
    sim, ing, rec, rep = (fig.get(k) or {} for k in ("simulate", "ingest", "reconcile", "replay"))
    lines = ["| figure | value | target | status |", "|---|---|---|---|"]

    def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
        lines.append(f"| {name} | {value} | {target} | {_status(ok) if target else ''} |")

    plan = sim.get("plan", {})
    msgs = sim.get("messages_stored")
    if sim:
        row("`mixed` scale (seed)", f"{sim['scale']} (seed {sim['seed']})")
        if sim.get("bulk_messages") is not None:
            row("of which bulk (vectorised) messages", f"{sim['bulk_messages']:,}")
        row("messages stored", f"{msgs:,}", f">= {TARGET_MESSAGES:,}", msgs >= TARGET_MESSAGES)
        row("simulate wall time", fmt_s(sim["wall_s"]), "< 600 s for 10 M (issue 4)",
            sim["wall_s"] < TARGET_SIMULATE_S and msgs >= TARGET_MESSAGES)
        row("simulate speed", f"{sim['messages_per_s']:,.0f} messages/s",
            f">= {TARGET_MESSAGES / TARGET_SIMULATE_S:,.0f} messages/s (10 M in 10 min)",
            sim["messages_per_s"] >= TARGET_MESSAGES / TARGET_SIMULATE_S)
        row("landing zone", f"{sim['landing_bytes']:,} bytes ({fmt_bytes(sim['landing_bytes'])}), "
            f"{fmt_bytes(sim['landing_bytes_on_disk'])} on disk (hard links once), {sim['landing_files']:,} files")
        row("simulate peak RSS", fmt_bytes(peak_rss(sim)), "< 8 GiB", peak_rss(sim) < TARGET_RSS)
    if ing:
        row("ingest wall time", fmt_s(ing["wall_s"]))
        row("ingest peak RSS", fmt_bytes(peak_rss(ing)), "< 8 GiB", peak_rss(ing) < TARGET_RSS)
        row("lake size", f"{fmt_bytes(ing['lake_bytes'])}, {ing['lake_files']:,} files")
    if rec:
        row("reconcile wall time", fmt_s(rec["wall_s"]))
        row("reconcile peak RSS", fmt_bytes(peak_rss(rec)), "< 8 GiB", peak_rss(rec) < TARGET_RSS)
    if sim and ing and rec:
        total = sim["wall_s"] + ing["wall_s"] + rec["wall_s"]
        ok = total < TARGET_RUN_S and msgs >= TARGET_MESSAGES
        row("whole run (simulate + ingest + reconcile)", fmt_s(total), "< 600 s at 10 M messages", ok)
        worst = max(peak_rss(sim), peak_rss(ing), peak_rss(rec))
        row("peak RSS of the run (worst stage)", fmt_bytes(worst), "< 8 GiB", worst < TARGET_RSS)
    if rep:
        ex = rep["export"]
        copies = f" ({rep['copies']} copies of the input)" if rep.get("copies", 1) > 1 else ""
        row("replay input (Parquet)", f"{ex['rows'].get('deliveries', 0):,} deliveries{copies}, {ex['rows'].get('series', 0):,} "
            f"series rows, {fmt_bytes(ex['parquet_bytes'])}; export {ex['export_s']} s, series {ex['series_s']} s")
        for e, r in rep["engines"].items():
            row(f"replay on {e} (median of {len(r['times_s'])})",
                f"{r['median_s']:.2f} s (runs {', '.join(f'{t:.2f}' for t in r['times_s'])}; warm-up "
                f"{r['warmup_s']:.2f} s; peak RSS {fmt_bytes(peak_rss(r))})")
        row("replay results identical (Sail, classic, DuckDB)",
            f"{rep['groups']} groups, {rep['compared']:,} snapshots compared, {rep['agreeing']:,} agreeing"
            + ("" if rep["matches_reconcile"] is None else
               f"; same as reconcile's summary.json: {rep['matches_reconcile']}"),
            "identical", rep["identical"])
        if rep.get("sail_over_duckdb") is not None:
            row("Sail / DuckDB (replay)", f"{rep['sail_over_duckdb']:.2f}", "<= 1.00", rep["sail_over_duckdb"] <= 1.0)
        if rep.get("classic_over_sail") is not None:
            row("classic / Sail (replay)", f"{rep['classic_over_sail']:.2f}", ">= 5.00",
                rep["classic_over_sail"] >= TARGET_CLASSIC_VS_SAIL)
    sc = fig.get("scaling") or {}
    if sc:
        for name, r in sc["runs"].items():
            walls = r.get("wall_s_all") or [r["wall_s"]]
            spread = f" (median of {len(walls)}: {', '.join(f'{w:.1f}' for w in walls)})" if len(walls) > 1 else ""
            if name.startswith("embedded"):  # one process: the driver hosts the engine
                row(f"scaling: ingest on embedded Sail, whole job on {name.split('-')[1]} CPU(s)",
                    f"{fmt_s(r['wall_s'])}{spread}; peak RSS {fmt_bytes(r['driver_peak_rss'])} (driver and engine)")
                continue
            engine, n, *warm = name.split("-")
            row(f"scaling: ingest on {engine} x {n} core(s){', warm' if warm else ''}",
                f"{fmt_s(r['wall_s'])}{spread}; driver peak RSS {fmt_bytes(r['driver_peak_rss'])}, engine peak RSS "
                f"{fmt_bytes(r['engine_peak_rss'])}", f"driver < {fmt_bytes(TARGET_DRIVER_RSS)}",
                r["driver_peak_rss"] < TARGET_DRIVER_RSS)
        for warm in ("", "_warm"):
            if f"cluster_speedup{warm}" not in sc:  # figures.json of an earlier version
                continue
            what = " (warm: the engine's second ingest)" if warm else " (cold: the engine's first ingest)"
            row(f"scaling: cluster 2 cores / 1 core{what}", f"{sc[f'cluster_speedup{warm}']:.2f}x",
                f">= {TARGET_SCALING}x", sc[f"cluster_speedup{warm}"] >= TARGET_SCALING)
            row(f"scaling: Sail 2 slots / 1 slot{what}", f"{sc[f'sail_speedup{warm}']:.2f}x", f">= {TARGET_SCALING}x",
                sc[f"sail_speedup{warm}"] >= TARGET_SCALING)
            row(f"scaling: cluster / Sail (2 cores each){what}", f"{sc[f'cluster_over_sail{warm}']:.2f}", "<= 3.00",
                sc[f"cluster_over_sail{warm}"] <= 3.0)
        if sc.get("embedded_speedup") is not None:
            row("scaling: embedded Sail (the default deployment), whole job on 2 CPUs / 1 CPU",
                f"{sc['embedded_speedup']:.2f}x",
                "")
        row("scaling: same rows on every engine", str(sc["identical_rows"]), "identical", sc["identical_rows"])
    m = fig.get("machine", {})
    if m:
        row("machine", f"{m['cores']} cores, {fmt_bytes(m['memory'])}; load average at start {m['load_start']}, "
            f"at end {m.get('load_end', '-')} (shared with other workloads)")
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    import psutil

    return {"cores": os.cpu_count(), "memory": psutil.virtual_memory().total,
            "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def cleanup(workdir: Path) -> None:
    for name in ("landing", "lake", "reports", "replay"):
        p = workdir / name
        if p.exists():
            files, logical, disk = tree_size(p)
            say(f"cleanup: {p}: {files} files, {logical:,} bytes ({fmt_bytes(disk)} on disk): deleting")
            shutil.rmtree(p)
    say(f"cleanup: kept {workdir / 'figures.md'} and {workdir / 'figures.json'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=TARGET_MESSAGES, help="messages to store (default 10,000,000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default="/tmp/rmq-bench")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    p.add_argument("--engines", default=",".join(ENGINES), help="replay engines (default sail,classic,duckdb)")
    p.add_argument("--repeats", type=int, default=3, help="timed replay runs per engine after one warm-up")
    p.add_argument("--scale", type=int, default=None, help="run this `mixed` scale (default: planned from --messages)")
    p.add_argument("--replay-copies", type=int, default=1,
                   help="replay input N times over (groups renamed per copy) to compare the engines on more rows")
    p.add_argument("--sail-repeats", type=int, default=3,
                   help="scaling stage: ingests per Sail configuration, alternated; the medians are compared")
    p.add_argument("--cleanup", action="store_true", help="delete landing zone, lake, reports and Parquet at the end")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child_main(args.child, args.child_args, args.child_out)
        return 0
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = set(stages) - set(STAGES)
    if bad:
        p.error(f"unknown stage(s) {sorted(bad)}; expected {STAGES}")
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if "replay" in stages and "duckdb" in args.engines:
        try:
            import duckdb  # noqa: F401
        except ImportError:
            print("duckdb is missing: it is a benchmark-only dependency, install it with\n"
                  "    .venv/bin/pip install duckdb", file=sys.stderr)
            return 2
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    fig_path = workdir / "figures.json"
    fig: dict[str, Any] = json.loads(fig_path.read_text()) if fig_path.exists() else {}
    if "simulate" in stages:  # a new data set: figures of the old one no longer apply
        fig = {}
    fig["machine"] = machine_info()
    fig["args"] = {"messages": args.messages, "seed": args.seed, "stages": stages, "engines": args.engines,
                   "repeats": args.repeats}
    say(f"pipeline benchmark: {args.messages:,} messages, seed {args.seed}, stages {stages}, workdir {workdir}; "
        f"{fig['machine']['cores']} cores, {fmt_bytes(fig['machine']['memory'])}, load {fig['machine']['load_start']}")

    def save() -> None:
        fig_path.write_text(json.dumps(fig, indent=2, default=str) + "\n")

    steps = {"simulate": lambda: stage_simulate(args, workdir, fig), "ingest": lambda: stage_ingest(args, workdir, fig),
             "reconcile": lambda: stage_reconcile(workdir, fig), "replay": lambda: stage_replay(args, workdir, fig),
             "scaling": lambda: stage_scaling(workdir, fig, args.sail_repeats)}
    for s in STAGES:
        if s in stages:
            steps[s]()
            save()
    fig["machine"]["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    save()
    table = figures_table(fig)
    (workdir / "figures.md").write_text(table + "\n")
    print("\nFigures (also in " + str(workdir / "figures.md") + "):\n")
    print(table, flush=True)
    if args.cleanup:
        cleanup(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
