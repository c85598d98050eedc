"""The dashboard across runs: one self-contained static site per lake, ``<reports>/dashboard/``.

Reads only gold and quality tables, always bounded: the rows of one run (filtered by ``run_id``, at the table
versions its ledger row records) and, for the trends, a few columns of the ``recent_runs`` newest runs. Then pure
pandas transforms compute what the pages show (:func:`group_overview`, :func:`audit`, :func:`run_trends`,
:func:`quality_runs`, each tested on tiny frames with exact rows), and :func:`render` writes HTML with inline CSS
and inline SVG plots drawn by matplotlib (no script, no font or file from the network: it works from ``file://``
and offline). The folder is published all at once through :mod:`jobs.reconcile.reports` /
:mod:`jobs.lake.storage`, so an ``s3://`` reports root works the same.

Pages: ``index.html`` (the headline audit plot and the groups ranked by severity), ``groups/<group>.html`` (per
queue: timeline, "why this status", ranges), ``audit.html`` (per group and hour), ``trends.html`` (over runs),
``quality.html`` (stored validation results). A table longer than ``MAX_ROWS`` shows its first rows, says how many
are left out and links to the whole table as CSV.
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

from jobs.lake import _delta, storage
from jobs.reconcile import reports
from schemas import (
    audit_hours,
    consumer_status,
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
SERIES_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
GROUP = ["cluster", "consumer_group"]
LOST_KINDS = ("EXPIRED", "SKIPPED", "BROADCAST_DROPPED")
UNCONSUMED_KINDS = ("BACKLOG", *LOST_KINDS)
DLQ_REASONS = ("IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "BROADCAST_DROPPED")
# a DLQ candidate's reason BROADCAST_DROPPED is not the unconsumed kind of the same name: its own column
DLQ_COLUMNS = ("IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "DLQ_BROADCAST_DROPPED")
STATUSES = ("OK", "WARN", "STALL", "REWIND")
STATUS_RANK = {s: i for i, s in enumerate(STATUSES)}
SEVERITIES = ("OK", "WARNING", "CRITICAL")
CURRENT_TABLES = {
    "consumer_status": consumer_status.TABLE, "duplicated_ranges": duplicated_ranges.TABLE,
    "unconsumed_ranges": unconsumed_ranges.TABLE, "dlq_candidates": dlq_candidates.TABLE,
    "offset_corrections": offset_corrections.TABLE, "status_samples": status_samples.TABLE,
    "audit_hours": audit_hours.TABLE,
}
NO_VALIDATION = "no validation results yet"


# --------------------------------------------------------------------------------------------- extract


def _read(lake: str, table: Any, columns: list[str], filters: Any, at: int | None = None) -> pd.DataFrame:
    """A bounded projection of a table (``filters`` in delta-rs form); an empty frame when it does not exist."""
    if not _delta.exists(lake, table):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    return _delta.read_pandas_columns(lake, table, columns, filters=filters, at=at)


def completed_runs(lake: str, *, limit: int = RECENT_RUNS) -> pd.DataFrame:
    """The ``limit`` newest completed reconcile runs (by as-of time), oldest first, from gold/reconcile_runs."""
    cols = ["run_id", "as_of", "completed_at", "report_dir", "table_versions"]
    # The ledger gains a row per run for the lake's life: its narrow columns are read whole, the wide ones of these.
    runs = _read(lake, reconcile_runs.TABLE, cols[:3], None)
    if not len(runs):
        return _read(lake, reconcile_runs.TABLE, cols, None)
    runs = runs.sort_values(["as_of", "completed_at", "run_id"], kind="mergesort").tail(limit)
    wide = _read(lake, reconcile_runs.TABLE, ["run_id", *cols[3:]], [("run_id", "in", list(runs["run_id"]))])
    return runs.merge(wide.drop_duplicates("run_id"), on="run_id", how="left")[cols].reset_index(drop=True)


def extract(lake: str, *, run_id: str | None = None, recent_runs: int = RECENT_RUNS,
            recent_validations: int = RECENT_VALIDATIONS) -> dict[str, Any]:
    """Everything the site shows, read bounded: one run's gold rows, a few columns of recent runs, recent results.

    Args:
        lake: the lake root.
        run_id: the run the pages describe; default the newest completed one (by completion time).

    Raises:
        ValueError: the lake has no completed reconcile run, or not ``run_id``.
    """
    from jobs.lake import ledger

    runs = completed_runs(lake, limit=recent_runs)
    if not len(runs):
        raise ValueError(f"no completed reconcile run in {lake} (gold/reconcile_runs is empty or missing): run "
                         "`rmq-recon reconcile --lake ... --reports ...` first")
    if run_id is None:
        current = runs.sort_values(["completed_at", "run_id"], kind="mergesort").iloc[-1].to_dict()
    else:
        current = ledger.completed_reconcile(lake, run_id)
        if current is None:
            raise ValueError(f"run {run_id}: not a completed reconcile run of {lake}; give one of "
                             f"{', '.join(runs['run_id'].tolist()[-5:])}")
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
        "duplicated_ranges": _read(lake, duplicated_ranges.TABLE, ["run_id", *SERIES_KEY, "start_offset", "end_offset"],
                                   [("run_id", "in", ids)]),
        "unconsumed_ranges": _read(lake, unconsumed_ranges.TABLE, ["run_id", *SERIES_KEY, "start_offset",
                                                                   "end_offset", "kind"], [("run_id", "in", ids)]),
        "dlq_candidates": _read(lake, dlq_candidates.TABLE, ["run_id", "consumer_group", "reason"],
                                [("run_id", "in", ids)]),
        "consumer_status": _read(lake, consumer_status.TABLE, ["run_id", "status"], [("run_id", "in", ids)]),
    }
    return {"run": current, "runs": runs[["run_id", "as_of", "completed_at", "report_dir"]], "current": frames,
            "trend": trend, "validation": extract_validation(lake, limit=recent_validations)}


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


def union_ranges(ranges: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The union of ``[start_offset, end_offset]`` per key: overlapping or adjacent ranges merge, so an offset
    counts once (a duplicated offset with both TRACE and REWIND evidence is one offset).

    Returns:
        ``keys`` + start_offset, end_offset, messages; sorted by key and start.
    """
    cols = [*keys, "start_offset", "end_offset", "messages"]
    if not len(ranges):
        return pd.DataFrame(columns=cols)
    r = ranges[[*keys, "start_offset", "end_offset"]].astype({"start_offset": "int64", "end_offset": "int64"})
    r = r.sort_values([*keys, "start_offset", "end_offset"], kind="mergesort").reset_index(drop=True)
    prev_end = r.groupby(keys, sort=False, dropna=False)["end_offset"].transform(lambda s: s.cummax().shift())
    new = prev_end.isna() | (r["start_offset"] > prev_end + 1)
    r["_island"] = new.cumsum()
    out = (r.groupby([*keys, "_island"], sort=False, dropna=False)
           .agg(start_offset=("start_offset", "min"), end_offset=("end_offset", "max")).reset_index()
           .drop(columns="_island"))
    out["messages"] = out["end_offset"] - out["start_offset"] + 1
    return out[cols].reset_index(drop=True)


def worst_status(statuses: Iterable[str]) -> str:
    """The most severe status of a group's queues (REWIND > STALL > WARN > OK)."""
    found = [s for s in statuses if s in STATUS_RANK]
    return max(found, key=STATUS_RANK.__getitem__) if found else "OK"


def has_lost_messages(row: dict[str, Any]) -> bool:
    """Messages the group will never consume: EXPIRED, SKIPPED or BROADCAST_DROPPED offsets."""
    return sum(int(row[k]) for k in LOST_KINDS) > 0


def needs_a_human(row: dict[str, Any]) -> bool:
    """A message in the DLQ or blocking the commit, an offset to correct, or a rewound or stalled queue."""
    return (int(row["IN_DLQ"]) + int(row["BLOCKING_COMMIT"]) + int(row["corrections"]) > 0
            or row["status"] in ("REWIND", "STALL"))


def has_duplicates_or_warnings(row: dict[str, Any]) -> bool:
    """Duplicated offsets, messages retrying, or a queue whose lag never shrinks."""
    return int(row["duplicated"]) + int(row["RETRYING"]) > 0 or row["status"] == "WARN"


def severity(row: dict[str, Any]) -> str:
    """CRITICAL when messages are lost or need a human, WARNING on duplicates or warnings, else OK.

    Losses and duplicates count as much as lag: a group with 2,390 EXPIRED messages is CRITICAL even when every
    queue's status is OK.
    """
    if has_lost_messages(row) or needs_a_human(row):
        return "CRITICAL"
    if has_duplicates_or_warnings(row):
        return "WARNING"
    return "OK"


def _count_by(df: pd.DataFrame, keys: list[str], column: str, values: Iterable[str],
              weight: str | None = None, names: Iterable[str] | None = None) -> pd.DataFrame:
    """One column per value of ``column`` (named ``names``, default the values): rows (or sum of ``weight``) per key."""
    values = list(values)
    names = list(names) if names is not None else values
    if not len(df):
        return pd.DataFrame(columns=[*keys, *names])
    w = df[weight] if weight else pd.Series(1, index=df.index)
    t = df.assign(_w=w.astype("int64")).pivot_table(index=keys, columns=column, values="_w", aggfunc="sum",
                                                    fill_value=0)
    t = t.reindex(columns=values, fill_value=0)
    t.columns = names
    return t.reset_index()


OVERVIEW_COLUMNS = ["cluster", "consumer_group", "severity", "status", "queues", "duplicated", "unconsumed",
                    *UNCONSUMED_KINDS, "dlq", *DLQ_COLUMNS, "corrections", "why"]


def group_overview(consumer_status: pd.DataFrame, duplicated_ranges: pd.DataFrame,
                   unconsumed_ranges: pd.DataFrame, dlq_candidates: pd.DataFrame,
                   offset_corrections: pd.DataFrame) -> pd.DataFrame:
    """One row per group of the run, ranked most severe first.

    ``duplicated`` counts offsets once (the union of the TRACE and REWIND ranges of each queue and client);
    ``unconsumed`` is every unconsumed message (per kind beside it, BACKLOG included); ``dlq`` every DLQ candidate.
    Ranking: severity, then lost, duplicated and DLQ messages, the worst status, then the name.
    """
    present = [df[GROUP] for df in (consumer_status, duplicated_ranges, unconsumed_ranges, dlq_candidates,
                                    offset_corrections) if len(df)]
    out = pd.concat(present, ignore_index=True).drop_duplicates() if present else pd.DataFrame(columns=GROUP)
    if len(consumer_status):
        st = consumer_status.groupby(GROUP).agg(status=("status", worst_status), queues=("status", "size")).reset_index()
        out = out.merge(st, on=GROUP, how="left")
    else:
        out["status"], out["queues"] = "OK", 0
    dup = union_ranges(duplicated_ranges, SERIES_KEY)
    dup = dup.groupby(GROUP)["messages"].sum().rename("duplicated").reset_index() if len(dup) else \
        pd.DataFrame(columns=[*GROUP, "duplicated"])
    out = out.merge(dup, on=GROUP, how="left")
    out = out.merge(_count_by(unconsumed_ranges, GROUP, "kind", UNCONSUMED_KINDS, "messages"), on=GROUP, how="left")
    out = out.merge(_count_by(dlq_candidates, GROUP, "reason", DLQ_REASONS, names=DLQ_COLUMNS), on=GROUP, how="left")
    corr = offset_corrections.groupby(GROUP).size().rename("corrections").reset_index() if len(offset_corrections) \
        else pd.DataFrame(columns=[*GROUP, "corrections"])
    out = out.merge(corr, on=GROUP, how="left")
    for c in ["queues", "duplicated", *UNCONSUMED_KINDS, *DLQ_COLUMNS, "corrections"]:
        out[c] = _ints(out[c])
    out["status"] = out["status"].fillna("OK")
    out["unconsumed"] = out[list(UNCONSUMED_KINDS)].sum(axis=1).astype("int64")
    out["dlq"] = out[list(DLQ_COLUMNS)].sum(axis=1).astype("int64")
    records = out.to_dict("records")
    out["severity"] = [severity(r) for r in records]
    out["why"] = [why(r) for r in records]
    out["_sev"] = out["severity"].map(SEVERITIES.index)
    out["_lost"] = out[list(LOST_KINDS)].sum(axis=1)
    out["_st"] = out["status"].map(STATUS_RANK)
    out = out.sort_values(["_sev", "_lost", "duplicated", "dlq", "_st", "cluster", "consumer_group"],
                          ascending=[False, False, False, False, False, True, True], kind="mergesort")
    return out[OVERVIEW_COLUMNS].reset_index(drop=True)


def why(row: dict[str, Any]) -> str:
    """The facts behind a group's severity, most severe first (``"2390 EXPIRED; 1200 duplicated"``)."""
    parts = [f"{int(row[k])} {k}" for k in LOST_KINDS if int(row[k])]
    parts += [f"{int(row[k])} {k}" for k in ("IN_DLQ", "BLOCKING_COMMIT") if int(row[k])]
    if int(row["corrections"]):
        parts.append(f"{int(row['corrections'])} offsets to correct")
    if row["status"] != "OK":
        parts.append(f"status {row['status']}")
    if int(row["duplicated"]):
        parts.append(f"{int(row['duplicated'])} duplicated")
    if int(row["RETRYING"]):
        parts.append(f"{int(row['RETRYING'])} RETRYING")
    return "; ".join(parts)


def _ints(values: pd.Series) -> pd.Series:
    """Counts as int64, missing ones 0."""
    return pd.to_numeric(values, errors="coerce").fillna(0).astype("int64")


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
    ``never_consumed``: inside an EXPIRED, SKIPPED or BROADCAST_DROPPED range; ``backlog``: inside BACKLOG;
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
    """One row per run (oldest as-of first): duplicated offsets (once), unconsumed messages per kind, DLQ
    candidates and queues per status."""
    out = runs[["run_id", "as_of"]].copy()
    dup = union_ranges(duplicated_ranges, ["run_id", *SERIES_KEY])
    d = dup.groupby("run_id")["messages"].sum().rename("duplicated").reset_index() if len(dup) else \
        pd.DataFrame(columns=["run_id", "duplicated"])
    out = out.merge(d, on="run_id", how="left")
    u = unconsumed_ranges.assign(messages=unconsumed_ranges["end_offset"] - unconsumed_ranges["start_offset"] + 1) \
        if len(unconsumed_ranges) else unconsumed_ranges.assign(messages=[])
    out = out.merge(_count_by(u, ["run_id"], "kind", UNCONSUMED_KINDS, "messages"), on="run_id", how="left")
    q = dlq_candidates.groupby("run_id").size().rename("dlq").reset_index() if len(dlq_candidates) else \
        pd.DataFrame(columns=["run_id", "dlq"])
    out = out.merge(q, on="run_id", how="left")
    out = out.merge(_count_by(consumer_status, ["run_id"], "status", STATUSES), on="run_id", how="left")
    for c in ["duplicated", *UNCONSUMED_KINDS, "dlq", *STATUSES]:
        out[c] = _ints(out[c])
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
    cols = [*SERIES_KEY, "status", "committed_offset", "min_offset", "max_offset", "lag", "duplicated",
            *UNCONSUMED_KINDS]
    if not len(consumer_status):
        return pd.DataFrame(columns=cols)
    out = consumer_status[[*SERIES_KEY, "status", "committed_offset", "min_offset", "max_offset", "lag"]].copy()
    dup = union_ranges(duplicated_ranges, SERIES_KEY)
    d = dup.groupby(SERIES_KEY)["messages"].sum().rename("duplicated").reset_index() if len(dup) else \
        pd.DataFrame(columns=[*SERIES_KEY, "duplicated"])
    out = out.merge(d, on=SERIES_KEY, how="left")
    out = out.merge(_count_by(unconsumed_ranges, SERIES_KEY, "kind", UNCONSUMED_KINDS, "messages"), on=SERIES_KEY,
                    how="left")
    for c in ["duplicated", *UNCONSUMED_KINDS]:
        out[c] = _ints(out[c])
    out["_st"] = out["status"].map(STATUS_RANK).fillna(0)
    out["_lost"] = out[list(LOST_KINDS)].sum(axis=1)
    out = out.sort_values(["_st", "_lost", "duplicated", "lag", *SERIES_KEY],
                          ascending=[False, False, False, False, True, True, True, True, True, True], kind="mergesort")
    return out[cols].reset_index(drop=True)


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
border:1px solid #d0d0d0;padding:8px 14px;min-width:120px}.card b{display:block;font-size:20px}"""

_PAGES = [("index.html", "Overview"), ("audit.html", "Audit"), ("trends.html", "Trends over runs"),
          ("quality.html", "Data quality")]


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


def _page(title: str, run: dict[str, Any], body: list[str], depth: int = 0) -> str:
    up = "../" * depth
    nav = "".join(f"<a href='{up}{href}'>{_esc(name)}</a>" for href, name in _PAGES)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_esc(title)} - rmq-recon</title><style>{_CSS}</style></head><body>"
            f"<header><b>rmq-recon dashboard</b>{nav}<span class='muted'>run {_esc(run['run_id'])}, as of "
            f"{_esc(reports.format_ts(run['as_of']))}</span></header><main><h1>{_esc(title)}</h1>"
            + "\n".join(body) + "</main></body></html>\n")


class Site:
    """The files of the site being built (relative path -> text), and the CSVs of tables too long to show whole."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

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
    """Headline: completeness % and duplicate % per store hour (bars: messages stored)."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    x = _naive(by_hour["hour"])
    ax2 = ax.twinx()
    ax2.bar(x, by_hour["stored"], width=1 / 24 * 0.8, color="#d9e2ef", label="stored", zorder=0)
    ax2.set_ylabel("messages stored")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.plot(x, by_hour["completeness_pct"], marker="o", color="#0a7d32", label="completeness %")
    ax.plot(x, by_hour["duplicate_pct"], marker="s", color="#b00020", label="duplicate %")
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(_drawn(title))
    ax.legend(loc="lower left")
    fig.autofmt_xdate()
    return _svg(fig)


def plot_trends(trends: pd.DataFrame) -> str:
    """Duplicated, unconsumed and DLQ counts per run, and queues per status per run."""
    plt = _mpl()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.2))
    x = list(range(len(trends)))
    labels = [_drawn(reports.format_ts(t)[:16].replace("T", " ")) for t in trends["as_of"]]
    for col, color in (("duplicated", "#b00020"), ("unconsumed", "#a35200"), ("dlq", "#5b2a86")):
        a.plot(x, trends[col], marker="o", label=col, color=color)
    a.set_title("messages per run")
    a.legend()
    bottom = pd.Series(0, index=trends.index)
    for st, color in zip(STATUSES, ("#0a7d32", "#e0a800", "#d9534f", "#6f1d1b")):
        b.bar(x, trends[st], bottom=bottom, label=st, color=color)
        bottom = bottom + trends[st]
    b.set_title("queues per status")
    b.legend()
    for ax in (a, b):
        ax.set_xticks(x, labels, rotation=30, ha="right")
    return _svg(fig)


def plot_quality(trend: pd.DataFrame) -> str:
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(9, 2.8))
    x = list(range(len(trend)))
    ax.plot(x, trend["pass_rate_pct"], marker="o", color="#0a7d32")
    ax.set_ylim(0, 105)
    ax.set_ylabel("expectations passed %")
    ax.set_xticks(x, [_drawn(str(v)[:28]) for v in trend["validation_id"]], rotation=30, ha="right")
    ax.set_title("pass rate per validation run")
    return _svg(fig)


def plot_timeline(samples: pd.DataFrame, dup: pd.DataFrame, unc: pd.DataFrame, title: str) -> str:
    """Committed offset against Min and Max over the snapshots (lag shaded between), REWIND (a drop of the
    committed offset) and EXPIRED (committed below Min) marked; duplicated and unconsumed ranges as bands."""
    plt = _mpl()
    s = samples.sort_values("snapshot_ts", kind="mergesort")
    x = _naive(s["snapshot_ts"])
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for r in dup.to_dict("records"):
        ax.axhspan(r["start_offset"], r["end_offset"] + 1, color="#b00020", alpha=0.15, lw=0)
    for r in unc.to_dict("records"):
        color = "#e0a800" if r["kind"] == "BACKLOG" else "#5b2a86"
        ax.axhspan(r["start_offset"], r["end_offset"] + 1, color=color, alpha=0.15, lw=0)
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
    ax.legend(fontsize=7, loc="upper left", ncols=3)
    fig.autofmt_xdate()
    return _svg(fig)


def group_slug(cluster: str, group: str) -> str:
    """A file name for a group's page, whatever the names hold: at most 80 safe characters (no '/', no leading
    '.') and a hash of the pair, so two groups never share a page (``a_``/``_/b`` and ``a_/_``/``b`` both read
    ``a_____b``)."""
    return f"{_readable(f'{cluster}__{group}')}-{_digest(cluster, group)}"


def render(data: dict[str, Any]) -> dict[str, str]:
    """Every file of the site (relative path -> text) from :func:`extract`'s frames."""
    site = Site()
    run, cur = data["run"], data["current"]
    overview = group_overview(cur["consumer_status"], cur["duplicated_ranges"], cur["unconsumed_ranges"],
                              cur["dlq_candidates"], cur["offset_corrections"])
    rows = audit_rows(cur["audit_hours"], cur["consumer_status"], cur["duplicated_ranges"], cur["unconsumed_ranges"])
    per_group_hour = audit(rows)
    per_hour = audit(rows, by=["hour"])
    trends = run_trends(data["runs"], **data["trend"])
    report_href = f"../{urllib.parse.quote(str(run['run_id']), safe='')}/"
    summary = {s: int((overview["severity"] == s).sum()) for s in SEVERITIES}
    body = ["<div class='cards'>" + "".join(
        f"<div class='card {s}' data-card='{s}'><b>{summary[s]:,}</b>{s} groups</div>" for s in reversed(SEVERITIES))
        + f"<div class='card' data-card='duplicated'><b>{int(overview['duplicated'].sum()):,}</b>duplicated offsets</div>"
        + f"<div class='card' data-card='lost'><b>{int(overview[list(LOST_KINDS)].sum().sum()):,}</b>messages lost</div>"
        + f"<div class='card' data-card='dlq'><b>{int(overview['dlq'].sum()):,}</b>DLQ candidates</div></div>"]
    if len(per_hour):
        body.append(plot_audit(per_hour, "all groups: completeness and duplicates per store hour"))
    body.append("<h2>Groups by severity</h2><p class='muted'>CRITICAL: messages lost (EXPIRED, SKIPPED, "
                "BROADCAST_DROPPED), in the DLQ or blocking the commit, offsets to correct, or a REWIND/STALL queue; "
                "WARNING: duplicated offsets (each counted once, whatever the evidence), RETRYING messages or a WARN "
                "queue.</p>")
    body.append(site.table(overview, OVERVIEW_COLUMNS[1:], name="overview",
                           link=lambda r: f"groups/{group_slug(r['cluster'], r['consumer_group'])}.html",
                           max_rows=max(MAX_ROWS, len(overview))))
    files_list = [f for f in _run_files(run) if f != "_SUCCESS"]
    body.append("<h2>This run's files</h2><ul>" + "".join(
        f"<li><a href='{_esc(report_href + urllib.parse.quote(f))}'>{_esc(f)}</a></li>" for f in files_list) + "</ul>")
    site.files["index.html"] = _page("Consumer groups by severity", run, body)

    # audit
    body = []
    if len(per_hour):
        body.append(plot_audit(per_hour, "all groups: completeness and duplicates per store hour"))
    body.append("<p class='muted'>Per group and store hour: messages stored, delivered (trace), committed past "
                "(below the committed offset), consumed, duplicated and never consumed (EXPIRED, SKIPPED, "
                "BROADCAST_DROPPED); completeness = consumed / stored, duplicates = duplicated / stored.</p>")
    body.append(site.table(per_group_hour, AUDIT_COLUMNS, name="audit"))
    site.files["audit.html"] = _page("Audit per group and hour", run, body)

    # trends
    body = [plot_trends(trends) if len(trends) else "", site.table(trends, TREND_COLUMNS, name="trends")]
    site.files["trends.html"] = _page(f"Trends over the last {len(trends)} runs", run, body)

    # quality
    site.files["quality.html"] = _page("Data quality", run, _quality_body(site, data["validation"]))

    # groups
    for r in overview.to_dict("records"):
        slug = group_slug(r["cluster"], r["consumer_group"])
        site.files[f"groups/{slug}.html"] = _page(f"{r['consumer_group']} ({r['cluster']})", run,
                                                  _group_body(site, r, cur, rows, slug), depth=1)
    return site.files


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
                slug: str) -> list[str]:
    key = (r["cluster"], r["consumer_group"])

    def of_group(df: pd.DataFrame) -> pd.DataFrame:
        if not len(df):
            return df
        return df[(df["cluster"] == key[0]) & (df["consumer_group"] == key[1])]

    st, dup, unc = of_group(cur["consumer_status"]), of_group(cur["duplicated_ranges"]), of_group(cur["unconsumed_ranges"])
    samples = of_group(cur["status_samples"])
    body = [f"<p>severity <span class='{r['severity']}' data-field='severity'>{r['severity']}</span>; "
            f"{_esc(r['why']) or 'nothing to report'}</p>"]
    body.append(site.table(pd.DataFrame([r]), OVERVIEW_COLUMNS[2:-1], name=f"{slug}-counts"))
    queues = queue_table(st, dup, unc)
    body.append("<h2>Queues</h2>")
    body.append(site.table(queues, [*SERIES_KEY[2:], "status", "committed_offset", "min_offset", "max_offset", "lag",
                                    "duplicated", *UNCONSUMED_KINDS], name=f"{slug}-queues", depth=1))
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
    for name, df, cols in (("duplicated ranges", dup, duplicated_ranges.REPORT_COLUMNS[2:]),
                           ("unconsumed ranges", unc, unconsumed_ranges.REPORT_COLUMNS[2:]),
                           ("DLQ candidates", of_group(cur["dlq_candidates"]), dlq_candidates.REPORT_COLUMNS[2:])):
        body.append(f"<h2>{name} ({len(df):,})</h2>")
        body.append(site.table(df, cols, name=f"{slug}-{name.replace(' ', '_')}", depth=1))
    return body


# ------------------------------------------------------------------------------------------------- run


def run(lake: str, reports_root: str, *, run_id: str | None = None, recent_runs: int = RECENT_RUNS,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build ``<reports_root>/dashboard/`` from the lake's gold and quality tables (local or ``s3://``).

    Idempotent: the same lake gives the same files, published all at once
    (:func:`jobs.reconcile.reports.publish_folder`).

    Returns:
        ``{"dashboard": folder, "index": index uri, "run_id", "files", "seconds"}``.
    """
    say = progress or log.info
    t0 = time.time()
    data = extract(lake, run_id=run_id, recent_runs=recent_runs)
    files = render(data)
    folder = storage.join(reports_root, "dashboard")
    reports.publish_folder(folder, files)
    out = {"dashboard": folder, "index": storage.join(folder, "index.html"), "run_id": data["run"]["run_id"],
           "files": len(files), "seconds": round(time.time() - t0, 2)}
    say(f"dashboard: wrote {out['index']} ({out['files']} files, run {out['run_id']}) in {out['seconds']} s")
    return out

