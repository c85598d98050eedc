"""Gold retention: exactly the rows of expired runs and validations go, once, and a killed prune finishes on rerun.

The lake is built with delta-rs (no engine): every gold table keyed by run id gets two rows for each of eight
completed reconcile runs and one run that never completed (r99, killed before its ledger row: its rows go whatever
their age), one commit a run. ``now`` is 2026-01-20 00:00 UTC, retention 7 days (cutoff 2026-01-13 00:00), the 3
newest runs kept:

=====  ===================  ===================  ===========================================
run    completed            as of                kept?
=====  ===================  ===================  ===========================================
r01    2026-01-01 00:10     2026-01-01 00:00     no
r02    2026-01-02 00:10     2026-01-02 00:00     no
r03    2026-01-03 00:10     2026-01-03 00:00     no
r04    2026-01-10 00:10     2026-01-10 00:00     no
r05    2026-01-11 00:10     2026-01-11 00:00     yes: 3rd newest by as-of (r08 is a backfill)
r06    2026-01-12 00:10     2026-01-12 00:00     yes: newest 3 by completion and by as-of
r07    2026-01-13 00:00     2026-01-12 23:50     yes: completed at the cutoff, not before it
r08    2026-01-19 00:10     2025-12-31 00:00     yes: completed 1 day ago (a backfill of an old as-of)
=====  ===================  ===================  ===========================================

Validations v1..v5 validated on Jan 1, 5, 14, 15, 16 (3 rows each), the 2 newest kept: v1 and v2 go.
"""
from __future__ import annotations

import datetime as dt
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from jobs.lake import _delta, ledger
from jobs.ops import maintenance, retention
from jobs.problems import UsageError
from schemas import alerts_sent, reconcile_runs, validation_results

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 20, tzinfo=UTC)
RUNS = {  # run id: (completed, as of)
    "r01": ("2026-01-01T00:10", "2026-01-01T00:00"), "r02": ("2026-01-02T00:10", "2026-01-02T00:00"),
    "r03": ("2026-01-03T00:10", "2026-01-03T00:00"), "r04": ("2026-01-10T00:10", "2026-01-10T00:00"),
    "r05": ("2026-01-11T00:10", "2026-01-11T00:00"), "r06": ("2026-01-12T00:10", "2026-01-12T00:00"),
    "r07": ("2026-01-13T00:00", "2026-01-12T23:50"), "r08": ("2026-01-19T00:10", "2025-12-31T00:00"),
}
ORPHAN = "r99"
VALIDATIONS = {"v1": "2026-01-01T01:00", "v2": "2026-01-05T01:00", "v3": "2026-01-14T01:00",
               "v4": "2026-01-15T01:00", "v5": "2026-01-16T01:00"}
EXPIRED = ["r01", "r02", "r03", "r04"]
KEPT = ["r05", "r06", "r07", "r08"]


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def _write(lake: str, table: Any, rows: list[dict[str, Any]]) -> None:
    from deltalake import write_deltalake

    schema = _delta._arrow_schema(table)  # noqa: SLF001
    full = [{f.name: r.get(f.name) for f in schema} for r in rows]
    write_deltalake(table.path(lake), pa.Table.from_pylist(full, schema=schema), mode="append")


def _build(lake: str) -> None:
    for rid in [*RUNS, ORPHAN]:
        for t in retention.run_tables():
            _write(lake, t, [{"run_id": rid}, {"run_id": rid}])
        if rid in RUNS:
            done, as_of = RUNS[rid]
            _write(lake, reconcile_runs.TABLE, [{"run_id": rid, "completed_at": _ts(done), "as_of": _ts(as_of),
                                                 "table_versions": []}])
    _write(lake, alerts_sent.TABLE, [{"run_id": "r01", "channel": "file"}])
    for vid, at in VALIDATIONS.items():
        _write(lake, validation_results.TABLE, [{"validation_id": vid, "table_name": f"t{i}", "validated_at": _ts(at)}
                                                for i in range(3)])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = str(tmp_path_factory.mktemp("retention") / "lake")
    _build(lake)
    return lake


def _copy(built: str, tmp_path: pathlib.Path) -> str:
    lake = str(tmp_path / "lake")
    shutil.copytree(built, lake)
    return lake


def _ids(lake: str, table: Any, column: str = "run_id") -> list[str]:
    return sorted(_delta.read_pandas_columns(lake, table, [column])[column])


def _state(lake: str) -> dict[str, list[str]]:
    out = {t.qualified: _ids(lake, t) for t in [*retention.run_tables(), reconcile_runs.TABLE, alerts_sent.TABLE]}
    out[validation_results.TABLE.qualified] = _ids(lake, validation_results.TABLE, "validation_id")
    return out


def _versions(lake: str) -> dict[str, int]:
    return ledger.versions(lake, [*retention.run_tables(), reconcile_runs.TABLE, validation_results.TABLE])


def _pruned_state() -> dict[str, list[str]]:
    twice = sorted([r for r in KEPT for _ in range(2)])
    out = {t.qualified: twice for t in retention.run_tables()}
    out[reconcile_runs.TABLE.qualified] = KEPT
    out[alerts_sent.TABLE.qualified] = ["r01"]
    out[validation_results.TABLE.qualified] = sorted([v for v in ("v3", "v4", "v5") for _ in range(3)])
    return out


def test_the_tables_pruned_are_the_reconciles_gold_tables() -> None:
    from jobs.reconcile.reconcile import GOLD_TABLES

    assert {t.qualified for t in retention.run_tables()} == {t.qualified for t in GOLD_TABLES}


def test_expired_runs_are_old_and_outside_the_newest_by_completion_and_by_as_of(built: str) -> None:
    from jobs.reconcile import gold_runs

    runs = gold_runs.completed_runs(built)
    assert retention.expired_runs(runs, now=NOW, days=7, keep_runs=3) == EXPIRED
    # keeping 1: r05 (3rd newest by as-of) goes, r06 too; r07 sits on the cutoff, r08 is young
    assert retention.expired_runs(runs, now=NOW, days=7, keep_runs=1) == [*EXPIRED, "r05", "r06"]
    assert retention.expired_runs(runs, now=NOW, days=0, keep_runs=3) == EXPIRED
    assert retention.expired_runs(runs, now=NOW, days=30, keep_runs=3) == []
    times = retention.validation_times(built)
    assert retention.expired_validations(times, now=NOW, days=7, keep=2) == ["v1", "v2"]
    assert retention.expired_validations(times, now=NOW, days=7, keep=4) == ["v1"]
    assert retention.expired_validations(times, now=NOW, days=0, keep=2) == ["v1", "v2", "v3"]


def test_prune_deletes_exactly_the_expired_rows_and_a_rerun_changes_nothing(built: str,
                                                                             tmp_path: pathlib.Path) -> None:
    lake = _copy(built, tmp_path)
    said: list[str] = []
    out = retention.prune(lake, days=7, keep_runs=3, keep_validations=2, now=NOW, say=said.append)
    assert (out["runs"], out["validations"], out["unrecorded"]) == (EXPIRED, ["v1", "v2"], [ORPHAN])
    assert out["rows"] == {**{t.qualified: 10 for t in retention.run_tables()}, "gold/reconcile_runs": 4,
                           "gold/validation_results": 6}
    assert _state(lake) == _pruned_state()
    assert said == [f"maintain: gold retention (7 days, the 3 newest runs kept): 4 reconcile runs and 2 validations "
                    f"pruned, 1 run(s) that never completed removed, {10 * len(retention.run_tables()) + 10} rows "
                    "deleted"]
    versions = _versions(lake)
    again = retention.prune(lake, days=7, keep_runs=3, keep_validations=2, now=NOW, say=said.append)
    assert (again["runs"], again["validations"], again["unrecorded"], again["rows"], _versions(lake), len(said)) == (
        [], [], [], {}, versions, 1)


def test_only_one_run_files_name_runs_without_a_ledger_row(built: str, tmp_path: pathlib.Path) -> None:
    """The log's statistics, no data read: r99's own files name it; once compacted with recorded runs (as after a
    maintenance, which prunes first) its rows sit in a file whose min and max differ, which names no run."""
    from deltalake import DeltaTable

    lake = _copy(built, tmp_path)
    table = retention.run_tables()[0]
    known = set(RUNS)
    assert retention.unrecorded_runs(lake, table, known) == {ORPHAN}
    assert retention.unrecorded_runs(lake, table, known | {ORPHAN}) == set()
    DeltaTable(table.path(lake)).optimize.compact()
    assert retention.unrecorded_runs(lake, table, known) == set()


def test_a_pruned_runs_rows_stay_readable_at_its_recorded_version_until_vacuum(built: str,
                                                                                tmp_path: pathlib.Path) -> None:
    lake = _copy(built, tmp_path)
    table = retention.run_tables()[0]
    before = _delta.version(lake, table)
    retention.prune(lake, days=7, keep_runs=3, keep_validations=2, now=NOW)
    at = _delta.read_pandas_columns(lake, table, ["run_id"], filters=[("run_id", "=", "r01")], at=before)
    assert list(at["run_id"]) == ["r01", "r01"]
    assert _delta.read_pandas_columns(lake, table, ["run_id"], filters=[("run_id", "=", "r01")]).empty


def test_a_prune_killed_between_tables_is_finished_by_the_rerun(built: str, tmp_path: pathlib.Path) -> None:
    lake = _copy(built, tmp_path)
    code = ("import datetime as dt; from jobs.ops import retention; "
            "retention.prune(%r, days=7, keep_runs=3, keep_validations=2, "
            "now=dt.datetime(2026, 1, 20, tzinfo=dt.timezone.utc))" % lake)
    env = {**os.environ, "RMQ_RECON_FAILPOINT": "retention-after-table@2"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    half = _state(lake)
    first_two = [t.qualified for t in retention.run_tables()[:2]]
    assert [q for q, ids in half.items() if ids != _pruned_state()[q]] == [
        t.qualified for t in retention.run_tables()[2:]] + ["gold/reconcile_runs", "gold/validation_results"]
    assert all(half[q] == _pruned_state()[q] for q in first_two)
    out = retention.prune(lake, days=7, keep_runs=3, keep_validations=2, now=NOW)
    # the rerun deletes what the kill left: nothing in the first two tables, the rest as a clean run would
    assert out["runs"] == EXPIRED
    assert out["rows"] == {**{t.qualified: 10 for t in retention.run_tables()[2:]}, "gold/reconcile_runs": 4,
                           "gold/validation_results": 6}
    assert _state(lake) == _pruned_state()


def test_maintenance_prunes_then_vacuums_the_pruned_rows_files(built: str, tmp_path: pathlib.Path) -> None:
    import pyarrow.parquet as pq

    lake = _copy(built, tmp_path)
    out = maintenance.run(lake, retention_h=0, gold_retention_days=7, keep_runs=3, now=NOW, progress=lambda _: None)
    # the dashboard shows the 30 newest validations: all five stay
    assert (out["pruned"]["runs"], out["pruned"]["validations"]) == (EXPIRED, [])
    assert _state(lake) == {**_pruned_state(), "gold/validation_results": sorted(v for v in VALIDATIONS for _ in "abc")}
    on_disk: set[str] = set()
    for t in retention.run_tables():
        for f in pathlib.Path(t.path(lake)).rglob("*.parquet"):
            on_disk |= set(pq.read_table(f, columns=["run_id"]).column("run_id").to_pylist())
    assert on_disk == set(KEPT)
    again = maintenance.run(lake, retention_h=0, gold_retention_days=7, keep_runs=3, now=NOW, progress=lambda _: None)
    assert (again["pruned"]["runs"], again["pruned"]["rows"], again["vacuumed"]) == ([], {}, 0)


def test_an_s3_lake_is_pruned_the_same_way(built: str, moto_s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.lake import storage

    moto_s3.apply(monkeypatch)
    lake = storage.join(moto_s3.bucket_uri, "lake-retention")
    storage.upload_tree(built, lake)
    out = retention.prune(lake, days=7, keep_runs=3, keep_validations=2, now=NOW)
    assert (out["runs"], out["validations"]) == (EXPIRED, ["v1", "v2"])
    assert _state(lake) == _pruned_state()


def test_bad_settings_are_refused_in_one_line(built: str) -> None:
    with pytest.raises(UsageError, match=r"^--gold-retention-days -1: give 0 or more days$"):
        retention.prune(built, days=-1, keep_runs=3, keep_validations=2, now=NOW)
    with pytest.raises(UsageError, match="keep at least the newest reconcile run"):
        retention.prune(built, days=7, keep_runs=0, keep_validations=2, now=NOW)
    with pytest.raises(UsageError, match=r"^--gold-retention-days -2: give 0 or more days$"):
        maintenance.run(built, gold_retention_days=-2)


@pytest.mark.integration
def test_the_maintenance_dag_prunes_with_its_gold_retention_param(tmp_path: pathlib.Path,
                                                                  airflow_db: pathlib.Path) -> None:
    """rocketmq_maintenance as the scheduler runs it (dag.test, the real clock): 33 runs of January 2026, all older
    than the Param's 30 days; the 30 newest stay, the 3 oldest go with their rows."""
    from airflow.dag_processing.dagbag import DagBag

    lake = str(tmp_path / "lake")
    ids = [f"s{i:02d}" for i in range(33)]
    for i, rid in enumerate(ids):
        done = dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(minutes=15 * i)
        for t in retention.run_tables():
            _write(lake, t, [{"run_id": rid}])
        _write(lake, reconcile_runs.TABLE, [{"run_id": rid, "completed_at": done, "as_of": done,
                                             "table_versions": []}])
    dag = DagBag(dag_folder=str(pathlib.Path(__file__).resolve().parents[2] / "dags" / "rocketmq_maintenance.py")) \
        .dags["rocketmq_maintenance"]
    run = dag.test(run_conf={"lake": lake, "retention_h": 0, "gold_retention_days": 30})
    assert (run.state, {ti.task_id: ti.state for ti in run.get_task_instances()}) == (
        "success", {"maintain": "success"})
    assert _ids(lake, reconcile_runs.TABLE) == ids[3:]
    assert {t.qualified: _ids(lake, t) for t in retention.run_tables()} == {
        t.qualified: ids[3:] for t in retention.run_tables()}
