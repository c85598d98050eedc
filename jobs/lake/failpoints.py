"""Named points where a test can kill the process, to prove that a rerun repairs whatever a kill leaves.

``RMQ_RECON_FAILPOINT=name`` (or ``name@N`` for the N-th time the point is reached) makes the process SIGKILL
itself there, as an OOM killer or a lost node would: no cleanup, no exit handler. Unset (always, outside the
fault-injection tests), a point costs one dictionary lookup.
"""
from __future__ import annotations

import os
import signal
import sys

_hits: dict[str, int] = {}


def hit(name: str) -> None:
    """Die here if the environment names this point (and this is the named occurrence)."""
    wanted = os.environ.get("RMQ_RECON_FAILPOINT")
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(nth or 1):
        print(f"failpoint {wanted}: SIGKILL", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
