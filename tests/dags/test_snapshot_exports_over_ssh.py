"""Issue 37 item 3: the snapshot DAG takes the snapshot itself, running ``rmq-recon export`` on the broker host over
an Airflow SSH connection, then ingests.

The host is a real OpenSSH server on 127.0.0.1 (infra/sshd.sh, Debian openssh-server) holding a broker store that
grows between runs: ``blocked-head`` seed 7's store copies, each run's store the next copy. Its lake must hold what
the same store copies ingested (run for run) give. A second host whose store is not there fails its export, and the
run, while the first host's folder still lands.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest

from export.test_export_parity import compared, folders

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A started sshd; the Airflow connection (JSON) that reaches it as the running user."""
    import getpass

    where, port = tmp_path_factory.mktemp("sshd"), _free_port()
    started = subprocess.run(["bash", str(ROOT / "infra/sshd.sh"), "start", str(where), str(port)],
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "port": port, "login": getpass.getuser(),
            "extra": {"key_file": str(where / "client_ed25519"), "host_key": started.stdout.strip()}}
    yield {"conn": json.dumps(conn), "dir": str(where)}
    subprocess.run(["bash", str(ROOT / "infra/sshd.sh"), "stop", str(where)], check=False, timeout=60)


def _replace_store(src: pathlib.Path, live: pathlib.Path) -> None:
    """The live store becomes ``src``: what the broker wrote since (segments grown, new files, files removed)."""
    shutil.rmtree(live, ignore_errors=True)
    shutil.copytree(src, live)


@pytest.mark.integration
def test_the_snapshot_dag_exports_a_growing_store_over_ssh_then_ingests_it(
        tmp_path: pathlib.Path, airflow_db: pathlib.Path, sshd: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from jobs import simulate
    from jobs.ingest import ingest

    copies = tmp_path / "copies"
    simulate.run("blocked-head", str(copies), seed=7)
    history = [(ts, folder) for _, broker, ts, folder in folders(copies) if broker]
    assert len(history) == 4
    taken = [history[0], history[2], history[3]]  # the store grows by one snapshot, then by two, then by one
    live, landing, lake = tmp_path / "host" / "store", tmp_path / "landing", tmp_path / "lake"
    monkeypatch.setenv("AIRFLOW_CONN_BROKER_A_HOST", sshd["conn"])
    host = {"conn_id": "broker_a_host", "store": str(live), "cluster": "DefaultCluster", "broker": "broker-a",
            "state": str(tmp_path / "host" / "state"),
            # this checkout's code (the virtualenv's rmq-recon may be installed from another)
            "command": f"env PYTHONPATH={ROOT} RUST_LOG=warn {sys.executable} -m jobs.cli"}
    missing = {**host, "broker": "broker-b", "store": str(tmp_path / "host" / "no-store")}
    dag = DagBag(dag_folder=str(ROOT / "dags" / "rocketmq_snapshot.py")).dags["rocketmq_snapshot"]
    states = []
    for i, (ts, folder) in enumerate(taken):
        _replace_store(folder / "store", live)
        hosts = [host] if i < 2 else [host, missing]
        run = dag.test(run_conf={"landing": str(landing), "lake": str(lake), "export_hosts": hosts,
                                 "snapshot_ts": ts.strftime("%Y%m%dT%H%M%SZ")})
        tis = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
        states.append((run.state, tis))
        names = [ti.rendered_map_index for ti in sorted(run.get_task_instances(), key=lambda t: t.map_index)
                 if ti.task_id == "export"]
        # the same snapshot ingested as a store copy, run for run
        shutil.copytree(folder, tmp_path / "copied" / folder.relative_to(copies))
        ingest.run(str(tmp_path / "copied"), str(tmp_path / "copies-lake"))
    exported = sorted(p.relative_to(landing).as_posix() for p in landing.glob("cluster=*/broker=*/snapshot_ts=*"))
    assert exported == [f"cluster=DefaultCluster/broker=broker-a/snapshot_ts={ts:%Y%m%dT%H%M%SZ}" for ts, _ in taken]
    assert all((landing / p / "_SUCCESS").exists() and (landing / p / "store-export/manifest.json").exists()
               for p in exported)
    ok = {("snapshot_time", -1): "success", ("broker_hosts", -1): "success", ("export", 0): "success",
          ("an_export_failed", -1): "skipped", ("ingest", -1): "success", ("validate_silver", -1): "success",
          ("landed_anything", -1): "success", ("publish", -1): "success"}
    assert states[:2] == [("success", ok), ("success", ok)]
    # broker-b's store is not there: its export refuses at once (no retry), the run fails, broker-a's folder lands
    assert states[2] == ("failed", {**ok, ("export", 1): "failed", ("an_export_failed", -1): "failed"})
    assert names == ["DefaultCluster/broker-a", "DefaultCluster/broker-b"]  # the Grid names each host's export
    want = compared(tmp_path / "copies-lake")
    got = compared(lake)
    assert sorted(got) == sorted(want)
    for table in want:
        assert got[table] == want[table], table
    assert len(want["silver/messages"]) == 2641  # every message blocked-head stored
