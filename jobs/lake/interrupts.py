"""SIGINT and SIGTERM stop a run promptly: the engine is let go without waiting on it, and the process exits 130/143.

Why: the Spark Connect client retries a call to a server that went away for up to ten minutes (its default retry
policy), and ``SparkSession.stop`` makes such a call; pysail's embedded server also stops itself on Ctrl-C, so the
client's goodbye went to a dead server and a Ctrl-C'd ingest sat for minutes. Here a signal raises
:class:`Interrupted` in the main thread (grpc waits in short slices, so it lands within a fraction of a second),
``jobs.lake._spark.session`` lets the engine go without a goodbye (bounded), and the CLI exits with ``os._exit`` so that
no exit handler can hang either. A second signal during that cleanup exits at once, and so does the run when the
cleanup has not ended :data:`GRACE_S` after the first (a watchdog thread): the client's interrupt call to the engine
has no deadline of its own.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, NoReturn

GRACE_S = 8.0
_caught: list[int] = []
_on_stop: list[Callable[[], None]] = []
_command = ["run"]
_leaving = threading.Lock()
_lines = threading.RLock()  # a progress line or the last line: one write each, whole, and none after the last


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; ``exit_code`` is 128 + its number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(signal.Signals(signum).name)


def _handler(signum: int, frame: FrameType | None) -> Any:
    if _caught:  # a second signal while the first one's cleanup runs: leave now
        sys.stderr.flush()
        os._exit(128 + _caught[0])
    _caught.append(signum)
    for fn in list(_on_stop):
        try:
            fn()
        except Exception:  # noqa: BLE001 - the stop goes on whatever a callback does
            pass
    threading.Thread(target=_watchdog, args=(signum,), name="interrupt-watchdog", daemon=True).start()
    raise Interrupted(signum)


def _watchdog(signum: int) -> None:
    threading.Event().wait(GRACE_S)
    leave(signum, engine_stopped=False)


def leave(signum: int, *, engine_stopped: bool = True) -> NoReturn:
    """The stopped run's last line, once, and out with 128 + ``signum`` (``os._exit``: no exit handler may wait on
    the engine now)."""
    if not _leaving.acquire(blocking=False):  # the other of the main thread and the watchdog is leaving
        threading.Event().wait()
    state = "the engine is stopped" if engine_stopped else f"the engine had not stopped after {GRACE_S:g} s and is left"
    with _lines:  # held to the end: no progress line after the last
        try:
            sys.stderr.write(f"rmq-recon {_command[0]}: stopped by {signal.Signals(signum).name}; {state}, and a rerun "
                             "completes the work (every write is idempotent)\n")
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(128 + signum)


def say(line: str) -> None:
    """A progress line on stderr, in one write with its newline, and none once a signal has stopped the run.

    Why: ``print`` writes the text and its newline apart; a signal between the two left the stop message on the
    progress line (CI, stop 52), and a progress line from another thread between the last line's two writes left
    an empty last line (CI, stop 74). The steps still running while the engine stops have nothing to report."""
    with _lines:
        if _caught:
            return
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()


def on_stop(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn`` (quick, no waiting) when a signal stops the run, before :class:`Interrupted` is raised: e.g. kill
    helper processes, whose tasks would otherwise hold up the engine's stop and print broken pipes after the CLI's
    last line."""
    _on_stop.append(fn)
    return fn


def install(command: str) -> None:
    """Route SIGINT and SIGTERM to :class:`Interrupted` (the CLI's main thread, running ``command``; Airflow installs
    its own in tasks)."""
    _command[0] = command
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def interrupted() -> bool:
    """Whether a signal has stopped this process's run."""
    return bool(_caught)
