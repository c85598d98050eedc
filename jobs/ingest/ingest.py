"""Ingest job: landing zone (spec §3) -> bronze and silver Delta tables (spec §8).

Reads: every snapshot folder under ``--landing`` (local path or ``s3://``).
Writes: bronze/files, bronze/quarantine, bronze/segments, bronze/trace_records, bronze/cq_files,
silver/consumer_offsets, silver/subscription_groups, silver/topic_configs, silver/delay_offsets, silver/queue_bounds,
silver/messages, silver/deliveries, and last bronze/ingest_runs (the ledger row that marks the run complete).

Incremental and idempotent: config rows are MERGEd on their keys; a commitlog segment already decoded to
its end is not read again and the growing last segment is read from where the previous run stopped
(bronze/segments); messages are inserted only where their key is new (the anti-join's scan pruned to the
brokers and byte ranges decoded), so a run that dies half-way and is run again writes the same rows once. Re-running on the same landing zone
changes no table. The run holds the lake's writer lease (jobs.lake.lease), so a second ingest waits for the first;
silver/deliveries is rebuilt whenever its inputs moved since the last completed run (jobs.lake.ledger), so a run killed
anywhere is repaired by the next one. Bad input is quarantined with its file and position and never stops the rest.

Plan, decode, load (issue 13): the driver lists the snapshots, parses their small JSON configs and plans the
commitlog work units; the engine's tasks decode them (jobs.ingest.decode_tasks, ``mapInArrow``: the local cores on Sail,
the executors on a cluster) into a staging folder below the lake; the loads are set operations on that output, one
commit per table per run. Only problems, segment progress and bronze/files rows come back to the driver, so its
memory does not grow with the data. Consume queues (queue bounds, entries that point at no record) are still read
by the driver, but only the files that changed since the broker's previous snapshot (jobs.ingest.cq_ledger).
:func:`run` is the only function that sees both the session and the table locations.

Each step has a module of its own and :func:`run` calls them in turn: jobs.ingest.plan (the snapshot folders to
take), snapshot_configs, decode (segment progress in segment_ledger), bounds (checked against known_records),
load, exports, late (folders that landed after a newer one), key_index and deliveries_update.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from contextlib import ExitStack
from typing import Any, Callable

from jobs import progress as progress_lines
from jobs.ingest import cq_ledger, landing, plan
from jobs.ingest import key_index as key_index_update
from jobs.ingest.bounds import extract_all_queue_bounds
from jobs.ingest.decode import Decoded, decode_commitlogs, seen_commitlog_paths
from jobs.ingest.deliveries_update import build_deliveries, deliveries_stale
from jobs.ingest.exports import load_exports
from jobs.ingest.extracted import Extracted, rows_folder
from jobs.ingest.late import lower_first_held
from jobs.ingest.load import CONFIG_TABLES, load_decoded, load_pop, load_small, load_trace
from jobs.ingest.plan import LATE_WINDOW_ENV
from jobs.ingest.segment_ledger import load_segments_state, save_segments_state
from jobs.ingest.snapshot_configs import extract_all_configs
from jobs.lake import _delta, _spark, layout, ledger, point_index, storage
from jobs.problems import UsageError
from schemas import (
    consumer_offsets,
    cq_files,
    delay_offsets,
    deliveries,
    files,
    key_index,
    messages,
    order_info,
    quarantine,
    pop_acks,
    pop_checkpoints,
    queue_bounds,
    segments,
    store_features,
    subscription_groups,
    topic_configs,
    trace_records,
)
from schemas import snapshots as snapshots_table

# The job's names, and the steps' names that callers and tests reach as ``ingest.<name>``.
__all__ = ["LATE_WINDOW_ENV", "LEDGER_TABLES", "Extracted", "UsageError", "build_deliveries", "check_inputs",
           "decode_commitlogs", "landed_anything", "require_marker_default", "rows_folder", "run", "settle_default"]

log = logging.getLogger(__name__)
UTC = dt.timezone.utc

# Every table ingest writes: the versions the ingest ledger records and a reconcile reads at.
LEDGER_TABLES = [files.TABLE, quarantine.TABLE, segments.TABLE, snapshots_table.TABLE, trace_records.TABLE,
                 cq_files.TABLE, consumer_offsets.TABLE,
                 subscription_groups.TABLE, topic_configs.TABLE, delay_offsets.TABLE, order_info.TABLE,
                 queue_bounds.TABLE, store_features.TABLE, messages.TABLE, key_index.TABLE, pop_checkpoints.TABLE,
                 pop_acks.TABLE, deliveries.TABLE]


class _Background:
    """A function run on a daemon thread (a signal still stops the run at once: the main thread waits in short
    slices, and the thread does not hold the process at exit)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn,), name="rmq-recon-background", daemon=True).start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again by result()
            self._error = exc
        finally:
            self._done.set()

    def wait_for(self, event: threading.Event) -> None:
        """Until ``event`` is set, or the function has ended (its error raised here)."""
        while not event.wait(0.2):
            if self._done.is_set():
                self.result()
                return

    def settled(self) -> None:
        """Until the function has ended, its outcome left to :meth:`result` (a run that stops on another error
        waits here, so that no thread still writes once it has let go of the lake)."""
        while not self._done.wait(0.2):
            pass

    def result(self) -> Any:
        self.settled()
        if self._error is not None:
            raise self._error
        return self._value


def _say_missing(missing: dict[str, list[tuple[str, str]]], say: Callable[[str], None]) -> None:
    """One line per snapshot that lacks files spec §3 expects (reported, never fatal; bronze/snapshots.missing)."""
    for folder, m in missing.items():
        if m:
            say(f"ingest: {folder} lacks " + "; ".join(f"{rel} ({what})" for rel, what in m))


def _new_layout_problems(lake: str, ex: Extracted) -> bool:
    """Whether a path off the landing layout is not quarantined yet (a no-op run must still record it)."""
    paths = sorted({p.source_path for _, _, _, p in ex.problems})
    if not paths:
        return False
    if not _delta.exists(lake, quarantine.TABLE):
        return True
    got = _delta.read_pandas_columns(lake, quarantine.TABLE, ["source_path"], filters=[("source_path", "in", paths)])
    return bool(set(paths) - set(got["source_path"]))


def _since(t0: float) -> str:
    """Seconds since ``t0`` and the process's peak RSS so far (the embedded engine included): for progress lines."""
    import resource

    return f"{time.time() - t0:.1f} s, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"


def check_inputs(landing_uri: str, lake: str) -> None:
    """Refuse, before any engine starts, a landing zone that is not there and a lake that is a file (spec §6)."""
    if not storage.is_s3(lake) and os.path.isfile(lake):
        raise UsageError(f"--lake {lake}: is a file; give a folder (created if missing) or an s3:// URI")
    if not storage.is_s3(landing_uri) and os.path.isfile(landing_uri):
        raise UsageError(f"--landing {landing_uri}: is a file; give the landing zone's root folder or s3:// URI")
    if not storage.exists(landing_uri):
        raise UsageError(f"--landing {landing_uri}: no such folder or prefix; give the landing zone's root (the sync "
                         "job's destination)")
    if landing.looks_like_a_lake(landing_uri):
        raise UsageError(f"--landing {landing_uri}: is a lake (bronze/, silver/ or gold/ Delta tables), not a landing "
                         "zone; did you swap --landing and --lake?")
    if storage.exists(lake) and landing.looks_like_a_landing_zone(lake):
        raise UsageError(f"--lake {lake}: is a landing zone (cluster=<c>/... snapshot folders), not a lake; did you "
                         "swap --landing and --lake?")


def settle_default() -> float:
    """Seconds a snapshot folder without the marker must stay unchanged before it is taken (RMQ_RECON_SNAPSHOT_SETTLE_S)."""
    return float(os.environ.get("RMQ_RECON_SNAPSHOT_SETTLE_S", "0"))


def landed_anything(summary: dict[str, Any]) -> bool:
    """Whether a run's summary says it moved a lake table (a scheduled run that found nothing new did not: the
    snapshot DAG then publishes no Asset event, so the reconcile DAG is not started for nothing)."""
    versions = summary.get("table_versions") or {}
    return bool(versions.get("after")) and versions.get("before") != versions.get("after")


def require_marker_default() -> bool:
    """Take only snapshot folders with the sync job's marker (:func:`jobs.lake.engine_config.require_marker_default`)."""
    from jobs.lake import engine_config

    return engine_config.require_marker_default()


def run(landing_uri: str, lake: str, *, snapshot_glob: str | None = None,
        progress: Callable[[str], None] | None = None, now: dt.datetime | None = None,
        settle_s: float | None = None, require_marker: bool | None = None, retake: bool = False) -> dict[str, Any]:
    """Ingest the new snapshots of ``landing_uri`` into ``lake``. Idempotent: a second run changes nothing.

    A snapshot folder is taken once it is complete (``Snapshot.completed_by``) and its listing differs from the
    one the snapshot ledger (bronze/snapshots) recorded: new folders, and folders whose files arrived late. With
    nothing to take and nothing to repair, the run costs a listing and a few ledger reads: no engine starts.

    Args:
        landing_uri: the landing zone root (local folder or ``s3://bucket/prefix``).
        lake: the lake root (local folder or ``s3://``).
        snapshot_glob: only snapshot folders matching this fnmatch pattern (relative path), for backfills.
        progress: called with one line per step (default: the module logger).
        now: the ingestion time recorded in bronze rows (default: the wall clock, for provenance only).
        settle_s: a folder without the marker is complete when no file changed for this long (default
            :func:`settle_default`).
        require_marker: take only folders with the marker (default :func:`require_marker_default`).
        retake: take every complete folder again, whatever the snapshot ledger says (an investigation; the loads
            are idempotent, so this changes nothing unless the landing zone did).

    Returns:
        Counts of snapshots, files, rows new or changed per table, quarantined problems and seconds taken.
    """
    from jobs.lake import failpoints, lease

    say = progress_lines.reporter(progress, log)
    t0 = time.time()
    started = dt.datetime.now(UTC).replace(microsecond=0)
    now = now or started
    check_inputs(landing_uri, lake)
    settle_s = settle_default() if settle_s is None else settle_s
    require_marker = require_marker_default() if require_marker is None else require_marker
    listing = plan.list_snapshots(landing_uri, lake, snapshot_glob=snapshot_glob, retake=retake)
    ex = Extracted()
    for p in listing.layout_problems:
        ex.problem(listing.problem_cluster.get(p.source_path, ""), "", None, p)
    # One writer at a time (jobs.lake.lease); everything that reads the lake's state is read under the lease.
    with lease.hold(lake, "writer", purpose=f"ingest of {landing_uri}", say=say) as held, ExitStack() as stack:
        todo = plan.take(listing, ledger.taken_snapshots(lake), landing_uri, settle_s=settle_s,
                         require_marker=require_marker, retake=retake, say=say)
        # The export manifests are read on a thread while the engine starts, when there are snapshots to take (it
        # was 0.4 s of bench_export's 264 folders before the engine started, one core idle)
        manifests = _Background(lambda: landing.read_manifests(
            todo.snaps, lambda snap, p: ex.problem(snap.cluster, snap.broker, snap.ts, p)))
        spark = stack.enter_context(_spark.session()) if todo.snaps else None
        snaps = todo.snaps = manifests.result()
        todo.late = [s for s in todo.late if any(s is x for x in snaps)]
        previous = ledger.last_ingest(lake)
        if (not snaps and previous is not None and not _new_layout_problems(lake, ex)
                and ledger.versions(lake, LEDGER_TABLES) == previous["table_versions"]):
            # Nothing new and the last run completed: the listing was the whole cost (and the engine's start, when
            # every new folder's manifest was unusable).
            return _unchanged(previous, landing_uri, lake, listing, todo, t0)
        # The config files are parsed on a thread while the commitlogs are decoded (it was a second of the 264
        # snapshots of bench_export's exports, the engine's second core idle); their rows and problems go where they
        # would have come had they been extracted first.
        configs_at, cx = ex.mark(), Extracted()
        configs_read = _Background(lambda: extract_all_configs(snaps, landing_uri, cx, now, say))
        if spark is None:  # (nothing new to take: a killed run's leftovers, or layout problems, to record)
            spark = stack.enter_context(_spark.session())
        _clear_killed_run(spark, lake, say)
        state = load_segments_state(lake)
        seen_paths = seen_commitlog_paths(lake, snaps)
        missing = {snap.folder: landing.missing_files(snap) for snap in snaps}
        _say_missing(missing, say)
        t_decode = time.time()
        staged = decode_commitlogs(spark, lake, snaps, state, ex, now, seen_paths)
        configs_read.result()
        ex.splice(configs_at, cx)
        say(f"ingest: decoded {staged.messages} records and {staged.trace} trace records in "
            f"{_since(t_decode)}")
        cqs = cq_ledger.CQLedger.load(lake)
        indexed: dict[str, int] = {}
        warming: list[_Background] = []

        def index_keys() -> None:
            """silver/key_index brought up to date with silver/messages (before silver/deliveries, whose update looks
            traced keys up through it), while the queue bounds are still read: the engine's work beside the
            driver's. The late folders' lowering below rewrites no indexed column. Then its segments for the point
            look-ups (the reconcile's and the deliveries update's) are built on a thread, beside the steps up to
            that update, which waits for them only where it looks keys up (a first build looks none up)."""
            if key_index_update.stale(lake, previous):
                indexed[key_index.TABLE.qualified] = key_index_update.update(
                    spark, lake, previous["table_versions"] if previous else None, say)
                say(f"ingest: silver/key_index up to date ({_since(t_decode)} since the decode began)")
                failpoints.hit("ingest.after_key_index")
            warming.append(_Background(lambda: point_index.warm(
                lake, max_merge_rows=point_index.INGEST_MERGE_ROWS, say=lambda line: say(f"ingest: {line}"))))
            stack.callback(warming[0].settled)  # no thread writes once the run lets go of the lake

        def ready() -> Any:
            """Once the key index's segments are built (their rows written; None: not started)."""
            return warming[0].result() if warming else None

        counts: dict[str, int] = {}

        def beside_bounds() -> None:
            """The engine's work that needs no queue bounds, while they are still read: the key index, the late
            folders' lowering, the config files' tables, then silver/deliveries, which is derived from them (trace
            records, messages, broadcast clients). Run after the bounds, it left the engine idle for 4 s of
            bench_export's ingest while the driver checked the queue files."""
            index_keys()
            if todo.late:
                _lower_late(spark, lake, todo.late, say)
            failpoints.hit("ingest.after_trace")
            counts.update(load_small(spark, lake, ex, now, CONFIG_TABLES, problems=False))
            failpoints.hit("ingest.after_configs")
            # Derived tables are rebuilt from what the lake holds whenever their inputs moved since the last completed
            # run, not only when this run loaded something: rows a killed run loaded are taken in here.
            if deliveries_stale(lake, previous):
                say("ingest: bringing silver/deliveries up to date")
                counts[deliveries.TABLE.qualified] = build_deliveries(
                    spark, lake, previous["table_versions"] if previous else None, index_ready=ready)
                say(f"ingest: silver/deliveries up to date ({_since(t_decode)} since the decode began)")
                failpoints.hit("ingest.after_deliveries")

        loaded = _load_records_beside_bounds(spark, lake, landing_uri, snaps, staged, cqs, ex, now, retake, say,
                                             t_decode, beside_bounds)
        counts.update(indexed)
        counts.update(load_small(spark, lake, ex, now, (files.TABLE, queue_bounds.TABLE)))
        counts[cq_files.TABLE.qualified] = cq_ledger.save(spark, lake, cqs, rows_folder(lake))
        say(f"ingest: small tables loaded ({_since(t_decode)} since the decode began)")
        counts[segments.TABLE.qualified] = save_segments_state(spark, lake, state, now)
        storage.delete_tree(rows_folder(lake))
        failpoints.hit("ingest.after_segments")
        if written := ready():
            say(f"ingest: silver/key_index segments up to date, {written:,} rows written ({_since(t_decode)} since "
                f"the decode began)")
        # Files the engine appended (a rerun's anti-join, an export beside a store copy, a killed run's) hold every
        # broker: one file per broker, so that look-ups by position skip the other brokers' files (issue 39;
        # maintenance merges them). The usual load wrote a file per broker already (jobs.ingest.load).
        if _delta.table_format() == "delta" and _delta.exists(lake, messages.TABLE):
            split = layout.split_added(lake, messages.TABLE, (previous or {}).get("table_versions", {}).get(
                messages.TABLE.qualified), lambda line: say(f"ingest: {line}"))
            if split:
                failpoints.hit("ingest.after_layout")
        counts.update(loaded)
        rows = _snapshot_rows(todo, missing, now)
        counts[snapshots_table.TABLE.qualified] = ledger.record_snapshots(spark, lake, rows)
        after = ledger.versions(lake, LEDGER_TABLES)
        held.check()
        before = previous["table_versions"] if previous else {}
        run_id = _record_run(spark, lake, landing_uri, previous, before, after, snaps, ex, counts, started)
    summary = {
        # the ledger row of this run (the previous one when nothing changed) and the versions it moved
        "run_id": run_id,
        "table_versions": {"before": before, "after": after},
        "landing": landing_uri,
        "lake": lake,
        "snapshots": len(snaps),
        "snapshots_seen": listing.seen,
        "snapshots_waiting": todo.waiting,
        "files": sum(len(s.files) for s in snaps),
        "changed_rows": counts,
        "quarantined": len(ex.problems),
        "missing_files": {folder: [rel for rel, _ in m] for folder, m in missing.items() if m},
        "seconds": round(time.time() - t0, 2),
    }
    say(f"ingest: done in {summary['seconds']} s; {len(ex.problems)} problem(s) quarantined")
    return summary


def _unchanged(previous: dict[str, Any], landing_uri: str, lake: str, listing: plan.Listing, todo: plan.Plan,
               t0: float) -> dict[str, Any]:
    """The summary of a run that found nothing to do: the last completed run's ledger row and versions."""
    return {"run_id": previous["run_id"], "landing": landing_uri, "lake": lake, "snapshots": 0,
            "snapshots_seen": listing.seen, "snapshots_waiting": todo.waiting, "files": 0, "changed_rows": {},
            "table_versions": {"before": previous["table_versions"], "after": previous["table_versions"]},
            "quarantined": 0, "seconds": round(time.time() - t0, 2)}


def _clear_killed_run(spark: Any, lake: str, say: Callable[[str], None]) -> None:
    """Finish the Parquet rewrites and remove the staged rows that a killed run left."""
    recovered = _delta.recover_parquet_staging(spark, lake, LEDGER_TABLES)
    if recovered:
        say(f"ingest: finished the rewrites of {', '.join(recovered)} that a killed run left")
    storage.delete_tree(rows_folder(lake))  # what a killed run left


def _load_records_beside_bounds(spark: Any, lake: str, landing_uri: str, snaps: list[landing.Snapshot],
                                staged: Decoded, cqs: cq_ledger.CQLedger, ex: Extracted, now: dt.datetime,
                                retake: bool, say: Callable[[str], None], t_decode: float,
                                then: Callable[[], None] = lambda: None) -> dict[str, int]:
    """Load the staged messages, the tabular exports and the trace records while the queue bounds are read beside
    them, then run ``then`` (more of the engine's work: beside the bounds while they are still read); the bounds'
    rows and problems go into ``ex`` where they would have come had they been read first (the CQ ledger ``cqs`` is
    updated in place). Returns the rows loaded into silver/messages and bronze/trace_records.
    """
    from jobs.lake import failpoints

    # The queue bounds are the driver's work (consume queues read and checked), the loads the engine's: they
    # run side by side once the bounds have read what silver/messages held before this run.
    mark, qx = ex.mark(), Extracted()
    lake_read = threading.Event()
    bounds = _Background(lambda: extract_all_queue_bounds(snaps, landing_uri, lake, staged, qx, now, cqs,
                                                          read_all=retake, lake_read=lake_read.set))
    bounds.wait_for(lake_read)
    n_messages = load_decoded(spark, lake, staged, lambda line: say(f"ingest: {line}"))
    say(f"ingest: silver/messages loaded ({_since(t_decode)} since the decode began)")
    failpoints.hit("ingest.after_snapshot")
    n_messages += load_exports(spark, lake, snaps, ex)
    n_trace = load_trace(spark, lake, staged)
    say(f"ingest: bronze/trace_records loaded ({_since(t_decode)} since the decode began)")
    n_pop = load_pop(spark, lake, staged)
    if n_pop:
        say(f"ingest: silver/pop_checkpoints, silver/pop_acks loaded ({_since(t_decode)} since the decode began)")
    then()
    reads = bounds.result()
    ex.splice(mark, qx)
    say(f"ingest: queue bounds of {len(snaps)} snapshot(s) ({reads.read} consume queue file(s) read, "
        f"{reads.skipped} unchanged not read; beside the loads; {_since(t_decode)} since the decode began)")
    storage.delete_tree(staged.staging)
    return {messages.TABLE.qualified: n_messages, trace_records.TABLE.qualified: n_trace, **n_pop}


def _lower_late(spark: Any, lake: str, late: list[landing.Snapshot], say: Callable[[str], None]) -> None:
    """:func:`jobs.ingest.late.lower_first_held` of the folders that landed late, and a line that says so."""
    lowered = lower_first_held(spark, lake, late)
    say(f"ingest: {len(late)} snapshot folder(s) older than their broker's newest taken "
        f"({', '.join(s.folder for s in late[:3])}{', ...' if len(late) > 3 else ''}): "
        f"{lowered} record(s) now first held at their time")


def _snapshot_rows(todo: plan.Plan, missing: dict[str, list[tuple[str, str]]], now: dt.datetime
                   ) -> list[dict[str, Any]]:
    """The snapshot ledger's rows (bronze/snapshots) of the folders the run took."""
    return [{"cluster": sn.cluster, "broker": sn.broker, "snapshot_ts": sn.ts, "folder": sn.folder,
             "files": len(sn.files), "bytes": sum(f.size for f in sn.files), "listing_digest": sn.listing_digest(),
             "completed_by": todo.completed_by[sn.folder], "missing": ", ".join(rel for rel, _ in missing[sn.folder]),
             "ingested_at": now} for sn in todo.snaps]


def _record_run(spark: Any, lake: str, landing_uri: str, previous: dict[str, Any] | None, before: dict[str, int],
                after: dict[str, int], snaps: list[landing.Snapshot], ex: Extracted, counts: dict[str, int],
                started: dt.datetime) -> str | None:
    """Write the run's ingest ledger row (the last write: it marks the run complete) unless no table moved since
    the ``previous`` one (``before``: its versions); the run id of the row that now stands for the lake's state."""
    run_id = previous["run_id"] if previous else None
    if previous is None or after != before:
        run_id = ledger.new_run_id("ingest", started)
        ledger.record_ingest(spark, lake, {
            "run_id": run_id, "started_at": started,
            "completed_at": dt.datetime.now(UTC).replace(microsecond=0), "landing": landing_uri,
            "snapshots": len(snaps), "files": sum(len(s.files) for s in snaps), "quarantined": len(ex.problems),
            "changed_rows": {k: int(v) for k, v in counts.items()}, "table_versions": after})
    return run_id
