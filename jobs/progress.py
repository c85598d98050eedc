"""Where a job's progress lines go: the caller's function (the CLI prints them on stderr), else the module's log.

With ``RMQ_RECON_PROGRESS_FILE`` set, every line is also appended to that file: an Airflow task logs at the level its
deployment chose (the demo's, WARNING), and the demo shows the newest line while a DAG runs (no step silent for more
than 10 s, and the heartbeat says what the step is doing).
"""
from __future__ import annotations

import logging
import os
from typing import Callable

ENV = "RMQ_RECON_PROGRESS_FILE"


def reporter(progress: Callable[[str], None] | None, log: logging.Logger) -> Callable[[str], None]:
    say = progress or log.info
    path = os.environ.get(ENV)
    if not path:
        return say

    def both(line: str) -> None:
        say(line)
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line.replace("\n", " ") + "\n")
        except OSError:
            pass  # progress is never worth failing a job for

    return both
