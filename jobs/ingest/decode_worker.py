"""The helper process a decode task runs in when its interpreter is shared (issue 13).

Why: Sail runs every task's Python on its own threads, in one interpreter. Two decode tasks then take turns on one
interpreter lock, and each of the thousands of Arrow kernels a task calls hands the lock over: with 2 task slots the
decode used 2.1x the CPU of 1 slot (45 % of it the kernel switching threads) and took longer. A task on another
thread than its process's main one (where a Spark executor's Python worker runs it), in a process that may use more
than one CPU, therefore sends its units to a helper process, which decodes them with the same
:func:`jobs.ingest.decode_tasks.decode_unit` and streams the batches back; the task only reads them. Helpers are
kept for the next task (starting one imports numpy and pyarrow: 0.4 s) and exit when their host does (their stdin
closes). At most one helper per CPU the host may run on decodes at a time: Sail starts every task of a query at
once, each on its own thread, whatever its task slots (8 helpers decoding side by side on one CPU took 2.8x the time
of one).

``RMQ_RECON_DECODE_PROCESS``: ``auto`` (the default, as above), ``always`` or ``never``.

The protocol, on the helper's stdin and stdout: a task is an 8-byte little-endian length and the units' JSON; the
answer is frames of an 8-byte length and an Arrow IPC record batch (:data:`jobs.ingest.decode_tasks.OUTPUT_ARROW`),
then a length of 0 (done) or a negative length and the error's traceback.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO, Iterator

import pyarrow as pa

from jobs import unused
from jobs.lake import interrupts

log = logging.getLogger(__name__)
_FRAME = struct.Struct("<q")
ENV = "RMQ_RECON_DECODE_PROCESS"
_idle: list[subprocess.Popen] = []
_live: set[subprocess.Popen] = set()  # every helper started and not yet stopped, idle or decoding
_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None
_unavailable: list[str] = []  # why a helper could not start (then tasks decode in their own interpreter)


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _gate() -> threading.BoundedSemaphore:
    global _slots
    with _lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(_cpus())
        return _slots


def isolated() -> bool:
    """Whether a task on this thread decodes in a helper process (``RMQ_RECON_DECODE_PROCESS``)."""
    mode = os.environ.get(ENV, "auto").strip().lower()
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"{ENV}={mode!r}: expected auto, always or never")
    if mode != "auto":
        return mode == "always" and not _unavailable
    if _unavailable:
        return False
    # on one CPU a helper would only add the copying of its batches
    return threading.current_thread() is not threading.main_thread() and _cpus() > 1


def _environment() -> dict[str, str]:
    """What a helper starts with: this process's environment (S3 endpoint and keys) and module path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _start() -> subprocess.Popen:
    env = _environment()
    w = subprocess.Popen([sys.executable, "-m", "jobs.ingest.decode_worker"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, close_fds=True)
    w.started_with = env  # type: ignore[attr-defined]
    with _lock:
        _live.add(w)
    return w


def _take() -> subprocess.Popen:
    """An idle helper started with the environment this task has (else a new one; the old one is stopped)."""
    env = _environment()
    stale = []
    try:
        with _lock:
            while _idle:
                w = _idle.pop()
                if w.poll() is None and getattr(w, "started_with", None) == env:
                    return w
                stale.append(w)
    finally:
        for w in stale:
            _stop(w)
    return _start()


def _stop(w: subprocess.Popen) -> None:
    with _lock:
        _live.discard(w)
    try:
        w.kill()
        w.wait(10)
    except Exception:  # noqa: BLE001 - it is gone either way
        pass


@interrupts.on_stop
def _kill_all() -> None:
    """A signal stopped the run: every helper goes at once (a signal handler: no lock, no waiting). A decoding one
    would otherwise keep its task, and so the engine's stop, busy for seconds."""
    for w in list(_live):
        try:
            w.kill()
        except Exception:  # noqa: BLE001 - it is gone either way
            pass


@atexit.register
def _close_all() -> None:
    with _lock:
        idle, _idle[:] = list(_idle), []
        _live.difference_update(idle)
    for w in idle:
        try:
            w.stdin.close()  # type: ignore[union-attr]
            w.wait(5)
        except Exception:  # noqa: BLE001
            _stop(w)


def _read(stream: BinaryIO, n: int, w: subprocess.Popen) -> bytes:
    data = stream.read(n)
    if len(data) < n:
        try:
            code = w.wait(5)  # its stdout closed: it is exiting
        except subprocess.TimeoutExpired:
            code = None
        raise RuntimeError(f"the decode helper process (pid {w.pid}) exited"
                           f"{'' if code is None else f' with code {code}'} in the middle of a task; "
                           "rerun the ingest (it starts again from the ledger)")
    return data


def _acquire(gate: threading.BoundedSemaphore) -> None:
    """A decode slot, or an error once a signal has stopped the run. A slot's holder may be a task the engine has
    stopped pulling (its generator suspended until the engine drops it), and the engine's cancel of a stopped run
    waited on the tasks queued here: the ingest hung in the client's interrupt call (1 of 9 stops timed, stop 75)."""
    while not gate.acquire(timeout=0.1):
        if interrupts.interrupted():
            raise RuntimeError("the run was stopped by a signal")


def run(units: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    """The batches of ``units`` as :func:`jobs.ingest.decode_tasks.decode_unit` yields them, decoded in a helper."""
    from jobs.ingest.decode_tasks import OUTPUT_ARROW, decode_unit

    gate = _gate()
    _acquire(gate)
    try:
        w = _take()
    except OSError as exc:  # e.g. this user may not run the interpreter's file: decode here, as without helpers
        gate.release()
        with _lock:
            if not _unavailable:
                _unavailable.append(str(exc))
                log.warning("ingest: a decode helper process cannot start (%s); decode tasks run in their own "
                            "interpreter", exc)
        for unit in units:
            yield from decode_unit(unit)
        return
    except BaseException:
        gate.release()
        raise
    done = False
    try:
        payload = json.dumps(units).encode()
        w.stdin.write(_FRAME.pack(len(payload)) + payload)  # type: ignore[union-attr]
        w.stdin.flush()  # type: ignore[union-attr]
        out = w.stdout
        while True:
            (n,) = _FRAME.unpack(_read(out, _FRAME.size, w))  # type: ignore[arg-type]
            if n == 0:
                done = True
                return
            if n < 0:
                done = True
                raise RuntimeError(f"a decode task failed in its helper process:\n"
                                   f"{_read(out, -n, w).decode(errors='replace')}")  # type: ignore[arg-type]
            yield pa.ipc.read_record_batch(pa.py_buffer(_read(out, n, w)), OUTPUT_ARROW)  # type: ignore[arg-type]
    except BrokenPipeError as exc:
        raise RuntimeError(f"the decode helper process (pid {w.pid}) is gone: {exc}; rerun the ingest") from exc
    finally:
        if done:
            with _lock:
                _idle.append(w)
        else:  # stopped half way (an error, or the engine gave up the task): its stream is not at a task's start
            _stop(w)
        gate.release()


def main() -> None:
    """The helper's loop: a task in, its batches out, until stdin closes or its host goes away."""
    import signal

    # Ctrl-C in a terminal reaches the whole process group: the host stops the run (and its helpers); a helper's
    # own KeyboardInterrupt would only print a traceback after the host's last line.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    # A helper hands nothing to pandas or to linear algebra, yet each would be imported at its start: pandas by
    # pyarrow's first pa.array of a numpy array (to ask whether it is a pandas object: 0.25 s), scipy by numba
    # (its BLAS check: 0.2 s). Without them the helper starts in half the time (1.1 -> 0.6 s of CPU).
    sys.meta_path.insert(0, unused.Without("pandas", "scipy", why="is not used in a decode helper"))
    from jobs.ingest.decode_tasks import decode_unit

    stdin = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the stream
    sys.stdout = sys.stderr
    try:
        _serve(stdin, out, decode_unit)
    except BrokenPipeError:  # the host went away mid-task (stopped by a signal, or killed): nothing to answer
        os._exit(0)


def _serve(stdin: BinaryIO, out: BinaryIO, decode_unit: Any) -> None:
    import traceback

    while True:
        head = stdin.read(_FRAME.size)
        if len(head) < _FRAME.size:
            return
        (n,) = _FRAME.unpack(head)
        units = json.loads(stdin.read(n))
        try:
            for unit in units:
                for batch in decode_unit(unit):
                    data = batch.serialize()
                    out.write(_FRAME.pack(data.size))
                    out.write(data)
            out.write(_FRAME.pack(0))
        except BrokenPipeError:
            raise
        except Exception:  # noqa: BLE001 - sent to the task, which raises it
            text = traceback.format_exc().encode()
            out.write(_FRAME.pack(-len(text)) + text)
        out.flush()


if __name__ == "__main__":
    main()
