"""Issue 12 item 4: lake maintenance compacts small files and vacuums old versions without changing any answer.

The lake: ``blocked-head`` (one broker, snapshots at 00:04, 00:07, 00:10, 00:13) ingested one snapshot per run, the
first three, then reconciled: many small commits. Then ``maintain`` (retention 0 h, so only the ledgers keep
files), a no-op ingest, a reconcile of the same as-of, a second ``maintain``, then the fourth snapshot and a last
``maintain``.
"""
from __future__ import annotations

import filecmp
import os
import pathlib
from typing import Any

import pytest

import schemas
from exactness import report_files
from jobs import simulate
from jobs.ingest import ingest
from jobs.lake import _delta, ledger
from jobs.ops import maintenance
from jobs.reconcile import reconcile
from schemas import ingest_runs, reconcile_runs

SNAPS = ["20260105T000400Z", "20260105T000700Z", "20260105T001000Z", "20260105T001300Z"]


def _glob(ts: str) -> str:
    return f"*/snapshot_ts={ts}"


def _existing(lake: str) -> list:
    return [t for t in schemas.ALL_TABLES if _delta.exists(lake, t)]


def _rows(lake: str, table: Any, version: int | None = None) -> list[tuple]:
    from deltalake import DeltaTable

    df = DeltaTable(table.path(lake), version=version).to_pandas(filesystem=_delta.arrow_filesystem(table.path(lake)))
    drop = _delta.VOLATILE_COLUMNS | {"started_at"}
    df = df[[c for c in table.columns if c in df.columns and c not in drop]]
    return sorted(tuple(repr(v) for v in r) for r in df.itertuples(index=False, name=None))


def _all_rows(lake: str) -> dict[str, list[tuple]]:
    return {t.qualified: _rows(lake, t) for t in _existing(lake) if t is not ingest_runs.TABLE}


def _live(lake: str) -> dict[str, int]:
    from deltalake import DeltaTable

    return {t.qualified: len(DeltaTable(t.path(lake)).file_uris()) for t in _existing(lake)}


def _on_disk(lake: str) -> dict[str, set[str]]:
    out = {}
    for t in _existing(lake):
        root = pathlib.Path(t.path(lake))
        out[t.qualified] = {str(p) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}
    return out


def _needed(lake: str, protected: dict[str, set[int]]) -> dict[str, set[str]]:
    """The data files the current version and every protected version of each table name."""
    from deltalake import DeltaTable

    out = {}
    for t in _existing(lake):
        versions = protected.get(t.qualified, set()) | {DeltaTable(t.path(lake)).version()}
        out[t.qualified] = {u for v in versions for u in DeltaTable(t.path(lake), version=v).file_uris()}
    return out


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("maintenance")
    landing, lake = base / "landing", str(base / "lake")
    simulate.run("blocked-head", str(landing), seed=7)
    for ts in SNAPS[:3]:
        ingest.run(str(landing), lake, snapshot_glob=_glob(ts), settle_s=0)
    first = reconcile.run(lake, str(base / "reports-before"))
    out: dict[str, Any] = {"landing": landing, "lake": lake, "base": base, "run_id": first["run_id"],
                           "rows": _all_rows(lake), "live": _live(lake), "disk": _on_disk(lake),
                           "ingest_rows": _delta.read_pandas(lake, ingest_runs.TABLE),
                           "reconcile_row": ledger.last_reconcile(lake), "last_ingest": ledger.last_ingest(lake)}
    out["m1"] = maintenance.run(lake, retention_h=0)
    out["rows_after"], out["live_after"], out["disk_after"] = _all_rows(lake), _live(lake), _on_disk(lake)
    out["versions_after"] = ledger.versions(lake, _existing(lake))
    out["ledger_rows_after"] = len(_delta.read_pandas(lake, ingest_runs.TABLE))
    out["m2"] = maintenance.run(lake, retention_h=0)  # a rerun at once
    out["versions_rerun"], out["disk_rerun"] = ledger.versions(lake, _existing(lake)), _on_disk(lake)
    out["ledger_rows_rerun"] = len(_delta.read_pandas(lake, ingest_runs.TABLE))
    return out


def test_compaction_leaves_one_file_per_table_and_keeps_every_row(flow: dict[str, Any]) -> None:
    before, after = flow["live"], flow["live_after"]
    # three ingests: three files per bronze/silver table (four for silver/deliveries: rebuilt; one for bronze/cq_files:
    # each ingest replaces a broker's rows whole), gold of one run (one file a table: the run computes the offset
    # series its dashboard tables derive from once, into one file; gold/series_tail and gold/offset_decreases none:
    # no key's newest snapshot lacks bounds and no committed offset decreases in blocked-head; gold/subscription_latest
    # one: the broker's subscriptionGroup.json has the groups; gold/held_queues one: the queues that held messages;
    # silver/store_features and gold/coverage none: a 4.x store, every group traced; silver/key_index three, as
    # silver/messages)
    assert (sum(before.values()), sum(after.values())) == (45, 20)
    # (silver/pop_checkpoints, silver/pop_acks and silver/order_info none either: blocked-head has no POP group)
    assert {n for n, k in before.items() if k > 1} == {t.qualified for t in ingest.LEDGER_TABLES + [
        ingest_runs.TABLE] if t.name not in ("quarantine", "delay_offsets", "cq_files", "store_features",
                                             "pop_checkpoints", "pop_acks", "order_info")}
    # every table is one file (or none when it has no rows); the ingest ledger is compacted after the maintenance
    # row is appended to it
    assert after == {n: min(k, 1) for n, k in before.items()}
    assert {n: (i["files_before"], i["files_after"]) for n, i in flow["m1"]["tables"].items()} == {
        n: (k + (n == "bronze/ingest_runs"), min(k, 1)) for n, k in before.items()}
    assert flow["rows_after"] == flow["rows"]


def test_vacuum_keeps_every_version_the_ledgers_name(flow: dict[str, Any]) -> None:
    lake = flow["lake"]
    # the ledger tables themselves are named by no row: their replaced files go at once (retention 0)
    # deleted: the files bronze/segments' MERGE updates and bronze/cq_files' replacements replaced before the last
    # ingest's version, and the ingest ledger's (no row names a version of a ledger table); every file compaction
    # replaced is kept (the last ingest and the reconcile run name the versions before it)
    assert {n: i["vacuumed"] for n, i in flow["m1"]["tables"].items() if i["vacuumed"]} == {
        "bronze/segments": 2, "bronze/cq_files": 2, "bronze/ingest_runs": 4}
    # on disk: 49 data files (3 of bronze/cq_files), + 12 compacted (11 ingest tables, the ingest ledger;
    # bronze/cq_files is one file already) + 1 ledger row - 8 deleted
    assert (sum(map(len, flow["disk"].values())), sum(map(len, flow["disk_after"].values()))) == (49, 54)
    # the versions the last ingest (read by reconcile) and the reconcile run (read by dashboard and alerts) recorded
    # are still readable, with the rows they had
    for name, v in {**flow["last_ingest"]["table_versions"], **flow["reconcile_row"]["table_versions"]}.items():
        table = next(t for t in schemas.ALL_TABLES if t.qualified == name)
        assert _rows(lake, table, v) == flow["rows"][name], name
    assert flow["disk_after"] == _needed(lake, maintenance.protected_versions(lake))


def test_a_no_op_ingest_after_maintenance_starts_no_engine(flow: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.lake import _spark

    def no_engine(*a: Any, **k: Any) -> Any:
        raise AssertionError("the engine was started after maintenance with nothing new to ingest")

    monkeypatch.setattr(_spark, "session", no_engine)
    again = ingest.run(str(flow["landing"]), flow["lake"], snapshot_glob=_glob(SNAPS[2]), settle_s=0)
    assert (again["snapshots"], again["changed_rows"], again["run_id"]) == (0, {}, flow["m1"]["run_id"])
    assert ledger.is_maintenance(flow["m1"]["run_id"])
    # the maintenance row added nothing: silver validation of it has nothing to look at
    inc = ledger.ingest_increment(flow["lake"])
    assert (inc["run_id"], inc["before"]) == (flow["m1"]["run_id"], inc["after"])


def test_reconcile_after_maintenance_writes_identical_reports_and_rows(flow: dict[str, Any]) -> None:
    lake, base = flow["lake"], flow["base"]
    again = reconcile.run(lake, str(base / "reports-after"))
    assert again["run_id"] == flow["run_id"]
    before, after = base / "reports-before" / flow["run_id"], base / "reports-after" / flow["run_id"]
    names = report_files(before)
    assert names == report_files(after) and len(names) == 10
    differ = [n for n in names if n != "summary.json" and n != "index.html"
              and not filecmp.cmp(before / n, after / n, shallow=False)]
    assert differ == []
    gold = [t for t in _existing(lake) if t.layer == "gold" and "run_id" in t.columns and t is not reconcile_runs.TABLE
            and t.name not in ("validation_results", "alerts_sent")]
    assert {t.qualified: _rows(lake, t) for t in gold} == {t.qualified: flow["rows"][t.qualified] for t in gold}


def test_a_rerun_of_maintenance_changes_nothing(flow: dict[str, Any]) -> None:
    again = flow["m2"]
    assert (again["run_id"], again["vacuumed"], again["files_before"], again["files_after"]) == (None, 0, 20, 20)
    assert all(i["files_removed"] == 0 for i in again["tables"].values())
    assert (flow["versions_rerun"], flow["disk_rerun"]) == (flow["versions_after"], flow["disk_after"])
    assert flow["ledger_rows_rerun"] == flow["ledger_rows_after"] == 4


def test_after_the_next_ingest_the_replaced_files_go_and_the_lake_equals_a_clean_one(
        flow: dict[str, Any], tmp_path: pathlib.Path) -> None:
    lake = flow["lake"]
    ingest.run(str(flow["landing"]), lake, snapshot_glob=_glob(SNAPS[3]), settle_s=0)
    disk_before = sum(len(v) for v in _on_disk(lake).values())
    third = maintenance.run(lake, retention_h=0)
    disk_after = sum(len(v) for v in _on_disk(lake).values())
    # now no ledger row names a version before the first compaction: its replaced files go, and what the fourth
    # ingest and the second reconcile replaced is kept only as far as their versions need it
    assert (disk_before, disk_after) == (71, 34)  # with silver/key_index (one file of it after)
    assert _on_disk(lake) == _needed(lake, maintenance.protected_versions(lake))
    clean = str(tmp_path / "clean")
    ingest.run(str(flow["landing"]), clean, settle_s=0)
    silver = [t for t in _existing(clean) if t.layer != "gold" and t is not ingest_runs.TABLE]
    assert {t.qualified: _rows(lake, t) for t in silver} == {t.qualified: _rows(clean, t) for t in silver}
    assert third["run_id"] is not None and ledger.last_ingest(lake)["run_id"] == third["run_id"]


def test_maintain_on_a_missing_lake_says_so(tmp_path: pathlib.Path) -> None:
    from jobs.problems import UsageError

    with pytest.raises(UsageError, match=r"--lake .*/nowhere: no such lake"):
        maintenance.run(str(tmp_path / "nowhere"))


def test_parquet_lakes_are_skipped_with_a_line(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_RECON_FORMAT", "parquet")
    said: list[str] = []
    out = maintenance.run(str(tmp_path), progress=said.append)
    assert (out["skipped"], out["run_id"]) == ({"*": "parquet lake"}, None)
    assert said == [f"maintain: {tmp_path} is a Parquet lake: skipped (no versions to vacuum; Parquet rewrites "
                    "already replace the table's files)"]


def test_an_s3_lake_is_compacted_and_vacuumed_the_same_way(flow: dict[str, Any], moto_s3: Any, tmp_path: pathlib.Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Maintenance needs no engine: a local lake of two ingests, uploaded to S3 (moto), maintained there."""
    from jobs.lake import storage

    local = str(tmp_path / "lake")
    for ts in SNAPS[:2]:
        ingest.run(str(flow["landing"]), local, snapshot_glob=_glob(ts), settle_s=0)
    rows, live = _all_rows(local), _live(local)
    moto_s3.apply(monkeypatch)
    lake = storage.join(moto_s3.bucket_uri, "lake-maintenance")
    storage.upload_tree(local, lake)
    first = maintenance.run(lake, retention_h=0)
    assert {n: (i["files_before"], i["files_after"]) for n, i in first["tables"].items()} == {
        n: (k + (n == "bronze/ingest_runs"), min(k, 1)) for n, k in live.items()}
    assert {t.qualified: sorted(tuple(repr(v) for v in r) for r in _delta.read_pandas(lake, t)[
        [c for c in t.columns if c not in _delta.VOLATILE_COLUMNS]].itertuples(index=False, name=None))
        for t in _existing(local) if t is not ingest_runs.TABLE} == rows
    assert ledger.last_ingest(lake)["run_id"] == first["run_id"]
    again = maintenance.run(lake, retention_h=0)
    assert (again["run_id"], again["vacuumed"], again["files_after"]) == (None, 0, first["files_after"])
    assert [k for k in storage.list_keys(storage.join(lake, "_control")) if k.endswith(".lease")] == []
