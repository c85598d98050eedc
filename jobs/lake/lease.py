"""Leases on a lake: one writer at a time, so two runs never interleave their writes.

Why: the loads are idempotent but not atomic across tables (an anti-join then an append per batch, a MERGE per
table), so two ingests started together both see a key as new and both append it. A lease turns "at once" into
"one after the other", and the second run then finds nothing new.

* A local lake uses ``flock`` on ``<lake>/_control/<name>.lock``: the kernel drops the lock when the holder dies,
  however it dies (SIGKILL included), so a dead run never blocks the next one.
* An ``s3://`` lake uses an object ``<lake>/_control/<name>.lease`` created with ``If-None-Match: *`` and renewed
  with ``If-Match: <etag>`` (S3 conditional writes; Ceph RGW and moto have them). A holder that dies stops
  renewing; after ``RMQ_RECON_LEASE_TTL_S`` (default 120 s) the next run takes the lease over, again by
  ``If-Match`` on the expired object's etag, so exactly one taker wins.

Names: ``writer`` (ingest: bronze and silver), ``gold`` (reconcile: gold tables, reports, the lake's temporary files).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from jobs.lake import storage

log = logging.getLogger(__name__)
UTC = dt.timezone.utc


class LeaseBusy(RuntimeError):
    """Another run holds the lease longer than this run may wait."""


class LeaseLost(RuntimeError):
    """An ``s3://`` lease expired under its holder (it could not renew in time) and was taken over."""


def wait_default() -> float:
    """Seconds a run waits for a busy lease (``RMQ_RECON_LEASE_WAIT_S``, default 1800: two scheduled intervals)."""
    return float(os.environ.get("RMQ_RECON_LEASE_WAIT_S", "1800"))


def ttl_default() -> float:
    return float(os.environ.get("RMQ_RECON_LEASE_TTL_S", "120"))


@dataclass
class Lease:
    """A held lease: ``holder`` is what other runs are told while they wait."""

    uri: str
    holder: dict[str, Any]
    _lost: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was taken over; called before a run records its completion."""
        if self._lost.is_set():
            raise LeaseLost(f"the lease {self.uri} expired and another run took it over; rerun this one (its writes "
                            "are idempotent) and raise RMQ_RECON_LEASE_TTL_S if the store was unreachable for long")


def _holder(purpose: str) -> dict[str, Any]:
    return {"token": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(), "purpose": purpose,
            "since": dt.datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another run"
    return f"{info.get('purpose', 'a run')} (pid {info.get('pid')} on {info.get('host')}, since {info.get('since')})"


@contextmanager
def hold(lake: str, name: str, *, purpose: str, wait_s: float | None = None,
         say: Callable[[str], None] | None = None) -> Iterator[Lease]:
    """Hold the lake's ``name`` lease for the block; wait up to ``wait_s`` for it (default :func:`wait_default`)."""
    say = say or log.info
    wait_s = wait_default() if wait_s is None else wait_s
    if storage.is_s3(lake):
        with _hold_s3(lake, name, purpose, wait_s, say) as lease:
            yield lease
    else:
        with _hold_local(lake, name, purpose, wait_s, say) as lease:
            yield lease


def _waiting(say: Callable[[str], None], uri: str, info: dict[str, Any] | None, waited: float, last: list[float]) -> None:
    if not last or waited - last[0] >= 30:
        say(f"lease: waiting for {uri}, held by {_describe(info)} ({waited:.0f} s so far)")
        last[:] = [waited]


def _busy(uri: str, info: dict[str, Any] | None, wait_s: float) -> LeaseBusy:
    return LeaseBusy(f"the lake is busy: {uri} is held by {_describe(info)} after waiting {wait_s:.0f} s; let that run "
                     "finish (or stop it) and run again, or raise RMQ_RECON_LEASE_WAIT_S")


@contextmanager
def _hold_local(lake: str, name: str, purpose: str, wait_s: float, say: Callable[[str], None]) -> Iterator[Lease]:
    import fcntl

    folder = os.path.join(lake, "_control")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        t0, last = time.monotonic(), []  # type: ignore[var-annotated]
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                info = _read_local(path)
                waited = time.monotonic() - t0
                if waited >= wait_s:
                    raise _busy(path, info, wait_s) from None
                _waiting(say, path, info, waited, last)
                time.sleep(min(0.5, max(0.05, wait_s - waited)))
        holder = _holder(purpose)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield Lease(path, holder)
    finally:
        os.close(fd)  # releases the flock


def _read_local(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read() or b"null")
    except (OSError, ValueError):
        return None


def _s3_error_code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


_FAILED = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def _put_if_match(client: Any, bucket: str, key: str, body: bytes, etag: str) -> str:
    """PUT only if the object's etag is still ``etag``; returns the new etag.

    The standard form quotes the etag (AWS, moto); Ceph RGW (16.x) compares If-Match with the bare etag and
    refuses the quoted one. A stale etag fails in both forms, so trying the bare form after a refusal is safe.
    """
    try:
        return client.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=etag)["ETag"]
    except Exception as exc:  # noqa: BLE001
        bare = etag.strip('"')
        if _s3_error_code(exc) not in _FAILED or bare == etag:
            raise
        return client.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=bare)["ETag"]


@contextmanager
def _hold_s3(lake: str, name: str, purpose: str, wait_s: float, say: Callable[[str], None]) -> Iterator[Lease]:
    uri = storage.join(lake, "_control", f"{name}.lease")
    bucket, key = storage.split(uri)
    client = storage.client()
    ttl = ttl_default()
    holder = _holder(purpose)

    def body() -> bytes:
        expires = dt.datetime.now(UTC) + dt.timedelta(seconds=ttl)
        return json.dumps({**holder, "expires_at": expires.timestamp()}).encode()

    t0, last = time.monotonic(), []  # type: ignore[var-annotated]
    etag = None
    while etag is None:
        try:
            etag = client.put_object(Bucket=bucket, Key=key, Body=body(), IfNoneMatch="*")["ETag"]
            break
        except Exception as exc:  # noqa: BLE001 - only a failed precondition means "held"
            if _s3_error_code(exc) not in _FAILED:
                raise storage._error("lease", uri, exc) from exc  # noqa: SLF001
        try:
            got = client.get_object(Bucket=bucket, Key=key)
            info, current = json.loads(got["Body"].read() or b"null"), got["ETag"]
        except Exception as exc:  # noqa: BLE001 - released between the two calls: try again at once
            if _s3_error_code(exc) in ("NoSuchKey", "404"):
                continue
            raise storage._error("lease", uri, exc) from exc  # noqa: SLF001
        if info and float(info.get("expires_at", 0)) < time.time():
            try:
                etag = _put_if_match(client, bucket, key, body(), current)
                say(f"lease: took over {uri} from {_describe(info)}, which stopped renewing it")
                break
            except Exception as exc:  # noqa: BLE001 - another taker won
                if _s3_error_code(exc) not in _FAILED:
                    raise storage._error("lease", uri, exc) from exc  # noqa: SLF001
        waited = time.monotonic() - t0
        if waited >= wait_s:
            raise _busy(uri, info, wait_s)
        _waiting(say, uri, info, waited, last)
        time.sleep(min(1.0, max(0.05, wait_s - waited)))
    lease = Lease(uri, holder)
    stop = threading.Event()
    state = {"etag": etag}

    def renew() -> None:
        while not stop.wait(ttl / 4):
            try:
                state["etag"] = _put_if_match(client, bucket, key, body(), state["etag"])
            except Exception as exc:  # noqa: BLE001
                if _s3_error_code(exc) in ("PreconditionFailed", "412"):
                    lease._lost.set()  # noqa: SLF001
                    log.error("lease %s was taken over by another run", uri)
                    return
                log.warning("lease %s: renewal failed (%s); retrying", uri, type(exc).__name__)

    thread = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join(timeout=5)
        # Released only if still ours (conditional deletes are not everywhere: RGW 16 ignores If-Match on DELETE,
        # so the holder's token is checked first; the gap is a few ms against a TTL of minutes).
        if not lease._lost.is_set():  # noqa: SLF001
            try:
                got = client.get_object(Bucket=bucket, Key=key)
                if json.loads(got["Body"].read() or b"null").get("token") == holder["token"]:
                    client.delete_object(Bucket=bucket, Key=key)
            except Exception:  # noqa: BLE001 - an unreleased lease expires after its TTL
                log.warning("lease %s not released; it expires in %.0f s", uri, ttl)
