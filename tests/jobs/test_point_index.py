"""jobs.lake.point_index: silver/key_index's segments, searched in the driver: exact rows, merged like an LSM tree,
carried through compactions, built again when damaged or when what they were built from is gone."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def _arrow(rows: list[tuple]) -> Any:
    import pyarrow as pa

    return pa.table({c: [r[i] for r in rows] for i, c in enumerate(
        ("cluster", "key_hash", "broker", "physical_offset", "queue_offset"))},
        schema=pa.schema([("cluster", pa.string()), ("key_hash", pa.int64()), ("broker", pa.string()),
                          ("physical_offset", pa.int64()), ("queue_offset", pa.int64())]))


# two files, unsorted; hash 7 stored three times in C (two brokers) and once in D; nulls; hashes at the extremes
FILE_A = [("C", 7, "a", 100, 1), ("C", -5, "b", 200, 2), ("D", 7, "a", 300, 3), ("C", 2**63 - 1, "a", 400, 4),
          ("C", 7, "b", 500, 5), ("C", 9, None, 600, 6), ("C", 11, "a", None, 7)]
FILE_B = [("C", -2**63, "c", 10, 1), ("C", 7, "c", 20, 2), (None, 7, "a", 30, 3), ("C", 3, "a", 40, 4)]
SEVENS = [("C", "a", 100, 1), ("C", "b", 500, 5), ("C", "c", 20, 2)]


def _rows(got: dict[str, list[np.ndarray]] | None) -> list[tuple] | None:
    if got is None:
        return None
    cols = [np.concatenate(got[c]).tolist() if got[c] else []
            for c in ("cluster", "broker", "physical_offset", "queue_offset")]
    return sorted(zip(*cols))


def _segments(tmp_path: Path, *files: list[tuple]) -> Any:
    import pyarrow.parquet as pq

    from jobs.lake import point_index

    paths = []
    for i, rows in enumerate(files):
        paths.append(str(tmp_path / f"f{i}.parquet"))
        pq.write_table(_arrow(rows), paths[-1], row_group_size=2)
    point_index.build(tmp_path / "segs", -1, 0, paths, "t")
    return point_index.PointIndex(None, tmp_path / "segs", 0)


@pytest.mark.parametrize(("run_rows", "fence", "chunk", "build_runs"),
                         [(2, 2, 2, 1), (3, 4, 1, 1), (1 << 21, 512, 1 << 21, 1), (2, 2, 2, 8)],
                         ids=["batches of 2, fences of 2", "batches of 3, fences of 4", "a batch a row group",
                              "batches kept as runs"])
def test_a_lookup_finds_exactly_the_rows_of_a_join_on_cluster_and_hash(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        run_rows: int, fence: int, chunk: int,
                                                                        build_runs: int) -> None:
    """Every stored row of a wanted (cluster, hash), none of another cluster's same hash; rows with a null cluster,
    broker or position are not kept (no join on a record's key matches them); the extreme hashes are found; a hash
    stored nowhere and a cluster never stored find nothing. Built from batches merged in steps, or kept as the
    segment's runs (no more than BUILD_RUNS a cluster), with fences of a few rows, so that keys fall on page
    bounds."""
    from jobs.lake import point_index

    monkeypatch.setattr(point_index, "RUN_ROWS", run_rows)
    monkeypatch.setattr(point_index, "FENCE", fence)
    monkeypatch.setattr(point_index, "MERGE_CHUNK", chunk)
    monkeypatch.setattr(point_index, "BUILD_RUNS", build_runs)
    index = _segments(tmp_path, FILE_A, FILE_B)

    got = index.lookup({"C": np.array([7, 7, -2**63, 2**63 - 1, 9, 11, 12, -6, 8], np.int64),
                        "E": np.array([7], np.int64)})

    assert _rows(got) == sorted([*SEVENS, ("C", "a", 400, 4), ("C", "c", 10, 1)])
    assert _rows(index.lookup({"D": np.array([7, 3], np.int64)})) == [("D", "a", 300, 3)]
    assert _rows(index.lookup({"C": np.array([3, -5], np.int64)})) == [("C", "a", 40, 4), ("C", "b", 200, 2)]
    assert _rows(index.lookup({})) == []
    seg = index.segments()[0]
    runs = [(r.cluster, r.hashes.tolist(), r.fences.tolist()) for r in seg.runs]
    if build_runs == 1:  # merged: one run a cluster
        assert runs == [("C", [-2**63, -5, 3, 7, 7, 7, 2**63 - 1], [-2**63, -5, 3, 7, 7, 7, 2**63 - 1][::fence]),
                        ("D", [7], [7])]
    else:  # five batches of C (row groups of 2 rows, without the rows holding a null), each a sorted run
        assert runs == [("C", [-5, 7], [-5]), ("D", [7], [7]), ("C", [2**63 - 1], [2**63 - 1]), ("C", [7], [7]),
                        ("C", [-2**63, 7], [-2**63]), ("C", [3], [3])]
    assert sorted(p.name for p in (tmp_path / "segs").iterdir()) == ["seg--1-0.kix"]


def test_files_already_sorted_give_the_segment_of_the_same_rows_unsorted(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A file sorted by (cluster, hash) without nulls (as a Spark cluster writes silver/key_index) is taken as it is:
    the segment equals the one built from the same rows in another order (its batches merged into one run)."""
    import random

    from jobs.lake import point_index

    monkeypatch.setattr(point_index, "BUILD_RUNS", 1)

    rows = [("C", h, "ab"[h % 2], 1000 + h, h) for h in range(-20, 20, 3)] + [("D", h, "a", h, 0) for h in (-4, 9)]
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)

    def runs(name: str, data: list[tuple]) -> list[tuple]:
        (tmp_path / name).mkdir()
        seg = _segments(tmp_path / name, data).segments()[0]
        return [(r.cluster, r.hashes.tolist(), r.physical.tolist(), r.queue.tolist(),
                 [seg.brokers[i] for i in r.brokers.tolist()]) for r in seg.runs]

    assert runs("sorted", rows) == runs("shuffled", shuffled) == [
        ("C", [h for h in range(-20, 20, 3)], [1000 + h for h in range(-20, 20, 3)], list(range(-20, 20, 3)),
         ["ab"[h % 2] for h in range(-20, 20, 3)]), ("D", [-4, 9], [-4, 9], [0, 0], ["a", "a"])]


def test_many_copies_of_one_key_across_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hash stored in more rows than a page holds (fences of 2, 9 copies among others): every copy is found."""
    from jobs.lake import point_index

    monkeypatch.setattr(point_index, "FENCE", 2)
    rows = [("C", 5, "a", i, i) for i in range(9)] + [("C", h, "b", 100 + h, 0) for h in (1, 2, 3, 8, 9)]
    index = _segments(tmp_path, rows)
    assert _rows(index.lookup({"C": np.array([5, 3], np.int64)})) == sorted(
        [("C", "a", i, i) for i in range(9)] + [("C", "b", 103, 0)])


def test_hits_through_the_engine_and_more_keys_than_the_driver_searches(spark: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """PointIndex.hits: the positions of a DataFrame's (cluster, key_hash) as a DataFrame of the session; with more
    distinct keys than MAX_KEYS, or no segments, None (the caller joins in the engine)."""
    from jobs.lake import point_index

    index = _segments(tmp_path, FILE_A, FILE_B)
    hashed = spark.createDataFrame([("C", 7), ("D", 7), ("C", 3), ("C", 99), (None, 7)], "cluster string, key_hash long")

    got = index.hits(hashed)

    assert sorted(tuple(r) for r in got.collect()) == sorted([*SEVENS, ("C", "a", 40, 4), ("D", "a", 300, 3)])
    assert point_index.PointIndex(None, tmp_path / "none", 0).hits(hashed) is None
    monkeypatch.setattr(point_index, "MAX_KEYS", 4)
    assert index.hits(hashed) is None


def _append(path: str, rows: list[tuple]) -> None:
    from deltalake import write_deltalake

    write_deltalake(path, _arrow(rows), mode="append")


def _names(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_the_chain_follows_the_table_merges_and_survives_compaction_and_kills(tmp_path: Path) -> None:
    """warm: a segment of the commits since the chain's end, a tail merged into the segment before it once it holds
    as many rows; a compaction (no new rows) carries the last segment to its version; a reader of an
    older version finds the same rows through the newer chain; what a killed merge left (its inputs beside its
    output) and a killed build's old temporary file are deleted, a recent one kept; a damaged segment, a chain of
    another table (the lake created again) and a commit's file vacuumed before its segment was built make the chain
    be built again from the table's files."""
    from deltalake import DeltaTable

    from jobs.lake import point_index
    from schemas import key_index

    lake = str(tmp_path / "lake")
    path = key_index.TABLE.path(lake)
    cache = point_index.cache_dir(lake)
    assert cache == tmp_path / "lake" / "_lookup" / "key_index"
    _append(path, FILE_B)  # version 0: 3 rows kept
    assert point_index.warm(lake) == 3
    _append(path, FILE_A)  # version 1: 5 rows >= 3: merged
    assert point_index.warm(lake) == 5 + 8
    assert _names(cache) == ["seg--1-1.kix"]
    _append(path, [("C", 1, "x", 1, 1)])  # version 2: 1 row < 8: a segment of its own
    assert (point_index.warm(lake), point_index.warm(lake)) == (1, 0)
    assert _names(cache) == ["seg--1-1.kix", "seg-1-2.kix"]

    DeltaTable(path).optimize.compact()  # version 3: no new rows
    # a reader first (the ingest that made version 3 was killed before its segment): it fills the tail with an
    # empty segment and renames nothing (a writer may hold the last segment's name)
    reader = point_index.PointIndex(None, cache, 3, lake=lake, table=key_index.TABLE)
    assert _rows(reader.lookup({"C": np.array([1], np.int64)})) == [("C", "x", 1, 1)]
    assert _names(cache) == ["seg--1-1.kix", "seg-1-2.kix", "seg-2-3.kix"]
    assert [s.rows for s in point_index.chain(cache, None)] == [8, 1, 0]
    assert point_index.warm(lake) == 0  # the writer: the chain reaches version 3, an empty tail merges nothing
    assert _names(cache) == ["seg--1-1.kix", "seg-1-2.kix", "seg-2-3.kix"]
    old = point_index.PointIndex(None, cache, 1, lake=lake, table=key_index.TABLE)
    assert _rows(old.lookup({"C": np.array([7, 1], np.int64)})) == sorted([*SEVENS, ("C", "x", 1, 1)])

    # a merge killed after writing its output: both inputs still there, and temporary files
    point_index._merge(point_index.chain(cache, None), cache / "seg--1-3.kix", point_index._table_id(lake, key_index.TABLE))
    stale, fresh = cache / "seg-3-4.kix.tmp-1", cache / "seg-3-4.kix.tmp-2"
    for p in (stale, fresh):
        p.write_bytes(b"half")
    os.utime(stale, (time.time() - point_index.STALE_TMP_S - 5,) * 2)
    _append(path, [("C", 7, "y", 2, 2)])  # version 4
    assert point_index.warm(lake) == 1  # beside the merged segment (9 rows)
    assert _names(cache) == ["seg--1-3.kix", "seg-3-4.kix", "seg-3-4.kix.tmp-2"]
    now = point_index.PointIndex(None, cache, 4, lake=lake, table=key_index.TABLE)
    assert _rows(now.lookup({"C": np.array([7], np.int64)})) == sorted([*SEVENS, ("C", "y", 2, 2)])

    # damaged: built again from the table's files (the compacted file and version 4's)
    (cache / "seg--1-3.kix").write_bytes(b"\0" * 64)
    assert point_index.warm(lake) == 10
    assert _names(cache) == ["seg--1-4.kix", "seg-3-4.kix.tmp-2"]
    assert _rows(point_index.PointIndex(None, cache, 4, lake=lake, table=key_index.TABLE)
                 .lookup({"C": np.array([7], np.int64)})) == sorted([*SEVENS, ("C", "y", 2, 2)])

    # a commit's file compacted and vacuumed before its segment was built: the chain again from the table's files
    _append(path, [("C", 8, "z", 3, 3)])  # version 5
    DeltaTable(path).optimize.compact()  # version 6
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert point_index.warm(lake) == 11
    assert [(s.lo, s.hi, s.rows) for s in point_index.chain(cache, None)] == [(-1, DeltaTable(path).version(), 11)]
    now = point_index.PointIndex(None, cache, 5, lake=lake, table=key_index.TABLE)
    assert _rows(now.lookup({"C": np.array([8], np.int64)})) == [("C", "z", 3, 3)]

    # the lake created again: another table id, segments of the old one are not read
    import shutil

    shutil.rmtree(path)
    _append(path, [("C", 7, "new", 1, 1)])
    assert point_index.warm(lake) == 1
    assert _names(cache) == ["seg--1-0.kix", "seg-3-4.kix.tmp-2"]
    assert _rows(point_index.PointIndex(None, cache, 0, lake=lake, table=key_index.TABLE)
                 .lookup({"C": np.array([7], np.int64)})) == [("C", "new", 1, 1)]


def test_an_ingest_merges_small_segments_only_maintain_merges_the_rest(tmp_path: Path) -> None:
    """warm(max_merge_rows): no merge larger than that many rows (an ingest pays about what it added); warm without
    it (maintain) merges whatever the size; the look-up finds the same rows either way."""
    from jobs.lake import point_index
    from schemas import key_index

    lake = str(tmp_path / "lake")
    path = key_index.TABLE.path(lake)
    cache = point_index.cache_dir(lake)
    for v in range(3):
        _append(path, [("C", 7, f"b{v}", v, v), ("C", 100 + v, "x", 10 + v, 0)])
        assert point_index.warm(lake, max_merge_rows=3) == 2
    assert [(s.lo, s.hi, s.rows) for s in point_index.chain(cache, None)] == [(-1, 0, 2), (0, 1, 2), (1, 2, 2)]
    assert point_index.warm(lake) == 6  # the tail (4 rows) >= the first (2): all three at once
    assert [(s.lo, s.hi, s.rows) for s in point_index.chain(cache, None)] == [(-1, 2, 6)]
    assert _rows(point_index.PointIndex(None, cache, 2).lookup({"C": np.array([7], np.int64)})) == [
        ("C", "b0", 0, 0), ("C", "b1", 1, 1), ("C", "b2", 2, 2)]


def test_a_merge_killed_beside_its_inputs_then_run_again_leaves_what_a_clean_merge_leaves(tmp_path: Path) -> None:
    """SIGKILL inside a merge (its output written, its inputs not yet deleted: failpoint key_segments.merged), in a
    process of its own: the next warm finds the merged segment on the chain, deletes the inputs, and the chain holds
    the same rows in the same segments as a clean run's."""
    import signal
    import subprocess
    import sys

    from jobs.lake import point_index
    from schemas import key_index

    def lake_with_two_segments(name: str) -> str:
        lake = str(tmp_path / name)
        _append(key_index.TABLE.path(lake), FILE_A)
        assert point_index.warm(lake) == 5
        _append(key_index.TABLE.path(lake), [("C", 50 + i, "m", 1000 + i, i) for i in range(5)])  # 5 >= 5: a merge
        return lake

    def state(lake: str) -> list[tuple]:
        return [(s.path.name, s.rows, [(r.cluster, r.hashes.tolist(), r.physical.tolist()) for r in s.runs])
                for s in point_index.chain(point_index.cache_dir(lake), None)]

    clean, killed = lake_with_two_segments("clean"), lake_with_two_segments("killed")
    assert point_index.warm(clean) == 5 + 10
    code = subprocess.run([sys.executable, "-c", f"from jobs.lake import point_index; point_index.warm({killed!r})"],
                          env={**os.environ, "RMQ_RECON_FAILPOINT": "key_segments.merged"},
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
    assert code.returncode == -signal.SIGKILL, code.stderr
    assert _names(point_index.cache_dir(killed)) == ["seg--1-0.kix", "seg--1-1.kix", "seg-0-1.kix"]

    assert point_index.warm(killed) == 0
    assert _names(point_index.cache_dir(killed)) == ["seg--1-1.kix"]
    assert state(killed) == state(clean)
