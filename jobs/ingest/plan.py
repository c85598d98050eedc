"""The snapshot plan: which snapshot folders a run lists, and which of them it takes (complete, and new or changed
since the snapshot ledger recorded them)."""
from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass
from typing import Callable

from jobs.ingest import landing
from jobs.ingest.landing import Snapshot
from jobs.lake import ledger
from jobs.problems import Problem, UsageError


LATE_WINDOW_ENV = "RMQ_RECON_LATE_WINDOW_H"


def late_window_h() -> float:
    """Hours of snapshot time a folder already taken is still listed for late files (RMQ_RECON_LATE_WINDOW_H, 2)."""
    raw = os.environ.get(LATE_WINDOW_ENV, "2")
    try:
        hours = float(raw)
    except ValueError:
        hours = float("nan")
    if not hours >= 0:
        raise UsageError(f"{LATE_WINDOW_ENV}={raw!r}: not a number of hours >= 0 (how long, in snapshot time, a "
                         "folder already taken is listed again for files that arrive late)")
    return hours


def sealed_rule(taken: ledger.TakenSnapshots, window_h: float) -> Callable[[str], bool]:
    """Which snapshot folders a run need not list: taken already, and a snapshot of the same broker (or clients
    folder) at least ``window_h`` hours newer was taken too. The sync job writes a broker's snapshots in order, so
    files no longer arrive in a folder that old; a run then lists what is new, not the whole landing zone (a
    folder's files, 4,500 at 1 M messages an hour, cost 20 us each to list and classify). ``--retake`` lists all.
    """
    window = dt.timedelta(hours=window_h)

    def sealed(folder: str) -> bool:
        key = landing.folder_key(folder)
        if key is None or key not in taken:
            return False
        newest = taken.newest(key[0], key[1])
        try:
            return newest is not None and newest - landing.parse_snapshot_ts(key[2]) >= window
        except ValueError:
            return False

    return sealed


@dataclass
class Listing:
    """The snapshot folders a run listed, before the lease: those it may take, and those it did not list."""

    found: list[Snapshot]
    sealed: list[str]  # folders not listed (:func:`sealed_rule`)
    layout_problems: list[Problem]  # paths off the landing layout
    problem_cluster: dict[str, str]  # a layout problem's path -> its cluster, where the path names one

    @property
    def seen(self) -> int:
        """Snapshot folders under the landing zone, listed or not."""
        return len(self.found) + len(self.sealed)


@dataclass
class Plan:
    """The snapshot folders a run takes (under the lease), and what it says of the others."""

    snaps: list[Snapshot]
    completed_by: dict[str, str]  # folder -> "marker" or "settle" (Snapshot.completed_by)
    waiting: list[str]  # folders not complete yet
    late: list[Snapshot]  # taken folders older than their broker's newest taken one


def list_snapshots(landing_uri: str, lake: str, *, snapshot_glob: str | None, retake: bool) -> Listing:
    """The snapshot folders of ``landing_uri`` a run may take: all of them with ``retake``, else those
    :func:`sealed_rule` does not rule out; only those matching ``snapshot_glob`` when given.

    Raises:
        UsageError: no snapshot folder at all, or none that matches ``snapshot_glob``.
    """
    import fnmatch

    sealed: list[str] = []
    found, layout_problems, problem_cluster = landing.discover(
        landing_uri, None if retake else sealed_rule(ledger.taken_snapshots(lake), late_window_h()), sealed)
    if not found and not sealed and not layout_problems:
        raise UsageError(f"--landing {landing_uri}: no snapshot folder (expected cluster=<c>/broker=<b>/snapshot_ts="
                         "<YYYYMMDDTHHMMSSZ>/store/... or cluster=<c>/clients/snapshot_ts=...); point it at the sync "
                         "job's destination")
    if snapshot_glob:
        found = [s for s in found if fnmatch.fnmatch(s.folder, snapshot_glob)]
        if not found:
            raise UsageError(f"--snapshots {snapshot_glob!r}: matches no snapshot folder under {landing_uri}; the "
                             "pattern is matched against cluster=<c>/broker=<b>/snapshot_ts=<ts>")
    return Listing(found, sealed, layout_problems, problem_cluster)


def take(listing: Listing, taken: ledger.TakenSnapshots, landing_uri: str, *, settle_s: float,
         require_marker: bool, retake: bool, say: Callable[[str], None]) -> Plan:
    """The listed folders a run takes: complete (``Snapshot.completed_by``) and, unless ``retake``, with a listing
    other than the one the snapshot ledger (``taken``) recorded; says how many.

    Raises:
        UsageError: the folders to take hold no RocketMQ file at all (success is never reported on nothing).
    """
    clock = time.time()
    snaps, completed_by, waiting = [], {}, []
    for snap in listing.found:
        by = snap.completed_by(clock, settle_s, require_marker)
        if by is None:
            waiting.append(snap.folder)
        elif retake or taken.get(ledger.snapshot_key(snap.cluster, snap.broker, snap.ts)) != snap.listing_digest():
            snaps.append(snap)
            completed_by[snap.folder] = by
    # Folders a sync job delivered after a newer one of the same broker (a failed upload retried): the records
    # they hold were first held by them, not by the newer folder that landed first (as-of runs read this).
    late = [s for s in snaps if not s.is_clients and (newest := taken.newest(s.cluster, s.broker)) is not None
            and s.ts < newest and taken.get(ledger.snapshot_key(s.cluster, s.broker, s.ts)) != s.listing_digest()]
    say(f"ingest: {len(snaps)} new or changed snapshot(s) of {listing.seen} under {landing_uri}"
        + (f"; {len(waiting)} not complete yet (no {landing.MARKER}"
           + ("" if require_marker else f", changed less than {settle_s:g} s ago") + ")" if waiting else ""))
    empty = [s.folder for s in snaps if all(f.kind in ("other", "marker") for f in s.files)]
    if snaps and len(empty) == len(snaps):  # success is never reported on nothing (spec §6)
        raise UsageError(f"--landing {landing_uri}: the {len(snaps)} new snapshot folder(s) hold no RocketMQ "
                         f"file (e.g. {empty[0]}: no store/config/*.json, store/commitlog, store/consumequeue "
                         "or clients' offsets.json); nothing ingested: check the sync job's source and target")
    return Plan(snaps, completed_by, waiting, late)
