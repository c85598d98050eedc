"""Gold retention: the rows of old reconcile runs and old validations go, so gold stops growing with the lake's age.

Why: every reconcile writes a full set of gold rows under its run id (gold/status_samples alone: max(window, 48)
rows a key, about 150,000 a run at 3,192 keys, 15 million a day at 15 minutes) and every validation a row per
expectation. Nothing reads them once the run is old: the dashboard reads one run and the trends of the 30 newest,
alerts compare the newest with the one before, a horizon run carries the newest. Without retention the tables,
the ledger the dashboard reads whole (its narrow columns), and each compaction grow for the lake's life.

What goes: a reconcile run that completed more than ``days`` ago and is neither among the ``keep_runs`` newest by
completion nor by as-of time (the dashboard's trends, a backfill's) loses its rows in every gold table keyed by
run id, then its gold/reconcile_runs row; a validation whose newest result is older than ``days`` and is not among
the ``keep_validations`` newest loses its gold/validation_results rows. The gold rows of a reconcile that died
before its ledger row (no completed run has its id) go at once, whatever their age. gold/alerts_sent stays whole (a
row per alert sent: it is what stops a re-run from paging twice). Report folders are files the operator keeps or
deletes.

Safe, by construction:

* The ledger row goes last. A run killed half way leaves the ledger row, so a rerun picks the same run again and
  deletes what is left; a delete that matches nothing makes no commit (idempotent).
* A reader of a pruned run reads at the versions its ledger row recorded (time travel), so it sees every row until
  maintenance's vacuum deletes the files, and vacuum keeps only what the newest ledger rows name, which these are
  not.
* Deletes are delta-rs ``DeltaTable.delete`` (no engine), in batches of ``BATCH`` run ids, pruned by the files' run id
  statistics.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pandas as pd

from jobs.lake import _delta, failpoints
from jobs.problems import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from schemas._table import Table

log = logging.getLogger(__name__)
UTC = dt.timezone.utc
DAYS_DEFAULT = 7.0
BATCH = 1000


def days_default() -> float:
    """Days a run's gold rows are kept at least (``RMQ_RECON_GOLD_RETENTION_DAYS``, default 7)."""
    return float(os.environ.get("RMQ_RECON_GOLD_RETENTION_DAYS", DAYS_DEFAULT))


def run_tables() -> list["Table"]:
    """The gold tables whose rows belong to one reconcile run (keyed by ``run_id``), the ledger and alerts aside."""
    import schemas
    from schemas import alerts_sent, reconcile_runs

    return [t for t in schemas.ALL_TABLES if t.layer == "gold" and "run_id" in t.columns
            and t not in (reconcile_runs.TABLE, alerts_sent.TABLE)]


# ------------------------------------------------------------------------------------------------ extract


def unrecorded_runs(lake: str, table: "Table", known: set[str]) -> set[str]:
    """Run ids of ``table``'s one-run files (Delta statistics: min = max run_id) that no ledger row names: what a
    reconcile killed before its ledger row left and nobody reran under its run id. The log only, no data read.

    A run writes files of its own rows, and every maintenance prunes before it compacts, so a compacted file (min <
    max) holds only runs the ledger named then. Truncated statistics (a writer that cuts long strings) name no
    run, so nothing is deleted for them."""
    import pyarrow as pa

    if not _delta.exists(lake, table):
        return set()
    actions = pa.table(_delta.delta_table(lake, table).get_add_actions(flatten=True))
    if "min.run_id" not in actions.column_names or "max.run_id" not in actions.column_names:
        return set()
    lows, highs = actions.column("min.run_id").to_pylist(), actions.column("max.run_id").to_pylist()
    return {lo for lo, hi in zip(lows, highs) if lo is not None and lo == hi and lo not in known}


def validation_times(lake: str) -> pd.Series:
    """Each validation's newest ``validated_at``, by ``validation_id``, gathered batch by batch (a value each held)."""
    import pyarrow as pa

    from schemas import validation_results

    latest: dict[str, Any] = {}
    if not _delta.exists(lake, validation_results.TABLE):
        return pd.Series(latest, dtype=object)
    for batch in _delta.scan_batches(lake, validation_results.TABLE, ["validation_id", "validated_at"], filters=None):
        grouped = pa.Table.from_batches([batch]).group_by("validation_id").aggregate([("validated_at", "max")])
        for vid, at in zip(grouped.column("validation_id").to_pylist(), grouped.column("validated_at_max").to_pylist()):
            if at is not None and (vid not in latest or at > latest[vid]):
                latest[vid] = at
    return pd.Series(latest) if latest else pd.Series(latest, dtype=object)


# ---------------------------------------------------------------------------------------------- transform


def _utc(value: Any) -> Any:
    """Timestamps (a value or a column, naive UTC or aware) as aware UTC, so any two compare."""
    return pd.to_datetime(value, utc=True)


def expired_runs(runs: pd.DataFrame, *, now: dt.datetime, days: float, keep_runs: int) -> list[str]:
    """Run ids completed before ``now - days`` and outside the ``keep_runs`` newest by completion and by as-of."""
    if not len(runs):
        return []
    runs = runs.assign(completed_at=_utc(runs["completed_at"]), as_of=_utc(runs["as_of"]))
    kept: set[str] = set()
    for order in (["completed_at", "as_of", "run_id"], ["as_of", "completed_at", "run_id"]):
        kept |= set(runs.sort_values(order, kind="mergesort").tail(keep_runs)["run_id"])
    old = runs["completed_at"] < _utc(now) - pd.Timedelta(days=days)
    return sorted(set(runs.loc[old, "run_id"]) - kept)


def expired_validations(times: pd.Series, *, now: dt.datetime, days: float, keep: int) -> list[str]:
    """Validation ids whose newest result is older than ``now - days``, outside the ``keep`` newest."""
    if not len(times):
        return []
    when = _utc(times)
    kept = set(when.sort_values(kind="mergesort").tail(keep).index)
    return sorted(set(when[when < _utc(now) - pd.Timedelta(days=days)].index) - kept)


# ------------------------------------------------------------------------------------------------ load


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def delete_keys(lake: str, table: "Table", column: str, values: Iterable[str]) -> int:
    """Delete the rows whose ``column`` is one of ``values``; returns how many (no commit when none match)."""
    values = list(values)
    if not values or not _delta.exists(lake, table):
        return 0
    deleted = 0
    for i in range(0, len(values), BATCH):
        chunk = values[i:i + BATCH]
        metrics = _delta.delta_table(lake, table).delete(
            f"{column} IN ({', '.join(_literal(v) for v in chunk)})")
        deleted += int(metrics["num_deleted_rows"])
    return deleted


def prune(lake: str, *, days: float | None = None, keep_runs: int, keep_validations: int,
          now: dt.datetime | None = None, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Delete the gold rows of expired reconcile runs and validations (see the module's docstring).

    Returns ``runs`` and ``validations`` (the ids pruned), ``unrecorded`` (runs with gold rows and no ledger row,
    whose rows went too: :func:`unrecorded_runs`) and ``rows`` (rows deleted per table). The caller holds the gold
    and quality leases (``jobs.ops.maintenance``): no reconcile is writing, so a run without a ledger row is one
    that died; if it is rerun under its id, it writes its rows again.

    Raises:
        UsageError: ``days`` is negative or ``keep_runs`` is below 1 (the newest run is what the next one carries).
    """
    from jobs.reconcile import gold_runs
    from schemas import reconcile_runs, validation_results

    say = say or log.info
    days = days_default() if days is None else float(days)
    if days < 0:
        raise UsageError(f"--gold-retention-days {days:g}: give 0 or more days")
    if keep_runs < 1 or keep_validations < 1:
        raise UsageError("keep at least the newest reconcile run and validation: the next run carries the newest")
    now = now or dt.datetime.now(UTC)
    ledger = gold_runs.completed_runs(lake)
    runs = expired_runs(ledger, now=now, days=days, keep_runs=keep_runs)
    validations = expired_validations(validation_times(lake), now=now, days=days, keep=keep_validations)
    rows: dict[str, int] = {}
    orphans: set[str] = set()
    known = set(ledger["run_id"])
    for t in run_tables():
        unrecorded = unrecorded_runs(lake, t, known)
        orphans |= unrecorded
        rows[t.qualified] = delete_keys(lake, t, "run_id", sorted(set(runs) | unrecorded))
        failpoints.hit("retention-after-table")
    # last: until it goes, a rerun finds the same runs and finishes their deletes
    rows[reconcile_runs.TABLE.qualified] = delete_keys(lake, reconcile_runs.TABLE, "run_id", runs)
    if validations:
        rows[validation_results.TABLE.qualified] = delete_keys(lake, validation_results.TABLE, "validation_id",
                                                               validations)
    if runs or validations or orphans:
        say(f"maintain: gold retention ({days:g} days, the {keep_runs} newest runs kept): {len(runs)} reconcile runs "
            f"and {len(validations)} validations pruned, {len(orphans)} run(s) that never completed removed, "
            f"{sum(rows.values())} rows deleted")
    return {"days": days, "runs": runs, "validations": validations, "unrecorded": sorted(orphans),
            "rows": {k: v for k, v in rows.items() if v}}
