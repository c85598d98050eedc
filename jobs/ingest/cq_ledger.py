"""The CQ file ledger (bronze/cq_files): which consume queue files ingest need not read again (issue 12).

A broker keeps days of consume queue files and only the last file of each queue changes between snapshots, so
reading every file of every snapshot grows with the broker's retained store. A file whose fingerprint
(:meth:`LandingFile.fingerprint`) equals the one recorded for the same broker and path is summarised from here
instead (jobs.ingest.bounds.extract_queue_bounds decides when the summary is not enough and reads it anyway).

Within a run a broker's snapshots pass their entries on in memory; the table is written once, after the run's
other small tables and before its ledger row, so a run killed and run again leaves what a clean run leaves.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.formats.consumequeue import CQSummary
from jobs.ingest.landing import LandingFile
from jobs.lake import _delta
from schemas import cq_files

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

BrokerKey = tuple[str, str]


@dataclass(frozen=True)
class Entry:
    """One file as ingest last read it: its fingerprint, digest and summary."""

    size: int
    mtime: float
    etag: str
    sha256: str
    summary: CQSummary
    # digest of the records the file's commit offsets span when its dangling entries were found (None: not found)
    records_digest: str | None = None
    dangling: tuple[tuple[int, str], ...] = ()
    # sha256 of its valid entries' bytes, kept by the run that read it (not in the table): a later snapshot of the run
    # tells the same entries in a grown copy without hashing the zeros of the earlier one (jobs.ingest.bounds)
    prefix_sha256: str | None = field(default=None, compare=False)
    # an export's file: its pieces as the run last read them (not in the table): the next snapshot's copy of it, whose
    # pieces begin with these, is read from where its entries ended (jobs.ingest.bounds._grown_pieces)
    pieces: tuple[tuple[str, int, int, int], ...] | None = field(default=None, compare=False)
    # (commit offset, position): where the first of its entries at or past that commit offset is, as this run found
    # it (not in the table). The oldest commitlog segment's start moves only when the broker deletes one, so the
    # next snapshot's copy, the same entries and maybe more, is not searched again for the same start.
    found: tuple[int, int] | None = field(default=None, compare=False)
    # an export's file: the sha256 state of its digest's text up to its last piece (jobs.ingest.bounds._pieces_digest),
    # kept by the run: a grown copy's digest hashes its new pieces only
    pieces_state: Any = field(default=None, compare=False, repr=False)

    def same_file(self, f: LandingFile) -> bool:
        """Whether ``f`` is this file unchanged (its fingerprint)."""
        if bool(self.etag) != bool(f.etag):
            return False
        return f.fingerprint() == ((self.size, self.etag) if self.etag else (self.size, self.mtime))

    def stands_for(self, f: LandingFile) -> bool:
        """Whether ``f`` is this file unchanged, and its summary can stand in for its bytes."""
        return not self.summary.problems and self.same_file(f)


class CQLedger:
    """The entries of each broker's files as its newest snapshot seen held them (``rel`` -> :class:`Entry`)."""

    def __init__(self, entries: dict[BrokerKey, dict[str, Entry]] | None = None) -> None:
        self._entries = entries or {}
        self.touched: set[BrokerKey] = set()

    @classmethod
    def load(cls, lake: str) -> "CQLedger":
        if not _delta.exists(lake, cq_files.TABLE):
            return cls()
        df = _delta.read_pandas_columns(lake, cq_files.TABLE, cq_files.TABLE.columns)
        out: dict[BrokerKey, dict[str, Entry]] = {}
        for r in df.itertuples(index=False):
            first = None if r.first_commit_offset != r.first_commit_offset or r.first_commit_offset is None \
                else int(r.first_commit_offset)
            last = None if r.last_commit_offset != r.last_commit_offset or r.last_commit_offset is None \
                else int(r.last_commit_offset)
            digest = r.records_digest if isinstance(r.records_digest, str) else None
            out.setdefault((r.cluster, r.broker), {})[r.rel] = Entry(
                int(r.size), float(r.mtime), r.etag or "", r.sha256,
                CQSummary(int(r.entries), bool(r.full), first, last, bool(r.problems)), digest,
                tuple((int(p), str(w)) for p, w in json.loads(r.dangling)) if digest is not None else ())
        return cls(out)

    def of(self, cluster: str, broker: str) -> dict[str, Entry]:
        return self._entries.get((cluster, broker), {})

    def replace(self, cluster: str, broker: str, entries: dict[str, Entry]) -> None:
        """The broker's files as a newer snapshot holds them (files it no longer holds are dropped)."""
        self._entries[(cluster, broker)] = entries
        self.touched.add((cluster, broker))

    def rows(self, keys: set[BrokerKey] | None = None) -> list[dict[str, Any]]:
        return [{"cluster": c, "broker": b, "rel": rel, "size": e.size, "mtime": e.mtime, "etag": e.etag,
                 "sha256": e.sha256, "entries": e.summary.entries, "full": e.summary.full,
                 "first_commit_offset": e.summary.first_commit_offset,
                 "last_commit_offset": e.summary.last_commit_offset, "problems": e.summary.problems,
                 "records_digest": e.records_digest,
                 "dangling": None if e.records_digest is None else json.dumps([list(d) for d in e.dangling])}
                for (c, b), files in sorted(self._entries.items()) if keys is None or (c, b) in keys
                for rel, e in sorted(files.items())]


def save(spark: "SparkSession", lake: str, ledger: CQLedger, folder: str) -> int:
    """Replace the rows of the brokers the run took snapshots of; nothing is written when they are unchanged.
    ``folder``: where the new rows are written for the engine to read (:func:`jobs.lake._delta.rows_frame`).

    Returns:
        The number of rows new or changed.
    """
    if not ledger.touched:
        return 0
    new = ledger.rows(ledger.touched)
    cols = cq_files.TABLE.columns
    as_tuples = lambda rows: {tuple(r[c] for c in cols) for r in rows}  # noqa: E731
    old: set[tuple[Any, ...]] = set()
    if _delta.exists(lake, cq_files.TABLE):
        df = _delta.read_pandas_columns(lake, cq_files.TABLE, cols)
        keep = [(c, b) in ledger.touched for c, b in zip(df["cluster"], df["broker"])]
        old = {tuple(None if v != v else v for v in row) for row in
               df[keep].astype(object).itertuples(index=False, name=None)}
        old = {tuple(int(v) if isinstance(v, float) and c in ("first_commit_offset", "last_commit_offset")
                     else v for c, v in zip(cols, row)) for row in old}
    fresh = as_tuples(new)
    if fresh == old and _delta.exists(lake, cq_files.TABLE):
        return 0
    q = lambda s: s.replace("'", "''")  # noqa: E731
    predicate = " OR ".join(f"(cluster = '{q(c)}' AND broker = '{q(b)}')" for c, b in sorted(ledger.touched))
    frame = _delta.rows_frame(spark, new, cq_files.TABLE, folder)
    _delta.replace_where(spark, frame, lake, cq_files.TABLE, predicate)
    return len(fresh - old)
