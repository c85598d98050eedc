"""jobs.lake.lease: one holder at a time on a local lake (flock) and on S3 (conditional writes, moto); a dead holder's
lease is free at once locally and after its TTL on S3; a lease taken over is reported to its old holder."""
from __future__ import annotations

import json
import os
import pathlib
import threading
import time
import uuid

import pytest

from jobs.lake import lease, storage


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "local":
        return str(tmp_path / "lake")
    endpoint = request.getfixturevalue("moto_s3")
    endpoint.apply(monkeypatch)
    return storage.join(endpoint.bucket_uri, f"lake-{uuid.uuid4().hex[:10]}")


def test_a_second_holder_waits_then_gives_up_naming_the_holder(lake: str) -> None:
    lines: list[str] = []
    with lease.hold(lake, "writer", purpose="ingest of L") as held:
        assert (held.holder["pid"], held.holder["purpose"]) == (os.getpid(), "ingest of L")
        t0 = time.monotonic()
        with pytest.raises(lease.LeaseBusy) as err:
            with lease.hold(lake, "writer", purpose="second", wait_s=1.0, say=lines.append):
                pass
        assert 1.0 <= time.monotonic() - t0 < 5
        assert f"held by ingest of L (pid {os.getpid()} on " in str(err.value)
        assert "RMQ_RECON_LEASE_WAIT_S" in str(err.value)
        assert len(lines) == 1 and lines[0].startswith("lease: waiting for ") and "held by ingest of L" in lines[0]
        # another name is another lease
        with lease.hold(lake, "gold", purpose="reconcile", wait_s=0):
            pass
    with lease.hold(lake, "writer", purpose="third", wait_s=0):
        pass


def test_a_waiting_holder_gets_the_lease_when_it_is_released(lake: str) -> None:
    order: list[str] = []
    first = threading.Event()

    def second() -> None:
        first.wait()
        with lease.hold(lake, "writer", purpose="second", wait_s=30, say=lambda _: None):
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with lease.hold(lake, "writer", purpose="first"):
        first.set()
        time.sleep(1.5)
        order.append("first done")
    t.join(timeout=30)
    assert order == ["first done", "second"]


def test_s3_lease_of_a_dead_holder_is_taken_over_after_its_ttl(moto_s3: object, monkeypatch: pytest.MonkeyPatch) -> None:
    moto_s3.apply(monkeypatch)  # type: ignore[attr-defined]
    lake = storage.join(moto_s3.bucket_uri, f"lake-{uuid.uuid4().hex[:10]}")  # type: ignore[attr-defined]
    uri = storage.join(lake, "_control", "writer.lease")
    dead = {"token": "x", "host": "gone", "pid": 4242, "purpose": "ingest", "since": "2026-01-01T00:00:00Z"}
    storage.write_bytes(uri, json.dumps({**dead, "expires_at": time.time() + 2}).encode())
    with pytest.raises(lease.LeaseBusy, match="pid 4242 on gone"):
        with lease.hold(lake, "writer", purpose="new", wait_s=0.5, say=lambda _: None):
            pass
    lines: list[str] = []
    with lease.hold(lake, "writer", purpose="new", wait_s=10, say=lines.append) as held:
        assert json.loads(storage.read_bytes(uri))["token"] == held.holder["token"]
    assert any("took over" in line and "pid 4242 on gone" in line for line in lines)
    assert storage.read_bytes(uri) is None  # released


def test_s3_holder_learns_its_lease_was_taken_over(moto_s3: object, monkeypatch: pytest.MonkeyPatch) -> None:
    moto_s3.apply(monkeypatch)  # type: ignore[attr-defined]
    monkeypatch.setenv("RMQ_RECON_LEASE_TTL_S", "1")
    lake = storage.join(moto_s3.bucket_uri, f"lake-{uuid.uuid4().hex[:10]}")  # type: ignore[attr-defined]
    uri = storage.join(lake, "_control", "writer.lease")
    with lease.hold(lake, "writer", purpose="slow") as held:
        storage.write_bytes(uri, b'{"token": "other", "expires_at": 0}')  # someone else's lease now
        time.sleep(1.0)  # the renewal (every TTL/4) finds the object changed
        with pytest.raises(lease.LeaseLost, match="another run took it over"):
            held.check()
    assert json.loads(storage.read_bytes(uri))["token"] == "other"  # not deleted on the way out
