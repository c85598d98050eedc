"""Operator actions on a group's offsets (formats §8).

Both run the way ``mqadmin`` falls back when the group is offline (CONSUMER_NOT_ONLINE ->
``resetOffsetByTimeOld``): the broker's offsets are written directly, clients pick them up when they start.
``skipAccumulatedMessage`` is a reset to timestamp -1, i.e. every queue's max offset.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.engine import World


def _queues(world: "World", topic: str) -> list[tuple[object, int]]:
    return [(b, q) for b in world.brokers if topic in b.topics for q in range(b.topics[topic]["writeQueueNums"])]


def reset_offset_by_time(world: "World", group: str, topic: str, ts_ms: int) -> dict[str, int]:
    """``resetOffsetByTimeOld``: every queue of ``topic`` to the first offset stored at or after ``ts_ms``.

    A queue whose computed offset would not change is left alone (force=true writes it anyway; same value).
    Returns the new offset per ``broker:queue``.
    """
    out = {}
    for b, q in _queues(world, topic):
        off = b.search_offset(topic, q, ts_ms)  # type: ignore[attr-defined]
        b.offsets.commit(world.loop.now, topic, group, q, off)  # type: ignore[attr-defined]
        out[f"{b.name}:{q}"] = off  # type: ignore[attr-defined]
    world.inject("resetOffsetByTime", group=group, topic=topic, timestamp_ms=ts_ms, offsets=out)
    return out


def skip_accumulated(world: "World", group: str, topic: str) -> dict[str, int]:
    """``skipAccumulatedMessage``: every queue to its max offset (reset to timestamp -1)."""
    out = {}
    for b, q in _queues(world, topic):
        off = b.bounds(topic, q)[1]  # type: ignore[attr-defined]
        b.offsets.commit(world.loop.now, topic, group, q, off)  # type: ignore[attr-defined]
        out[f"{b.name}:{q}"] = off  # type: ignore[attr-defined]
    world.inject("skipAccumulatedMessage", group=group, topic=topic, offsets=out)
    return out
