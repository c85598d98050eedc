"""Issue 37: an exporter killed at any of its points and run again leaves the landing zone a clean run leaves.

A broker's history of store copies (``mixed`` seed 1's broker-a) is exported snapshot by snapshot; at one snapshot
the exporter is SIGKILLed at a failpoint (jobs.lake.failpoints) and run again with the same arguments, as a timer
or cron job would. The landing zone must then hold exactly the clean export's files and rows: the same folders,
parts with the same rows, the same manifests (but the CPU time), no folder left half-written. The lake is a function
of the landing zone, so the lake is the clean run's too (tests/export/test_export_parity.py ingests one).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from export.test_export_parity import folders

ROOT = pathlib.Path(__file__).resolve().parents[2]
POINTS = ("export.after_files", "export.after_decode", "export.after_upload", "export.before_marker",
          "export.after_marker")


def _export(store: pathlib.Path, to: pathlib.Path, state: pathlib.Path, cluster: str, broker: str, ts: str,
            failpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RMQ_RECON_FAILPOINT"}
    if failpoint:
        env["RMQ_RECON_FAILPOINT"] = failpoint
    return subprocess.run([sys.executable, "-m", "jobs.cli", "export", "--store", str(store), "--to", str(to),
                           "--cluster", cluster, "--broker", broker, "--snapshot-ts", ts, "--state", str(state)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def landing_content(to: pathlib.Path) -> dict[str, object]:
    """Every file below ``to``: a part's rows, a manifest without its CPU time, other files' bytes."""
    import pyarrow.parquet as pq

    out: dict[str, object] = {}
    for p in sorted(to.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(to).as_posix()
        if p.suffix == ".parquet":
            out[rel] = pq.read_table(p).to_pylist()
        elif p.name == "manifest.json":
            doc = json.loads(p.read_text())
            doc.pop("cpu_s")
            out[rel] = doc
        else:
            out[rel] = p.read_bytes()
    return out


HISTORY = 6  # snapshots of broker-a: enough for exports before and after the killed one


@pytest.fixture(scope="module")
def history(mixed_world: pathlib.Path) -> list[tuple[str, str, str, pathlib.Path]]:
    """broker-a's first snapshots: (cluster, broker, YYYYMMDDTHHMMSSZ, store folder), oldest first."""
    got = [(c, b, ts.strftime("%Y%m%dT%H%M%SZ"), f / "store") for c, b, ts, f in folders(mixed_world / "landing")
           if b == "broker-a"][:HISTORY]
    assert len(got) == HISTORY
    return got


def _in_process(store: pathlib.Path, to: pathlib.Path, state: pathlib.Path, cluster: str, broker: str,
                ts: str) -> None:
    import datetime as dt

    from jobs.export import store as export

    export.export_store(str(store), str(to), cluster=cluster, broker=broker, state_dir=str(state),
                        snapshot_ts=dt.datetime.strptime(ts, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc),
                        say=lambda _: None)


@pytest.fixture(scope="module")
def clean_landing(history: list, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("clean-export")
    for c, b, ts, store in history:
        _in_process(store, root / "to", root / "state", c, b, ts)
    return root / "to"


@pytest.fixture(scope="module")
def clean(clean_landing: pathlib.Path) -> dict[str, object]:
    return landing_content(clean_landing)


@pytest.mark.integration
@pytest.mark.parametrize("point", POINTS)
def test_an_export_killed_and_run_again_leaves_what_a_clean_run_leaves(
        point: str, history: list, clean: dict, tmp_path: pathlib.Path) -> None:
    kill_at = len(history) // 2  # a snapshot with exports before and after it
    for i, (c, b, ts, store) in enumerate(history):
        if i == kill_at:  # killed, then run again by the timer with the same arguments
            r = _export(store, tmp_path / "to", tmp_path / "state", c, b, ts, failpoint=point)
            assert r.returncode == -9, (point, r.returncode, r.stderr)
            r = _export(store, tmp_path / "to", tmp_path / "state", c, b, ts)
            assert r.returncode == 0, r.stderr
        else:
            _in_process(store, tmp_path / "to", tmp_path / "state", c, b, ts)
    assert not list((tmp_path / "state").rglob(".*.export/*")), "a killed run's scratch files were left"
    assert landing_content(tmp_path / "to") == clean


@pytest.mark.integration
@pytest.mark.compute  # no service
def test_an_ingest_killed_after_copying_the_exports_messages_files_then_rerun_leaves_what_a_clean_run_leaves(
        clean_landing: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Export layout 2: the load copies each messages file into silver/messages and adds them in its one commit.
    Killed between the copies and the commit, the table holds copies no commit names; the rerun adopts the files
    again (new names) and the lake is a clean run's. (Killed after the commit, the rerun's anti-join reads the
    messages files: test_export_parity's broker moving from copies in two runs.)"""
    import signal

    from deltalake import DeltaTable

    from faults.test_kill_rerun import ingest, lake_rows
    from schemas import messages

    killed = tmp_path / "killed"
    code, _, err = ingest(clean_landing, killed, failpoint="layout.append.before_commit")
    assert code == -signal.SIGKILL, err
    table = pathlib.Path(messages.TABLE.path(str(killed)))
    orphans = sorted(p.name for p in table.glob("part-adopted-*.parquet"))
    assert len(orphans) == len(list(clean_landing.rglob("store-export/messages-*.parquet"))) > 0
    def live() -> set[str]:
        return {pathlib.Path(u).name for u in DeltaTable(str(table)).file_uris()}

    assert live() == set()  # created empty, nothing added
    code, _, err = ingest(clean_landing, killed)
    assert code == 0, err
    assert live() and not live() & set(orphans)
    code, _, err = ingest(clean_landing, tmp_path / "clean")
    assert code == 0, err
    assert lake_rows(killed) == lake_rows(tmp_path / "clean")
