"""Fleet simulator: RocketMQ store files with ground truth.

``run(scenario, out)`` builds one of the spec §7 scenarios (or ``mixed``) on a seeded virtual clock, writes
the landing zone of spec §3 under ``out`` and the expected reports under ``out/_truth/``.
Modules: ``clock`` (event loop), ``broker``, ``consumer`` (producers and push consumers), ``trace``,
``operators``, ``snapshot``, ``truth``, ``scenarios``, ``bulk`` (vectorised happy path for ``mixed``).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

__all__ = ["run", "tree_size", "SCENARIO_NAMES"]

SCENARIO_NAMES = ["blocked-head", "queue2-offset32", "out-of-order-acks", "retry-to-dlq", "expired-offset",
                  "skip-accumulated", "rewind", "broadcast", "rebalance", "orderly-blocked", "store-types",
                  "pop", "mixed"]


def tree_size(root: str | os.PathLike[str]) -> tuple[int, int, int]:
    """(files, logical bytes, bytes on disk counting hard links once) below ``root``; files deleted mid-walk skipped."""
    files = logical = disk = 0
    seen: set[tuple[int, int]] = set()
    for d, _, names in os.walk(root):
        for n in names:
            try:
                st = os.stat(os.path.join(d, n))
            except OSError:
                continue
            files += 1
            logical += st.st_size
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                disk += st.st_size
    return files, logical, disk


def run(scenario: str, out: str, *, seed: int = 7, scale: int = 1, bulk_messages: int | None = None,
        hours: int | None = None, rate: int | None = None, every: int = 30, bulk_brokers: int | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Simulate ``scenario`` and write its landing zone and ``_truth/`` to the local folder ``out``.

    Args:
        scenario: a spec §7 name (``blocked-head`` ... ``rebalance``) or ``mixed``.
        out: the landing-zone folder (created; it should be empty).
        seed: every random choice derives from it: same seed, byte-identical output.
        scale: ``mixed`` only: size multiplier (1 = a few brokers and ~100k messages; past 3 the extra volume is
            the vectorised healthy traffic of ``jobs.simulate.bulk``, ~98k messages per unit).
        bulk_messages: ``mixed`` only: that many bulk messages instead of the scale's.
        hours: ``mixed`` only: a soak of that many virtual hours (default 6, the ``mixed`` of the scenario tests).
        rate: ``mixed`` only: bulk messages per virtual hour (instead of ``bulk_messages``), on the fleet a 6-hour
            run at that rate has.
        every: ``mixed`` only: minutes between snapshots (15 or 30).
        bulk_brokers: ``mixed`` only: the bulk traffic on that many brokers (default: one per 1 M messages of a
            6-hour run).
        progress: called with a line per step and per snapshot written (the CLI prints them on stderr).

    Returns:
        a summary: scenario, seed, scale, messages stored, snapshots, files and bytes written, truth row
        counts, generation seconds and messages per second.
    """
    from jobs.simulate.clock import iso_ms, snapshot_name
    from jobs.simulate.scenarios import SCENARIOS
    from jobs.simulate.truth import Truth

    from jobs.simulate import engine

    say = progress or (lambda line: None)
    started = time.perf_counter()
    if scenario != "mixed" and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {SCENARIO_NAMES}")
    soak = hours is not None or rate is not None or every != 30
    if soak and scenario != "mixed":
        raise ValueError(f"--hours, --rate and --every apply to the mixed scenario only, not {scenario!r}")
    if every not in (15, 30):
        raise ValueError(f"--every {every}: snapshots every 15 or 30 minutes; give 15 or 30")
    if hours is not None and hours < 1:
        raise ValueError(f"--hours {hours}: give 1 or more virtual hours")
    if bulk_brokers is not None and (scenario != "mixed" or bulk_brokers < 1):
        raise ValueError(f"--bulk-brokers {bulk_brokers}: give 1 or more, for the mixed scenario")
    if rate is not None and (rate < 0 or bulk_messages is not None):
        raise ValueError(f"--rate {rate}: give 0 or more messages per hour, without --bulk-messages")
    say(f"simulate: {scenario} (seed {seed}, scale {scale}) into {out}")
    engine.PROGRESS = progress
    try:
        if scenario == "mixed":
            from jobs.simulate.mixed import mixed

            world = mixed(out, seed, scale, bulk_messages, hours=hours or 6, rate=rate, every=every,
                          bulk_brokers=bulk_brokers)
        else:
            world = SCENARIOS[scenario](out, seed, scale)
    finally:
        engine.PROGRESS = None
    simulated = time.perf_counter() - started
    say(f"simulate: {world.message_count()} messages stored in {simulated:.1f} s; computing the truth")
    truth_dir = os.path.join(out, "_truth")
    counts = Truth(world).write(truth_dir)
    messages = world.message_count()
    meta = {
        "scenario": scenario, "seed": seed, "scale": scale, "cluster": world.cluster,
        **({"hours": hours or 6, "rate": rate, "every_min": every} if soak else {}),
        "brokers": [b.name for b in world.brokers + world.bulk_brokers],
        # the brokers' fileReservedTime: what a reconcile's --retention-h should be for this fleet
        "file_reserved_h": max(b.cfg.file_reserved_ms for b in world.brokers + world.bulk_brokers) / 3_600_000,
        "snapshot_times": [iso_ms(t) for t in sorted(world.snapshot_times)],
        "snapshot_folders": [f"snapshot_ts={snapshot_name(t)}" for t in sorted(world.snapshot_times)],
        "groups": [world.group_info[g] for g in sorted(world.group_info)],
        "injected": world.injected,
        "messages_stored": messages,
        "bulk_messages": world.bulk_messages,
        "truth_rows": counts,
    }
    with open(os.path.join(truth_dir, "scenario.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    elapsed = time.perf_counter() - started
    files, logical, disk = tree_size(out)
    return {"scenario": scenario, "seed": seed, "scale": scale, "out": out, "messages_stored": messages,
            "bulk_messages": world.bulk_messages,
            "snapshots": len(world.snapshot_times), "files": files, "bytes": logical, "bytes_on_disk": disk,
            "truth_rows": counts, "simulate_s": round(simulated, 3), "generation_s": round(elapsed, 3),
            "messages_per_s": round(messages / elapsed, 1) if elapsed else None}
