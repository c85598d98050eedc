"""Consume queue decoding and the queue bounds of spec §4 on the real unit-test store."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from conftest import REAL
from jobs.formats import commitlog, consumequeue

STORE = REAL / "ericpan-unit-test-store" / "store" / "unit_test_store"
FILES = consumequeue.read_queue_files(str(STORE / "consumequeue" / "abc" / "0"))


def _records() -> tuple[np.ndarray, np.ndarray]:
    offs, sizes = [], []
    for p in sorted((STORE / "commitlog").iterdir()):
        for r in commitlog.decode_file(str(p)):
            offs += r.table.column("physical_offset").to_pylist()
            sizes += r.table.column("size").to_pylist()
    return np.array(offs), np.array(sizes)


def test_real_queue_has_56_entries_each_pointing_at_a_record_of_the_same_size() -> None:
    decoded = [consumequeue.decode_cq(data, file_start_byte=start) for start, data in FILES]
    assert [(d.first_index, d.count) for d in decoded] == [(0, 10), (10, 10), (20, 10), (30, 10), (40, 10), (50, 6)]
    offs, sizes = _records()
    entries = np.concatenate([d.commit_offset for d in decoded])
    assert len(entries) == 56
    assert entries[[0, 46, 47, 55]].tolist() == [0, 7912, 8192, 9568]
    assert np.isin(entries, offs).all()
    assert (sizes[np.searchsorted(offs, entries)] == np.concatenate([d.size for d in decoded])).all()
    assert all(consumequeue.dangling_entries(d, offs, sizes, (0, 32768)) == [] for d in decoded)


@pytest.mark.parametrize("oldest, expected", [
    pytest.param(None, (0, 56), id="no_commitlog_in_snapshot_min_is_first_entry"),
    pytest.param(0, (0, 56), id="all_segments_retained"),
    pytest.param(8192, (47, 56), id="first_segment_deleted_min_moves_to_first_entry_in_second"),
    pytest.param(16384, (56, 56), id="every_entry_expired_queue_is_empty"),
])
def test_queue_bounds(oldest: int | None, expected: tuple[int, int]) -> None:
    assert consumequeue.queue_bounds(FILES, oldest) == expected


def test_bounds_when_front_files_were_deleted() -> None:
    assert consumequeue.queue_bounds(FILES[2:], 0) == (20, 56)


def test_dangling_entry_is_reported_with_its_byte_position() -> None:
    offs, sizes = _records()
    start, data = FILES[1]
    bad = bytearray(data)
    bad[3 * 20: 4 * 20] = consumequeue.encode_cq_entry(1720 + 5, 172, 0)  # points inside a record
    bad[4 * 20: 5 * 20] = consumequeue.encode_cq_entry(int(offs[14]), 99, 0)  # right record, wrong size
    d = consumequeue.decode_cq(bytes(bad), file_start_byte=start)
    assert consumequeue.dangling_entries(d, offs, sizes, (0, 32768)) == [
        (60, "entry 13 points at commitlog offset 1725, where no message starts; entry ignored"),
        (80, "entry 14 says size 99 but the message at commitlog offset 2408 has size 172"),
    ]


def test_trailing_partial_entry_is_a_problem(tmp_path: pathlib.Path) -> None:
    d = consumequeue.decode_cq(FILES[0][1] + b"\x00" * 7, file_start_byte=0, source_path="q/0")
    assert d.count == 10
    assert [(p.position, p.reason) for p in d.problems] == [(200, "file size 207 is not a multiple of 20: trailing 7 bytes ignored")]


def test_writer_round_trip(tmp_path: pathlib.Path) -> None:
    w = consumequeue.ConsumeQueueWriter(str(tmp_path), file_size=100)
    for i in range(12):
        assert w.append(1000 + i * 50, 50, i) == i
    files = consumequeue.read_queue_files(str(tmp_path))
    assert [s for s, _ in files] == [0, 100, 200]
    assert consumequeue.queue_bounds(files, None) == (0, 12)
    assert consumequeue.queue_bounds(files, 1000 + 5 * 50) == (5, 12)


def test_search_finds_mins_position_by_ranged_reads_as_the_decoded_entries_do() -> None:
    # 6000 entries (a 120,000-byte file) with repeated commit offsets: Min is the first entry at or past the oldest
    # segment's start, whichever value it falls on
    offsets = np.repeat(np.arange(3000, dtype=np.int64) * 97 + 5, 2)
    data = b"".join(consumequeue.encode_cq_entry(int(o), 50, 0) for o in offsets)
    reads: list[tuple[int, int]] = []

    def read(a: int, b: int) -> bytes:
        reads.append((a, b))
        return data[a:b]

    for oldest in (6, 102, 103, 97 * 1500 + 5, 97 * 2999 + 5):
        reads.clear()
        assert consumequeue.search(read, len(offsets), oldest) == int(np.searchsorted(offsets, oldest, side="left"))
        assert len(reads) <= 13 and all(b - a == 8 for a, b in reads)
        # the first 3,000 entries (60,000 bytes: up to SEARCH_READ_BYTES) in one read
        if oldest < offsets[2999]:
            reads.clear()
            assert consumequeue.search(read, 3000, oldest) == int(np.searchsorted(offsets, oldest, side="left"))
            assert reads == [(0, 60_000)]
    with pytest.raises(OSError, match="entries 0-2999: 40 of 60000 bytes read"):
        consumequeue.search(lambda a, b: data[a:a + 40], 3000, 103)
    f = consumequeue.QueueFile(0, len(offsets), True, None, int(offsets[0]), int(offsets[-1]), (102, 40))
    assert (f.position(102), f.position(5), f.position(10 ** 9)) == (40, 0, len(offsets))
    with pytest.raises(ValueError, match="falls inside a file that was not read"):
        f.position(103)
