"""Completed reconcile runs and their gold rows, read narrowly (one run's rows at the versions its ledger row names).

What came after a run (alerts: "what changed since the previous run"; metrics: "this run's figures") reads only the
rows of the runs it compares, never whole gold tables: each gold table is filtered on ``run_id`` at the Delta version
the run's ledger row (gold/reconcile_runs) recorded, so a later run, or a re-run killed half way, is invisible.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from jobs.lake import _delta, ledger
from schemas import reconcile_runs
from schemas._table import Table


def completed_runs(lake: str) -> pd.DataFrame:
    """The reconcile ledger's ``run_id``, ``as_of`` and ``completed_at`` (one small row per completed run)."""
    columns = ["run_id", "as_of", "completed_at"]
    if not _delta.exists(lake, reconcile_runs.TABLE):
        return pd.DataFrame({c: [] for c in columns})
    return _delta.read_pandas_columns(lake, reconcile_runs.TABLE, columns)


def previous_run_id(runs: pd.DataFrame, run_id: str) -> str | None:
    """The completed run that came before ``run_id``: the latest by (as_of, completed_at) before it, else None.

    A run with the same as-of that completed earlier (a manual run beside the scheduled one) counts as before, so
    the second of two identical runs finds nothing new. Raises KeyError when ``run_id`` is not in ``runs``.
    """
    mine = runs[runs["run_id"] == run_id]
    if not len(mine):
        raise KeyError(run_id)
    me = mine.iloc[-1]
    others = runs[runs["run_id"] != run_id]
    earlier = others[(others["as_of"] < me["as_of"])
                     | ((others["as_of"] == me["as_of"]) & (others["completed_at"] < me["completed_at"]))]
    if not len(earlier):
        return None
    return str(earlier.sort_values(["as_of", "completed_at", "run_id"], kind="mergesort").iloc[-1]["run_id"])


def run_rows(lake: str, run: dict[str, Any], table: Table, columns: list[str],
             filters: list[tuple[str, str, Any]] | None = None) -> pd.DataFrame:
    """``columns`` of ``table``'s rows of one completed run (``ledger.completed_reconcile``), optionally filtered.

    Read at the table version the run recorded (Delta; Parquet tables are read as they are), filtered on run_id.
    """
    if not _delta.exists(lake, table):
        return pd.DataFrame({c: [] for c in columns})
    version = run.get("table_versions", {}).get(table.qualified)
    at = version if _delta.table_format() == "delta" else None
    df = _delta.read_pandas_columns(lake, table, columns + ["run_id"],
                                    filters=[("run_id", "=", run["run_id"])] + list(filters or []), at=at)
    return df[df["run_id"] == run["run_id"]][columns].reset_index(drop=True)


def run(lake: str, run_id: str) -> dict[str, Any]:
    """The ledger row of a completed run (``run_id``, ``as_of``, ``report_dir``, ``table_versions``...).

    Raises:
        KeyError: the run has not completed in this lake (its ledger row is missing).
    """
    row = ledger.completed_reconcile(lake, run_id)
    if row is None:
        raise KeyError(f"reconcile run {run_id} has not completed in {lake} (no row in "
                       f"{reconcile_runs.TABLE.qualified}): run the reconcile first")
    return row
