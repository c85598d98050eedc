"""SIGINT and SIGTERM stop a run promptly: the engine is let go without waiting on it, and the process exits 130/143.

Why: the Spark Connect client retries a call to a server that went away for up to ten minutes (its default retry
policy), and ``SparkSession.stop`` makes such a call; pysail's embedded server also stops itself on Ctrl-C, so the
client's goodbye went to a dead server and a Ctrl-C'd ingest sat for minutes. Here a signal raises
:class:`Interrupted` in the main thread (grpc waits in short slices, so it lands within a fraction of a second),
``jobs.lake._spark.session`` lets the engine go without a goodbye (bounded), and the CLI exits with ``os._exit`` so that
no exit handler can hang either. A second signal during that cleanup exits at once.
"""
from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

_caught: list[int] = []


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
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to :class:`Interrupted` (the CLI's main thread; Airflow installs its own in tasks)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def interrupted() -> bool:
    """Whether a signal has stopped this process's run."""
    return bool(_caught)
