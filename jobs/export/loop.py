"""A long-lived exporter (``rmq-recon export ... --every 15m``): one process exports at every tick.

Why: a process per export pays its start-up each time (Python, pyarrow, numba's compiled kernels loaded from their
cache: ~1.5 s CPU of the ~2.3 s an export cost per run in bench_export), every 15 minutes on every broker host.

Ticks are the multiples of the interval in UTC; each run starts at its tick and names its folder by it, as a
one-shot export names its folder by the time it starts. A run that fails for a reason a later run can get past (the
network, a torn read, S3) is reported in one line and the next tick exports what it missed; an option the exporter
refuses stops the loop (exit 2), as it would every run.
SIGINT / SIGTERM stop it (jobs.lake.interrupts); a run killed mid-way is completed or undone by the next.
"""
from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any, Callable

from jobs.problems import UsageError

UTC = dt.timezone.utc
_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_every(value: str, option: str = "--every") -> int:
    """``--every`` (``--reship-after``): seconds, or a number with s, m or h (``900``, ``15m``, ``1h``); at least 60 s.

    Raises:
        UsageError: anything else.
    """
    m = re.fullmatch(r"(\d+)([smh]?)", value.strip())
    seconds = int(m[1]) * _UNITS[m[2] or "s"] if m else 0
    if seconds < 60:
        raise UsageError(f"{option} {value!r}: expected an interval of at least 60 s (900, 15m, 1h)")
    return seconds


def next_tick(now: float, every_s: int) -> dt.datetime:
    """The first multiple of ``every_s`` after ``now`` (epoch seconds), in UTC."""
    return dt.datetime.fromtimestamp((int(now) // every_s + 1) * every_s, UTC)


def run_every(export_at: Callable[[dt.datetime], Any], every_s: int, *, say: Callable[[str], None],
              clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
              runs: int | None = None) -> int:
    """Wait for each next tick and call ``export_at(tick)``, forever (``runs``: that many ticks, for tests). A run
    longer than an interval skips the ticks it overran (the next run exports what they would have). Returns the
    number of runs that failed."""
    failed = done = 0
    say(f"export: every {every_s} s, the first at {next_tick(clock(), every_s):%Y-%m-%dT%H:%M:%SZ}")
    while runs is None or done < runs:
        at = next_tick(clock(), every_s)
        wait = at.timestamp() - clock()
        if wait > 0:
            sleep(wait)
        started = time.process_time()
        try:
            export_at(at)
            say(f"export {at:%Y-%m-%dT%H:%M:%SZ}: done ({time.process_time() - started:.2f} s CPU)")
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - one line; the next tick exports what this one missed
            failed += 1
            say(f"export {at:%Y-%m-%dT%H:%M:%SZ}: failed ({type(e).__name__}: {' '.join(str(e).split())[:500]}); "
                "the next run exports what it missed")
        done += 1
    return failed
