"""Fixtures for real services: S3 endpoints (moto, Ceph RGW) and an Apache Spark standalone cluster.

``tests/conftest.py`` imports them with ``from infra_fixtures import *``. All are session-scoped, start their
service once per run and stop it at the end, whether the tests passed or not:

* ``moto_s3``: moto's S3 server in a child process on 127.0.0.1 (fast, no Debian packages).
* ``rgw_s3``: one-node Ceph + radosgw from ``infra/ceph-rgw.sh`` (needs ``infra/install-debian-deps.sh``).
* ``spark_cluster``: a standalone Spark master + worker + Spark Connect server from ``infra/spark-cluster.sh``;
  yields its ``sc://127.0.0.1:PORT`` URL (``SPARK_REMOTE`` is *not* set, so other tests keep their engine).

The S3 fixtures yield an :class:`S3Endpoint` (``env`` dict and ``bucket_uri``; it also unpacks as
``env, bucket_uri = moto_s3``) and put its variables in ``os.environ`` while they live, restoring the old
values at the end. Two endpoints can be alive at once and the last one started wins ``os.environ``, so a test
that must talk to one of them calls ``endpoint.apply(monkeypatch)`` first. Tests that use ``rgw_s3`` or
``spark_cluster`` carry ``@pytest.mark.integration`` (pytest does not allow marks on fixtures).
Start times are printed in the run's output and kept in :data:`START_TIMES`.
"""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Iterator

import pytest

__all__ = ["moto_s3", "rgw_s3", "spark_cluster"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
BUCKET = "rmq-recon-test"
# Variables the S3 clients (boto3, delta-rs, Sail) read; set or cleared together so no stale one leaks through.
S3_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
           "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP", "AWS_EC2_METADATA_DISABLED", "AWS_SESSION_TOKEN", "AWS_PROFILE")
START_TIMES: dict[str, float] = {}


@dataclass(frozen=True)
class S3Endpoint:
    """A running S3 endpoint: the environment that reaches it and a bucket created for the tests."""

    name: str
    env: dict[str, str]
    bucket_uri: str
    start_seconds: float = field(default=0.0, compare=False)

    def __iter__(self) -> Iterator[object]:
        return iter((self.env, self.bucket_uri))

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point every S3 client at this endpoint for one test (undone by ``monkeypatch``)."""
        for name in S3_VARS:
            if name in self.env:
                monkeypatch.setenv(name, self.env[name])
            else:
                monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: "subprocess.Popen[bytes]") -> None:
    """Terminate a child server and reap it (killed after 20 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _s3_env(endpoint: str, key_id: str, secret: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT": endpoint,  # Sail's name; set both so a stale one never points elsewhere
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class _Environ:
    """Sets the S3 variables for a session fixture's lifetime and restores the previous values."""

    def __init__(self, env: dict[str, str]) -> None:
        self.saved = {k: os.environ.get(k) for k in S3_VARS}
        for k in S3_VARS:
            if k in env:
                os.environ[k] = env[k]
            else:
                os.environ.pop(k, None)

    def restore(self) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _report(config: pytest.Config, line: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)


def _make_bucket() -> str:
    from jobs.lake import storage

    uri = f"s3://{BUCKET}"
    storage.ensure_bucket(uri)
    return uri


def _run_script(script: str, action: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INFRA / script), action], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def _parse_exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            k, _, v = line[len("export "):].partition("=")
            out[k.strip()] = v.strip()
    return out


def _start(script: str, state_var: str, state_dir: pathlib.Path, timeout: float) -> tuple[dict[str, str], float]:
    """Run ``<script> start``; on any failure run ``stop`` and fail the test with the script's output."""
    env = dict(os.environ, **{state_var: str(state_dir)})
    t0 = time.monotonic()
    try:
        proc = _run_script(script, "start", env, timeout)
    except subprocess.TimeoutExpired as exc:
        _run_script(script, "stop", env, 120)
        pytest.fail(f"infra/{script} start took more than {timeout:.0f} s; logs in {state_dir}/log\n{exc.stderr}")
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        _run_script(script, "stop", env, 120)
        pytest.fail(f"infra/{script} start failed ({proc.returncode}); logs in {state_dir}/log\n"
                    f"{proc.stdout}\n{proc.stderr}")
    return _parse_exports(proc.stdout), elapsed


def _stop(script: str, state_var: str, state_dir: pathlib.Path) -> None:
    env = dict(os.environ, **{state_var: str(state_dir)})
    _run_script(script, "stop", env, 120)


@pytest.fixture(scope="session")
def moto_s3(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """moto's S3 server on a free 127.0.0.1 port with bucket ``rmq-recon-test``; S3 variables set meanwhile.

    A separate process, not moto's ThreadedMotoServer: delta-rs keeps the GIL during some S3 calls
    (``DeltaTable.is_deltatable``), which deadlocks against a server thread of the same interpreter.
    """
    import sys
    import urllib.request

    port = _free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    environ = None
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start on {url}; log {log_path}:\n{log_path.read_text()}")
                time.sleep(0.2)
        environ = _Environ(_s3_env(url, "testing", "testing-secret"))
        env = {k: os.environ[k] for k in S3_VARS if k in os.environ}
        bucket = _make_bucket()
        START_TIMES["moto"] = time.monotonic() - t0
        _report(request.config, f"moto S3 at {url} started in {START_TIMES['moto']:.1f} s")
        yield S3Endpoint("moto", env, bucket, START_TIMES["moto"])
    finally:
        if environ is not None:
            environ.restore()
        stop_process(proc)


@pytest.fixture(scope="session")
def rgw_s3(request: pytest.FixtureRequest) -> Iterator[S3Endpoint]:
    """Ceph RGW (``infra/ceph-rgw.sh``, state in ``var/pytest-rgw``) with bucket ``rmq-recon-test``.

    Tests using it are ``@pytest.mark.integration``. Fails (never skips) when Ceph is not installed: run
    ``infra/install-debian-deps.sh``.
    """
    state = ROOT / "var" / "pytest-rgw"
    try:
        exports, elapsed = _start("ceph-rgw.sh", "RGW_DIR", state, timeout=300)
        env = _s3_env(exports["AWS_ENDPOINT_URL"], exports["AWS_ACCESS_KEY_ID"], exports["AWS_SECRET_ACCESS_KEY"])
        environ = _Environ(env)
        try:
            bucket = _make_bucket()
            START_TIMES["rgw"] = elapsed
            _report(request.config, f"Ceph RGW at {env['AWS_ENDPOINT_URL']} started in {elapsed:.1f} s")
            yield S3Endpoint("rgw", env, bucket, elapsed)
        finally:
            environ.restore()
    finally:
        _stop("ceph-rgw.sh", "RGW_DIR", state)


@pytest.fixture(scope="session")
def spark_cluster(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Spark standalone cluster with a Spark Connect server (``infra/spark-cluster.sh``); yields its sc:// URL.

    State and logs in ``var/pytest-spark-cluster``. Tests using it are ``@pytest.mark.integration``.
    """
    state = ROOT / "var" / "pytest-spark-cluster"
    try:
        exports, elapsed = _start("spark-cluster.sh", "SPARK_CLUSTER_DIR", state, timeout=900)
        START_TIMES["spark_cluster"] = elapsed
        _report(request.config, f"Spark cluster at {exports['SPARK_REMOTE']} started in {elapsed:.1f} s")
        yield exports["SPARK_REMOTE"]
    finally:
        _stop("spark-cluster.sh", "SPARK_CLUSTER_DIR", state)
