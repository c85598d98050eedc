"""Batch consume queue units, the queue bounds the broker reports from them, and INNER_BATCH bodies."""
from __future__ import annotations

import time

import numpy as np
import pytest

from jobs.formats import batch_consumequeue as bcq
from jobs.problems import Problem

UNIT = bcq.BCQ_UNIT_SIZE
CAPACITY = 4  # units a test file holds
# (physical offset, size, msgBaseOffset, batchSize) per unit; three files of 4 units, the last one half written
FILE_UNITS = [
    [(0, 100, 0, 3), (100, 100, 3, 1), (200, 100, 4, 5), (300, 100, 9, 2)],  # queue offsets 0..10
    [(400, 100, 11, 4), (500, 100, 15, 1), (600, 100, 16, 2), (700, 100, 18, 3)],  # 11..20
    [(800, 100, 21, 2), (900, 100, 23, 10)],  # 21..32, then two zero-filled units
]


def _file(units: list[tuple[int, int, int, int]], capacity: int = CAPACITY) -> bytes:
    data = b"".join(bcq.encode_unit(phy, size, 7, 1_700_000_000_000 + phy, base, n) for phy, size, base, n in units)
    return data + bytes((capacity - len(units)) * UNIT)


FILES = [(i * CAPACITY * UNIT, _file(units)) for i, units in enumerate(FILE_UNITS)]


def test_unit_layout_is_the_brokers() -> None:
    raw = bcq.encode_unit(0x0102030405060708, 300, -5, 1_700_000_000_123, 42, 3)
    assert len(raw) == 46
    assert raw.hex() == ("0102030405060708" "0000012c" "fffffffffffffffb" "0000018bcfe5687b" "000000000000002a"
                         "0003" "ffffffff" "00000000")


def test_round_trip_of_several_units_stops_at_the_zero_filled_tail() -> None:
    units = [(1000, 250, 5, 3), (1250, 90, 8, 1), (1340, 4000, 9, 200)]
    d = bcq.decode_bcq(_file(units, capacity=10), file_start_byte=460, source_path="bcq/t/0/00000000000000000460")
    assert d.count == 3 and d.capacity == 10 and not d.full and d.file_start_byte == 460
    assert d.commit_offset.tolist() == [1000, 1250, 1340]
    assert d.size.tolist() == [250, 90, 4000]
    assert d.tags_code.tolist() == [7, 7, 7]
    assert d.store_ts.tolist() == [1_700_000_001_000, 1_700_000_001_250, 1_700_000_001_340]
    assert d.msg_base_offset.tolist() == [5, 8, 9]
    assert d.batch_size.tolist() == [3, 1, 200]
    assert d.end_offset == 209
    assert d.problems == []


def test_unit_with_batch_size_0_or_negative_base_ends_the_valid_units() -> None:
    # BatchConsumeQueue.recover: offset >= 0 && size > 0 && msgBaseOffset >= 0 && batchSize > 0
    data = _file([(0, 100, 0, 2)], 1) + bcq.encode_unit(100, 100, 0, 0, 2, 0) + _file([(200, 100, 2, 1)], 1)
    assert bcq.decode_bcq(data, file_start_byte=0).count == 1
    data = _file([(0, 100, 0, 2)], 1) + bcq.encode_unit(100, 100, 0, 0, -1, 1)
    assert bcq.decode_bcq(data, file_start_byte=0).count == 1


def test_size_not_a_multiple_of_46_is_a_problem() -> None:
    d = bcq.decode_bcq(_file(FILE_UNITS[0]) + b"\x00" * 7, file_start_byte=0,
                       source_path="bcq/t/0/00000000000000000000")
    assert d.count == 4 and d.capacity == 4 and d.full
    assert d.problems == [Problem("bcq/t/0/00000000000000000000", 184,
                                  "file size 191 is not a multiple of 46: trailing 7 bytes ignored")]


def test_units_whose_offsets_do_not_follow_on_are_a_problem() -> None:
    d = bcq.decode_bcq(_file([(0, 10, 0, 2), (10, 10, 2, 1), (20, 10, 5, 1), (30, 10, 9, 1)]), file_start_byte=0,
                       source_path="q")
    assert d.count == 4
    assert d.problems == [Problem("q", 92, "2 units do not follow the previous unit's offsets; the first, unit 2, "
                                           "has msgBaseOffset 5 after 3")]


@pytest.mark.parametrize("oldest, expected", [
    pytest.param(None, (0, 33), id="no_commitlog_min_is_first_unit"),
    pytest.param(0, (0, 33), id="all_retained"),
    pytest.param(400, (11, 33), id="first_file_below_oldest_segment_min_is_second_files_first_unit"),
    pytest.param(350, (11, 33), id="oldest_between_files"),
    pytest.param(550, (16, 33), id="first_units_of_second_file_below_too"),
    pytest.param(850, (23, 33), id="two_files_below_min_in_last_file"),
    pytest.param(1000, (33, 33), id="every_unit_below_queue_is_empty"),
])
def test_queue_bounds_three_files(oldest: int | None, expected: tuple[int, int]) -> None:
    assert bcq.queue_bounds(FILES, oldest) == expected
    assert bcq.queue_bounds(FILES[::-1], oldest) == expected  # any order: by start byte


def test_queue_bounds_edges() -> None:
    assert bcq.queue_bounds([], None) is None  # no files: no data, the caller decides
    assert bcq.queue_bounds([(0, bytes(4 * UNIT)), (184, bytes(4 * UNIT))], 0) == (0, 0)  # all zero-filled
    # the last file is new (zero-filled) after a full one: Max from the full one (reviseMaxOffsetInQueue)
    assert bcq.queue_bounds([FILES[0], FILES[1], (368, bytes(4 * UNIT))], None) == (0, 21)
    # a file after one that is not full is not part of the queue (recover truncates it)
    late = (552, _file([(2000, 100, 40, 5)]))
    assert bcq.queue_bounds([*FILES, late], None) == (0, 33)
    # the front files were deleted: Min from the first file left
    assert bcq.queue_bounds(FILES[1:], 0) == (11, 33)
    # a 0-byte file is left out (MappedFileQueue.doLoad deletes it)
    assert bcq.queue_bounds([*FILES, (552, b"")], None) == (0, 33)


def test_offsets_of_expands_each_unit_to_its_batch() -> None:
    q, p = bcq.offsets_of(bcq.decode_bcq(FILES[0][1], file_start_byte=0))
    assert q.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert p.tolist() == [0, 0, 0, 100, 200, 200, 200, 200, 200, 300, 300]
    q, p = bcq.offsets_of(bcq.decode_bcq(FILES[2][1], file_start_byte=368))
    assert q.tolist() == list(range(21, 33))
    assert p.tolist() == [800, 800] + [900] * 10
    q, p = bcq.offsets_of(bcq.decode_bcq(bytes(2 * UNIT), file_start_byte=0))
    assert q.tolist() == [] and p.tolist() == []


def test_inner_message_layout() -> None:
    raw = bcq.encode_inner_batch([(b"hi", {"UNIQ_KEY": "AB"})])
    assert raw == (bytes.fromhex("00000024" "00000000" "00000000" "00000000" "00000002") + b"hi"
                   + bytes.fromhex("000c") + b"UNIQ_KEY\x01AB\x02")


def test_inner_batch_round_trip() -> None:
    messages = [
        (b"order-1", {"UNIQ_KEY": "7F0000010001640B4AAC1F2B00000000", "TAGS": "created", "KEYS": "o1 o1b"}),
        (b"", {"UNIQ_KEY": "7F0000010001640B4AAC1F2B00000001"}),
        ("zażółć".encode(), {"UNIQ_KEY": "7F0000010001640B4AAC1F2B00000002", "WAIT": "true", "k": "ü"}),
    ]
    body = bcq.encode_inner_batch(messages)
    assert len(body) == (20 + 7 + 2 + 67) + (20 + 0 + 2 + 42) + (20 + 10 + 2 + 57)
    assert bcq.inner_messages(body) == [
        {"flag": 0, "body": b, "properties": props, "magic": 0, "body_crc": 0} for b, props in messages
    ]


def _inner(payload: bytes, props: bytes, *, flag: int = 0, magic: int = 0, crc: int = 0,
           total: int | None = None) -> bytes:
    """One inner message with the fields given (``total``: a wrong size, else the right one)."""
    size = 20 + len(payload) + 2 + len(props) if total is None else total
    head = [size, magic, crc, flag, len(payload)]
    return b"".join(v.to_bytes(4, "big", signed=True) for v in head) + payload + len(props).to_bytes(2, "big") + props


def test_inner_properties_follow_string2messageProperties() -> None:
    props = b"A\x01x\x02\x01novalue\x02E\x01\x02NOSEP\x02A\x01y\x02last\x01z"  # no trailing \x02 on the last pair
    body = _inner(b"b", props, flag=9, magic=-626843481, crc=123)
    assert bcq.inner_messages(body) == [
        {"flag": 9, "body": b"b", "properties": {"A": "y", "last": "z"}, "magic": -626843481, "body_crc": 123}]


def test_damaged_inner_batch_raises_naming_the_message() -> None:
    good = bcq.encode_inner_batch([(b"x", {"UNIQ_KEY": "A"})])
    with pytest.raises(ValueError, match=r"^inner message 1 at byte 34 of 45: 11 bytes left, a header needs 20$"):
        bcq.inner_messages(good + good[:11])
    with pytest.raises(ValueError,
                       match=r"^inner message 0 at byte 0 of 34: total size 99 but its fields take 34 bytes$"):
        bcq.inner_messages(_inner(b"x", b"UNIQ_KEY\x01A\x02", total=99))
    with pytest.raises(ValueError, match=r"^inner message 0 at byte 0 of 30: body length 9 runs past the end$"):
        bcq.inner_messages(_inner(b"x" * 9, b"")[:30])


def test_300000_unit_file_decodes_fast() -> None:
    n = 300_000
    dt = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("store_ts", ">i8"), ("base", ">i8"),
                   ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])
    units = np.zeros(n, dt)
    batch = (np.arange(n) % 5 + 1).astype(np.int64)
    units["offset"] = np.arange(n, dtype=np.int64) * 500 + 10**9
    units["size"] = 500
    units["tags"] = np.arange(n)
    units["store_ts"] = 1_700_000_000_000 + np.arange(n)
    units["base"] = 1000 + np.cumsum(batch) - batch
    units["batch"] = batch
    units["compacted"] = -1
    data = units.tobytes()
    assert len(data) == bcq.DEFAULT_FILE_SIZE
    assert data[:46] == bcq.encode_unit(10**9, 500, 0, 1_700_000_000_000, 1000, 1)
    t0 = time.perf_counter()
    d = bcq.decode_bcq(data, file_start_byte=bcq.DEFAULT_FILE_SIZE)
    decode_s = time.perf_counter() - t0
    q, p = bcq.offsets_of(d)
    total_s = time.perf_counter() - t0
    print(f"decode of {n} units: {decode_s * 1000:.1f} ms; with offsets_of ({len(q)} rows): {total_s * 1000:.1f} ms")
    assert decode_s < 2.0
    assert d.count == n and d.full and d.problems == []
    assert d.end_offset == 1000 + 900_000  # batch sizes 1..5 repeating: 60,000 * 15
    assert len(q) == 900_000 and q[0] == 1000 and q[-1] == 900_999 and bool((np.diff(q) == 1).all())
    assert p[:4].tolist() == [10**9, 10**9 + 500, 10**9 + 500, 10**9 + 1000]
    assert bcq.queue_bounds([(0, data)], 10**9 + 500 * 1000) == (1000 + 3000, 901_000)
