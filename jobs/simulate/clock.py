"""The virtual clock and the seeded discrete-event loop every actor schedules on.

Time is integer epoch milliseconds (UTC). Events with equal times run in scheduling order, so a run is a pure
function of the seed: nothing reads the wall clock.
"""
from __future__ import annotations

import datetime as dt
import heapq
import random
from typing import Callable

T0_MS = 1_767_571_200_000  # 2026-01-05T00:00:00Z
SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def to_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def month_start_ms(ms: int) -> int:
    """The first millisecond of the UTC month of ``ms`` (``MessageClientIDSetter`` counts time from it)."""
    return int(to_datetime(ms).replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


def snapshot_name(ms: int) -> str:
    """``YYYYMMDDTHHMMSSZ`` of a virtual time (spec §3)."""
    return to_datetime(ms).strftime("%Y%m%dT%H%M%SZ")


def iso_ms(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds (docs/semantics.md rule 22); empty for None."""
    if ms is None:
        return ""
    d = to_datetime(ms)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class EventLoop:
    """A heap of (time, sequence, callback): ``at`` schedules, ``run_until`` advances the virtual clock."""

    def __init__(self, seed: int, start_ms: int = T0_MS) -> None:
        self.now = start_ms
        self.start = start_ms
        self.rng = random.Random(seed)
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, when_ms: int, fn: Callable[[], None]) -> None:
        """Run ``fn`` at virtual time ``when_ms`` (never earlier than now)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(int(when_ms), self.now), self._seq, fn))

    def after(self, delay_ms: int, fn: Callable[[], None]) -> None:
        self.at(self.now + int(delay_ms), fn)

    def every(self, first_ms: int, period_ms: int, fn: Callable[[], None], *, until_ms: int | None = None) -> None:
        """A periodic task (``ScheduledExecutorService.scheduleAtFixedRate``); ``fn`` returning False stops it."""

        def tick() -> None:
            if fn() is False:
                return
            nxt = self.now + period_ms
            if until_ms is None or nxt <= until_ms:
                self.at(nxt, tick)

        self.at(first_ms, tick)

    def run_until(self, end_ms: int) -> None:
        """Run every event with time <= ``end_ms``; the clock ends at ``end_ms``."""
        heap = self._heap
        while heap and heap[0][0] <= end_ms:
            t, _, fn = heapq.heappop(heap)
            self.now = t
            fn()
        self.now = max(self.now, end_ms)
