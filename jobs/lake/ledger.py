"""The lake's ledgers: which ingest and reconcile runs completed, and the table versions each left.

A run records its row last, after every write it makes, so a row means "complete". Two uses:

* recovery by construction: a derived table (``silver/deliveries``) is rebuilt whenever its inputs moved since the
  newest completed ingest, whichever run moved them, so rows loaded by a run that died are taken in by the next;
* consistent reads: a reconcile reads every table at the versions of the newest completed ingest, so an ingest
  running (or killed) beside it is invisible to it.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Iterable

from jobs.lake import _delta
from jobs.problems import ReconError
from schemas import ingest_runs, reconcile_runs, snapshots

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from schemas._table import Table

log = logging.getLogger(__name__)
UTC = dt.timezone.utc


class NoCompletedIngest(ReconError):
    """The lake holds no completed ingest to reconcile."""


# Rows of bronze/ingest_runs written by lake maintenance (jobs.ops.maintenance): new versions, no rows added. The kind
# sorts before "ingest", so an ingest completing in the same second as a maintenance run counts as the newer one.
MAINTENANCE_KIND = "compact"


def is_maintenance(run_id: str) -> bool:
    """Whether an ingest ledger row was written by lake maintenance (it moved versions but added no rows)."""
    return str(run_id).startswith(MAINTENANCE_KIND + "-")


def new_run_id(kind: str, started: dt.datetime) -> str:
    return f"{kind}-{started.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"


def versions(lake: str, tables: Iterable["Table"]) -> dict[str, int]:
    """Current version (Delta) or fingerprint (Parquet) of each table that exists."""
    out = {}
    for t in tables:
        v = _delta.version(lake, t)
        if v is not None:
            out[t.qualified] = v
    return out


def _as_dict(value: Any) -> dict[str, int]:
    """A map cell as read by delta-rs (a list of (key, value) pairs) or pyarrow, as a dict."""
    if value is None or (isinstance(value, float) and value != value):
        return {}
    items = value.items() if isinstance(value, dict) else value
    return {str(k): int(v) for k, v in items}


def last_ingest(lake: str) -> dict[str, Any] | None:
    """The newest completed ingest run (``run_id``, ``completed_at``, ``table_versions``), or None."""
    if not _delta.exists(lake, ingest_runs.TABLE):
        return None
    df = _newest_ingest_runs(lake, 1)
    if not len(df):
        return None
    row = df.iloc[-1]
    return {"run_id": row["run_id"], "completed_at": row["completed_at"],
            "table_versions": _as_dict(row["table_versions"])}


def _newest_ingest_runs(lake: str, n: int, also: str | None = None) -> Any:
    """The ``n`` newest completed ingest runs (and run ``also``) with their table versions, oldest first. The ledger
    gains a row every 15 minutes for the lake's life: its narrow columns are read whole, the versions of these only."""
    runs = _delta.read_pandas_columns(lake, ingest_runs.TABLE, ["run_id", "completed_at"]).sort_values(
        ["completed_at", "run_id"], kind="mergesort").reset_index(drop=True)
    if also is not None:
        at = runs.index[runs["run_id"] == also]
        if not len(at):
            return runs.iloc[0:0].assign(table_versions=None)
        runs = runs.iloc[max(0, at[0] - n + 1):at[0] + 1]
    else:
        runs = runs.tail(n)
    if not len(runs):
        return runs.assign(table_versions=None)
    wide = _delta.read_pandas_columns(lake, ingest_runs.TABLE, ["run_id", "table_versions"],
                                      filters=[("run_id", "in", list(runs["run_id"]))])
    return runs.merge(wide.drop_duplicates("run_id"), on="run_id", how="left")


def ingest_increment(lake: str, run_id: str | None = None) -> dict[str, Any] | None:
    """What one completed ingest run added: its ``run_id`` and the table versions ``before`` and ``after`` it.

    ``before`` is what the completed run preceding it left (empty for the first run), so the rows of a run that died
    in between count as added by the run that took them in. ``run_id`` None: the newest completed run. None when no
    such run completed. A maintenance row (:func:`is_maintenance`) added nothing: its ``before`` is its ``after``.
    """
    if not _delta.exists(lake, ingest_runs.TABLE):
        return None
    df = _newest_ingest_runs(lake, 2, also=run_id).reset_index(drop=True)
    if not len(df):
        return None
    at = len(df) - 1
    after = _as_dict(df["table_versions"].iloc[at])
    before = after if is_maintenance(df["run_id"].iloc[at]) else \
        _as_dict(df["table_versions"].iloc[at - 1]) if at > 0 else {}
    return {"run_id": df["run_id"].iloc[at], "completed_at": df["completed_at"].iloc[at], "before": before,
            "after": after}


def last_reconcile(lake: str) -> dict[str, Any] | None:
    """The newest completed reconcile run's row (as :func:`completed_reconcile`), or None."""
    if not _delta.exists(lake, reconcile_runs.TABLE):
        return None
    df = _delta.read_pandas_columns(lake, reconcile_runs.TABLE, ["run_id", "completed_at"])
    if not len(df):
        return None
    newest = df.sort_values(["completed_at", "run_id"], kind="mergesort").iloc[-1]["run_id"]
    return completed_reconcile(lake, newest)


def record_ingest(spark: "SparkSession", lake: str, row: dict[str, Any]) -> None:
    """Write the completed ingest's row (the last write of the run)."""
    frame = spark.createDataFrame([tuple(row.get(c) for c in ingest_runs.TABLE.columns)], ingest_runs.TABLE.schema)
    _delta.merge(spark, frame, lake, ingest_runs.TABLE, insert_only=True)


def consistent_state(lake: str, tables: Iterable["Table"]) -> dict[str, Any]:
    """The state a reconcile reads: the newest completed ingest, checked against the tables it names.

    Delta tables are read at the recorded versions, whatever happened since. Parquet tables have no versions:
    their fingerprints must still equal the recorded ones (the caller holds the writer lease, so a difference
    means an ingest died half way), else the run stops instead of reporting from a partial lake.

    Raises:
        NoCompletedIngest: no ingest completed in this lake, or (Parquet) the last one did not complete.
    """
    state = last_ingest(lake)
    if state is None:
        raise NoCompletedIngest(f"no completed ingest in {lake} ({ingest_runs.TABLE.qualified} is empty or missing): "
                                "run `rmq-recon ingest --landing ... --lake ...` first")
    if _delta.table_format() == "parquet":
        recorded = state["table_versions"]
        moved = [t.qualified for t in tables if _delta.version(lake, t) != recorded.get(t.qualified)]
        if moved:
            raise NoCompletedIngest(
                f"{lake}: {', '.join(moved)} changed after the last completed ingest ({state['run_id']}): an ingest "
                "died half way; rerun `rmq-recon ingest` (it completes the work), then reconcile")
    return state


def record_reconcile(spark: "SparkSession", lake: str, *, run_id: str, as_of: dt.datetime, report_dir: str,
                     ingest_run_id: str, rows: dict[str, int], gold_tables: Iterable["Table"],
                     summary: dict[str, Any], kind: str = "cli") -> None:
    """Write (or replace) the completed reconcile run's row, after its gold rows and report folder."""
    newest = summary.get("newest_snapshot")
    row = {"run_id": run_id, "kind": kind, "as_of": as_of, "completed_at": dt.datetime.now(UTC).replace(microsecond=0),
           "newest_snapshot": dt.datetime.fromisoformat(newest.replace("Z", "+00:00")) if newest else None,
           "report_dir": report_dir, "ingest_run_id": ingest_run_id, "rows": rows,
           "table_versions": versions(lake, gold_tables),
           "summary": json.dumps(summary, sort_keys=True, default=str)}
    frame = spark.createDataFrame([tuple(row.get(c) for c in reconcile_runs.TABLE.columns)],
                                  reconcile_runs.TABLE.schema)
    _delta.merge(spark, frame, lake, reconcile_runs.TABLE)


def completed_reconcile(lake: str, run_id: str) -> dict[str, Any] | None:
    """A completed reconcile run's row (with ``table_versions`` of its gold tables), or None."""
    if not _delta.exists(lake, reconcile_runs.TABLE):
        return None
    df = _delta.read_pandas_columns(lake, reconcile_runs.TABLE, ["run_id", "as_of", "completed_at", "report_dir",
                                                                 "ingest_run_id", "table_versions"],
                                    filters=[("run_id", "=", run_id)])
    if not len(df):
        return None
    r = df.iloc[-1].to_dict()
    r["table_versions"] = _as_dict(r["table_versions"])
    return r


class TakenSnapshots:
    """The snapshot ledger as an ingest consults it: ``(cluster, broker, snapshot_ts text) -> listing digest`` of
    every snapshot folder taken, and each broker's newest. Held as sorted numpy arrays per broker, 72 bytes a folder:
    the ledger gains a row per broker and snapshot for as long as the lake lives (35,000 a broker-year) and every
    15-minute ingest reads it; a dict of Python strings held about 450 bytes a folder (0.45 GiB a million)."""

    FORMAT = "%Y%m%dT%H%M%SZ"

    def __init__(self, parts: dict[tuple[str, str], tuple[Any, Any]]) -> None:
        self._parts = parts  # (cluster, broker) -> (sorted epoch seconds int64, listing digests "S64")

    @classmethod
    def read(cls, lake: str) -> "TakenSnapshots":
        """One streamed pass over the ledger's four columns (Arrow batches; no whole-table frame)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not _delta.exists(lake, snapshots.TABLE):
            return cls({})
        acc: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
        for batch in _delta.scan_batches(lake, snapshots.TABLE, ["cluster", "broker", "snapshot_ts", "listing_digest"],
                                         filters=None):
            if not batch.num_rows:
                continue
            secs = pc.divide(batch.column("snapshot_ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()),
                             1_000_000).to_numpy(zero_copy_only=False).astype(np.int64)
            digests = np.array(batch.column("listing_digest").fill_null("").to_pylist(), dtype="S64")
            keys = pc.binary_join_element_wise(batch.column("cluster").cast(pa.string()).fill_null(""),
                                               batch.column("broker").cast(pa.string()).fill_null(""), "\0")
            for key in pc.unique(keys).to_pylist():
                rows = pc.equal(keys, key).to_numpy(zero_copy_only=False)
                acc.setdefault(tuple(key.split("\0", 1)), []).append((secs[rows], digests[rows]))
        parts = {}
        for key, chunks in acc.items():
            secs, digests = np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])
            order = np.argsort(secs, kind="stable")
            parts[key] = (secs[order], digests[order])
        return cls(parts)

    def _find(self, key: tuple[str, str, str]) -> tuple[Any, int] | None:
        import numpy as np

        part = self._parts.get((key[0], key[1]))
        if part is None:
            return None
        try:
            at = int(dt.datetime.strptime(key[2], self.FORMAT).replace(tzinfo=UTC).timestamp())
        except ValueError:
            return None
        i = int(np.searchsorted(part[0], at))
        return (part, i) if i < len(part[0]) and part[0][i] == at else None

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        return self._find(key) is not None

    def get(self, key: tuple[str, str, str]) -> str | None:
        """The listing digest recorded for the folder ``key`` (``snapshot_key``), None when not taken."""
        found = self._find(key)
        return None if found is None else found[0][1][found[1]].decode()

    def newest(self, cluster: str, broker: str) -> dt.datetime | None:
        part = self._parts.get((cluster, broker))
        return None if part is None or not len(part[0]) else dt.datetime.fromtimestamp(int(part[0][-1]), UTC)

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self._parts.values())


def taken_snapshots(lake: str) -> TakenSnapshots:
    """The snapshot ledger: which folders were taken, with their listing digests (:class:`TakenSnapshots`)."""
    return TakenSnapshots.read(lake)


def _ts_key(ts: Any) -> str:
    import pandas as pd

    return pd.Timestamp(ts).tz_convert("UTC").strftime("%Y%m%dT%H%M%SZ") if pd.Timestamp(ts).tzinfo else \
        pd.Timestamp(ts).strftime("%Y%m%dT%H%M%SZ")


def snapshot_key(cluster: str, broker: str, ts: dt.datetime) -> tuple[str, str, str]:
    return (cluster, broker, ts.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ"))


def record_snapshots(spark: "SparkSession", lake: str, rows: list[dict[str, Any]]) -> int:
    """Record the snapshots a run took (after their rows, before the run's ingest ledger row)."""
    if not rows:
        return 0
    frame = spark.createDataFrame([tuple(r.get(c) for c in snapshots.TABLE.columns) for r in rows],
                                  snapshots.TABLE.schema)
    return _delta.merge(spark, frame, lake, snapshots.TABLE)
