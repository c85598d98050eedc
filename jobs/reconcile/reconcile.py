"""Reconcile job: silver tables -> gold reports (spec §4, §5, §8).

Reads: silver/consumer_offsets, silver/queue_bounds, silver/messages, silver/deliveries,
silver/subscription_groups (and bronze/files for the original consumerOffset.json of each broker).
Writes: gold/duplicated_ranges, gold/unconsumed_ranges, gold/offset_corrections, gold/dlq_candidates,
gold/consumer_status (rows tagged with ``run_id``) and the report folder ``<reports>/<run_id>/``; for the
dashboard (``jobs.ops.dashboard``), gold/status_samples and gold/audit_hours (bounded per queue, not §5 reports).

Idempotent per run: the gold rows of ``run_id`` are replaced as a whole and the report files are
rewritten with the same content, so re-running a run (same as-of, same run id) changes nothing.
Consistent and atomic: the run reads every silver table as the last completed ingest left it (``jobs.lake.ledger``),
holds the lake's gold lease, publishes its report folder all at once, and records its ledger row
(gold/reconcile_runs) last.
The run id defaults to one derived from the as-of time, which itself defaults to the newest snapshot
in the lake: the job never reads the wall clock to decide what to report.
"""
from __future__ import annotations

import datetime as dt
import logging
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from jobs import progress as progress_lines
from jobs.lake import _delta, failpoints, lookups, point_index, storage
from jobs.reconcile import offset_state, reports, verdict
from jobs.rules import snapshots
from jobs.problems import UsageError
from jobs.formats import names
from jobs.formats import topics
from jobs.formats.topics import DLQ_PREFIX
from schemas import (
    consumer_offsets,
    consumer_status,
    coverage,
    deliveries,
    dlq_candidates,
    duplicated_ranges,
    files,
    key_index,
    messages,
    offset_corrections,
    pop_acks,
    pop_checkpoints,
    queue_bounds,
    store_features,
    subscription_groups,
    unconsumed_ranges,
)
from schemas import audit_hours as audit_hours_schema
from schemas import status_samples as status_samples_schema

if TYPE_CHECKING:
    from jobs.reconcile.horizon import SnapshotFolders

log = logging.getLogger(__name__)
UTC = dt.timezone.utc
REPORT_MODULES = {
    "duplicated_ranges": duplicated_ranges,
    "unconsumed_ranges": unconsumed_ranges,
    "offset_corrections": offset_corrections,
    "dlq_candidates": dlq_candidates,
    "consumer_status": consumer_status,
    "coverage": coverage,
}
# What the dashboard draws beside the reports: gold tables of their own, no report file.
DASHBOARD_TABLES = {"status_samples": status_samples_schema.TABLE, "audit_hours": audit_hours_schema.TABLE}
# What the next run carries (jobs.reconcile.offset_state): gold tables of their own, no report file.
CARRIED_TABLES = offset_state.CARRIED_TABLES
GOLD_TABLES = ([m.TABLE for m in REPORT_MODULES.values()] + list(DASHBOARD_TABLES.values())
               + list(CARRIED_TABLES.values()))


def parse_as_of(value: str | dt.datetime | None) -> dt.datetime | None:
    """Accept ISO-8601 (``2026-01-05T01:00:00Z``) or the snapshot folder format (``20260105T010000Z``)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = str(value).strip()
    if re.fullmatch(r"\d{8}T\d{6}Z", text):
        return dt.datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ts = pd.Timestamp(text)
    ts = ts.tz_localize(UTC) if ts.tzinfo is None else ts.tz_convert(UTC)
    return ts.to_pydatetime()


AS_OF_FORMATS = "ISO-8601 UTC such as 2026-01-05T02:00:00Z, or the snapshot folder form 20260105T020000Z"


def check_inputs(lake: str, reports_root: str, *, as_of: str | dt.datetime | None, window: int,
                 run_id: str | None = None) -> None:
    """Refuse, before any engine starts, option values that cannot give a report (one line each, spec §6)."""
    import os

    if run_id is not None:
        sanitize_run_id(run_id)
    if window < 2:
        raise UsageError(f"--window {window}: the status needs at least 2 snapshots (Burrow's evaluator); "
                         "give --window 2 or more (default 10)")
    try:
        parse_as_of(as_of)
    except (ValueError, TypeError):
        raise UsageError(f"--as-of {as_of!r}: not a time; expected {AS_OF_FORMATS}") from None
    for option, uri in (("--lake", lake), ("--reports", reports_root)):
        if not storage.is_s3(uri) and os.path.isfile(uri):
            raise UsageError(f"{option} {uri}: is a file; give a folder (or an s3:// URI)")
    if not storage.exists(lake):
        raise UsageError(f"--lake {lake}: no such lake; give the folder or s3:// URI that `rmq-recon ingest --lake` "
                         "wrote")
    from jobs.ingest import landing

    if landing.looks_like_a_landing_zone(lake):
        raise UsageError(f"--lake {lake}: is a landing zone (cluster=<c>/... snapshot folders), not a lake; give the "
                         "folder or s3:// URI that `rmq-recon ingest --lake` wrote")


def check_groups(frames: dict[str, Any], groups: list[str] | None) -> None:
    """Refuse ``--groups`` names the lake knows nothing of (offsets, subscriptions, deliveries or a DLQ topic)."""
    from pyspark.sql import functions as F

    if not groups:
        return
    known = (
        frames["consumer_offsets"].select("consumer_group")
        .unionByName(frames["subscription_groups"].select("consumer_group"))
        .unionByName(frames["deliveries"].select("consumer_group"))
        .unionByName(frames["messages"].where(F.col("topic").isin([DLQ_PREFIX + g for g in groups]))
                     .select(F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group")))
        .where(F.col("consumer_group").isin(list(groups))).distinct()
    )
    found = {r[0] for r in known.collect()}
    missing = [g for g in groups if g not in found]
    if missing:
        raise UsageError(f"--groups {','.join(missing)}: not in the lake (no offsets, subscription, delivery or DLQ "
                         "record of that group); check the names (case matters) or drop them")


def default_run_id(as_of: dt.datetime) -> str:
    return "asof-" + as_of.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


# What started a run. The dashboard shows the newest ``scheduled`` run by as-of time as the current state (else the
# newest ``manual`` or ``cli`` run, which reconciled everything at the newest snapshot); ``ad-hoc`` (an as-of time or
# groups were asked for) and ``backfill`` runs keep their own pages.
RUN_KINDS = ("scheduled", "manual", "backfill", "ad-hoc", "cli")


def run_kind(run_type: str | None, params: dict[str, Any]) -> str:
    """The kind of a DAG run: Airflow's run type (scheduled, asset-triggered, manual, backfill), ``ad-hoc`` when the
    run asked for an as-of time or groups."""
    rt = str(getattr(run_type, "value", run_type) or "").lower()
    if rt == "backfill":
        return "backfill"
    if params.get("as_of") or params.get("groups"):
        return "ad-hoc"
    return "manual" if rt == "manual" else "scheduled"


# Folders of the report root that are not a run's: a run of that id would replace them.
RESERVED_RUN_IDS = frozenset({"dashboard"})


def sanitize_run_id(run_id: str) -> str:
    """Run ids become folder names (``<reports>/<run_id>``, replaced whole) and SQL literals: keep them to
    ``[A-Za-z0-9._-]``, and refuse what would name another folder: ``.``, ``..`` (the report root or its parent,
    which the run would replace), a hidden name, the dashboard's folder."""
    rid = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_") or "run"
    if rid.startswith(".") or rid in RESERVED_RUN_IDS:
        raise UsageError(f"--run-id {names.shown(run_id)}: a run id names its report folder <reports>/<run_id>; "
                         "give letters, digits, '_', '-' or '.', not starting with '.' and not "
                         + ", ".join(sorted(RESERVED_RUN_IDS)))
    return rid


# --------------------------------------------------------------------------------------------- extract


READ_TABLES = {"consumer_offsets": consumer_offsets.TABLE, "queue_bounds": queue_bounds.TABLE,
               "messages": messages.TABLE, "deliveries": deliveries.TABLE,
               "subscription_groups": subscription_groups.TABLE, "store_features": store_features.TABLE,
               "pop_checkpoints": pop_checkpoints.TABLE, "pop_acks": pop_acks.TABLE}


def extract(spark: Any, lake: str, groups: list[str] | None, versions: dict[str, int] | None = None) -> dict[str, Any]:
    """The silver tables the reconciliation needs, restricted to ``groups`` when given.

    ``versions``: read each table as the last completed ingest left it (``jobs.lake.ledger``); a table it did not
    have reads empty.
    """
    from pyspark.sql import functions as F

    def read(table: Any) -> Any:
        if versions is None:
            return _delta.read(spark, lake, table) if _delta.exists(lake, table) else \
                spark.createDataFrame([], table.schema)
        if table.qualified not in versions:
            return spark.createDataFrame([], table.schema)
        return _delta.read(spark, lake, table, at=versions[table.qualified])

    frames = {name: read(table) for name, table in READ_TABLES.items()}
    # silver/key_index as the ledger row names it (that ingest brought it up to date with messages); None without
    # one (a Parquet lake, a row from before the index, no ledger): look-ups by key then scan the key column
    indexed = lookups.index_enabled() and versions is not None and versions.get(key_index.TABLE.qualified) is not None
    frames["key_index"] = point_index.PointIndex.of_delta(spark, lake, key_index.TABLE,
                                                          versions[key_index.TABLE.qualified]) if indexed else None
    # RocketMQ's own groups and topics are never reported as findings (spec §4.2): their offsets (a revive or
    # transaction checker's progress, TOOLS_CONSUMER's) are not a user's, nor are messages in their DLQs
    system = topics.is_system_group_col(F.col("consumer_group"))
    frames["consumer_offsets"] = frames["consumer_offsets"].where(
        ~system & ~topics.is_reserved_topic_col(F.col("topic")))
    for name in ("deliveries", "subscription_groups"):
        frames[name] = frames[name].where(~system)
    frames["messages"] = frames["messages"].where(~(F.col("topic").startswith(DLQ_PREFIX) & topics.is_system_group_col(
        F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})"))))
    for name in ("pop_checkpoints", "pop_acks"):
        frames[name] = frames[name].where(~system)
    if groups:
        for name in ("consumer_offsets", "deliveries", "subscription_groups", "pop_checkpoints", "pop_acks"):
            frames[name] = frames[name].where(F.col("consumer_group").isin(list(groups)))
        # records carry no group; a DLQ topic names its group (IN_DLQ reports every record of %DLQ%G); a discarded
        # transaction has no group: not in a run about some groups
        frames["messages"] = frames["messages"].where(
            (~F.col("topic").startswith(DLQ_PREFIX) | F.col("topic").isin([DLQ_PREFIX + g for g in groups]))
            & (F.col("topic") != topics.TRANS_CHECK_TOPIC))
    return frames


# ------------------------------------------------------------------------------------------- transform


def transform(frames: dict[str, Any], *, as_of: dt.datetime, window: int, dlq_warn_retries: int,
              blocking_min_age_s: int, keep: Callable[[Any, str], Any] = lambda df, _name: df) -> dict[str, Any]:
    """All reports from the silver frames: pure DataFrame -> DataFrame steps, no I/O.

    ``keep(df, name)``: computes a frame every report reads once (``jobs.lake._spark.materializer``); Sail
    otherwise computes the offset series and the deliveries again for each report (2.5 s of a 10 M run).
    """
    from jobs.rules import audit, corrections, dlq, duplicates, modes, replay, snapshots, status, unconsumed

    dels = keep(snapshots.deliveries_as_of(frames["deliveries"], as_of=as_of), "deliveries")
    # since when each queue held messages (spec §4.2 NO_CONSUME_QUEUE): from every stored record, not only the ones
    # the reports read one by one
    held = keep(snapshots.held_queues(frames["queue_bounds"], frames.get("stored_messages", frames["messages"]),
                                      as_of=as_of), "held")
    series = keep(snapshots.offset_series(frames["consumer_offsets"], frames["queue_bounds"], as_of=as_of, held=held),
                  "series")
    msgs = snapshots.messages_as_of(frames["messages"], as_of=as_of)
    # the consume modes (spec §4.1): the evidence of local redeliveries is kept for the next run (jobs.rules.modes)
    evidence = keep(modes.local_redeliveries(snapshots.deliveries_in_window(dels, series, as_of=as_of), msgs),
                    "evidence")
    fifo = modes.fifo_groups(frames["subscription_groups"], as_of=as_of)
    mode_rows = modes.mode_rows(series, evidence, fifo)
    # the keys whose newest snapshot has no bounds: read by BACKLOG, the status, coverage and the next run
    unknown = keep(snapshots.unknown_newest(series), "unknown_newest")
    # every stored record counts in the audit, not only those the reports read one by one; its hour stats are read
    # several times (audit.delivered_per_hour) and give the window's last hour the next run carries: computed once
    audit_stats = keep(audit.stored_hours(snapshots.messages_as_of(frames.get("stored_messages", frames["messages"]),
                                                                   as_of=as_of), as_of=as_of), "audit_stats")
    out = {
        "duplicated_ranges": duplicates.duplicated_ranges(series, dels, msgs, as_of=as_of),
        "unconsumed_ranges": unconsumed.unconsumed_ranges(series, dels, msgs, as_of=as_of, unknown=unknown),
        "offset_corrections": corrections.offset_corrections(series),
        "dlq_candidates": dlq.dlq_candidates(series, dels, msgs, frames["subscription_groups"], as_of=as_of,
                                             dlq_warn_retries=dlq_warn_retries,
                                             blocking_min_age_s=blocking_min_age_s, evidence=evidence),
        "consumer_status": status.consumer_status(series, msgs, window=window, modes=mode_rows, unknown=unknown),
        "_agreement": replay.agreement(dels, series, as_of=as_of),
        "_evidence": evidence,
        "_orderly": modes.orderly_pairs(series, evidence, fifo),
        "_traced": dels.select("cluster", "consumer_group"),
        # dashboard inputs
        "status_samples": status.status_samples(series, window=window),
        "audit_hours": audit.audit_rows(series, snapshots.deliveries_in_window(dels, series, as_of=as_of),
                                        audit_stats, keep=keep),
        "_audit_stats": audit_stats,
        # what the next run carries (jobs.reconcile.offset_state)
        "series_tail": unknown,
        "offset_decreases": snapshots.decreases(series),
        "subscription_latest": dlq.latest_subscriptions(frames["subscription_groups"], as_of=as_of),
        "held_queues": held,
        "_series": series,
    }
    return out


# ------------------------------------------------------------------------------------------------ load


def _with_run_id(df: Any, run_id: str) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("run_id", F.lit(run_id))


ROCKSDB_NO_FILE = ("the broker keeps its offsets in RocksDB (config/consumerOffsets/ or config/rdb/) and does not "
                   "read consumerOffset.json: apply the corrections with offset_corrections.sh")


def rocksdb_brokers(latest: pd.DataFrame) -> set[tuple[str, str]]:
    """The brokers whose newest offsets came from a RocksDB config: a corrected consumerOffset.json would be a file
    the broker never reads (spec §4.2: their offsets come from RocksDB), so none is written for them."""
    from jobs.formats import rocksdb_config

    if not len(latest):
        return set()
    return {(str(c), str(b)) for c, b, f in zip(latest["cluster"], latest["broker"], latest["source_file"])
            if isinstance(f, str) and f.rstrip("/").rsplit("/", 1)[-1] in (*rocksdb_config.V1, rocksdb_config.V2)}


def _original_offset_files(lake: str, latest: pd.DataFrame, version: int | None = None) -> dict[tuple[str, str], str]:
    """The consumerOffset.json text each broker's latest snapshot held (from bronze/files at ``version``).

    Read from the data files whose snapshot times admit the oldest of those snapshots (the ingest writes a file's row
    with its snapshot's time, as the offsets read from it): bronze/files gains a row per file of every snapshot, and
    a read by path alone scanned them all (issue 39)."""
    if not len(latest) or not _delta.exists(lake, files.TABLE):
        return {}
    wanted = set(latest["source_file"].dropna())
    if not wanted:
        return {}
    first = pd.Timestamp(latest.loc[latest["source_file"].notna(), "snapshot_ts"].min())
    first = (first.tz_localize(UTC) if first.tzinfo is None else first.tz_convert(UTC)).to_pydatetime()
    df = _delta.read_pandas_columns(lake, files.TABLE, ["cluster", "source_path", "content"],
                                    filters=[("file_kind", "in", ["consumer_offsets", "backup"]),
                                             ("snapshot_ts", ">=", first),
                                             ("source_path", "in", sorted(wanted))], at=version)
    df = df[df["source_path"].isin(wanted)]
    texts = {(r["cluster"], r["source_path"]): bytes(r["content"]).decode("utf-8", "replace")
             for r in df.to_dict("records") if r["content"] is not None}
    out: dict[tuple[str, str], str] = {}
    for r in latest.to_dict("records"):
        text = texts.get((r["cluster"], r["source_file"]))
        if text:
            out[(r["cluster"], r["broker"])] = text
    return out


def summarize(run_id: str, as_of: dt.datetime, lake: str, pdfs: dict[str, pd.DataFrame],
              agreement: pd.DataFrame, file_names: list[str], kind: str = "cli") -> dict[str, Any]:
    """summary.json: counts per table and per group (an offset counted once: ``offsets``; the breakdown by evidence
    or kind beside it, labelled, whose parts may overlap), each group's severity with its reason and its worst
    status (jobs.reconcile.verdict: the same numbers the dashboard and the terminal show), and replay agreement."""
    kind_col = {"duplicated_ranges": "evidence", "unconsumed_ranges": "kind", "offset_corrections": "reason",
                "dlq_candidates": "reason", "consumer_status": "status", "coverage": "reason"}
    tables: dict[str, Any] = {}
    for name, df in pdfs.items():
        info: dict[str, Any] = {"rows": int(len(df))}
        if len(df):
            info["by_kind"] = {str(k): int(v) for k, v in df.groupby(kind_col[name]).size().sort_index().items()}
        if name in ("duplicated_ranges", "unconsumed_ranges"):
            info["offsets"] = verdict.distinct_offsets(df)
            info[f"offsets_by_{kind_col[name]}"] = verdict.offsets_by(df, kind_col[name])
        tables[name] = info
    groups: dict[str, dict[str, Any]] = {}
    # A group is named by its name; when the run covers several clusters, by "cluster/group" (two clusters can
    # both have a GID_orders, and their counts and statuses are not one group's).
    clusters = set().union(*[set(df["cluster"]) for df in [*pdfs.values(), agreement] if "cluster" in df.columns])
    several = len(clusters) > 1

    def g(cluster: str, name: str) -> dict[str, Any]:
        return groups.setdefault(f"{cluster}/{name}" if several else name, {})

    overview = verdict.group_overview(pdfs["consumer_status"], pdfs["duplicated_ranges"], pdfs["unconsumed_ranges"],
                                      pdfs["dlq_candidates"], pdfs["offset_corrections"])
    for r in overview.to_dict("records"):
        g(r["cluster"], r["consumer_group"]).update({
            "severity": r["severity"], "reason": r["why"], "status": r["status"],
            "duplicated_offsets": int(r["duplicated"]), "unconsumed_offsets": int(r["unconsumed"]),
            "lost_offsets": int(r["lost"]), "dlq_candidates": int(r["dlq"]), "corrections": int(r["corrections"])})
    st = pdfs["consumer_status"]
    if len(st) and "consume_mode" in st.columns:  # spec §4.1: each (group, topic)'s mode
        for (c, grp), part in st.groupby(["cluster", "consumer_group"], sort=True):
            g(c, grp)["consume_modes"] = {str(t): str(m) for t, m in sorted(set(zip(part["topic"],
                                                                                      part["consume_mode"])))}
    for r in agreement.to_dict("records"):
        g(r["cluster"], r["consumer_group"])["replay_agreement"] = {
            "compared": int(r["compared"]), "agreeing": int(r["agreeing"]),
            "ratio": None if r["compared"] == 0 else round(float(r["agreeing"]) / float(r["compared"]), 4),
        }
    severities = {s: sum(1 for x in groups.values() if x.get("severity") == s) for s in verdict.SEVERITIES}
    newest = reports.format_ts(pd.to_datetime(st["snapshot_ts"], utc=True).max()) if len(st) else None
    return {"run_id": run_id, "kind": kind, "as_of": reports.format_ts(as_of), "newest_snapshot": newest,
            "lake": lake, "tables": tables, "severities": severities, "groups": groups, "files": file_names}


def missing_inputs(folders: SnapshotFolders, until: dt.datetime) -> list[dict[str, Any]]:
    """The newest snapshot folder of each broker (and clients folder) at or before ``until`` that lacks files spec
    §3 expects, with what it lacks (bronze/snapshots.missing): "missing files are reported, never fatal"."""
    return [{"cluster": r["cluster"], "broker": r["broker"], "snapshot_ts": reports.format_ts(r["snapshot_ts"]),
             "folder": r["folder"], "missing": r["missing"].split(", ")} for r in folders.newest_missing(until)]


def write_report_folder(folder: str, run_id: str, as_of: dt.datetime, lake: str, pdfs: dict[str, pd.DataFrame],
                        agreement: pd.DataFrame, latest_offsets: pd.DataFrame,
                        files_version: int | None = None, horizon_info: dict[str, Any] | None = None,
                        missing: list[dict[str, Any]] | None = None, kind: str = "cli") -> dict[str, Any]:
    """Write every §5 file of one run into ``folder`` (local or s3://), published all at once. ``missing``:
    :func:`missing_inputs`, in summary.json and on the dashboard."""
    out: dict[str, str] = {}
    for name, mod in REPORT_MODULES.items():
        out[f"{name}.csv"] = reports.to_csv(pdfs[name], mod.REPORT_COLUMNS, mod.SORT_KEY)
    corr = pdfs["offset_corrections"]
    out["offset_corrections.sh"] = reports.corrections_script(corr, run_id)
    clustering = corr[corr["client_id"].fillna("") == ""] if len(corr) else corr
    originals = _original_offset_files(lake, latest_offsets, files_version)
    rocksdb = rocksdb_brokers(latest_offsets)
    not_written = []
    for (cluster, broker), rows in (clustering.groupby(["cluster", "broker"]) if len(clustering) else []):
        if (cluster, broker) in rocksdb:
            not_written.append({"cluster": cluster, "broker": broker, "why": ROCKSDB_NO_FILE})
            continue
        out[f"corrected/{cluster}/{broker}/consumerOffset.json"] = reports.corrected_offset_file(
            originals.get((cluster, broker)), rows.to_dict("records"))
    summary = summarize(run_id, as_of, lake, pdfs, agreement, list(out) + ["summary.json", "index.html"], kind)
    summary["corrected_files_not_written"] = not_written
    if horizon_info is not None:
        summary["horizon"] = horizon_info
    summary["missing_inputs"] = missing or []
    out["summary.json"] = reports.summary_json(summary)
    columns = {n: m.REPORT_COLUMNS for n, m in REPORT_MODULES.items()}
    sorted_frames = {n: (pdfs[n].sort_values(m.SORT_KEY, kind="mergesort") if len(pdfs[n]) else pdfs[n])
                     for n, m in REPORT_MODULES.items()}
    out["index.html"] = reports.index_html(summary, sorted_frames, columns)
    reports.publish_folder(folder, out)
    return summary


# ------------------------------------------------------------------------------------------------- run


def run(lake: str, reports_root: str, *, as_of: str | dt.datetime | None = None, run_id: str | None = None,
        window: int = 10, groups: list[str] | None = None, dlq_warn_retries: int = 3,
        blocking_min_age_s: int = 900, full: bool = False, retention_h: float | str | None = None,
        kind: str | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Reconcile the lake as of ``as_of`` and write gold tables and ``<reports_root>/<run_id>/``.

    Args:
        lake: the lake root (local folder or ``s3://``).
        reports_root: where report folders go (local folder or ``s3://``).
        as_of: the reconciliation time; snapshots after it are ignored. Default: the newest snapshot.
        run_id: the run's identity; default ``asof-<YYYYMMDDTHHMMSSZ>``. Re-running a run id replaces its rows.
        window: snapshots per queue for the consumer status (Burrow's intervals).
        groups: restrict to these consumer groups (always a full computation).
        full: recompute everything (an investigation, a backfill) instead of carrying the previous run's final
            rows (docs/semantics.md rule 24).
        retention_h: the horizon, hours before as-of (default ``RMQ_RECON_RETENTION_H`` or 72).
        kind: what started the run (:data:`RUN_KINDS`; the DAG's :func:`run_kind`); default ``ad-hoc`` when
            ``as_of`` or ``groups`` is given, else ``cli``. The dashboard's current view is the newest scheduled run.

    Returns:
        The summary (counts per table and group) plus ``report_dir`` and ``seconds``.
    """
    from contextlib import ExitStack

    from jobs.lake import _spark, lease, ledger

    from jobs.reconcile import horizon

    say = progress_lines.reporter(progress, log)
    t0 = time.time()
    check_inputs(lake, reports_root, as_of=as_of, window=window, run_id=run_id)
    kind = kind or ("ad-hoc" if as_of is not None or groups else "cli")
    if kind not in RUN_KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(RUN_KINDS)}")
    hours = horizon.retention_hours(retention_h)
    with ExitStack() as stack:
        if _delta.table_format() == "parquet":
            # Parquet tables have no versions to pin: read them with no ingest running beside.
            stack.enter_context(lease.hold(lake, "writer", purpose="reconcile (reading Parquet tables)", say=say))
        held = stack.enter_context(lease.hold(lake, "gold", purpose="reconcile", say=say))
        spark = stack.enter_context(_spark.session())
        _delta.recover_parquet_staging(spark, lake, GOLD_TABLES)
        # Temporary files of runs that died: no other reconcile runs while this one holds the gold lease.
        storage.delete_tree(storage.join(lake, "_tmp"))
        state = ledger.consistent_state(lake, READ_TABLES.values())
        frames = extract(spark, lake, groups, state["table_versions"])
        check_groups(frames, groups)
        as_of_ts = _as_of(frames, as_of, lake, groups)
        rid = sanitize_run_id(run_id or default_run_id(as_of_ts))
        say(f"reconcile: run {rid} as of {reports.format_ts(as_of_ts)} (lake as ingest {state['run_id']} left it)")
        cut = as_of_ts - dt.timedelta(hours=hours)
        params = horizon.params_of(window=window, dlq_warn_retries=dlq_warn_retries,
                                   blocking_min_age_s=blocking_min_age_s, groups=groups)
        folders = horizon.SnapshotFolders(spark, lake,
                                          state["table_versions"].get(horizon.snapshots_schema.TABLE.qualified))
        info: dict[str, Any] = {"mode": "full", "retention_h": hours, "cut": reports.format_ts(cut),
                                "params": params, "snapshots_digest": folders.digest(as_of_ts)}
        previous, why = (None, "--full") if full else (None, "--groups") if groups else horizon.previous_run(
            lake, run_id=rid, as_of=as_of_ts, cut=cut, params=params, folders=folders)
        tmp = storage.join(lake, "_tmp", f"reconcile-{uuid.uuid4().hex[:12]}")
        try:
            frames["stored_messages"] = frames["messages"]
            h, full_state = None, {}
            if previous is not None and not {"local_redelivery", "orderly", "traced"} <= set(previous["horizon"]):
                previous, why = None, (f"the previous run {previous['run_id']} kept no consume modes or traced groups "
                                       "(an earlier release)")
            if previous is not None:
                h = horizon.compute(spark, lake, frames, tmp, as_of=as_of_ts, cut=cut, previous=previous,
                                    window=window, dlq_warn_retries=dlq_warn_retries,
                                    blocking_min_age_s=blocking_min_age_s, say=say)
                why = "" if h is not None else "old records at or above a queue's lowest recent offset"
            if h is not None:
                assert previous is not None
                info.update(mode="horizon", previous_run=previous["run_id"], full_groups=h["full_groups"],
                            audit=h["audit"], read=h["read"])
                offset_files = offset_state.latest_files(
                    frames["consumer_offsets"], as_of=as_of_ts, since=h["offsets"].since,
                    before=h["offsets"].files_before) if h["offsets"] else \
                    offset_state.latest_files(frames["consumer_offsets"], as_of=as_of_ts)
                popped = pop_rows(frames, h["series"], as_of=as_of_ts, dlq_warn_retries=dlq_warn_retries,
                                  blocking_min_age_s=blocking_min_age_s,
                                  keep=_spark.materializer(spark, storage.join(tmp, "pop")), say=say)
                r = _load(spark, lake, as_of_ts, rid, covered(frames, h["pdfs"], h["series_tail"], h["modes"]["traced"],
                                                              as_of=as_of_ts, popped=popped), h["agreement"],
                          {n: h[n] for n in [*DASHBOARD_TABLES, *CARRIED_TABLES]}, offset_files, say)
                kept_offsets = offset_state.state(spark, frames, h["offsets"], offset_files, as_of=as_of_ts,
                                                  window=window)
            else:
                # What several reports read is computed once: the records they read one by one (at 10 M records
                # most are untraced traffic). The replay is one plan that reads its timeline once: nothing to keep.
                info["why_full"] = why
                frames["messages"] = _spark.materialize(spark, snapshots.relevant_messages(
                    frames["messages"], frames["deliveries"], frames["consumer_offsets"],
                    small=_spark.materializer(spark, storage.join(tmp, "relevant")))
                    .select(*messages.TABLE.columns), storage.join(tmp, "messages"))
                info["read"] = {"consumer_offsets": "all", "queue_bounds": "all", "subscription_groups": "all",
                                "messages": frames["stored_messages"].count(),
                                "deliveries": frames["deliveries"].count()}
                offset_files = offset_state.latest_files(frames["consumer_offsets"], as_of=as_of_ts)
                r = _reconcile(spark, lake, frames, as_of_ts, rid, window, dlq_warn_retries, blocking_min_age_s, say,
                               offset_files, keep=_spark.materializer(spark, storage.join(tmp, "shared")))
                kept_offsets = offset_state.state(spark, frames, None, offset_files, as_of=as_of_ts, window=window)
                if not groups:  # a run of some groups writes no audit rows of the others: nothing to carry
                    info["audit"] = horizon.full_audit_state(r["audit_stats"])
                    full_state = horizon.full_run_state(
                        {**frames, "messages": frames["stored_messages"]}, r["series"], as_of=as_of_ts, cut=cut,
                        small=_spark.materializer(spark, storage.join(tmp, "carry")))
            say(f"reconcile: {info['mode']} run" + (f" (full: {info.get('why_full')})" if info["mode"] == "full"
                                                    else f", {len(info['full_groups'])} group(s) in full"))
        finally:
            storage.delete_tree(tmp)
        folder = storage.join(reports_root, rid)
        summary = write_report_folder(folder, rid, as_of_ts, lake, r["pdfs"], r["agreement"], r["latest_offsets"],
                                      state["table_versions"].get(files.TABLE.qualified), horizon_info=info,
                                      missing=missing_inputs(folders, as_of_ts), kind=kind)
        failpoints.hit("reconcile.after_publish")
        held.check()
        # The ledger row also keeps the old records' maxima per queue and the positions looked up with their hits,
        # which the next run carries (horizon.old_maxima, horizon.position_hits); the report folder's summary does
        # not list them.
        # So does the offset state (jobs.reconcile.offset_state): each broker's newest bounds time and offsets file.
        carry = {"old_max": h["old_max"], "positions": h["positions"]} if h is not None else full_state
        kept = {**summary, "horizon": {**info, **carry,
                                       "offsets": kept_offsets, **(h["modes"] if h is not None else r["modes"])}}
        ledger.record_reconcile(spark, lake, run_id=rid, as_of=as_of_ts, report_dir=folder,
                                ingest_run_id=state["run_id"], rows={n: len(df) for n, df in r["pdfs"].items()},
                                gold_tables=GOLD_TABLES, summary=kept, kind=kind)
    summary["report_dir"] = folder
    summary["seconds"] = round(time.time() - t0, 2)
    say(f"reconcile: wrote {folder} in {summary['seconds']} s")
    return summary


def _as_of(frames: dict[str, Any], as_of: str | dt.datetime | None, lake: str,
           groups: list[str] | None = None) -> dt.datetime:
    """The run's as-of time: the one given, else the newest snapshot with consumer offsets."""
    as_of_ts = parse_as_of(as_of)
    if as_of_ts is not None:
        first = frames["consumer_offsets"].agg({"snapshot_ts": "min"}).collect()[0][0]
        if first is None or parse_as_of(first) > as_of_ts:  # type: ignore[operator]
            raise UsageError(f"--as-of {reports.format_ts(as_of_ts)}: before the first snapshot with consumer offsets "
                             f"in {lake} ({reports.format_ts(first) or 'none'}): nothing to reconcile then; give a "
                             "later time")
    if as_of_ts is None:
        latest = frames["consumer_offsets"].agg({"snapshot_ts": "max"}).collect()[0][0]
        if latest is None:
            raise ValueError(
                f"no consumer offsets of groups {sorted(groups)} in {lake}/silver/consumer_offsets: check the group "
                "names, or give --as-of to report their DLQ records and deliveries" if groups else
                f"no consumer offsets in {lake}/silver/consumer_offsets: no ingest has landed a consumerOffset.json or "
                "offsets.json (bronze/snapshots.missing names what each snapshot lacked); run `rmq-recon ingest` on a "
                "landing zone that has them")
        as_of_ts = parse_as_of(latest)
    assert as_of_ts is not None
    return as_of_ts


def _reconcile(spark: Any, lake: str, frames: dict[str, Any], as_of_ts: dt.datetime, rid: str, window: int,
               dlq_warn_retries: int, blocking_min_age_s: int, say: Callable[[str], None], files: pd.DataFrame,
               keep: Callable[[Any, str], Any] = lambda df, _name: df) -> dict[str, Any]:
    """Transform, load the gold tables and collect what the report folder needs (inside the Spark session)."""
    out = transform(frames, as_of=as_of_ts, window=window, dlq_warn_retries=dlq_warn_retries,
                    blocking_min_age_s=blocking_min_age_s, keep=keep)
    pdfs = {name: out[name].select(*mod.REPORT_COLUMNS).toPandas() for name, mod in REPORT_MODULES.items()
            if name in out}
    modes = mode_state(out["_evidence"], out["_orderly"], out["_traced"])
    popped = pop_rows(frames, out["_series"], as_of=as_of_ts, dlq_warn_retries=dlq_warn_retries,
                      blocking_min_age_s=blocking_min_age_s, keep=keep, say=say)
    pdfs = covered(frames, pdfs, out["series_tail"], modes["traced"], as_of=as_of_ts, popped=popped)
    r = _load(spark, lake, as_of_ts, rid, pdfs, out["_agreement"].toPandas(),
              {name: out[name] for name in [*DASHBOARD_TABLES, *CARRIED_TABLES]}, files, say)
    return {**r, "modes": modes, "audit_stats": out["_audit_stats"], "series": out["_series"]}


def mode_state(evidence: Any, orderly: Any, traced: Any) -> dict[str, list[list[str]]]:
    """What the next run carries of the consume modes (jobs.rules.modes): the pairs with a local redelivery (evidence
    in deliveries it may no longer read) and the orderly pairs (a change sends the group to a full computation); and
    the groups with a delivery by its time (spec §4.2 NO_TRACE), whose old deliveries the next run does not read."""
    def rows(df: Any, cols: tuple[str, ...] = ("cluster", "consumer_group", "topic")) -> list[list[str]]:
        return sorted([str(v) for v in r] for r in df.select(*cols).distinct().collect())

    return {"local_redelivery": rows(evidence), "orderly": rows(orderly),
            "traced": rows(traced, ("cluster", "consumer_group"))}


def pop_rows(frames: dict[str, Any], series: Any, *, as_of: dt.datetime, dlq_warn_retries: int,
             blocking_min_age_s: int, keep: Callable[[Any, str], Any] = lambda df, _name: df,
             say: Callable[[str], None] = lambda _line: None) -> dict[str, pd.DataFrame] | None:
    """The POP rows of the run (jobs.rules.pop.reports), collected (report-sized); None when the lake holds no POP
    checkpoint (one small read). From the whole pop tables and every stored record, after a full and a scheduled
    run alike."""
    from jobs.rules import dlq, pop, snapshots

    if not frames["pop_checkpoints"].limit(1).count():
        return None
    t0 = time.time()
    msgs = snapshots.messages_as_of(frames.get("stored_messages", frames["messages"]), as_of=as_of)
    rows = pop.reports({k: frames[k] for k in ("pop_checkpoints", "pop_acks")}, msgs, series,
                       dlq.retry_max_times(frames["subscription_groups"], as_of=as_of), as_of=as_of,
                       dlq_warn_retries=dlq_warn_retries, blocking_min_age_s=blocking_min_age_s, keep=keep)
    out = {k: v.toPandas() for k, v in rows.items()}
    say(f"reconcile:   POP rows: {len(out['pairs'])} POP pairs, {len(out['duplicated'])} POP_LATE_ACK, "
        f"{len(out['lost'])} POP_LOST, {len(out['retrying'])} RETRYING ({time.time() - t0:.1f} s)")
    return out


def covered(frames: dict[str, Any], pdfs: dict[str, pd.DataFrame], unknown_newest: Any, traced: list[list[str]], *,
            as_of: dt.datetime, popped: dict[str, pd.DataFrame] | None = None) -> dict[str, pd.DataFrame]:
    """The report rows with the POP rows in (``popped``: :func:`pop_rows`), less what the files cannot support, and
    the coverage report (jobs.rules.coverage): the same step after a full and a horizon run. ``unknown_newest``:
    the keys whose newest snapshot has no bounds."""
    from jobs.rules import coverage as rules
    from jobs.rules import pop

    if popped is not None:
        pdfs = pop.merged(pdfs, popped)

    feats = rules.features(frames["store_features"], as_of=as_of).toPandas()
    compaction = {(c, b, t) for c, b, t, f in zip(feats["cluster"], feats["broker"], feats["topic"], feats["feature"])
                  if f == "COMPACTION_TOPIC"}
    out = rules.without_unsupported(pdfs, compaction)
    per_group = rules.unknown_queues(unknown_newest).toPandas()  # one action: report-sized
    queues = rules.no_consume_queue(per_group)
    unknown_groups = {(str(c), str(g)) for c, g in zip(per_group["cluster"], per_group["consumer_group"])}
    st = out["consumer_status"]
    groups = set(zip(st["cluster"], st["consumer_group"])) | unknown_groups
    # a POP group needs no traces (spec §4.1): no NO_TRACE row for a group that is POP on every topic
    pop_only = pop.pop_only_groups(popped["pairs"], set(zip(st["cluster"], st["consumer_group"], st["topic"]))) \
        if popped is not None else set()
    out["coverage"] = rules.rows(feats, queues, rules.untraced_groups(groups - pop_only, {(c, g) for c, g in traced}))
    return out


def _load(spark: Any, lake: str, as_of_ts: dt.datetime, rid: str, pdfs: dict[str, pd.DataFrame],
          agreement: pd.DataFrame, frames: dict[str, Any], files: pd.DataFrame,
          say: Callable[[str], None]) -> dict[str, Any]:
    """Write the run's gold rows (replaced per run id) and collect what the report folder needs. ``frames``: the
    dashboard's and the carried tables' rows (Spark); ``files``: each broker's newest consumerOffset.json
    (:func:`jobs.reconcile.offset_state.latest_files`)."""
    for name, mod in REPORT_MODULES.items():
        pdf = pdfs[name]
        t0 = time.time()
        gold = spark.createDataFrame(pdf if len(pdf) else [], _report_schema(mod))
        _delta.replace_run(spark, _with_run_id(gold, rid), lake, mod.TABLE, rid)
        failpoints.hit("reconcile.after_gold_table")
        say(f"reconcile:   gold/{name}: {len(pdf)} rows ({time.time() - t0:.1f} s)")
    for name, table in {**DASHBOARD_TABLES, **CARRIED_TABLES}.items():
        t0 = time.time()  # (the frames are computed as they are written)
        _delta.replace_run(spark, _with_run_id(frames[name], rid), lake, table, rid)
        say(f"reconcile:   gold/{name} ({'dashboard' if name in DASHBOARD_TABLES else 'for the next run'}, "
            f"{time.time() - t0:.1f} s)")
    return {"pdfs": pdfs, "agreement": agreement, "latest_offsets": files}


def _report_schema(mod: Any) -> Any:
    from pyspark.sql.types import StructType

    return StructType([f for f in mod.SCHEMA.fields if f.name != "run_id"])
