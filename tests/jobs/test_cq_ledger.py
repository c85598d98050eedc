"""The CQ file ledger (issue 12): consume queue files a broker's previous snapshot held unchanged are not read again,
and the lake holds exactly what reading every file gives."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import pathlib
import shutil

import pytest

from jobs.formats import consumequeue
from jobs.formats.commitlog_encode import CommitLogWriter
from jobs.ingest import cq_ledger, ingest
from jobs.lake import _delta
from schemas import cq_files, files, quarantine, queue_bounds

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 6, tzinfo=UTC)
ENTRIES_PER_FILE = 10  # CQ files of 200 bytes: a queue spans several, as a real broker's do
SEGMENT = 8 * 1024
MTIME0 = 1_767_000_000
COMPARED = [files.TABLE, queue_bounds.TABLE, quarantine.TABLE, cq_files.TABLE]


def _records(n: int, root: pathlib.Path) -> list[tuple[int, int]]:
    """The (offset, size) of the first ``n`` records of the broker's history (queues 0 and 1 of T, alternating)."""
    w = CommitLogWriter(str(root), segment_size=SEGMENT)
    at = [w.append(topic="T", queue_id=i % 2, queue_offset=i // 2, body=b"x" * 100,
                   properties={"UNIQ_KEY": f"K{i}"}, born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1),
                   store_host=("10.0.0.2", 10911)) for i in range(n)]
    w.close()
    return at


def _queue_bytes(at: list[tuple[int, int]], qid: int) -> bytes:
    """Queue ``qid``'s entries; queue 0's entry 3 points into a record and entry 25 gives a wrong size (quarantined);
    queue 1's entry 12 points past any commitlog (valid: Max counts it; never checked against records, so the file
    holding it is read in every snapshot)."""
    mine = [(o, s) for i, (o, s) in enumerate(at) if i % 2 == qid]
    out = []
    for k, (o, s) in enumerate(mine):
        if qid == 0 and k == 3:
            o += 5
        if qid == 0 and k == 25:
            s = 99
        if qid == 1 and k == 12:
            o = 1 << 40
        out.append(consumequeue.encode_cq_entry(o, s, 0))
    return b"".join(out)


def snapshot(landing: pathlib.Path, k: int, n: int, keep_from_segment: int, previous: pathlib.Path | None,
             odd: bool = False) -> pathlib.Path:
    """Snapshot ``k`` of broker b: the first ``n`` records, commitlog segments below ``keep_from_segment`` expired.
    CQ files whose bytes equal the previous snapshot's are copied with its mtime (as rsync --link-dest or cp -p
    keep them); the rest get a new one. ``odd``: queue 2 has a file whose size is not a multiple of 20 and a file
    whose entries are out of order (always read)."""
    folder = landing / "cluster=c" / "broker=b" / f"snapshot_ts=20260105T0{k}0000Z"
    store = folder / "store"
    at = _records(n, store / "commitlog")
    for seg in sorted((store / "commitlog").iterdir()):
        if int(seg.name) < keep_from_segment * SEGMENT:
            seg.unlink()
    size = ENTRIES_PER_FILE * 20
    for qid in (0, 1):
        data = _queue_bytes(at, qid)
        data += bytes(-len(data) % size)
        for start in range(0, len(data), size):
            rel = pathlib.Path("store/consumequeue/T") / str(qid) / f"{start:020d}"
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            before = previous / rel if previous else None
            if before is not None and before.exists() and before.read_bytes() == data[start:start + size]:
                shutil.copy2(before, target)
            else:
                target.write_bytes(data[start:start + size])
                os.utime(target, (MTIME0 + k, MTIME0 + k))
    if odd:
        q2 = store / "consumequeue" / "T" / "2"
        q2.mkdir(parents=True)
        (q2 / f"{0:020d}").write_bytes(b"".join(consumequeue.encode_cq_entry(o, s, 0) for o, s in reversed(at[:10])))
        (q2 / f"{200:020d}").write_bytes(bytes(23))
        for f in q2.iterdir():
            os.utime(f, (MTIME0, MTIME0))
    return folder


def rows(lake: str) -> dict[str, list[tuple]]:
    out = {}
    for t in COMPARED:
        df = _delta.read_pandas(lake, t)
        cols = [c for c in t.columns if c not in _delta.VOLATILE_COLUMNS]
        out[t.qualified] = sorted(tuple(repr(v) for v in r) for r in df[cols].itertuples(index=False, name=None))
    return out


def _ingest(landing: pathlib.Path, lake: pathlib.Path, said: list[str], monkeypatch: pytest.MonkeyPatch,
            ledger: bool) -> None:
    with monkeypatch.context() as m:
        if not ledger:  # no entry stands for a file: every file is read
            m.setattr(cq_ledger.Entry, "stands_for", lambda self, f: False)
        ingest.run(str(landing), str(lake), now=NOW, progress=said.append)


def _reads(said: list[str]) -> list[tuple[int, int]]:
    """(files read, files not read) of each run's progress line."""
    import re

    return [tuple(int(x) for x in m.groups()) for s in said
            if (m := re.search(r"(\d+) consume queue file\(s\) read, (\d+) unchanged not read", s))]


def test_unchanged_files_are_not_read_and_the_lake_is_what_reading_every_file_gives(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four snapshots in two runs of two: with the ledger only the files that changed, or whose commit offsets
    straddle the oldest segment or the records decoded, are read; files, bounds, quarantine and the ledger itself
    equal those of a lake where every file was read."""
    landing = tmp_path / "landing"
    said: dict[str, list[str]] = {"with": [], "without": []}
    prev = snapshot(landing, 0, 100, 0, None, odd=True)
    prev = snapshot(landing, 1, 160, 0, prev, odd=True)
    for name, on in (("with", True), ("without", False)):
        _ingest(landing, tmp_path / name, said[name], monkeypatch, on)
    prev = snapshot(landing, 2, 220, 2, prev, odd=True)
    snapshot(landing, 3, 280, 3, prev, odd=True)
    for name, on in (("with", True), ("without", False)):
        _ingest(landing, tmp_path / name, said[name], monkeypatch, on)
    with_ledger, without = rows(str(tmp_path / "with")), rows(str(tmp_path / "without"))
    assert with_ledger == without
    # files: the 4 snapshots' 12, 18, 24 and 30 CQ files and 17 commitlog segment rows; 3 queues a snapshot; the
    # quarantine: per snapshot the 23-byte file, and in the first run's two the entry into a record and the wrong
    # size (the second run checks the records it decoded, after them); the ledger: the newest snapshot's 30 files
    assert {k: len(v) for k, v in with_ledger.items()} == {
        "bronze/files": 101, "silver/queue_bounds": 12, "bronze/quarantine": 8, "bronze/cq_files": 30}
    # (files read, not read) per run. Run 1: snapshot 1 does not read again the 9 files snapshot 0 read and checked
    # whole (queue 0's 5, queue 1's but the one holding its entry 12, which points past every record). Run 2:
    # snapshot 2 reads what changed and what was checked against other records, and searches (not reads) the
    # unchanged file the oldest segment starts inside; snapshot 3 then takes more from snapshot 2's entries, also of
    # 2 unchanged files whose first entries point below the checked range (their findings were made from its start:
    # bounds._checked_digest; before it they were read again, 22 read and 32 not)
    assert _reads(said["with"]) == [(21, 9), (20, 34)]
    assert _reads(said["without"]) == [(30, 0), (54, 0)]
    # --retake reads every CQ file of the four snapshots again (84); the quarantine gains queue 0's two bad entries in
    # snapshots 2 and 3 (one run now decodes the records they point at before those snapshots, as it does without
    # the ledger), and the ledger the same summaries and findings of queues 0 and 1's newest files, now tied to the
    # records from the start of that run's checked range (below their first entries), not from the second run's
    # (above them: bounds._checked_digest)
    again: list[str] = []
    retaken = ingest.run(str(landing), str(tmp_path / "with"), now=NOW, progress=again.append, retake=True)
    assert _reads(again) == [(84, 0)]
    assert {k: v for k, v in retaken["changed_rows"].items() if v or k == "bronze/cq_files"} == {
        "bronze/cq_files": 2, "bronze/quarantine": 4}


def _copied(landing: pathlib.Path, first: pathlib.Path, rel: str) -> tuple[pathlib.Path, bytearray]:
    """Snapshot 1 as a copy of ``first`` (times kept, as ``cp -p``), and the bytes of its file ``rel`` to change."""
    second = landing / "cluster=c" / "broker=b" / "snapshot_ts=20260105T010000Z"
    shutil.copytree(first, second, copy_function=shutil.copy2)
    return second, bytearray((second / rel).read_bytes())


def test_a_file_changed_in_place_with_its_size_is_read_again(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshot 2 holds a CQ file of snapshot 1 rewritten in place: same size, new mtime. It is read (its new digest
    in bronze/files, its new entry in the ledger); the file beside it, unchanged, is not."""
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    first = snapshot(landing, 0, 100, 0, None)
    said: list[str] = []
    _ingest(landing, lake, said, monkeypatch, True)
    rel = "store/consumequeue/T/1/00000000000000000000"
    second, changed = _copied(landing, first, rel)
    changed[8:12] = (150).to_bytes(4, "big")  # entry 0 says another size: same length, other bytes
    (second / rel).write_bytes(bytes(changed))
    os.utime(second / rel, (MTIME0 + 9, MTIME0 + 9))
    _ingest(landing, lake, said, monkeypatch, True)
    got = _delta.read_pandas(str(lake), files.TABLE)
    path = f"cluster=c/broker=b/snapshot_ts=20260105T010000Z/{rel}"
    assert got[got.source_path == path]["sha256"].tolist() == [hashlib.sha256(bytes(changed)).hexdigest()]
    led = _delta.read_pandas(str(lake), cq_files.TABLE)
    assert led[led.rel == rel][["mtime", "sha256"]].values.tolist() == [
        [float(MTIME0 + 9), hashlib.sha256(bytes(changed)).hexdigest()]]
    # Run 2 reads queue 1's changed file and the one holding its entry 12 (past every record: never checked against
    # them); queue 0's 5 files and queue 1's 3 others are not read.
    assert _reads(said) == [(10, 0), (2, 8)]


def test_a_grown_last_file_is_read_though_its_size_and_mtime_are_kept(tmp_path: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync job that sets the times of what it copies could give a queue's grown last file (preallocated: same
    size) the fingerprint of its earlier copy. Such a file does not end where its ledger entry says (40 bytes are
    read to check), so it is read: its new digest, and Max counts the entry the broker appended."""
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    first = snapshot(landing, 0, 96, 0, None)  # queue 0: 48 entries, its last file holds 8 of 10
    said: list[str] = []
    _ingest(landing, lake, said, monkeypatch, True)
    rel = "store/consumequeue/T/0/00000000000000000800"
    second, grown = _copied(landing, first, rel)
    grown[160:180] = grown[140:160]  # entry 48 appended (a copy of entry 47: the size check quarantines nothing new)
    (second / rel).write_bytes(bytes(grown))
    os.utime(second / rel, (MTIME0, MTIME0))  # the fingerprint of the earlier copy
    _ingest(landing, lake, said, monkeypatch, True)
    got = _delta.read_pandas(str(lake), files.TABLE)
    assert got[got.source_path.str.endswith(f"010000Z/{rel}")]["sha256"].tolist() == [
        hashlib.sha256(bytes(grown)).hexdigest()]
    qb = _delta.read_pandas(str(lake), queue_bounds.TABLE)
    assert sorted(qb[qb.queue_id == 0][["min_offset", "max_offset"]].values.tolist()) == [[0, 48], [0, 49]]
    assert _reads(said) == [(10, 0), (2, 8)]  # the grown file and queue 1's holding its entry 12
