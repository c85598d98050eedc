"""The dashboard across runs: one self-contained static site per lake, ``<reports>/dashboard/``.

Reads only gold and quality tables, always bounded: the rows of one run (filtered by ``run_id``, at the table
versions its ledger row records) and, for the trends, a few columns of the ``recent_runs`` newest runs. Then pure
pandas transforms compute what the pages show (:func:`group_overview`, :func:`audit`, :func:`run_trends`,
:func:`quality_runs`, each tested on tiny frames with exact rows), and :func:`render` writes HTML with inline CSS
and inline SVG plots drawn by matplotlib (no script, no font or file from the network: it works from ``file://``
and offline). The folder is published all at once through :mod:`jobs.reconcile.reports` /
:mod:`jobs.lake.storage`, so an ``s3://`` reports root works the same.

Pages: ``index.html`` (the current run: the headline audit plot and the groups ranked by severity, since when),
``runs.html`` (every recent run, labelled by kind, linked to its own report page), ``groups/<group>.html`` (what to
do, the corrections and their mqadmin lines, the DLQ candidates and their look-ups, per queue a timeline and "why
this status"), ``audit.html`` (per group and hour), ``trends.html`` (over runs), ``quality.html`` (stored validation
results). A table longer than ``MAX_ROWS`` shows its first rows, says how many are left out and links to the whole
table as CSV.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import json
import logging
import re
import time
import urllib.parse
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from jobs import progress as progress_lines
from jobs.lake import _delta, storage
from jobs.reconcile import reports
from jobs.reconcile.verdict import (  # noqa: F401 - the vocabulary every output shares, used here and by tests
    DLQ_BOUND,
    DLQ_COLUMNS,
    DLQ_REASONS,
    GROUP,
    LOST_KINDS,
    OVERVIEW_COLUMNS,
    SERIES_KEY,
    SEVERITIES,
    STATUS_RANK,
    STATUSES,
    UNCONSUMED_KINDS,
    as_counts,
    count_by,
    group_overview,
    has_duplicates_or_warnings,
    has_lost_messages,
    needs_a_human,
    severity,
    union_ranges,
    why,
    worst_status,
)
from schemas import (
    audit_hours,
    consumer_status,
    coverage,
    dlq_candidates,
    duplicated_ranges,
    offset_corrections,
    reconcile_runs,
    status_samples,
    unconsumed_ranges,
    validation_results,
)

log = logging.getLogger(__name__)

RECENT_RUNS = 30
RECENT_VALIDATIONS = 30
MAX_ROWS = 200
MAX_PLOTS_PER_GROUP = 16
CURRENT_TABLES = {
    "consumer_status": consumer_status.TABLE, "duplicated_ranges": duplicated_ranges.TABLE,
    "unconsumed_ranges": unconsumed_ranges.TABLE, "dlq_candidates": dlq_candidates.TABLE,
    "offset_corrections": offset_corrections.TABLE, "status_samples": status_samples.TABLE,
    "audit_hours": audit_hours.TABLE, "coverage": coverage.TABLE,
}
NO_VALIDATION = "no validation results yet"


# --------------------------------------------------------------------------------------------- extract


def _read(lake: str, table: Any, columns: list[str], filters: Any, at: int | None = None) -> pd.DataFrame:
    """A bounded projection of a table (``filters`` in delta-rs form); an empty frame when it does not exist. A
    column an older lake's table lacks reads as null (the dashboard only reads: it never alters a table)."""
    if not _delta.exists(lake, table):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    have = columns
    if _delta.table_format() == "delta":
        stored = {f.name for f in _delta.delta_table(lake, table, version=at).schema().fields}
        have = [c for c in columns if c in stored]
    out = _delta.read_pandas_columns(lake, table, have, filters=filters, at=at)
    for c in columns:
        if c not in out.columns:
            out[c] = None
    return out[columns]


def kind_of(kind: Any, run_id: Any) -> str:
    """A run's kind (jobs.reconcile.reconcile.RUN_KINDS); for a ledger row written before kinds were recorded, read
    from Airflow's run id (``scheduled__``, ``asset_triggered__``, ``manual__``, ``backfill__``), else ``cli``."""
    if isinstance(kind, str) and kind:
        return kind
    rid = str(run_id)
    for prefix, k in (("scheduled__", "scheduled"), ("asset_triggered__", "scheduled"),
                      ("dataset_triggered__", "scheduled"), ("backfill__", "backfill"), ("manual__", "manual")):
        if rid.startswith(prefix):
            return k
    return "cli"


# The runs whose as-of is the state of the fleet, best first: scheduled runs; else runs that reconciled everything
# at the newest snapshot of the time (by hand, from the command line).
CURRENT_KINDS = (("scheduled",), ("manual", "cli"))


def current_run_id(runs: pd.DataFrame) -> str:
    """The run the overview shows as "now": the newest scheduled run by as-of time (then completion); without one,
    the newest manual or command-line run; an ad-hoc or backfill run (an as-of in the past, some groups) never,
    unless it is all there is."""
    kinds = [kind_of(k, r) for k, r in zip(runs["kind"], runs["run_id"])]
    ranked = runs.assign(_kind=kinds).sort_values(["as_of", "completed_at", "run_id"], kind="mergesort")
    for wanted in CURRENT_KINDS:
        hit = ranked[ranked["_kind"].isin(wanted)]
        if len(hit):
            return str(hit.iloc[-1]["run_id"])
    return str(ranked.sort_values(["completed_at", "run_id"], kind="mergesort").iloc[-1]["run_id"])


def run_label(run: dict[str, Any]) -> str:
    """What a page says of the run it shows: ``scheduled run``, ``ad-hoc run as of 2026-...``, ``backfill run ...``."""
    kind = kind_of(run.get("kind"), run.get("run_id"))
    as_of = reports.format_ts(run.get("as_of"))
    return {"scheduled": "scheduled run", "manual": "run triggered by hand", "cli": "run from the command line",
            "ad-hoc": f"ad-hoc run as of {as_of}", "backfill": f"backfill run as of {as_of}"}.get(kind, kind)


def completed_runs(lake: str, *, limit: int = RECENT_RUNS) -> tuple[pd.DataFrame, str | None]:
    """The ``limit`` newest completed reconcile runs (by as-of time), oldest first, from gold/reconcile_runs, and the
    current run's id (:func:`current_run_id`, chosen among every run), which is among them."""
    cols = ["run_id", "kind", "as_of", "completed_at", "newest_snapshot", "report_dir", "table_versions"]
    # The ledger gains a row per run for the lake's life: its narrow columns are read whole, the wide ones of these.
    narrow = ["run_id", "kind", "as_of", "completed_at", "newest_snapshot"]
    runs = _read(lake, reconcile_runs.TABLE, narrow, None)
    if not len(runs):
        return _read(lake, reconcile_runs.TABLE, cols, None), None
    current = current_run_id(runs)
    ordered = runs.sort_values(["as_of", "completed_at", "run_id"], kind="mergesort")
    runs = pd.concat([ordered.tail(limit), ordered[ordered["run_id"] == current]]).drop_duplicates("run_id")
    runs = runs.sort_values(["as_of", "completed_at", "run_id"], kind="mergesort")
    wide = _read(lake, reconcile_runs.TABLE, ["run_id", *cols[5:]], [("run_id", "in", list(runs["run_id"]))])
    out = runs.merge(wide.drop_duplicates("run_id"), on="run_id", how="left")[cols].reset_index(drop=True)
    out["kind"] = [kind_of(k, r) for k, r in zip(out["kind"], out["run_id"])]
    return out, current


def extract(lake: str, *, run_id: str | None = None, recent_runs: int = RECENT_RUNS,
            recent_validations: int = RECENT_VALIDATIONS) -> dict[str, Any]:
    """Everything the site shows, read bounded: one run's gold rows, a few columns of recent runs, recent results.

    Args:
        lake: the lake root.
        run_id: the run the pages describe; default the current one (:func:`current_run_id`).

    Raises:
        UsageError: the lake has no completed reconcile run, or not ``run_id`` (a retry would meet it again).
    """
    from jobs.lake import ledger
    from jobs.problems import UsageError

    runs, current_id = completed_runs(lake, limit=recent_runs)
    if not len(runs):
        raise UsageError(f"--lake {lake}: no completed reconcile run (gold/reconcile_runs is empty or missing): run "
                         "`rmq-recon reconcile --lake ... --reports ...` first")
    if run_id is None:
        current = runs[runs["run_id"] == current_id].iloc[-1].to_dict()
    else:
        current = ledger.completed_reconcile(lake, run_id)
        if current is None:
            raise UsageError(f"--run-id {run_id}: not a completed reconcile run of {lake}; give one of "
                             f"{', '.join(runs['run_id'].tolist()[-5:])}")
        known = runs[runs["run_id"] == run_id]
        current["kind"] = known.iloc[-1]["kind"] if len(known) else kind_of(current.get("kind"), run_id)
        if run_id not in set(runs["run_id"]):
            runs = pd.concat([runs, pd.DataFrame([{k: current.get(k) for k in runs.columns}])], ignore_index=True)
    versions = ledger._as_dict(current["table_versions"])
    rid = current["run_id"]
    frames: dict[str, pd.DataFrame] = {}
    for name, table in CURRENT_TABLES.items():
        cols = [c for c in table.columns if c != "run_id"]
        frames[name] = _read(lake, table, cols, [("run_id", "=", rid)], versions.get(table.qualified))
    ids = runs["run_id"].tolist()
    trend = {
        "duplicated_ranges": _read(lake, duplicated_ranges.TABLE, ["run_id", *SERIES_KEY, "start_offset", "end_offset",
                                                                   "evidence"], [("run_id", "in", ids)]),
        "unconsumed_ranges": _read(lake, unconsumed_ranges.TABLE, ["run_id", *SERIES_KEY, "start_offset",
                                                                   "end_offset", "kind"], [("run_id", "in", ids)]),
        "dlq_candidates": _read(lake, dlq_candidates.TABLE, ["run_id", "consumer_group", "reason"],
                                [("run_id", "in", ids)]),
        "consumer_status": _read(lake, consumer_status.TABLE, ["run_id", "status"], [("run_id", "in", ids)]),
    }
    return {"run": current, "runs": runs[["run_id", "kind", "as_of", "completed_at", "newest_snapshot", "report_dir"]],
            "current_id": current_id, "current": frames, "trend": trend,
            "validation": extract_validation(lake, limit=recent_validations)}


def extract_validation(lake: str, *, limit: int = RECENT_VALIDATIONS) -> pd.DataFrame | None:
    """The stored results of the ``limit`` newest validation runs; None when gold/validation_results does not exist."""
    table = validation_results.TABLE
    if not _delta.exists(lake, table):
        return None
    # A row per expectation and table of every validation (about 48 a run; maintenance prunes those older than the
    # gold retention): the newest time of each validation is gathered batch by batch, then only those are read.
    from jobs.ops import retention

    latest = retention.validation_times(lake)
    if not len(latest):
        return pd.DataFrame(columns=table.columns)
    newest = latest.sort_values(kind="mergesort").tail(limit)
    return _delta.read_pandas_columns(lake, table, table.columns, filters=[("validation_id", "in", list(newest.index))])


# ------------------------------------------------------------------------------------------- transform


def _overlap(a: pd.Series, b: pd.Series, lo: pd.Series, hi: pd.Series) -> pd.Series:
    """Offsets in both ``[a, b]`` and ``[lo, hi]`` (0 when they do not meet)."""
    return (pd.concat([b, hi], axis=1).min(axis=1) - pd.concat([a, lo], axis=1).max(axis=1) + 1).clip(lower=0)


def _covered(hours: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """Per row of ``hours``: offsets of ``[first_offset, last_offset]`` inside the (disjoint) ``ranges`` of its key."""
    if not len(ranges) or not len(hours):
        return pd.Series(0, index=hours.index, dtype="int64")
    h = hours[[*SERIES_KEY, "first_offset", "last_offset"]].reset_index()
    m = h.merge(ranges[[*SERIES_KEY, "start_offset", "end_offset"]], on=SERIES_KEY, how="inner")
    m["_n"] = _overlap(m["first_offset"], m["last_offset"], m["start_offset"], m["end_offset"])
    return m.groupby("index")["_n"].sum().reindex(hours.index, fill_value=0).astype("int64")


AUDIT_COLUMNS = ["cluster", "consumer_group", "hour", "stored", "delivered", "committed_past", "consumed",
                 "duplicated", "never_consumed", "backlog", "completeness_pct", "duplicate_pct"]


def _pct(part: pd.Series, whole: pd.Series) -> pd.Series:
    return (100.0 * part / whole.where(whole > 0)).round(2)


def audit_rows(audit_hours: pd.DataFrame, consumer_status: pd.DataFrame, duplicated_ranges: pd.DataFrame,
               unconsumed_ranges: pd.DataFrame) -> pd.DataFrame:
    """Per group, client, queue and hour: the hour's offsets intersected with the run's verdicts.

    ``committed_past``: offsets below the committed offset C_S; ``duplicated``: inside a duplicated range (once);
    ``never_consumed``: inside an EXPIRED, SKIPPED, BROADCAST_DROPPED or POP_LOST range; ``backlog``: inside BACKLOG;
    ``consumed = stored - (offsets inside any unconsumed range)``.
    """
    cols = [*SERIES_KEY, "hour", "stored", "delivered", "committed_past", "consumed", "duplicated", "never_consumed",
            "backlog"]
    if not len(audit_hours):
        return pd.DataFrame(columns=cols)
    h = audit_hours.reset_index(drop=True).copy()
    c = consumer_status[[*SERIES_KEY, "committed_offset"]] if len(consumer_status) else \
        pd.DataFrame(columns=[*SERIES_KEY, "committed_offset"])
    h = h.merge(c, on=SERIES_KEY, how="left")
    committed = h["committed_offset"].fillna(0).astype("int64")
    h["committed_past"] = _overlap(h["first_offset"], h["last_offset"], pd.Series(0, index=h.index), committed - 1)
    lost = unconsumed_ranges[unconsumed_ranges["kind"].isin(LOST_KINDS)] if len(unconsumed_ranges) else unconsumed_ranges
    backlog = unconsumed_ranges[unconsumed_ranges["kind"] == "BACKLOG"] if len(unconsumed_ranges) else unconsumed_ranges
    h["duplicated"] = _covered(h, union_ranges(duplicated_ranges, SERIES_KEY))
    h["never_consumed"] = _covered(h, union_ranges(lost, SERIES_KEY))
    h["backlog"] = _covered(h, union_ranges(backlog, SERIES_KEY))
    not_consumed = _covered(h, union_ranges(unconsumed_ranges, SERIES_KEY))
    h["consumed"] = (h["stored"].astype("int64") - not_consumed).clip(lower=0)
    for col in cols[len(SERIES_KEY) + 1:]:
        h[col] = h[col].astype("int64")
    return h[cols]


def audit(rows: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """:func:`audit_rows` summed per ``by`` (default group and hour), with completeness % and duplicate %.

    completeness = consumed / stored, duplicates = duplicated / stored, in percent (2 decimals; empty when
    nothing was stored).
    """
    by = GROUP + ["hour"] if by is None else by
    sums = ["stored", "delivered", "committed_past", "consumed", "duplicated", "never_consumed", "backlog"]
    if not len(rows):
        return pd.DataFrame(columns=[*by, *sums, "completeness_pct", "duplicate_pct"])
    out = rows.groupby(by, dropna=False)[sums].sum().reset_index()
    out["completeness_pct"] = _pct(out["consumed"], out["stored"])
    out["duplicate_pct"] = _pct(out["duplicated"], out["stored"])
    return out.sort_values(by, kind="mergesort").reset_index(drop=True)


TREND_COLUMNS = ["run_id", "as_of", "duplicated", "unconsumed", *UNCONSUMED_KINDS, "dlq", *STATUSES]


def run_trends(runs: pd.DataFrame, duplicated_ranges: pd.DataFrame, unconsumed_ranges: pd.DataFrame,
               dlq_candidates: pd.DataFrame, consumer_status: pd.DataFrame) -> pd.DataFrame:
    """One row per run (oldest as-of first): duplicated offsets (once), unconsumed messages per kind, messages in or
    on the way to a DLQ (a broadcast drop is lost, not DLQ-bound) and queues per status."""
    out = runs[["run_id", "as_of"]].copy()
    dup = union_ranges(duplicated_ranges, ["run_id", *SERIES_KEY])
    d = dup.groupby("run_id")["messages"].sum().rename("duplicated").reset_index() if len(dup) else \
        pd.DataFrame(columns=["run_id", "duplicated"])
    out = out.merge(d, on="run_id", how="left")
    u = unconsumed_ranges.assign(messages=unconsumed_ranges["end_offset"] - unconsumed_ranges["start_offset"] + 1) \
        if len(unconsumed_ranges) else unconsumed_ranges.assign(messages=[])
    out = out.merge(count_by(u, ["run_id"], "kind", UNCONSUMED_KINDS, "messages"), on="run_id", how="left")
    bound = dlq_candidates[dlq_candidates["reason"].isin(DLQ_BOUND)] if len(dlq_candidates) else dlq_candidates
    q = bound.groupby("run_id").size().rename("dlq").reset_index() if len(bound) else \
        pd.DataFrame(columns=["run_id", "dlq"])
    out = out.merge(q, on="run_id", how="left")
    out = out.merge(count_by(consumer_status, ["run_id"], "status", STATUSES), on="run_id", how="left")
    for c in ["duplicated", *UNCONSUMED_KINDS, "dlq", *STATUSES]:
        out[c] = as_counts(out[c])
    out["unconsumed"] = out[list(UNCONSUMED_KINDS)].sum(axis=1).astype("int64")
    out = out.sort_values(["as_of", "run_id"], kind="mergesort")
    return out[TREND_COLUMNS].reset_index(drop=True)


QUALITY_COLUMNS = ["validation_id", "validated_at", "table_name", "evaluated", "passed", "failed", "pass_rate_pct"]


def quality_runs(results: pd.DataFrame) -> pd.DataFrame:
    """Per validation run and table: expectations evaluated, passed and failed, and the pass rate in percent."""
    if not len(results):
        return pd.DataFrame(columns=QUALITY_COLUMNS)
    r = results.assign(_ok=results["success"].astype(bool))
    out = (r.groupby(["validation_id", "table_name"])
           .agg(validated_at=("validated_at", "max"), evaluated=("_ok", "size"), passed=("_ok", "sum"))
           .reset_index())
    out["passed"] = out["passed"].astype("int64")
    out["evaluated"] = out["evaluated"].astype("int64")
    out["failed"] = out["evaluated"] - out["passed"]
    out["pass_rate_pct"] = _pct(out["passed"], out["evaluated"])
    return out.sort_values(["validated_at", "validation_id", "table_name"], kind="mergesort")[QUALITY_COLUMNS] \
        .reset_index(drop=True)


def quality_trend(per_table: pd.DataFrame) -> pd.DataFrame:
    """Per validation run: expectations evaluated and passed over every table, and the pass rate in percent."""
    cols = ["validation_id", "validated_at", "evaluated", "passed", "pass_rate_pct"]
    if not len(per_table):
        return pd.DataFrame(columns=cols)
    out = (per_table.groupby("validation_id")
           .agg(validated_at=("validated_at", "max"), evaluated=("evaluated", "sum"), passed=("passed", "sum"))
           .reset_index())
    out["pass_rate_pct"] = _pct(out["passed"], out["evaluated"])
    return out.sort_values(["validated_at", "validation_id"], kind="mergesort")[cols].reset_index(drop=True)


def queue_table(consumer_status: pd.DataFrame, duplicated_ranges: pd.DataFrame,
                unconsumed_ranges: pd.DataFrame) -> pd.DataFrame:
    """Per queue (and client) of the run: status, offsets, lag, duplicated offsets (once) and unconsumed per kind."""
    cols = [*SERIES_KEY, "consume_mode", "status", "committed_offset", "min_offset", "max_offset", "lag", "inflight",
            "duplicated", *UNCONSUMED_KINDS]
    if not len(consumer_status):
        return pd.DataFrame(columns=cols)
    out = consumer_status.reindex(columns=[*SERIES_KEY, "consume_mode", "status", "committed_offset", "min_offset",
                                           "max_offset", "lag", "inflight"]).copy()  # a run before consume modes: none
    dup = union_ranges(duplicated_ranges, SERIES_KEY)
    d = dup.groupby(SERIES_KEY)["messages"].sum().rename("duplicated").reset_index() if len(dup) else \
        pd.DataFrame(columns=[*SERIES_KEY, "duplicated"])
    out = out.merge(d, on=SERIES_KEY, how="left")
    out = out.merge(count_by(unconsumed_ranges, SERIES_KEY, "kind", UNCONSUMED_KINDS, "messages"), on=SERIES_KEY,
                    how="left")
    for c in ["duplicated", *UNCONSUMED_KINDS]:
        out[c] = as_counts(out[c])
    out["_st"] = out["status"].map(STATUS_RANK).fillna(0)
    out["_lost"] = out[list(LOST_KINDS)].sum(axis=1)
    out = out.sort_values(["_st", "_lost", "duplicated", "lag", *SERIES_KEY],
                          ascending=[False, False, False, False, True, True, True, True, True, True], kind="mergesort")
    return out[cols].reset_index(drop=True)


def since_per_queue(samples: pd.DataFrame) -> pd.DataFrame:
    """Per queue (and client): when its current trouble began, the first snapshot of the trailing run of samples
    with lag or with the committed offset below Min (null when the newest sample has neither). The samples are the
    run's stored window (gold/status_samples), so a trouble older than them shows their first snapshot."""
    cols = [*SERIES_KEY, "since"]
    if not len(samples):
        return pd.DataFrame(columns=cols)
    s = samples.sort_values([*SERIES_KEY, "snapshot_ts"], kind="mergesort").reset_index(drop=True)
    lag = pd.to_numeric(s["lag"], errors="coerce").fillna(0)
    below = pd.to_numeric(s["committed_offset"], errors="coerce") < pd.to_numeric(s["min_offset"], errors="coerce")
    bad = (lag > 0) | below
    key = s[SERIES_KEY].astype(str).agg("\x1f".join, axis=1)
    # a run of equal "bad" values per key; the trailing one is the one that holds at the newest sample
    run = (bad != bad.groupby(key).shift()).groupby(key).cumsum()
    s = s.assign(_key=key, _bad=bad, _run=run)
    last = s.groupby("_key").tail(1)
    trailing = s.merge(last[["_key", "_run"]], on=["_key", "_run"])
    out = trailing.groupby("_key").agg(**{c: (c, "first") for c in SERIES_KEY}, since=("snapshot_ts", "min"),
                                       _bad=("_bad", "first")).reset_index(drop=True)
    out.loc[~out["_bad"].astype(bool), "since"] = pd.NaT
    return out[cols]


def snapshot_time(runs: pd.DataFrame) -> pd.Series:
    """Each run's newest snapshot judged, else (a ledger row written before it was recorded) its as-of time."""
    newest = runs["newest_snapshot"] if "newest_snapshot" in runs.columns else pd.Series(None, index=runs.index)
    return pd.to_datetime(newest, utc=True).fillna(pd.to_datetime(runs["as_of"], utc=True))


def first_seen(ranges: pd.DataFrame, history: pd.DataFrame, runs: pd.DataFrame, kind: str) -> pd.DataFrame:
    """``ranges`` (one run's) with ``first_seen``: the newest snapshot of the earliest of the recent runs that
    reported a range of the same key and ``kind`` (evidence or kind) meeting it: when the finding first appeared."""
    if not len(ranges):
        return ranges.assign(first_seen=pd.Series(dtype="object"))
    runs = runs.assign(as_of=snapshot_time(runs))
    h = history.merge(runs[["run_id", "as_of"]], on="run_id", how="inner") if len(history) else \
        pd.DataFrame(columns=[*SERIES_KEY, "start_offset", "end_offset", "as_of"])
    cols = [*SERIES_KEY, *([kind] if kind in h.columns else [])]
    r = ranges.reset_index(drop=True).reset_index()
    m = r[["index", *cols, "start_offset", "end_offset"]].merge(
        h[[*cols, "start_offset", "end_offset", "as_of"]].rename(columns={"start_offset": "_s", "end_offset": "_e"}),
        on=cols, how="inner")
    m = m[(m["_s"].astype("int64") <= m["end_offset"].astype("int64"))
          & (m["_e"].astype("int64") >= m["start_offset"].astype("int64"))]
    seen = pd.to_datetime(m.groupby("index")["as_of"].min(), utc=True)
    return ranges.reset_index(drop=True).assign(first_seen=list(seen.reindex(range(len(ranges)))))


def group_since(overview: pd.DataFrame, queue_since: pd.DataFrame, consumer_status: pd.DataFrame,
                dup_seen: pd.DataFrame, unc_seen: pd.DataFrame, dlq: pd.DataFrame) -> pd.Series:
    """Per overview row, when its trouble began: the earliest of its queues' :func:`since_per_queue` (for a status
    other than OK), the first sighting of its lost or duplicated ranges, and the last attempt of its messages in or
    blocking on the way to the DLQ. Null for a group with nothing to report."""
    parts = []
    if len(queue_since) and len(consumer_status):
        bad = consumer_status[consumer_status["status"] != "OK"][SERIES_KEY].merge(queue_since, on=SERIES_KEY)
        parts.append(bad[[*GROUP, "since"]])
    if len(dup_seen):
        parts.append(dup_seen[[*GROUP, "first_seen"]].rename(columns={"first_seen": "since"}))
    if len(unc_seen):
        lost = unc_seen[unc_seen["kind"].isin(LOST_KINDS)]
        parts.append(lost[[*GROUP, "first_seen"]].rename(columns={"first_seen": "since"}))
    if len(dlq):
        held = dlq[dlq["reason"].isin(("IN_DLQ", "BLOCKING_COMMIT"))]
        parts.append(held[[*GROUP, "last_attempt_ts"]].rename(columns={"last_attempt_ts": "since"}))
    parts = [p for p in parts if len(p)]
    if not parts or not len(overview):
        return pd.Series([pd.NaT] * len(overview), index=overview.index, dtype="datetime64[ns, UTC]")
    allp = pd.concat(parts, ignore_index=True)
    allp["since"] = pd.to_datetime(allp["since"], utc=True)
    first = allp.dropna(subset=["since"]).groupby(GROUP)["since"].min()
    keys = pd.MultiIndex.from_frame(overview[GROUP])
    return pd.Series(list(first.reindex(keys)), index=overview.index, dtype="datetime64[ns, UTC]")


def short_time(value: Any) -> str:
    """``2026-01-05 00:30`` (UTC, to the minute): a time in a narrow table column; empty for null."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    return reports.format_ts(value)[:16].replace("T", " ")


def time_lag_text(seconds: Any) -> str:
    """``2 h 05 min``, ``45 s``: a time lag people read at a glance."""
    try:
        s = int(seconds)
    except (TypeError, ValueError):
        return ""
    if s <= 0:
        return "0"
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m:02d} min"
    return f"{m} min {sec:02d} s" if m else f"{sec} s"


def is_worth_plotting(row: dict[str, Any]) -> bool:
    """A queue with something to see: a status other than OK, lag, duplicated or unconsumed offsets."""
    return (row["status"] != "OK" or int(row["lag"] or 0) != 0 or int(row["duplicated"]) > 0
            or any(int(row[k]) for k in UNCONSUMED_KINDS))


# ---------------------------------------------------------------------------------------------- render


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#20232a;color:#fff;padding:12px 24px}header a{color:#9cdcfe;margin-right:18px;text-decoration:none}
header b{margin-right:24px}main{padding:8px 24px 40px}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0;background:#fff}td,th{border:1px solid #d0d0d0;padding:3px 8px;
text-align:left;font-size:12px}th{background:#eef0f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.CRITICAL,.REWIND,.STALL,.EXPIRED,.SKIPPED,.IN_DLQ,.BLOCKING_COMMIT,.fail{color:#b00020;font-weight:600}
.WARNING,.WARN,.RETRYING{color:#a35200;font-weight:600}.OK,.pass{color:#0a7d32}.muted{color:#666}
.plot svg{max-width:100%;height:auto}.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;
border:1px solid #d0d0d0;padding:8px 14px;min-width:120px}.card b{display:block;font-size:20px}
td[data-col=why]{min-width:220px;max-width:420px;white-space:normal}.run{background:#fff;border:1px solid #d0d0d0;
padding:6px 12px}.note{background:#fff4e5;border:1px solid #e0a800;padding:6px 12px}pre.cmd{background:#20232a;
color:#e8e8e8;padding:8px 12px;overflow-x:auto;font-size:12px;user-select:all}.todo li{margin:4px 0}"""

_PAGES = [("index.html", "Overview"), ("runs.html", "Runs"), ("audit.html", "Audit"),
          ("trends.html", "Trends over runs"), ("quality.html", "Data quality"), ("coverage.html", "Not checked")]

# spec §4.2: what each coverage reason means for the reports (gold/coverage, jobs.rules.coverage)
COVERAGE_MEANS = {
    "NO_CONSUME_QUEUE": "the newest snapshot has no consume queue data for the queue: Min and Max unknown, status "
                        "UNKNOWN; no BACKLOG, correction or lag for it",
    "COMPACTION_TOPIC": "a compaction topic: offsets below Min are still served and compaction leaves gaps; no "
                        "EXPIRED, SKIPPED or BELOW_MIN is reported for it",
    "TIERED": "tiered storage: Min is the tier's when lower (offsets below the local Min are still served)",
    "BATCH_CQ": "a BatchCQ topic: bounds from the batch consume queue; the inner messages of a batch are not read, "
                "so trace findings cover only each batch's first offset",
    "STALE_JSON_IGNORED": "the broker keeps its config in RocksDB: the JSON files beside it are stale and not read",
    "STATIC_TOPIC": "a static topic: clients see logical queues, the broker physical ones; checked from the broker's "
                    "offsets only",
    "DLEDGER": "a DLedger commitlog: not decoded, the broker's groups are checked from their offsets only",
    "LMQ": "light message queues: bounds as the files give them, the message at an LMQ offset unknown",
    "NO_TRACE": "no delivery in the trace topic: offsets only (no TRACE duplicates, SKIPPED, RETRYING or "
                "BLOCKING_COMMIT can be found)",
}
COVERAGE_SHOWN = ["reason", "cluster", "broker", "topic", "consumer_group", "queue_id", "detail"]


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _href(path: str) -> str:
    """A relative link as an attribute value: URL-quoted (a name may hold '#', '?', '%' or a quote), then escaped."""
    return _esc(urllib.parse.quote(path, safe="/"))


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _digest(*parts: Any) -> str:
    """64 bits of a hash of the parts as a JSON list: no two lists give one text, and a collision is out of reach."""
    return hashlib.blake2b(json.dumps([str(p) for p in parts]).encode(), digest_size=8).hexdigest()


def _readable(text: str) -> str:
    return _UNSAFE.sub("_", text).lstrip(".")[:80]


def file_stem(name: str) -> str:
    """A file name for a table's CSV: the table name when it is a short run of safe characters, else its safe
    characters and a hash (names hold topics and brokers from input files: '/', '..', newlines, any length)."""
    readable = _readable(name)
    return name if readable == name and name else f"{readable}-{_digest(name)}"


def _drawn(text: Any) -> str:
    """Text from data as matplotlib must draw it, literally: ``$`` escaped (else ``app$\\foo{$`` is mathtext and
    the plot fails), control characters shown as escapes (a font has no glyph for them)."""
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))
    return shown.replace("$", r"\$")


def _fmt(v: Any) -> str:
    """Whole numbers with thousands separators, percentages as given, timestamps ISO UTC, nulls empty."""
    if v is None or (isinstance(v, float) and v != v) or v is pd.NaT:
        return ""
    if isinstance(v, (pd.Timestamp, dt.datetime)):
        return reports.format_ts(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{v:,.2f}"
    return str(v)


def freshness(run: dict[str, Any]) -> str:
    """The newest snapshot the run judged (``newest_snapshot``, else its as-of time: a scheduled run's as-of is its
    logical date, later than the snapshots) and how old it was when the run completed; the page then says how old it
    is now (an inline script: the site is static and works offline, no network)."""
    newest = run.get("newest_snapshot")
    as_of = pd.Timestamp(newest if newest is not None and pd.notna(newest) else run["as_of"])
    as_of = as_of.tz_localize("UTC") if as_of.tzinfo is None else as_of.tz_convert("UTC")
    done = pd.Timestamp(run["completed_at"]) if run.get("completed_at") is not None else None
    if done is not None:
        done = done.tz_localize("UTC") if done.tzinfo is None else done.tz_convert("UTC")
    iso = reports.format_ts(as_of)
    when = (f"; {time_lag_text((done - as_of).total_seconds())} old when the run completed"
            if done is not None and pd.notna(done) else "")
    return (f"<span data-field='as_of'>newest snapshot judged {_esc(iso)}</span>{when}"
            f"<span class='age' data-age-since='{_esc(iso)}'></span>")


_AGE_SCRIPT = ("<script>for(const e of document.querySelectorAll('[data-age-since]')){const s=(Date.now()-"
               "Date.parse(e.dataset.ageSince))/1000;const h=Math.floor(s/3600),m=Math.floor(s%3600/60);"
               "e.textContent='; '+(h>=48?Math.floor(h/24)+' d':h?h+' h '+String(m).padStart(2,'0')+' min':m+' min')"
               "+' old now';}</script>")


def _page(title: str, run: dict[str, Any], body: list[str], depth: int = 0, note: str = "") -> str:
    """A page: the navigation, which run it shows (its kind, as-of time and freshness), ``note`` (a run that is not
    the current one says so and links the current one), the body."""
    up = "../" * depth
    nav = "".join(f"<a href='{up}{href}'>{_esc(name)}</a>" for href, name in _PAGES)
    label = run_label(run)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_esc(title)} - rmq-recon</title><style>{_CSS}</style></head><body>"
            f"<header><b>rmq-recon dashboard</b>{nav}</header><main>"
            f"<p class='run' data-run='{_esc(run['run_id'])}' data-kind='{_esc(kind_of(run.get('kind'), run['run_id']))}'>"
            f"<b data-field='run_label'>{_esc(label)}</b> <span class='muted'>{_esc(run['run_id'])}</span>; "
            f"{freshness(run)}</p>{note}<h1>{_esc(title)}</h1>"
            + "\n".join(body) + f"</main>{_AGE_SCRIPT}</body></html>\n")


class Site:
    """The files of the site being built (relative path -> text), and the CSVs of tables too long to show whole."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.corrected: set[tuple[str, str]] = set()  # (cluster, broker) of the run's corrected offset files

    def table(self, df: pd.DataFrame, columns: list[str], *, name: str, depth: int = 0,
              link: Callable[[dict[str, Any]], str | None] | None = None, max_rows: int = MAX_ROWS,
              classed: Iterable[str] = ("severity", "status", "kind", "reason", "evidence", "result")) -> str:
        """An HTML table; past ``max_rows`` rows it says how many are left out and links the whole table as CSV.

        ``link(row)`` gives the href of the first cell. Each table has ``data-table=name`` for the tests.
        """
        if not len(df):
            return f"<p class='muted' data-table='{_esc(name)}' data-rows='0'>none</p>"
        classed = set(classed)
        out = [f"<table data-table='{_esc(name)}' data-rows='{len(df)}'><tr>"
               + "".join(f"<th>{_esc(c)}</th>" for c in columns) + "</tr>"]
        for r in df.head(max_rows).to_dict("records"):
            cells = []
            for i, c in enumerate(columns):
                r.setdefault(c, None)  # a column a run of an earlier release did not write
                text = _esc(_fmt(r[c]))
                if i == 0 and link is not None and link(r):
                    text = f"<a href='{_href(link(r))}'>{text}</a>"
                num = isinstance(r[c], (int, float, np.integer, np.floating)) and not isinstance(r[c], bool)
                cls = []
                if c in classed:
                    cls.append(_esc(str(r[c])))
                if num:
                    cls.append("n")
                attr = f" class='{' '.join(cls)}'" if cls else ""
                cells.append(f"<td data-col='{_esc(c)}'{attr}>{text}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
        if len(df) > max_rows:
            stem, n = file_stem(name), 1
            csv_name = f"csv/{stem}.csv"
            while csv_name in self.files:  # two tables whose names give one file name: neither overwrites the other
                n += 1
                csv_name = f"csv/{stem}-{n}.csv"
            self.files[csv_name] = reports.to_csv(df, columns, columns[:1])
            out.append(f"<p class='muted' data-left-out='{len(df) - max_rows}'>showing the first {max_rows:,} of "
                       f"{len(df):,} rows; {len(df) - max_rows:,} left out: every row in "
                       f"<a href='{_href('../' * depth + csv_name)}'>{_esc(csv_name)}</a></p>")
        return "\n".join(out)


def _svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG: text as text, no dates or random ids (same input, same bytes)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return "<div class='plot'>" + text[text.index("<svg"):] + "</div>"


def _mpl() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "rmq-recon", "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _naive(ts: pd.Series) -> pd.Series:
    ts = pd.to_datetime(ts, utc=True)
    return ts.dt.tz_convert("UTC").dt.tz_localize(None)


def plot_audit(by_hour: pd.DataFrame, title: str) -> str:
    return _svg(audit_figure(by_hour, title))


def audit_figure(by_hour: pd.DataFrame, title: str) -> Any:
    """Headline: completeness % and duplicate % per store hour (bars: messages stored); the legend beside the
    axes, never over the bars."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    x = _naive(by_hour["hour"])
    ax2 = ax.twinx()
    bars = ax2.bar(x, by_hour["stored"], width=1 / 24 * 0.8, color="#d9e2ef", label="stored", zorder=0)
    ax2.set_ylabel("messages stored")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    a = ax.plot(x, by_hour["completeness_pct"], marker="o", color="#0a7d32", label="completeness %")
    b = ax.plot(x, by_hour["duplicate_pct"], marker="s", color="#b00020", label="duplicate %")
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(_drawn(title))
    ax.legend(handles=[*a, *b, bars], loc="upper left", bbox_to_anchor=(1.12, 1.0), borderaxespad=0)
    fig.autofmt_xdate()
    return fig


def plot_trends(trends: pd.DataFrame) -> str:
    return _svg(trends_figure(trends))


def trends_figure(trends: pd.DataFrame) -> Any:
    """Duplicated, unconsumed and DLQ counts per run, and queues per status per run (legends below the axes)."""
    plt = _mpl()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    x = list(range(len(trends)))
    labels = [_drawn(reports.format_ts(t)[:16].replace("T", " ")) for t in trends["as_of"]]
    for col, color in (("duplicated", "#b00020"), ("unconsumed", "#a35200"), ("dlq", "#5b2a86")):
        a.plot(x, trends[col], marker="o", label=col, color=color)
    a.set_title("offsets and messages per run")
    bottom = pd.Series(0, index=trends.index)
    for st, color in zip(STATUSES, ("#9e9e9e", "#0a7d32", "#e0a800", "#d9534f", "#6f1d1b")):
        if st not in trends.columns:  # UNKNOWN came with spec §4.2
            continue
        b.bar(x, trends[st], bottom=bottom, label=st, color=color)
        bottom = bottom + trends[st]
    b.set_title("queues per status")
    for ax in (a, b):
        ax.set_xticks(x, labels, rotation=30, ha="right")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncols=4, frameon=False)
    return fig


def plot_quality(trend: pd.DataFrame) -> str:
    return _svg(quality_figure(trend))


def quality_figure(trend: pd.DataFrame) -> Any:
    """Pass rate per validation run, each labelled by its time in full (ids are long and were cut)."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(9, 2.8))
    x = list(range(len(trend)))
    ax.plot(x, trend["pass_rate_pct"], marker="o", color="#0a7d32", label="expectations passed %")
    ax.set_ylim(0, 105)
    ax.set_ylabel("passed %")
    ax.set_xticks(x, [_drawn(reports.format_ts(t)[:19].replace("T", " ")) for t in trend["validated_at"]],
                  rotation=30, ha="right")
    ax.set_title("pass rate per validation run (by validation time)")
    return fig


def plot_timeline(samples: pd.DataFrame, dup: pd.DataFrame, unc: pd.DataFrame, title: str) -> str:
    return _svg(timeline_figure(samples, dup, unc, title))


def timeline_figure(samples: pd.DataFrame, dup: pd.DataFrame, unc: pd.DataFrame, title: str) -> Any:
    """Committed offset against Min and Max over the snapshots (lag shaded between), REWIND (a drop of the
    committed offset) and EXPIRED (committed below Min) marked; duplicated and unconsumed ranges as bands, each
    kind of band in the legend (beside the axes)."""
    from matplotlib.patches import Patch

    plt = _mpl()
    s = samples.sort_values("snapshot_ts", kind="mergesort")
    x = _naive(s["snapshot_ts"])
    fig, ax = plt.subplots(figsize=(8, 2.8))
    bands: dict[str, str] = {}
    for r in dup.to_dict("records"):
        ax.axhspan(r["start_offset"], r["end_offset"] + 1, color="#b00020", alpha=0.15, lw=0)
        bands["duplicated range"] = "#b00020"
    for r in unc.to_dict("records"):
        backlog = r["kind"] == "BACKLOG"
        color = "#e0a800" if backlog else "#5b2a86"
        ax.axhspan(r["start_offset"], r["end_offset"] + 1, color=color, alpha=0.15, lw=0)
        bands["BACKLOG range" if backlog else "lost range"] = color
    ax.plot(x, s["max_offset"], color="#1f77b4", label="Max", lw=1.2)
    ax.plot(x, s["min_offset"], color="#7f7f7f", label="Min", lw=1.2, ls="--")
    ax.plot(x, s["committed_offset"], color="#111", label="committed", marker=".", lw=1.5)
    ax.fill_between(x, s["committed_offset"], s["max_offset"], color="#1f77b4", alpha=0.12, label="lag")
    c = s["committed_offset"].tolist()
    rew = [i for i in range(1, len(c)) if c[i] < c[i - 1]]
    if rew:
        ax.scatter(x.iloc[rew], s["committed_offset"].iloc[rew], marker="v", s=60, color="#b00020", zorder=5,
                   label="REWIND")
    exp = (s["committed_offset"] < s["min_offset"]).to_numpy()
    if exp.any():
        ax.scatter(x[exp], s["committed_offset"][exp], marker="X", s=50, color="#5b2a86", zorder=5, label="EXPIRED")
    ax.set_title(_drawn(title), fontsize=9)
    ax.set_ylabel("offset")
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(color=color, alpha=0.3, label=name) for name, color in bands.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.autofmt_xdate()
    return fig


def group_slug(cluster: str, group: str) -> str:
    """A file name for a group's page, whatever the names hold: at most 80 safe characters (no '/', no leading
    '.') and a hash of the pair, so two groups never share a page (``a_``/``_/b`` and ``a_/_``/``b`` both read
    ``a_____b``)."""
    return f"{_readable(f'{cluster}__{group}')}-{_digest(cluster, group)}"


# What an operator does about each kind of finding (the group page lists those its group has).
WHAT_TO_DO = {
    "EXPIRED": "Deleted by retention before the group consumed them: lost. Replay them from the producers or a backup "
               "if the business needs them; the BELOW_MIN correction moves the group to Min.",
    "SKIPPED": "The committed offset moved past them without consumption (a reset, skipAccumulatedMessage): reset the "
               "group back to the range's start (mqadmin resetOffsetByTime) if they must be processed.",
    "BROADCAST_DROPPED": "A broadcast client failed them and broadcast mode never retries: send them to that client "
                         "again or process them by hand.",
    "POP_LOST": "Popped by a POP consumer, never acked, and the broker could not revive them (the original had "
                "expired before its invisible time ran out, or the checkpoint was dropped): lost. Replay them from the "
                "producers; give the consumers an invisible time they can finish in.",
    "IN_DLQ": "Failed retryMaxTimes times and stored in %DLQ%<group>: look each one up (command below), fix the cause, "
              "then resend it from the DLQ.",
    "RETRYING": "Failing and retrying: it reaches the DLQ at the ETA shown unless it succeeds; read the consumer's "
                "errors for its key.",
    "ORDERLY_BLOCKED": "An orderly queue's head fails every time: the client retries it locally (every second, "
                       "no retry copy, never the DLQ for a 4.x client) and the queue waits behind it. Fix the cause "
                       "for its key, or skip it (resetOffsetByTime past it) if the order allows.",
    "TRANSACTION_DISCARDED": "A transaction's half message was checked transactionCheckMax times without an answer "
                             "and discarded: the producer (producer_group) never committed nor rolled it back. Ask "
                             "its owners whether it must be sent again.",
    "BLOCKING_COMMIT": "In flight longer than consumeTimeout: it pins the committed offset, so a restart delivers "
                       "everything after it again. Find the stuck consumer thread (jstack) or restart that client.",
    "corrections": "Committed offsets outside [Min, Max]: run the mqadmin lines below (RocketMQ 5.1+; set the "
                   "variables first), or offline replace the broker's consumerOffset.json with the corrected one.",
    "REWIND": "The committed offset went back (a reset, a commit lost in a rebalance): the range is delivered again; "
              "the consumers must be idempotent for it.",
    "STALL": "The committed offset has not moved while messages wait: check that the group's consumers run and are "
             "not blocked (a BLOCKING_COMMIT row names the message).",
    "WARN": "Lag never shrank over the window: the consumers are slower than the producers; add consumers or queues.",
    "duplicated": "Delivered twice: HEAD_BLOCKED and UNPERSISTED are RocketMQ's at-least-once semantics (make the "
                  "consumers idempotent), REWIND an operator's reset, POP_LATE_ACK a POP consumer that acked after its "
                  "invisible time (the broker had delivered it again: raise the invisible time).",
}


def consume_modes(consumer_status: pd.DataFrame) -> str:
    """A group's consume mode per topic (spec §4.1): ``ORDERLY (TopicA), CONCURRENT (%RETRY%G)``; one word when every
    topic has the same; ``unknown`` for a run before the modes were reported."""
    if not len(consumer_status) or "consume_mode" not in consumer_status.columns:
        return "unknown"
    pairs = consumer_status[["topic", "consume_mode"]].dropna().drop_duplicates().sort_values(["topic"])
    if not len(pairs):
        return "unknown"
    if pairs["consume_mode"].nunique() == 1:
        return str(pairs["consume_mode"].iloc[0])
    return ", ".join(f"{m} ({t})" for t, m in zip(pairs["topic"], pairs["consume_mode"]))


def findings(r: dict[str, Any]) -> list[str]:
    """The kinds of finding an overview row has, in :data:`WHAT_TO_DO`'s order."""
    counts = {"corrections": int(r["corrections"]), "duplicated": int(r["duplicated"]),
              **{k: int(r.get(k, 0)) for k in (*LOST_KINDS, "IN_DLQ", "RETRYING", "BLOCKING_COMMIT", "ORDERLY_BLOCKED",
                                                        "TRANSACTION_DISCARDED")}}
    return [k for k in WHAT_TO_DO if counts.get(k, 0) > 0 or r["status"] == k]


def lookup_command(r: dict[str, Any]) -> str:
    """The mqadmin line that shows a DLQ candidate's stored copy: the DLQ's copy for IN_DLQ, else the original's."""
    topic = f"%DLQ%{r['consumer_group']}" if r["reason"] == "IN_DLQ" else r["topic"]
    return f"mqadmin queryMsgByUniqueKey -n \"$NAMESRV\" -t {reports._sh(topic)} -i {reports._sh(r['uniq_key'])}"


OVERVIEW_SHOWN = ["consumer_group", "severity", "why", "since", "status", "time_lag", "duplicated", "lost", "BACKLOG",
                  "dlq", "corrections", "queues", "cluster"]


def render(data: dict[str, Any]) -> dict[str, str]:
    """Every file of the site (relative path -> text) from :func:`extract`'s frames."""
    site = Site()
    run, cur = dict(data["run"]), data["current"]
    runs = data["runs"]
    if len(cur["consumer_status"]) and "snapshot_ts" in cur["consumer_status"].columns:
        run["newest_snapshot"] = pd.to_datetime(cur["consumer_status"]["snapshot_ts"], utc=True).max()
    overview = group_overview(cur["consumer_status"], cur["duplicated_ranges"], cur["unconsumed_ranges"],
                              cur["dlq_candidates"], cur["offset_corrections"])
    trend_runs = runs
    dup_seen = first_seen(cur["duplicated_ranges"], data["trend"]["duplicated_ranges"], trend_runs, "evidence")
    unc_seen = first_seen(cur["unconsumed_ranges"], data["trend"]["unconsumed_ranges"], trend_runs, "kind")
    queue_since = since_per_queue(cur["status_samples"])
    overview["since"] = [short_time(t) for t in group_since(overview, queue_since, cur["consumer_status"], dup_seen,
                                                             unc_seen, cur["dlq_candidates"])]
    st = cur["consumer_status"]
    lag = st.groupby(GROUP)["time_lag_s"].max() if len(st) and "time_lag_s" in st.columns else \
        pd.Series(dtype="int64")
    overview["time_lag"] = [time_lag_text(lag.get((c, g), 0)) for c, g in zip(overview["cluster"],
                                                                               overview["consumer_group"])]
    rows = audit_rows(cur["audit_hours"], cur["consumer_status"], cur["duplicated_ranges"], cur["unconsumed_ranges"])
    per_group_hour = audit(rows)
    per_hour = audit(rows, by=["hour"])
    trends = run_trends(runs, **data["trend"])
    report_path = f"../{run['run_id']}/"  # the run's report folder, beside the dashboard's
    note = _not_current_note(run, data.get("current_id"), runs)
    counts = {s: int((overview["severity"] == s).sum()) for s in SEVERITIES}
    body = ["<div class='cards'>" + "".join(
        f"<div class='card {s}' data-card='{s}'><b>{counts[s]:,}</b>{s} groups</div>" for s in reversed(SEVERITIES))
        + f"<div class='card' data-card='duplicated'><b>{int(overview['duplicated'].sum()):,}</b>duplicated offsets"
          "<br><span class='muted'>each counted once</span></div>"
        + f"<div class='card' data-card='lost'><b>{int(overview['lost'].sum()):,}</b>messages lost</div>"
        + f"<div class='card' data-card='dlq'><b>{int(overview['dlq'].sum()):,}</b>DLQ candidates<br>"
          "<span class='muted'>in or on the way to a DLQ</span></div></div>"]
    if len(per_hour):
        body.append(plot_audit(per_hour, "all groups: completeness and duplicates per store hour"))
    body.append("<h2>Groups by severity</h2><p class='muted'>CRITICAL: messages lost (EXPIRED, SKIPPED, "
                "BROADCAST_DROPPED, POP_LOST), in the DLQ or blocking the commit, offsets to correct, or a REWIND/STALL queue; "
                "WARNING: duplicated offsets (each counted once, whatever the evidence), RETRYING messages or a WARN "
                "queue. <b>since</b>: when the trouble began (the first snapshot of a queue's lag or loss, the first "
                "run that saw a range, a DLQ message's last attempt); <b>time lag</b>: how long the oldest waiting "
                "message has waited; the status is Burrow's, per queue (the worst shown).</p>")
    body.append(site.table(overview, OVERVIEW_SHOWN, name="overview",
                           link=lambda r: f"groups/{group_slug(r['cluster'], r['consumer_group'])}.html",
                           max_rows=max(MAX_ROWS, len(overview))))
    cov = cur.get("coverage")
    if cov is not None and len(cov):
        body.append(f"<p data-field='not-checked'><a href='coverage.html'>{len(cov):,} things this run could not "
                    "check</a> (store types, queues without bounds, groups without traces): their findings are left "
                    "out, not guessed.</p>")
    files_list = [f for f in _run_files(run) if f != "_SUCCESS"]
    site.corrected = {(p[1], p[2]) for p in (f.split("/") for f in files_list)
                      if len(p) == 4 and p[0] == "corrected" and p[3] == "consumerOffset.json"}
    body.append("<h2>This run's files</h2><ul>" + "".join(
        f"<li><a href='{_href(report_path + f)}'>{_esc(f)}</a></li>" for f in files_list) + "</ul>")
    site.files["index.html"] = _page("Consumer groups by severity", run, body, note=note)

    # runs
    site.files["runs.html"] = _page("Runs", run, _runs_body(site, runs, run, data.get("current_id")), note=note)

    # audit
    body = []
    if len(per_hour):
        body.append(plot_audit(per_hour, "all groups: completeness and duplicates per store hour"))
    body.append("<p class='muted'>Per group and store hour: messages stored, delivered (trace), committed past "
                "(below the committed offset), consumed, duplicated and never consumed (EXPIRED, SKIPPED, "
                "BROADCAST_DROPPED, POP_LOST); completeness = consumed / stored, duplicates = duplicated / stored.</p>")
    body.append(site.table(per_group_hour, AUDIT_COLUMNS, name="audit"))
    site.files["audit.html"] = _page("Audit per group and hour", run, body, note=note)

    # trends
    body = [plot_trends(trends) if len(trends) else "", site.table(trends, TREND_COLUMNS, name="trends")]
    site.files["trends.html"] = _page(f"Trends over the last {len(trends)} runs", run, body, note=note)

    # quality
    site.files["quality.html"] = _page("Data quality", run, _quality_body(site, data["validation"]), note=note)

    # what the run could not check (spec §4.2)
    site.files["coverage.html"] = _page("What this run could not check", run, _coverage_body(site, cur.get("coverage")),
                                        note=note)

    # groups
    seen = {"dup": dup_seen, "unc": unc_seen, "queues": queue_since}
    for r in overview.to_dict("records"):
        slug = group_slug(r["cluster"], r["consumer_group"])
        site.files[f"groups/{slug}.html"] = _page(f"{r['consumer_group']} ({r['cluster']})", run,
                                                  _group_body(site, r, cur, rows, slug, seen, report_path),
                                                  depth=1, note=note)
    return site.files


def _coverage_body(site: Site, rows: pd.DataFrame | None) -> list[str]:
    """gold/coverage of the run: per reason what it means and where (spec §4.2)."""
    if rows is None or not len(rows):
        return ["<p data-field='coverage-none'>Every queue, topic and group of this run was checked by the rules as "
                "written (a 4.x store, traced groups).</p>"]
    counts = rows.groupby("reason").size()
    body = ["<p class='muted'>Where the files cannot support a finding the report says so here instead of guessing: "
            "the findings named are left out, the rest is reported as usual.</p>",
            "<table data-table='coverage-reasons'><tr><th>reason</th><th>rows</th><th>what it means</th></tr>"
            + "".join(f"<tr><td>{_esc(r)}</td><td>{int(n)}</td><td>{_esc(COVERAGE_MEANS.get(str(r), ''))}</td></tr>"
                      for r, n in counts.items()) + "</table>"]
    shown = rows.assign(queue_id=rows["queue_id"].map(lambda v: "" if pd.isna(v) else int(v)))
    shown = shown.sort_values(["reason", "cluster", "broker", "topic", "consumer_group"], kind="mergesort")
    body.append(site.table(shown, COVERAGE_SHOWN, name="coverage", max_rows=max(MAX_ROWS, len(shown))))
    return body


def _not_current_note(run: dict[str, Any], current_id: str | None, runs: pd.DataFrame) -> str:
    """A run that is not the current one says so on every page, and where the current state is."""
    if current_id is None or run["run_id"] == current_id:
        return ""
    cur = runs[runs["run_id"] == current_id]
    where = (f" The current state is the {_esc(run_label(cur.iloc[-1].to_dict()))} "
             f"<span class='muted'>{_esc(current_id)}</span> as of {_esc(reports.format_ts(cur.iloc[-1]['as_of']))}."
             if len(cur) else "")
    return (f"<p class='note' data-note='not-current'>This site shows the {_esc(run_label(run))}, not the current "
            f"state of the fleet.{where}</p>")


def _runs_body(site: Site, runs: pd.DataFrame, shown: dict[str, Any], current_id: str | None) -> list[str]:
    """Every recent run, newest first, with its kind and a link to its own report page."""
    t = runs.sort_values(["as_of", "completed_at", "run_id"], ascending=False, kind="mergesort").copy()
    t["run"] = [run_label(r) for r in t.to_dict("records")]
    t["page"] = [f"../{r}/index.html" for r in t["run_id"]]  # quoted by the table's link
    t["on this site"] = ["current" if r == current_id else ("shown" if r == shown["run_id"] else "")
                         for r in t["run_id"]]
    return ["<p class='muted'>The overview shows the current run: the newest scheduled run by as-of time (without "
            "one, the newest run over every group at its newest snapshot). Ad-hoc runs (an as-of time or groups "
            "asked for) and backfills keep their own report pages: follow the run id. <code>rmq-recon dashboard "
            "--run-id ID</code> builds this site for another run.</p>",
            site.table(t.assign(newest_snapshot=snapshot_time(t)),
                       ["run_id", "run", "newest_snapshot", "as_of", "completed_at", "on this site"], name="runs",
                       link=lambda r: r["page"], max_rows=max(MAX_ROWS, len(t)))]


def _run_files(run: dict[str, Any]) -> list[str]:
    try:
        folder = run["report_dir"]
        return sorted(storage.relative(u, folder) for u in storage.list_keys(folder.rstrip("/") + "/"))
    except Exception:  # noqa: BLE001 - a moved report folder must not stop the site
        log.warning("report folder %s of run %s not readable", run.get("report_dir"), run.get("run_id"))
        return []


def _quality_body(site: Site, results: pd.DataFrame | None) -> list[str]:
    if results is None or not len(results):
        return [f"<p data-empty='validation'>{NO_VALIDATION} (gold/validation_results"
                f"{' is empty' if results is not None else ' does not exist'}).</p>"]
    per_table = quality_runs(results)
    trend = quality_trend(per_table)
    body = [plot_quality(trend), "<h2>Per run and table</h2>",
            site.table(per_table, QUALITY_COLUMNS, name="quality_runs")]
    latest = trend["validation_id"].iloc[-1]
    detail = results[results["validation_id"] == latest].copy()
    detail["result"] = detail["success"].map({True: "pass", False: "fail"})
    detail = detail.sort_values(["success", "table_name", "expectation", "column"], kind="mergesort",
                                na_position="first")
    body.append(f"<h2>Expectations of {_esc(latest)}</h2>")
    body.append(site.table(detail, ["table_name", "expectation", "column", "result", "observed_value",
                                    "element_count", "unexpected_count"], name="quality_latest"))
    return body


def _group_body(site: Site, r: dict[str, Any], cur: dict[str, pd.DataFrame], rows: pd.DataFrame,
                slug: str, seen: dict[str, pd.DataFrame], report_path: str) -> list[str]:
    key = (r["cluster"], r["consumer_group"])

    def of_group(df: pd.DataFrame) -> pd.DataFrame:
        if not len(df):
            return df
        return df[(df["cluster"] == key[0]) & (df["consumer_group"] == key[1])]

    st, dup, unc = of_group(cur["consumer_status"]), of_group(cur["duplicated_ranges"]), of_group(cur["unconsumed_ranges"])
    samples = of_group(cur["status_samples"])
    since = r.get("since") or ""
    body = [f"<p>severity <span class='{r['severity']}' data-field='severity'>{r['severity']}</span>; "
            f"<span data-field='why'>{_esc(r['why']) or 'nothing to report'}</span>; Burrow status "
            f"<span class='{_esc(r['status'])}' data-field='status'>{_esc(r['status'])}</span>"
            + (f"; since <span data-field='since'>{_esc(since)}</span>" if since else "") + "</p>"]
    body.append("<p>consume mode <span data-field='consume_mode'>" + _esc(consume_modes(st)) + "</span></p>")
    body.append(site.table(pd.DataFrame([r]), ["since", "time_lag", "queues", "duplicated", "lost", *UNCONSUMED_KINDS,
                                               *DLQ_BOUND, "corrections"], name=f"{slug}-counts"))
    todo = findings(r)
    if todo:
        body.append("<h2>What to do</h2><ul class='todo' data-section='todo'>" + "".join(
            f"<li data-finding='{_esc(k)}'><b>{_esc(k)}</b>: {_esc(WHAT_TO_DO[k])}</li>" for k in todo) + "</ul>")
    body += _corrections_section(site, cur["offset_corrections"], key, slug, "../" + report_path)
    dlq = of_group(cur["dlq_candidates"])
    if len(dlq):
        dlq = dlq.sort_values(dlq_candidates.SORT_KEY, kind="mergesort")
        dlq = dlq.assign(look_up=[lookup_command(x) for x in dlq.to_dict("records")])
    body.append(f"<h2>DLQ candidates ({len(dlq):,})</h2><p class='muted'>each message's stored copy: set NAMESRV to "
                "the cluster's name server and run its look-up line (the DLQ's copy for IN_DLQ).</p>")
    body.append(site.table(dlq, [*dlq_candidates.REPORT_COLUMNS[2:], "look_up"] if len(dlq) else
                           dlq_candidates.REPORT_COLUMNS[2:], name=f"{slug}-DLQ_candidates", depth=1))
    queues = queue_table(st, dup, unc)
    if len(queues) and len(seen["queues"]):
        queues = queues.merge(seen["queues"], on=SERIES_KEY, how="left")
    else:
        queues = queues.assign(since=None)
    pop_note = ("<p class='muted' data-field='pop-note'>POP queues: the committed offset is the next offset to "
                "<i>pop</i>; <b>inflight</b> = popped, not acked and not yet revived at the newest snapshot; the POP "
                "retry topic (%RETRY%&lt;group&gt;_&lt;topic&gt;) is a queue of its own below, its lag the messages "
                "waiting to be popped again.</p>") if len(queues) and (queues["consume_mode"] == "POP").any() else ""
    body.append("<h2>Queues</h2>" + pop_note)
    body.append(site.table(queues, [*SERIES_KEY[2:], "consume_mode", "status", "since", "committed_offset",
                                    "min_offset", "max_offset", "lag", "inflight", "duplicated", *UNCONSUMED_KINDS],
                           name=f"{slug}-queues", depth=1))
    for name, df, cols in (("duplicated ranges", of_group(seen["dup"]), [*duplicated_ranges.REPORT_COLUMNS[2:],
                                                                          "first_seen"]),
                           ("unconsumed ranges", of_group(seen["unc"]), [*unconsumed_ranges.REPORT_COLUMNS[2:],
                                                                          "first_seen"])):
        sort = duplicated_ranges.SORT_KEY if name.startswith("dup") else unconsumed_ranges.SORT_KEY
        df = df.sort_values(sort, kind="mergesort") if len(df) else df
        body.append(f"<h2>{name} ({len(df):,})</h2><p class='muted'>first_seen: the as-of time of the first of the "
                    "recent runs that reported it.</p>")
        body.append(site.table(df, cols, name=f"{slug}-{name.replace(' ', '_')}", depth=1))
    hourly = audit(of_group(rows))
    body.append("<h2>Audit per hour</h2>")
    body.append(site.table(hourly, AUDIT_COLUMNS[2:], name=f"{slug}-audit", depth=1))
    plotted = [q for q in queues.to_dict("records") if is_worth_plotting(q)]
    shown = plotted[:MAX_PLOTS_PER_GROUP]
    body.append(f"<h2>Timelines and why each status</h2><p class='muted' data-plots='{len(shown)}'>"
                f"{len(shown)} of {len(queues)} queues plotted: those with a status other than OK, lag, duplicated or "
                f"unconsumed offsets{', the most severe first' if len(plotted) > len(shown) else ''}"
                + (f"; {len(plotted) - len(shown)} more such queues are not plotted (their rows are in the table "
                   "above)" if len(plotted) > len(shown) else "") + ".</p>")
    for q in shown:
        k = tuple(q[c] for c in SERIES_KEY)

        def of_key(df: pd.DataFrame) -> pd.DataFrame:
            if not len(df):
                return df
            m = pd.Series(True, index=df.index)
            for c, v in zip(SERIES_KEY, k):
                m &= df[c] == v
            return df[m]

        s = of_key(samples)
        label = f"{q['topic']} {q['broker']} q{q['queue_id']}" + (f" client {q['client_id']}" if q["client_id"] else "")
        body.append(f"<h3>{_esc(label)}: <span class='{_esc(q['status'])}'>{_esc(q['status'])}</span></h3>")
        if len(s):
            body.append(plot_timeline(s, of_key(dup), of_key(unc), label))
        win = s[s["in_window"].astype(bool)].sort_values("snapshot_ts", kind="mergesort") if len(s) else s
        body.append(f"<p class='muted'>why {_esc(q['status'])}: the {len(win)} snapshots of the status window "
                    "(oldest first); rules in order: lag 0 at the latest -> OK; a drop of the committed offset not "
                    "recovered -> REWIND; lag in every sample and the offset never moved -> STALL; lag in every "
                    "sample and never shrinking -> WARN; else OK.</p>")
        body.append(site.table(win, ["snapshot_ts", "committed_offset", "min_offset", "max_offset", "lag"],
                               name=f"{slug}-why-{q['topic']}-{q['broker']}-{q['queue_id']}-{q['client_id']}",
                               depth=1))
    return body


def _corrections_section(site: Site, corrections: pd.DataFrame, key: tuple[str, str], slug: str,
                         report_path: str) -> list[str]:
    """The group's offset corrections, their mqadmin lines ready to copy (the run's offset_corrections.sh's own, with
    the variables they read), and links to the corrected consumerOffset.json of each broker. ``report_path``: the
    run's report folder relative to the page."""
    mine = corrections[(corrections["cluster"] == key[0]) & (corrections["consumer_group"] == key[1])] \
        if len(corrections) else corrections
    out = [f"<h2>Offset corrections ({len(mine):,})</h2>"]
    if not len(mine):
        return out + ["<p class='muted'>none</p>"]
    out.append(site.table(mine.sort_values(offset_corrections.SORT_KEY, kind="mergesort"),
                          offset_corrections.REPORT_COLUMNS[2:], name=f"{slug}-corrections", depth=1))
    checks, rows = reports.correction_lines(corrections)  # the whole run's: the script's variable names
    lines = [line for r, row_lines in rows if (r["cluster"], r["consumer_group"]) == key for line in row_lines]
    used = set(re.findall(r"\$([A-Z0-9_]+)", "\n".join(line for line in lines if "mqadmin" in line)))
    setup = [c for c in checks if set(re.findall(r"\b(NAMESRV_[A-Z0-9_]+|BROKER_ADDR_[A-Z0-9_]+)", c)) & used]
    out.append("<p>With RocketMQ 5.1+, set the variables (each line names its cluster or broker) and run these lines, "
               f"or the run's whole <a href='{_href(report_path + 'offset_corrections.sh')}'>offset_corrections.sh"
               "</a>:</p>")
    out.append("<pre class='cmd' data-section='commands'>" + _esc("\n".join(setup + lines)) + "</pre>")
    brokers = sorted(set(mine[mine["client_id"].fillna("") == ""]["broker"]))
    with_file = [b for b in brokers if (key[0], b) in site.corrected]
    if with_file:
        out.append("<p>Offline (broker stopped): the broker's consumerOffset.json with the run's corrections applied: "
                   + ", ".join(f"<a data-corrected='{_esc(b)}' href='{_href(report_path)}"
                               f"{_esc('/'.join(urllib.parse.quote(x, safe='') for x in ('corrected', key[0], b)))}"
                               f"/consumerOffset.json'>{_esc(b)}</a>" for b in with_file) + ".</p>")
    without = [b for b in brokers if b not in with_file]
    if without:
        out.append("<p data-field='no-corrected-file'>No offline file for " + ", ".join(_esc(b) for b in without)
                   + ": the broker keeps its offsets in RocksDB (or the run wrote no file for it); use the mqadmin "
                     "lines above.</p>")
    return out


# ------------------------------------------------------------------------------------------------- run


def run(lake: str, reports_root: str, *, run_id: str | None = None, recent_runs: int = RECENT_RUNS,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build ``<reports_root>/dashboard/`` from the lake's gold and quality tables (local or ``s3://``).

    Idempotent: the same lake gives the same files, published all at once
    (:func:`jobs.reconcile.reports.publish_folder`).

    Returns:
        ``{"dashboard": folder, "index": index uri, "run_id", "files", "seconds"}``.
    """
    say = progress_lines.reporter(progress, log)
    t0 = time.time()
    data = extract(lake, run_id=run_id, recent_runs=recent_runs)
    files = render(data)
    folder = storage.join(reports_root, "dashboard")
    reports.publish_folder(folder, files)
    out = {"dashboard": folder, "index": storage.join(folder, "index.html"), "run_id": data["run"]["run_id"],
           "files": len(files), "seconds": round(time.time() - t0, 2)}
    say(f"dashboard: wrote {out['index']} ({out['files']} files, run {out['run_id']}) in {out['seconds']} s")
    return out

