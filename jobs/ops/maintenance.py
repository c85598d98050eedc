"""Lake upkeep: compact the small files every run leaves and vacuum the files no reader needs any more.

Reads and writes: every Delta table of the lake (``schemas.ALL_TABLES``), and one row in bronze/ingest_runs.

Why: every ingest appends a few files per table (a MERGE, a batch of 100,000 records) and every reconcile rewrites
its gold rows, so after days a table is thousands of small files: reads get slower with every hour. Compaction
(delta-rs ``optimize.compact``) rewrites them into a few large files; vacuum (delta-rs ``vacuum``) then deletes the
files only old versions still name. silver/messages is not bin-packed but laid out per broker (``jobs.lake.layout``:
each ingest file split into one sorted file per broker, a broker's small files merged), so that look-ups by
commitlog position read their broker's files only. Before both, gold retention (``jobs.ops.retention``) deletes the
gold rows of reconcile runs and validations older than ``RMQ_RECON_GOLD_RETENTION_DAYS`` (default 7) beyond the 30
newest: every run writes a full set, so without it gold grows by millions of rows a day.

Safety, by construction:

* **Alone on the lake.** The run holds the ``writer``, ``gold``, ``quality`` and ``alerts`` leases
  (``jobs.lake.lease``), so no ingest, reconcile, validation or alert writes beside it.
* **Vacuum never deletes what a reader may still read.** Reconcile reads silver at the versions of the newest
  completed ingest (``bronze/ingest_runs``); silver validation reads the newest real ingest's increment; the
  dashboard, alerts and gold validation read gold at the versions of the recent ``gold/reconcile_runs`` rows (the
  dashboard's trends: the 30 newest). Vacuum keeps every file removed less than the retention setting ago, and, at
  any age, every file of the versions those rows name and of the current version (delta-rs ``keep_versions``): the
  retention a ledger row needs is exactly its versions, not every version since.
* **A no-op ingest stays a no-op.** Compaction and vacuum make new table versions: the run records them in a ledger
  row of its own (``compact-<time>-<id>``, no rows added: its increment is empty), so the next ingest finds the
  versions it expects and neither starts an engine nor rebuilds silver/deliveries. A lake whose tables moved since
  the last completed ingest (an ingest died half way) keeps its bronze and silver tables as they are: the next ingest
  repairs them first (and a later maintenance compacts them).
* **Idempotent.** A rerun finds nothing to compact (delta-rs skips single-file bins) and nothing to delete, so it
  makes no commit and no ledger row.

Parquet lakes (``RMQ_RECON_FORMAT=parquet``) are skipped with one log line: their tables have no versions to
vacuum, and every Parquet write that is not an append already rewrites the table through the staged rewrite.
"""
from __future__ import annotations

import datetime as dt
import logging
import math
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Callable

from jobs import progress as progress_lines
from jobs.lake import _delta, point_index, storage
from jobs.problems import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from schemas._table import Table

log = logging.getLogger(__name__)
UTC = dt.timezone.utc
RETENTION_H_DEFAULT = 168
# gold/reconcile_runs rows whose gold versions stay readable: the dashboard's trend window
# (jobs.ops.dashboard.RECENT_RUNS)
KEEP_RECONCILE_RUNS = 30
LEASES = ("writer", "gold", "quality", "alerts")


def retention_default() -> float:
    """Hours a removed file is kept at least (``RMQ_RECON_VACUUM_RETENTION_H``, default 168: a week)."""
    import os

    return float(os.environ.get("RMQ_RECON_VACUUM_RETENTION_H", RETENTION_H_DEFAULT))


# ------------------------------------------------------------------------------------------------ extract


def protected_versions(lake: str, *, keep_runs: int = KEEP_RECONCILE_RUNS) -> dict[str, set[int]]:
    """Per table, the versions a reader may still read: those the ledgers' newest rows name.

    bronze/ingest_runs: the newest row (what a reconcile reads) and the newest ingest that added rows (what the
    silver validation of that run reads, maybe still running). gold/reconcile_runs: the ``keep_runs`` newest rows by
    completion and by as-of time (what the dashboard, alerts and gold validation read).
    """
    from jobs.lake import ledger
    from schemas import ingest_runs, reconcile_runs

    out: dict[str, set[int]] = {}

    def add(versions: dict[str, int]) -> None:
        for name, v in versions.items():
            out.setdefault(name, set()).add(int(v))

    if _delta.exists(lake, ingest_runs.TABLE):
        df = _delta.read_pandas_columns(lake, ingest_runs.TABLE, ["run_id", "completed_at", "table_versions"])
        df = df.sort_values(["completed_at", "run_id"], kind="mergesort")
        rows = list(df.itertuples(index=False))
        if rows:
            add(ledger._as_dict(rows[-1].table_versions))  # noqa: SLF001
        real = [r for r in rows if not ledger.is_maintenance(r.run_id)]
        if real:
            add(ledger._as_dict(real[-1].table_versions))  # noqa: SLF001
    if _delta.exists(lake, reconcile_runs.TABLE):
        df = _delta.read_pandas_columns(lake, reconcile_runs.TABLE,
                                        ["run_id", "as_of", "completed_at", "table_versions"])
        # the newest by completion (what was just written) and by as-of (the dashboard's trends; a backfill's)
        for order in (["completed_at", "as_of", "run_id"], ["as_of", "completed_at", "run_id"]):
            for r in df.sort_values(order, kind="mergesort").tail(keep_runs).itertuples(index=False):
                add(ledger._as_dict(r.table_versions))  # noqa: SLF001
    return out


# ------------------------------------------------------------------------------------------------ load


def compact(lake: str, table: "Table") -> dict[str, int]:
    """Rewrite the table's small files into large ones (no commit when there is nothing to do)."""
    before = len(_delta.delta_table(lake, table).file_uris())
    metrics = _delta.delta_table(lake, table).optimize.compact()
    return {"files_before": before, "files_after": before - int(metrics["numFilesRemoved"])
            + int(metrics["numFilesAdded"]), "files_removed": int(metrics["numFilesRemoved"]),
            "files_added": int(metrics["numFilesAdded"])}


def vacuum(lake: str, table: "Table", retention_h: float, keep: set[int]) -> int:
    """Delete the files removed longer ago than ``retention_h``, except those versions ``keep`` name; returns how many.

    A dry run first: delta-rs lists a removed file again until a checkpoint drops its tombstone, even when an earlier
    vacuum deleted it, and a vacuum commits twice (VACUUM START, END). Only when a listed file still exists does the
    real vacuum run, so a rerun makes no commit.
    """
    dt_ = _delta.delta_table(lake, table)
    kw = {"retention_hours": math.ceil(retention_h), "enforce_retention_duration": False,
          "keep_versions": sorted(keep | {dt_.version()})}
    stale = dt_.vacuum(dry_run=True, **kw)
    if not stale:
        return 0
    root = table.path(lake)
    present = {storage.relative(uri, root) for uri in storage.list_keys(root)}
    there = [f for f in stale if f in present]
    if not there:
        return 0
    dt_.vacuum(dry_run=False, **kw)
    return len(there)


def record(lake: str, run_id: str, started: dt.datetime, completed: dt.datetime, versions: dict[str, int],
           compacted: dict[str, int]) -> None:
    """The maintenance row of the ingest ledger (an append with delta-rs: no engine needed for one row)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from schemas import ingest_runs

    row = {"run_id": run_id, "started_at": started, "completed_at": completed, "landing": None, "snapshots": 0,
           "files": 0, "quarantined": 0, "changed_rows": sorted(compacted.items()),
           "table_versions": sorted(versions.items())}
    path = ingest_runs.TABLE.path(lake)
    write_deltalake(path, pa.Table.from_pylist([row], schema=_delta._arrow_schema(ingest_runs.TABLE)),  # noqa: SLF001
                    mode="append", storage_options=_delta.storage_options() if storage.is_s3(path) else None)


def _vacuum_all(lake: str, tables: list["Table"], infos: dict[str, dict[str, Any]], protected: dict[str, set[int]],
                setting: float, say: Callable[[str], None]) -> None:
    for t in tables:
        info = infos[t.qualified]
        info["kept_versions"] = sorted(protected.get(t.qualified, set()))
        info["vacuumed"] = vacuum(lake, t, setting, protected.get(t.qualified, set()))
        if info["files_removed"] or info["vacuumed"]:
            say(f"maintain: {t.qualified}: {info['files_before']} -> {info['files_after']} files, "
                f"{info['vacuumed']} deleted (kept: removed less than {setting:g} h ago, and the files of versions "
                f"{info['kept_versions'] or 'none'} the ledgers name)")


# ------------------------------------------------------------------------------------------------- run


def run(lake: str, *, retention_h: float | None = None, keep_runs: int = KEEP_RECONCILE_RUNS,
        gold_retention_days: float | None = None, now: dt.datetime | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Prune old gold rows, then compact and vacuum every Delta table of ``lake``, keeping what the ledgers' newest
    rows read.

    Idempotent: a rerun makes no commit and no ledger row. Holds the lake's writer, gold, quality and alerts leases.

    Args:
        lake: the lake root (local folder or ``s3://``).
        retention_h: hours a removed file is kept at least (default :func:`retention_default`, 168); the files of
            the versions the ledgers name are kept whatever their age.
        keep_runs: how many of the newest reconcile runs keep their gold versions readable (and their gold rows).
        gold_retention_days: a reconcile run or validation older than this and outside the newest ``keep_runs``
            loses its gold rows (``jobs.ops.retention``; default ``RMQ_RECON_GOLD_RETENTION_DAYS`` or 7).
        now: the time retention counts back from (default: the clock).
        progress: called with one line per table (default: the module logger).

    Returns:
        ``run_id`` (the ledger row written, or None), per table ``files_before``/``files_after`` of the compaction,
        ``vacuumed`` files and the ``kept_versions`` the ledgers name, ``skipped`` tables with the reason,
        ``pruned`` (the reconcile runs and validations whose gold rows went, rows deleted per table) and ``seconds``.

    Raises:
        UsageError: the lake does not exist.
    """
    import schemas
    from jobs.ingest import ingest
    from jobs.lake import lease, ledger
    from jobs.lake import layout
    from jobs.ops import dashboard, retention
    from schemas import ingest_runs

    say = progress_lines.reporter(progress, log)
    t0 = time.time()
    setting = retention_default() if retention_h is None else float(retention_h)
    if not storage.is_s3(lake) and not storage.exists(lake):
        raise UsageError(f"--lake {lake}: no such lake; give the folder or s3:// URI that `rmq-recon ingest --lake` "
                         "wrote")
    if retention_h is not None and retention_h < 0:
        raise UsageError(f"--retention-h {retention_h}: give 0 or more hours")
    if gold_retention_days is not None and gold_retention_days < 0:
        raise UsageError(f"--gold-retention-days {gold_retention_days:g}: give 0 or more days")
    out: dict[str, Any] = {"lake": lake, "run_id": None, "tables": {}, "skipped": {}, "retention_setting_h": setting}
    if _delta.table_format() != "delta":
        say(f"maintain: {lake} is a Parquet lake: skipped (no versions to vacuum; Parquet rewrites already replace "
            "the table's files)")
        out["skipped"] = {"*": "parquet lake"}
        out["seconds"] = round(time.time() - t0, 2)
        return out
    started = dt.datetime.now(UTC).replace(microsecond=0)
    with ExitStack() as stack:
        held = [stack.enter_context(lease.hold(lake, name, purpose="maintenance (compact, vacuum)", say=say))
                for name in LEASES]
        # first, so the compaction below rewrites what is left
        out["pruned"] = retention.prune(lake, days=gold_retention_days, keep_runs=keep_runs,
                                        keep_validations=dashboard.RECENT_VALIDATIONS, now=now, say=say)
        previous = ledger.last_ingest(lake)
        ingest_tables = {t.qualified for t in ingest.LEDGER_TABLES}
        consistent = previous is not None and ledger.versions(lake, ingest.LEDGER_TABLES) == previous["table_versions"]
        if not consistent:
            say("maintain: bronze and silver tables moved since the last completed ingest (an ingest died half way, "
                "or none completed): they are left as they are; run `rmq-recon ingest` (it repairs them), then "
                "maintain again")
        # the ingest ledger last, after the row this run adds to it (else each rerun would compact that row again)
        tables = [t for t in schemas.ALL_TABLES if t is not ingest_runs.TABLE and _delta.exists(lake, t)]
        for t in tables:
            if t.qualified in ingest_tables and not consistent:
                out["skipped"][t.qualified] = "moved since the last completed ingest"
                continue
            if layout.applies(t):
                out["tables"][t.qualified] = layout.arrange(lake, t, lambda line: say(f"maintain: {line}"))
            else:
                out["tables"][t.qualified] = compact(lake, t)
        protected = protected_versions(lake, keep_runs=keep_runs)
        _vacuum_all(lake, [t for t in tables if t.qualified in out["tables"]], out["tables"], protected, setting,
                    say)
        # the point look-ups' segments: a compaction adds no rows, so this only carries the chain to its version
        out["lookup_rows_written"] = point_index.warm(lake, say=lambda line: say(f"maintain: {line}"))
        if consistent:
            after = ledger.versions(lake, ingest.LEDGER_TABLES)
            if after != previous["table_versions"]:
                for h in held:
                    h.check()
                # strictly after the ingest it follows (the ledger orders rows by completed_at, then run_id)
                while dt.datetime.now(UTC).replace(microsecond=0) <= previous["completed_at"]:
                    time.sleep(0.05)
                completed = dt.datetime.now(UTC).replace(microsecond=0)
                out["run_id"] = ledger.new_run_id(ledger.MAINTENANCE_KIND, started)
                record(lake, out["run_id"], started, completed, after,
                       {name: info["files_removed"] for name, info in out["tables"].items()
                        if name in ingest_tables and info["files_removed"]})
        if _delta.exists(lake, ingest_runs.TABLE):
            out["tables"][ingest_runs.TABLE.qualified] = compact(lake, ingest_runs.TABLE)
            _vacuum_all(lake, [ingest_runs.TABLE], out["tables"], {}, setting, say)
    out["files_before"] = sum(i["files_before"] for i in out["tables"].values())
    out["files_after"] = sum(i["files_after"] for i in out["tables"].values())
    out["vacuumed"] = sum(i.get("vacuumed", 0) for i in out["tables"].values())
    out["seconds"] = round(time.time() - t0, 2)
    say(f"maintain: {out['files_before']} -> {out['files_after']} live files, {out['vacuumed']} deleted in "
        f"{out['seconds']} s" + (f"; ledger row {out['run_id']}" if out["run_id"] else ""))
    return out
