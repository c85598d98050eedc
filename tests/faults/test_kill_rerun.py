"""Issue 15: kill ingest and reconcile anywhere, run them twice at once: the lake and the reports always end up
exactly as a clean run leaves them, and a reader never sees a half-written state.

Real processes (``python -m jobs.cli``), killed with SIGKILL at the named failpoints of ``jobs.lake.failpoints`` (no
cleanup, no exit handler: as the OOM killer or a lost node would). The landing zone is ``blocked-head`` (4 broker
snapshots, 2,641 records, 6,802 trace records); the lake starts as a completed ingest of its first two snapshots, so
every kill lands on a lake that already has a completed run, as on a live fleet.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN_ID = "R"
LEDGERS = {"bronze/ingest_runs", "gold/reconcile_runs"}
VOLATILE = {"ingested_at", "detected_at", "updated_at", "completed_at", "started_at"}


def _cli(*args: str, failpoint: str | None = None, wait: bool = True, log: pathlib.Path | None = None,
         **env: str) -> Any:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_LOG": "warn", "RMQ_RECON_LEASE_WAIT_S": "300", **env}
    e.pop("RMQ_RECON_FAILPOINT", None)
    if failpoint:
        e["RMQ_RECON_FAILPOINT"] = failpoint
    if not wait:  # output to a file: a pipe nobody reads would block a long run
        assert log is not None
        with open(log, "w") as f:
            return subprocess.Popen([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=e,
                                    stdout=subprocess.DEVNULL, stderr=f)
    p = subprocess.Popen([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=300)
    return p.returncode, out, err


def ingest(landing: pathlib.Path, lake: pathlib.Path, *extra: str, failpoint: str | None = None) -> tuple:
    return _cli("ingest", "--landing", str(landing), "--lake", str(lake), *extra, failpoint=failpoint)


def reconcile(lake: pathlib.Path, reports: pathlib.Path, failpoint: str | None = None) -> tuple:
    return _cli("reconcile", "--lake", str(lake), "--reports", str(reports), "--run-id", RUN_ID, failpoint=failpoint)


def lake_rows(lake: pathlib.Path, layers: tuple[str, ...] = ("bronze", "silver")) -> dict[str, list[tuple]]:
    """Every row of every table of ``layers`` but the ledgers (whose run ids and times differ by nature), volatile
    columns out."""
    from jobs.lake import _delta
    from schemas import ALL_TABLES

    out = {}
    for t in ALL_TABLES:
        if t.layer not in layers or t.qualified in LEDGERS or not _delta.exists(str(lake), t):
            continue
        df = _delta.read_pandas(str(lake), t)
        cols = [c for c in t.columns if c not in VOLATILE]
        out[t.qualified] = sorted(tuple(repr(v) for v in r) for r in df[cols].itertuples(index=False, name=None))
    return out


def segment_rows(lake: pathlib.Path) -> list[tuple]:
    """The rows of the key index's segment chain (jobs.lake.point_index), as (cluster, hash, broker, physical offset,
    queue offset)."""
    from jobs.lake import point_index

    out = []
    for seg in point_index.chain(point_index.cache_dir(str(lake)), None):
        for r in seg.runs:
            out += [(r.cluster, h, seg.brokers[b], p, q) for h, b, p, q in
                    zip(r.hashes.tolist(), r.brokers.tolist(), r.physical.tolist(), r.queue.tolist())]
    return sorted(out)


def report_files(folder: pathlib.Path, lake: pathlib.Path) -> dict[str, str]:
    """A report folder's files, with the lake's path (named in summary.json and index.html) made neutral."""
    return {str(p.relative_to(folder)): p.read_text().replace(str(lake), "<lake>")
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The landing zone, a lake after the first two snapshots, and the clean results to compare with."""
    from jobs.ingest import landing as landing_mod
    from jobs import simulate

    base = tmp_path_factory.mktemp("kill")
    landing = base / "landing"
    simulate.run("blocked-head", str(landing), seed=7)
    snaps, _, _ = landing_mod.discover(str(landing))
    assert len(snaps) == 4
    half = base / "lake-half"
    # the first two snapshots: a glob on their folder names
    first_two = "*snapshot_ts=" + os.path.commonprefix([s.folder.split("snapshot_ts=")[1] for s in snaps[:2]]) + "*"
    assert ingest(landing, half, "--snapshots", first_two)[0] == 0
    half_reports = base / "reports-half"
    assert reconcile(half, half_reports)[0] == 0
    # the half lake as it was after its ingest: reconcile adds gold tables, which the kill cases do not start from
    shutil.rmtree(half / "gold")
    full = base / "lake-full"
    shutil.copytree(half, full)
    code, _, err = ingest(landing, full)
    assert code == 0, err
    full_reports = base / "reports-full"
    assert reconcile(full, full_reports)[0] == 0
    return {"base": base, "landing": landing, "half": half, "full": full, "first_two": first_two,
            "full_rows": lake_rows(full), "full_gold": lake_rows(full, ("gold",)), "half_report": report_files(half_reports / RUN_ID, half),
            "full_report": report_files(full_reports / RUN_ID, full)}


def _fresh(world: dict[str, Any], name: str, src: str = "half") -> pathlib.Path:
    lake = world["base"] / name
    shutil.copytree(world[src], lake)
    return lake


def test_the_clean_runs_are_what_the_scenario_holds(world: dict[str, Any]) -> None:
    rows = world["full_rows"]
    assert (len(rows["silver/messages"]), len(rows["bronze/trace_records"]), len(rows["silver/deliveries"]),
            len(rows["silver/key_index"])) == (2641, 6802, 2301, 2641)
    assert world["half_report"] != world["full_report"]
    from jobs.lake import _delta
    from schemas import key_index

    index = _delta.read_pandas(str(world["full"]), key_index.TABLE)
    assert segment_rows(world["full"]) == sorted(index[list(key_index.TABLE.columns)].itertuples(index=False,
                                                                                                  name=None))


@pytest.mark.parametrize("point", ["ingest.after_snapshot@1", "ingest.after_trace", "ingest.after_configs",
                                   "ingest.after_segments", "ingest.after_key_index", "ingest.after_deliveries"])
def test_ingest_killed_then_rerun_leaves_what_a_clean_run_leaves(world: dict[str, Any], point: str) -> None:
    lake = _fresh(world, f"lake-{point}")
    code, _, err = ingest(world["landing"], lake, failpoint=point)
    assert code == -signal.SIGKILL, err
    # Before the rerun a reconcile reports the last completed ingest's state (the first two snapshots), never the
    # partial one the killed run left.
    reports = world["base"] / f"reports-{point}"
    code, _, err = reconcile(lake, reports)
    assert code == 0, err
    assert report_files(reports / RUN_ID, lake) == world["half_report"]
    code, _, err = ingest(world["landing"], lake)
    assert code == 0, err
    assert lake_rows(lake) == world["full_rows"]
    assert segment_rows(lake) == segment_rows(world["full"])
    code, _, err = reconcile(lake, reports)
    assert code == 0, err
    assert report_files(reports / RUN_ID, lake) == world["full_report"]
    assert lake_rows(lake, ("gold",)) == world["full_gold"]


@pytest.mark.parametrize("point", ["reconcile.after_gold_table@2", "reports.between_renames",
                                   "reconcile.after_publish"])
def test_reconcile_killed_then_rerun_never_shows_a_mixed_folder(world: dict[str, Any], point: str) -> None:
    """A rerun of a run id whose report exists, killed: the folder is the old complete one or none at all."""
    lake = _fresh(world, f"lake-{point}", src="full")
    reports = world["base"] / f"reports-{point}"
    assert reconcile(lake, reports)[0] == 0
    code, _, err = reconcile(lake, reports, failpoint=point)
    assert code == -signal.SIGKILL, err
    folder = reports / RUN_ID
    if point == "reports.between_renames":
        assert not folder.exists()
    else:
        assert report_files(folder, lake) == world["full_report"]
    code, _, err = reconcile(lake, reports)
    assert code == 0, err
    assert report_files(folder, lake) == world["full_report"]
    assert lake_rows(lake, ("gold",)) == world["full_gold"]
    assert sorted(p.name for p in reports.iterdir()) == [RUN_ID]  # no staging or old folder left
    assert list((lake / "_tmp").glob("*")) == []


def test_first_reconcile_killed_leaves_no_folder_and_no_temporary_files(world: dict[str, Any]) -> None:
    lake = _fresh(world, "lake-first-reconcile", src="full")
    reports = world["base"] / "reports-first-reconcile"
    code, _, err = reconcile(lake, reports, failpoint="reconcile.after_gold_table@3")
    assert code == -signal.SIGKILL, err
    assert not (reports / RUN_ID).exists()
    assert [p.name for p in (lake / "_tmp").iterdir()][0].startswith("reconcile-")  # what the dead run left
    assert reconcile(lake, reports)[0] == 0
    assert report_files(reports / RUN_ID, lake) == world["full_report"]
    assert list((lake / "_tmp").glob("*")) == []


def test_two_ingests_at_once_land_every_row_once(world: dict[str, Any]) -> None:
    lake = _fresh(world, "lake-two-ingests")
    args = ("ingest", "--landing", str(world["landing"]), "--lake", str(lake))
    logs = [world["base"] / f"two-ingests-{i}.log" for i in range(2)]
    procs = [_cli(*args, wait=False, log=log) for log in logs]
    results = [(p.wait(timeout=300), log.read_text()) for p, log in zip(procs, logs)]
    assert [code for code, _ in results] == [0, 0], results
    assert sum("lease: waiting for" in err for _, err in results) == 1
    assert lake_rows(lake) == world["full_rows"]


def test_reconcile_beside_an_ingest_reports_a_completed_state(world: dict[str, Any]) -> None:
    """Started together: the reconcile reads the lake as the last completed ingest left it, before or after the
    ingest beside it, and its report is exactly that state's."""
    lake = _fresh(world, "lake-beside")
    reports = world["base"] / "reports-beside"
    ing = _cli("ingest", "--landing", str(world["landing"]), "--lake", str(lake), wait=False,
               log=world["base"] / "beside.log")
    time.sleep(2)  # the ingest has taken its lease and is loading
    code, _, err = reconcile(lake, reports)
    assert code == 0, err
    got = report_files(reports / RUN_ID, lake)
    assert got in (world["half_report"], world["full_report"])
    assert ing.wait(timeout=300) == 0
    assert reconcile(lake, reports)[0] == 0
    assert report_files(reports / RUN_ID, lake) == world["full_report"]


def test_two_reconciles_of_one_run_at_once_write_one_complete_folder(world: dict[str, Any]) -> None:
    lake = _fresh(world, "lake-two-reconciles", src="full")
    reports = world["base"] / "reports-two"
    args = ("reconcile", "--lake", str(lake), "--reports", str(reports), "--run-id", RUN_ID)
    procs = [_cli(*args, wait=False, log=world["base"] / f"two-reconciles-{i}.log") for i in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    assert lake_rows(lake, ("gold",)) == world["full_gold"]
    assert report_files(reports / RUN_ID, lake) == world["full_report"]
    assert sorted(p.name for p in reports.iterdir()) == [RUN_ID]


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``store-types`` (broker-a and broker-b, 50,402 records): a lake of its first four snapshots, and the clean
    lake and report after the rest, whose ingest appends the records it decoded as a file per broker (issue 39)."""
    from jobs import simulate

    base = tmp_path_factory.mktemp("kill-layout")
    landing = base / "landing"
    simulate.run("store-types", str(landing), seed=7)
    half = base / "lake-half"
    assert ingest(landing, half, "--snapshots", "*snapshot_ts=2026010[5-6]*")[0] == 0
    full = base / "lake-full"
    shutil.copytree(half, full)
    code, _, err = ingest(landing, full)
    assert code == 0, err
    assert "ingest: silver/messages: appended 35,282 rows as 2 file(s) of one broker each" in err
    assert "split" not in err
    reports = base / "reports-full"
    assert reconcile(full, reports)[0] == 0
    return {"base": base, "landing": landing, "half": half, "full_rows": lake_rows(full),
            "full_files": _broker_files(full), "full_report": report_files(reports / RUN_ID, full)}


def _broker_files(lake: pathlib.Path) -> list[tuple[str, str, int]]:
    import pyarrow as pa
    from deltalake import DeltaTable

    acts = pa.table(DeltaTable(str(lake / "silver" / "messages")).get_add_actions(flatten=True)).to_pylist()
    return sorted((a["min.broker"], a["max.broker"], a["num_records"]) for a in acts)


@pytest.mark.parametrize("point", ["layout.append.before_commit", "ingest.after_snapshot"])
def test_ingest_killed_in_its_append_then_rerun_leaves_what_a_clean_run_leaves(two_brokers: dict[str, Any],
                                                                               point: str) -> None:
    """Killed before the append's commit (the rerun decodes and appends again) and after it (the rerun finds the
    records in the table: its anti-join adds none)."""
    lake = two_brokers["base"] / f"lake-{point}"
    shutil.copytree(two_brokers["half"], lake)
    code, _, err = ingest(two_brokers["landing"], lake, failpoint=point)
    assert code == -signal.SIGKILL, err
    code, _, err = ingest(two_brokers["landing"], lake)
    assert code == 0, err
    assert lake_rows(lake) == two_brokers["full_rows"]
    # one file per broker for each of the two ingests: the half lake's and the rest
    assert _broker_files(lake) == two_brokers["full_files"]
    assert [(a, b) for a, b, _ in two_brokers["full_files"]] == [("broker-a", "broker-a")] * 2 + [
        ("broker-b", "broker-b")] * 2
    reports = two_brokers["base"] / f"reports-{point}"
    assert reconcile(lake, reports)[0] == 0
    assert report_files(reports / RUN_ID, lake) == two_brokers["full_report"]
