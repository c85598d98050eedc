"""RocketMQ 5.x RocksDB consume queue (``storeType=defaultRocksDB``, rocketmq5.md §1.4, reconciliation.md §4.2): the
queue bounds from the ``offset`` column family as the broker's getMinOffsetInQueue / getMaxOffsetInQueue answer them
(``RocksDBConsumeQueueStore``, ``RocksDBConsumeQueueOffsetTable``), written with the broker's exact keys and values."""
from __future__ import annotations

import pathlib
import random
import struct
import time

from jobs.formats import rocksdb_cq
from jobs.formats.rocksdb_cq import offset_key
from jobs.problems import Problem

WHERE = "cluster=C/broker=broker-a/snapshot_ts=2026-01-05T00:00:00Z/store/consumequeue"
TS = 1767571200000


def _u(cq: int, phy: int, size: int = 100) -> tuple[int, int, int, int, int]:
    return (cq, phy, size, 7 * cq, TS + cq)


# TopicA:0 five units, min answered once (record min = unit 0); TopicA:1 three units, no min record yet;
# TopicB:0 its commitlog head deleted: units 0-2 compacted away, min raised to 3 (record min = unit 3).
UNITS = {("TopicA", 0): [_u(c, c * 100) for c in range(5)],
         ("TopicA", 1): [_u(c, 50 + c * 100, 50) for c in range(3)],
         ("TopicB", 0): [_u(c, 3000 + c * 100) for c in range(3, 8)]}
BOUNDS = {("TopicA", 0): (0, 5), ("TopicA", 1): (None, 3), ("TopicB", 0): (3, 8)}


def _files(path: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


def _offset_cf(path: pathlib.Path) -> object:
    from rocksdict import Options, Rdict

    return Rdict(str(path), Options(raw_mode=True), column_families={"offset": Options(raw_mode=True)})


def test_keys_are_the_brokers_bytes() -> None:
    # RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0, RocksDBConsumeQueueTable.buildCQKeyByteBuffer0
    assert offset_key("TopicA", 1, True) == bytes.fromhex("00000006" "01" "546f70696341" "01" "6d6178" "01" "00000001")
    assert offset_key("TopicA", 1, False)[12:15] == b"min"
    assert rocksdb_cq.cq_key("TopicA", 1, 5) == bytes.fromhex(
        "00000006" "01" "546f70696341" "01" "00000001" "01" "0000000000000005")
    assert rocksdb_cq.parse_offset_key(offset_key("%RETRY%G", 3, False)) == ("%RETRY%G", False, 3)
    assert rocksdb_cq.parse_cq_key(rocksdb_cq.cq_key("TopicA", 2, 9)) == ("TopicA", 2, 9)
    assert rocksdb_cq.looks_like_rocksdb(["CURRENT", "MANIFEST-000005", "000011.sst", "LOCK"])
    assert not rocksdb_cq.looks_like_rocksdb(["TopicA/0/00000000000000000000", "CURRENT/0/00000000000000000000"])


def test_round_trip_bounds_and_min_raised_after_commitlog_deletion(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "consumequeue"
    rocksdb_cq.write_db(str(db), UNITS, BOUNDS)
    assert not (db / "rocksdict-config.json").exists() and (db / "CURRENT").exists()
    files = _files(db)
    files["TopicX/0/00000000000000000000"] = b"\0" * 20  # double-write mode: file CQ beside the DB, not copied
    bounds, problems = rocksdb_cq.read_bounds(files, WHERE)
    assert problems == []
    # Max = stored max cqOffset + 1; Min = stored min, or (no record) the first unit present
    assert bounds == {("TopicA", 0): (0, 5), ("TopicA", 1): (0, 3), ("TopicB", 0): (3, 8)}
    # The commitlog now starts at 300: the broker corrects the min lazily (getMinCqOffset -> correctMinCqOffset):
    # TopicA:0 stored min phy 0 < 300 -> binary search -> unit 3 (phy 300); TopicA:1 max phy 250 < 300 -> Min = Max;
    # TopicB:0 stored min phy 3300 >= 300 -> kept.
    bounds, problems = rocksdb_cq.read_bounds(files, WHERE, min_phy_offset=300)
    assert problems == []
    assert bounds == {("TopicA", 0): (3, 5), ("TopicA", 1): (3, 3), ("TopicB", 0): (3, 8)}
    bounds, _ = rocksdb_cq.read_bounds(files, WHERE, min_phy_offset=350)  # between units 3 and 4 of TopicA:0
    assert bounds[("TopicA", 0)] == (4, 5)
    units, problems = rocksdb_cq.read_units(files, WHERE)
    assert problems == [] and units == UNITS
    units, problems = rocksdb_cq.read_units(files, WHERE, queues=[("TopicB", 0), ("TopicA", 9)])
    assert problems == [] and units == {("TopicB", 0): UNITS[("TopicB", 0)]}


def test_checkpoint_topic_is_not_a_queue(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "consumequeue"
    rocksdb_cq.write_db(str(db), UNITS, BOUNDS)
    cf = _offset_cf(db)
    try:
        raw = dict(cf.get_column_family("offset").items())
    finally:
        cf.close()
        (db / "rocksdict-config.json").unlink(missing_ok=True)
    # appendMaxPhyOffset: CHECKPOINT_TOPIC / max / queue 0 -> 8-byte max(commitLogOffset + size)
    assert raw[offset_key("CHECKPOINT_TOPIC", 0, True)] == struct.pack(">q", 3800)
    assert len(raw) == 6  # 3 max + 2 min + the checkpoint
    bounds, problems = rocksdb_cq.read_bounds(_files(db), WHERE)
    assert problems == [] and sorted(bounds) == [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]


def test_damaged_records_are_problems_and_the_rest_is_read(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "consumequeue"
    rocksdb_cq.write_db(str(db), UNITS, BOUNDS)
    cf = _offset_cf(db)
    try:
        offsets = cf.get_column_family("offset")
        offsets[offset_key("TopicA", 1, True)] = b"\x00" * 15  # wrong length
        offsets[b"garbage"] = struct.pack(">qq", 1, 2)  # not a key of the layout
    finally:
        cf.close()
        (db / "rocksdict-config.json").unlink(missing_ok=True)
    bounds, problems = rocksdb_cq.read_bounds(_files(db), WHERE)
    assert bounds == {("TopicA", 0): (0, 5), ("TopicB", 0): (3, 8)}
    # key order: A max 0, A max 1, A min 0, B max 0, B min 0, CHECKPOINT_TOPIC (length 16), b"garbage" (0x67...)
    assert problems == [
        Problem(WHERE, 1, "offset record 1 (max of 'TopicA' queue 1) is 15 bytes, not 16: the queue's bounds are "
                          "unknown"),
        Problem(WHERE, 6, "offset record 6 (key 0x67617262616765) is not a consume queue offset key (7 bytes, too "
                          "short): skipped")]


def test_unopenable_db_gives_no_bounds_and_one_problem(tmp_path: pathlib.Path) -> None:
    bounds, problems = rocksdb_cq.read_bounds({"CURRENT": random.Random(7).randbytes(64)}, WHERE)
    assert bounds == {} and len(problems) == 1
    assert problems[0].source_path == WHERE and problems[0].position == 0
    assert problems[0].reason.startswith("RocksDB consume queue cannot be opened (")
    assert problems[0].reason.endswith("): its queue bounds are unknown in this snapshot")
    units, problems = rocksdb_cq.read_units({"CURRENT": b"MANIFEST-000001\n"}, WHERE)
    assert units == {} and len(problems) == 1
    # a RocksDB that is not a consume queue (no 'offset' column family: a config DB)
    from rocksdict import Options, Rdict

    other = tmp_path / "other"
    d = Rdict(str(other), Options(raw_mode=True))
    d[b"k"] = b"v"
    d.close()
    bounds, problems = rocksdb_cq.read_bounds(_files(other), WHERE)
    assert bounds == {} and len(problems) == 1 and "no 'offset' column family" in problems[0].reason


def test_ten_thousand_queues_in_under_five_seconds(tmp_path: pathlib.Path) -> None:
    units: dict[tuple[str, int], list[tuple[int, int, int, int, int]]] = {}
    bounds: dict[tuple[str, int], tuple] = {}
    phy = 0
    for t in range(100):
        for q in range(100):
            us = []
            for c in range(3):
                us.append((c, phy, 100, 0, TS))
                phy += 100
            units[(f"Topic{t}", q)] = us
            bounds[(f"Topic{t}", q)] = (0 if q % 2 else None, 3)
    db = tmp_path / "consumequeue"
    rocksdb_cq.write_db(str(db), units, bounds)
    files = _files(db)
    start = time.perf_counter()
    got, problems = rocksdb_cq.read_bounds(files, WHERE)
    elapsed = time.perf_counter() - start
    print(f"read_bounds: 10,000 queues in {elapsed:.3f} s")
    assert problems == [] and len(got) == 10_000
    assert got[("Topic0", 0)] == (0, 3) and got[("Topic99", 99)] == (0, 3)
    assert elapsed < 5
    start = time.perf_counter()
    got, problems = rocksdb_cq.read_bounds(files, WHERE, min_phy_offset=phy - 150)  # only the last unit retained
    print(f"read_bounds with min correction: 10,000 queues in {time.perf_counter() - start:.3f} s")
    assert problems == [] and got[("Topic99", 99)] == (2, 3) and got[("Topic0", 0)] == (3, 3)
