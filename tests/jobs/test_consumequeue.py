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


def _entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(consumequeue.encode_cq_entry(o, s, 7) for o, s in pairs)


def test_plain_appends_are_checked_together_with_exact_counts_and_ends() -> None:
    """Each body's (entries, first, last commit offset) when plain; None when the file must be checked alone: a torn
    entry, entries out of order or below the earlier last one, an entry inside the decoded range at no record or at a
    record of another size. Entries outside the range, and after the first zero-filled one, are not looked at."""
    records = np.array([100, 150, 200, 260, 300], np.int64)
    sizes = np.array([50, 50, 60, 40, 80], np.int32)
    zero = b"\0" * 20
    bodies = [
        _entries((100, 50), (150, 50)) + zero,  # plain, then preallocated zeros
        _entries((200, 60)),  # after 150: plain
        _entries((260, 40)),  # after 300: below the earlier last entry
        _entries((300, 80), (260, 40)),  # out of order
        _entries((150, 50), (170, 30)),  # 170 is inside the record at 150
        _entries((200, 61)),  # another size
        _entries((100, 50))[:15],  # torn
        b"",  # no new entry
        zero + _entries((100, 50)),  # only zeros count: the entry after them is never read
        _entries((40, 9), (90, 9), (400, 5), (900, 1)),  # outside [100, 400): not checked
        _entries((300, 80), (-1, 5), (10, 5)),  # ends at the invalid entry; what follows is not read
    ]
    after = [None, 150, 300, None, None, None, None, 50, None, None, 260]
    assert consumequeue.plain_appends(bodies, after, records, sizes, (100, 400)) == [
        (2, 100, 150), (1, 200, 200), None, None, None, None, None, (0, None, None), (0, None, None),
        (4, 40, 900), (1, 300, 300)]
    # nothing decoded: nothing to check, and no record known with a range: every entry inside it fails
    assert consumequeue.plain_appends(bodies[4:6], [None, None], records, sizes, None) == [(2, 150, 170),
                                                                                          (1, 200, 200)]
    empty = np.zeros(0, np.int64)
    assert consumequeue.plain_appends(bodies[:2], [None, None], empty, empty, (0, 1000)) == [None, None]
    assert consumequeue.plain_appends([], [], records, sizes, (0, 1)) == []


def test_plain_appends_agree_with_the_checks_file_by_file() -> None:
    """On random bodies (valid entries, dangling ones, disorder, zeros, torn tails): whenever a body is plain, decoding
    it alone gives the same count and ends, in order and above ``after``, and no dangling entry; whenever it is not,
    decoding it alone finds a problem, disorder, an entry below ``after`` or a dangling entry."""
    rng = np.random.default_rng(7)
    records = np.cumsum(rng.integers(20, 200, 400)).astype(np.int64)
    sizes = rng.integers(20, 200, 400).astype(np.int32)
    bodies, after = [], []
    for _ in range(300):
        k = int(rng.integers(0, 8))
        at = np.sort(rng.choice(len(records), k, replace=False))
        pairs = [(int(records[i]), int(sizes[i])) for i in at]
        roll = rng.random()
        if pairs and roll < 0.15:
            pairs[-1] = (pairs[-1][0] + 3, pairs[-1][1])  # inside a record
        elif pairs and roll < 0.25:
            pairs[0] = (pairs[0][0], pairs[0][1] + 1)  # another size
        elif len(pairs) > 1 and roll < 0.35:
            pairs.reverse()
        raw = _entries(*pairs) + b"\0" * 20 * int(rng.integers(0, 3))
        if rng.random() < 0.1:
            raw = raw[:-7] if raw else raw
        bodies.append(raw)
        after.append(None if rng.random() < 0.5 else int(records[int(rng.integers(0, len(records)))]))
    rng_ = (int(records[50]), int(records[350]))
    got = consumequeue.plain_appends(bodies, after, records, sizes, rng_)
    plain = 0
    for body, a, g in zip(bodies, after, got):
        cq = consumequeue.decode_cq(body, file_start_byte=0)
        first, last, problems = consumequeue.ends(cq)
        below = bool(cq.count) and a is not None and a > first
        dangles = consumequeue.dangling_entries(cq, records, sizes, rng_) != []
        if g is not None:
            plain += 1
            assert g == (cq.count, first, last) and not problems and not below and not dangles
        else:
            assert problems or below or dangles or cq.count and not bool(
                ((records[np.minimum(np.searchsorted(records, cq.commit_offset), len(records) - 1)] == cq.commit_offset)
                 | (cq.commit_offset < rng_[0]) | (cq.commit_offset >= rng_[1])).all())
    assert 100 < plain < 300
