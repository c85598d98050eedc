"""A signal stops the CLI within a bound whatever its cleanup does (jobs.lake.interrupts): the last line says whether
the engine was stopped, and the exit code is 128 + the signal's number."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

_PROGRAM = """
import os, signal, sys, time
from jobs.lake import interrupts
interrupts.GRACE_S = 0.5
interrupts.install("ingest")
interrupts.on_stop(lambda: print("callback ran", file=sys.stderr, flush=True))
try:
    os.kill(os.getpid(), signal.SIG{name})
    time.sleep(5)
except interrupts.Interrupted as stop:
    if {hang}:
        time.sleep(30)  # a cleanup that never ends (the client's interrupt call to a stuck engine)
    interrupts.leave(stop.signum)
print("not reached", file=sys.stderr)
"""


@pytest.mark.parametrize("name, code", [("INT", 130), ("TERM", 143)])
@pytest.mark.parametrize("hang", [False, True], ids=["cleanup-ends", "cleanup-hangs"])
def test_a_stopped_run_leaves_with_its_code_and_one_last_line(name: str, code: int, hang: bool) -> None:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _PROGRAM.format(name=name, hang=hang)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.monotonic() - t0
    state = "the engine had not stopped after 0.5 s and is left" if hang else "the engine is stopped"
    assert (p.returncode, p.stderr.splitlines()) == (code, [
        "callback ran",
        f"rmq-recon ingest: stopped by SIG{name}; {state}, and a rerun completes the work (every write is idempotent)"])
    assert seconds < 10


_CHATTY = """
import os, signal, threading, time
from jobs.lake import interrupts
interrupts.install("ingest")

def chatter():
    n = 0
    while True:
        interrupts.say(f"ingest: progress {n}")
        n += 1

threading.Thread(target=chatter, daemon=True).start()
time.sleep(0.2)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except interrupts.Interrupted as stop:
    time.sleep(0.2)  # the engine stopping while the other thread goes on
    interrupts.leave(stop.signum)
"""


def test_progress_from_other_threads_never_splits_or_follows_the_last_line() -> None:
    p = subprocess.run([sys.executable, "-c", _CHATTY], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = p.stderr.splitlines()
    last = ("rmq-recon ingest: stopped by SIGINT; the engine is stopped, and a rerun completes the work (every write "
            "is idempotent)")
    assert (p.returncode, lines[-1]) == (130, last)
    assert lines[:-1] == [f"ingest: progress {n}" for n in range(len(lines) - 1)]
