"""Commitlog work units (jobs.ingest.decode_tasks): planned from the listing alone, decoded the same in any process."""
from __future__ import annotations

import datetime as dt
import json
import pathlib
import shutil

import pyarrow as pa

from jobs.ingest import decode_tasks, landing
from jobs.formats.commitlog_encode import CommitLogWriter

UTC = dt.timezone.utc
SEG = 64 * 1024


def _store(root: pathlib.Path, ts: str, records: int) -> None:
    """A broker snapshot whose one (preallocated) segment holds ``records`` records of ~200 bytes."""
    seg = root / "cluster=c" / "broker=b" / f"snapshot_ts={ts}" / "store" / "commitlog"
    w = CommitLogWriter(str(seg), segment_size=SEG)
    for i in range(records):
        w.append(topic="T", queue_id=0, queue_offset=i, body=b"x" * 100, properties={"UNIQ_KEY": f"K{i:04d}"},
                 born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
    w.close()


def _run(unit: dict) -> dict[str, pa.Table]:
    """decode_unit's output by kind, through the JSON the task rows carry."""
    out = pa.Table.from_batches(list(decode_tasks.decode_tasks(iter([pa.RecordBatch.from_pydict(
        {"task": [0], "units": [json.dumps([unit])]})]))), schema=decode_tasks.OUTPUT_ARROW)
    return {k: out.filter(pa.compute.equal(out["kind"], k)) for k in ("message", "trace", "problem", "progress")}


def test_a_growing_segment_is_one_unit_read_on_from_where_each_copy_stopped(tmp_path: pathlib.Path) -> None:
    _store(tmp_path, "20260105T000000Z", 20)
    _store(tmp_path, "20260105T003000Z", 45)
    snaps, problems, _ = landing.discover(str(tmp_path))
    assert problems == []
    units = decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=2048, batch_rows=7,
                                    trace_batch_rows=10)
    assert [(u["segment"], [c["ts"] for c in u["copies"]]) for u in units] == [
        ("00000000000000000000", ["2026-01-05T00:00:00+00:00", "2026-01-05T00:30:00+00:00"])]
    assert decode_tasks.reads_nothing(units[0]) is False
    out = _run(units[0])
    msgs = out["message"]
    size = msgs["size"][0].as_py()
    assert msgs["uniq_key"].to_pylist() == [f"K{i:04d}" for i in range(45)]
    assert msgs["physical_offset"].to_pylist() == [i * size for i in range(45)]
    first = [t.isoformat() for t in msgs["first_snapshot_ts"].to_pylist()]
    assert first == ["2026-01-05T00:00:00+00:00"] * 20 + ["2026-01-05T00:30:00+00:00"] * 25
    assert set(msgs["cluster"].to_pylist()) == {"c"} and set(msgs["broker"].to_pylist()) == {"b"}
    assert out["trace"].num_rows == out["problem"].num_rows == 0
    info = json.loads(out["progress"]["info"][0].as_py())
    assert info["state"] == {"start_offset": 0, "decoded_to": 45 * size, "segment_size": SEG, "complete": False,
                             "snapshot_ts": "2026-01-05T00:30:00+00:00"}
    assert [(f["ts"][11:16], f["read_from"], f["read_to"]) for f in info["files"]] == [
        ("00:00", 0, 20 * size), ("00:30", 20 * size, 45 * size)]
    assert (min(d[1] for d in info["decoded"]), max(d[2] for d in info["decoded"])) == (0, 45 * size)
    assert info["ranges"][-1] == ["2026-01-05T00:30:00+00:00", 0, 45 * size]


def test_a_segment_decoded_to_its_end_is_settled_without_reading(tmp_path: pathlib.Path) -> None:
    """The ledger says the segment is complete: no task, no read (the file may even be gone by now)."""
    from jobs.ingest.segment_ledger import SegmentState

    _store(tmp_path, "20260105T000000Z", 5)
    snaps, _, _ = landing.discover(str(tmp_path))
    state = {("c", "b", "00000000000000000000"): SegmentState("c", "b", "00000000000000000000", 0, 1000, SEG, True,
                                                               dt.datetime(2026, 1, 4, tzinfo=UTC))}
    units = decode_tasks.plan_units(snaps, state, frozenset(), lambda s, p: None, chunk_bytes=2048, batch_rows=7,
                                    trace_batch_rows=10)
    assert decode_tasks.reads_nothing(units[0]) is True
    shutil.rmtree(tmp_path / "cluster=c")
    out = _run(units[0])
    assert (out["message"].num_rows, out["problem"].num_rows) == (0, 0)
    info = json.loads(out["progress"]["info"][0].as_py())
    assert info["state"]["decoded_to"] == 1000 and info["state"]["complete"] is True
    assert [(f["sha256"][:8], f["read_from"], f["read_to"]) for f in info["files"]] == [("e3b0c442", 1000, 1000)]


def test_units_are_packed_largest_first_onto_the_least_loaded_task() -> None:
    def unit(i: int, size: int) -> dict:
        return {"unit": i, "state": None, "copies": [{"size": size}]}

    units = [unit(0, 100_000), unit(1, 700_000), unit(2, 300_000), unit(3, 300_000), unit(4, 50_000)]
    # 1,450,000 bytes (+ 4 KiB a unit) in tasks of 1 MB: 2 tasks; 700k | 300k, 300k, 100k (now 704k vs 712k) | 50k
    tasks = decode_tasks.pack(units, task_bytes=1_000_000, min_tasks=2)
    assert [[u["unit"] for u in t] for t in tasks] == [[1, 4], [0, 2, 3]]
    # at least min_tasks, never more tasks than units
    assert len(decode_tasks.pack(units[:1], task_bytes=1, min_tasks=8)) == 1


def _full_segment(root: pathlib.Path, ts: str, records: int = 400) -> None:
    """A broker snapshot whose first segment is full (end-of-file marker, a newer segment follows)."""
    seg = root / "cluster=c" / "broker=b" / f"snapshot_ts={ts}" / "store" / "commitlog"
    w = CommitLogWriter(str(seg), segment_size=SEG)
    for i in range(records):
        w.append(topic="T", queue_id=i % 3, queue_offset=i // 3, body=b"y" * (50 + (i * 37) % 400),
                 properties={"UNIQ_KEY": f"K{i:04d}"}, born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1),
                 store_host=("10.0.0.2", 10911))
    w.close()


def _split_run(unit: dict, split_bytes: int) -> tuple[dict[str, pa.Table], dict | None, int]:
    """The pieces of ``unit`` decoded one by one (as separate tasks), their rows and the merged progress."""
    work, split = decode_tasks.split_units([unit], split_bytes)
    return _pieces_run(work, split, unit)


def _pieces_run(work: list[dict], split: dict, unit: dict) -> tuple[dict[str, pa.Table], dict | None, int]:
    outs = [_run(u) for u in work]
    rows = {k: pa.concat_tables([o[k] for o in outs]) for k in ("message", "trace")}
    # the tasks finish in any order: problems are ordered by their seq, as the driver orders them
    problems = pa.concat_tables([o["problem"] for o in reversed(outs)])
    rows["problem"] = problems.take(pa.compute.sort_indices(problems, [("seq", "ascending")]))
    pieces = [json.loads(o["progress"]["info"][0].as_py()) for o in outs]
    merged = decode_tasks.merge_pieces(split[unit["unit"]], pieces) if split else None
    return rows, merged, len(work)


def _same_as_whole(whole: dict[str, pa.Table], rows: dict[str, pa.Table], merged: dict | None) -> None:
    def sans(t: pa.Table, drop: tuple[str, ...] = ("seq",)) -> list[dict]:
        return t.drop_columns(list(drop)).to_pylist()

    assert sans(rows["message"]) == sans(whole["message"])
    assert sans(rows["problem"]) == sans(whole["problem"])
    info = json.loads(whole["progress"]["info"][0].as_py())
    assert merged is not None
    assert merged["state"] == info["state"]
    assert [{k: v for k, v in f.items() if k != "sha256"} for f in merged["files"]] == [
        {k: v for k, v in f.items() if k != "sha256"} for f in info["files"]]
    assert merged["ranges"][-1] == info["ranges"][-1]
    assert (min(d[1] for d in merged["decoded"]), max(d[2] for d in merged["decoded"])) == (
        min(d[1] for d in info["decoded"]), max(d[2] for d in info["decoded"]))


def test_a_full_segment_decoded_in_pieces_gives_the_rows_and_progress_of_the_whole_decode(tmp_path: pathlib.Path
                                                                                           ) -> None:
    """Pieces of 6-12 KiB of a full 64 KiB segment, read 2 KiB at a time (records cross every cut and window), in
    two snapshots: the second copy is settled after the merge. Every record once, in order; the same state."""
    _full_segment(tmp_path, "20260105T000000Z")
    _full_segment(tmp_path, "20260105T003000Z")
    snaps, problems, _ = landing.discover(str(tmp_path))
    assert problems == []
    units = decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=2048, batch_rows=50,
                                    trace_batch_rows=10)
    unit = units[0]
    assert unit["segment"] == "00000000000000000000" and [c["has_newer"] for c in unit["copies"]] == [True, True]
    whole = _run(unit)
    n = whole["message"].num_rows
    assert n > 150 and whole["problem"].num_rows == 0
    assert whole["message"]["uniq_key"].to_pylist() == [f"K{i:04d}" for i in range(n)]
    for split_bytes in (6000, 8192, 20000):
        rows, merged, pieces = _split_run(unit, split_bytes)
        assert pieces == SEG // split_bytes
        _same_as_whole(whole, rows, merged)
        assert len(merged["files"]) == 2 and merged["files"][1]["read_from"] == merged["files"][1]["read_to"]
    # a cut exactly at a record start: that record is the next piece's first
    starts = whole["message"]["physical_offset"].to_pylist()
    work, split = decode_tasks.split_units([unit], SEG // 2)
    work[0]["piece"]["hi"] = work[1]["piece"]["lo"] = starts[len(starts) // 2]
    rows, merged, _ = _pieces_run(work, split, unit)
    _same_as_whole(whole, rows, merged)
    # not split: a segment with less than twice the piece size to read, or not followed by a newer one
    assert decode_tasks.split_units([unit], SEG // 2 + 1)[1] == {}
    assert decode_tasks.split_units([units[-1]], 1024)[1] == {}
    assert units[-1]["copies"][0]["has_newer"] is False


def test_pieces_of_a_damaged_segment_chain_or_fall_back_to_the_whole_decode(tmp_path: pathlib.Path) -> None:
    """Damaged records are skipped exactly as the whole decode skips them, inside a piece and right after a cut (the
    piece before reports it and stops at the next valid record, where the next piece starts); a record right after a
    cut that looks like a start but has a damaged size leaves the pieces unchained (merge_pieces: None: the segment
    is then decoded whole)."""
    _full_segment(tmp_path, "20260105T000000Z")
    snaps, _, _ = landing.discover(str(tmp_path))
    seg = next(f for f in snaps[0].of_kind("commitlog") if f.start == 0)
    units = decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=2048, batch_rows=50,
                                    trace_batch_rows=10)
    whole0 = _run(units[0])
    starts = whole0["message"]["physical_offset"].to_pylist()
    path = pathlib.Path(seg.uri)
    data = bytearray(path.read_bytes())
    inside = next(p for p in starts if 30000 < p < 32000)  # inside the second of 3 pieces of 21,845 bytes
    data[inside + 4:inside + 8] = b"\0\0\0\1"  # its magic code
    path.write_bytes(bytes(data))
    whole = _run(units[0])
    assert whole["problem"]["position"].to_pylist() == [inside]
    assert whole["message"].num_rows == len(starts) - 1
    rows, merged, pieces = _split_run(units[0], 20000)
    assert pieces == 3
    _same_as_whole(whole, rows, merged)

    after_cut = next(p for p in starts if p >= SEG // 3)  # the first record of the second piece
    magic = bytes(data[after_cut + 4:after_cut + 8])
    data[after_cut + 4:after_cut + 8] = b"\0\0\0\1"
    path.write_bytes(bytes(data))
    whole = _run(units[0])
    assert whole["problem"]["position"].to_pylist() == [after_cut, inside]
    rows, merged, _ = _split_run(units[0], 20000)
    _same_as_whole(whole, rows, merged)

    data[after_cut + 4:after_cut + 8] = magic
    data[after_cut:after_cut + 4] = (1).to_bytes(4, "big")  # a start (magic, physical offset) with a damaged size
    path.write_bytes(bytes(data))
    rows, merged, _ = _split_run(units[0], 20000)
    assert merged is None



def _with_newer(root: pathlib.Path, ts: str) -> pathlib.Path:
    """Segment 0 of the snapshot, with a newer (empty, preallocated) segment beside it: the broker had rolled."""
    folder = root / "cluster=c" / "broker=b" / f"snapshot_ts={ts}" / "store" / "commitlog"
    (folder / f"{SEG:020d}").write_bytes(b"\0" * SEG)
    return folder / "00000000000000000000"


def _cut(seg: pathlib.Path, keep: int, *, garbage_to_the_end: bool = False) -> None:
    """The copy cut after ``keep`` bytes, its last 30 damaged (a sync that copied part of the file); or, at its full
    size, garbage from there to the end (a file damaged on the broker)."""
    data = bytearray(seg.read_bytes())
    if garbage_to_the_end:
        data[keep - 30:] = b"\xab" * (len(data) - keep + 30)
    else:
        data = data[:keep]
        data[-30:] = b"\xab" * 30
    seg.write_bytes(bytes(data))


def _segment0(root: pathlib.Path) -> dict[str, pa.Table]:
    snaps, _, _ = landing.discover(str(root))
    units = decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=SEG, batch_rows=100,
                                    trace_batch_rows=10)
    return _run(next(u for u in units if u["segment"] == "00000000000000000000"))


def _problems(out: dict[str, pa.Table]) -> list[tuple[str, int, str]]:
    cols = (out["problem"][c].to_pylist() for c in ("source_path", "position", "reason"))
    return [(p.split("/")[2], pos, r) for p, pos, r in zip(*cols)]


def test_a_copy_cut_short_is_not_the_segments_last_word(tmp_path: pathlib.Path) -> None:
    """Issue 34: the records past the cut were lost for good (the segment had a newer one, so it was complete and
    its later copies never read), and the next copy was blamed for a record starting inside the cut one."""
    for ts in ("20260105T000000Z", "20260105T003000Z"):
        _store(tmp_path, ts, 20)
        seg = _with_newer(tmp_path, ts)
    size = int.from_bytes(seg.read_bytes()[:4], "big")
    _cut(_with_newer(tmp_path, "20260105T000000Z"), 10 * size + 80)
    out = _segment0(tmp_path)
    assert out["message"]["uniq_key"].to_pylist() == [f"K{i:04d}" for i in range(20)]
    assert [t.isoformat()[11:16] for t in out["message"]["first_snapshot_ts"].to_pylist()] == \
        ["00:00"] * 10 + ["00:30"] * 10
    assert _problems(out) == [("snapshot_ts=20260105T000000Z", 10 * size, (
        f"record at byte {10 * size}: size {size} runs past the end of the segment ({10 * size + 80} bytes); no valid "
        "record after it in this copy: the segment's next copy is read from here"))]
    state = json.loads(out["progress"]["info"][0].as_py())["state"]
    assert (state["decoded_to"], state["complete"]) == (20 * size, True)


def test_a_segment_damaged_the_same_in_two_copies_is_settled_at_the_damage(tmp_path: pathlib.Path) -> None:
    """The damage is the broker's own file (full size, garbage to the end): the second copy that stops at the same
    byte, no larger, settles the segment (a rolled segment is never read again), so later runs do not read every
    copy again."""
    for ts in ("20260105T000000Z", "20260105T003000Z"):
        _store(tmp_path, ts, 20)
        seg = _with_newer(tmp_path, ts)
    size = int.from_bytes(seg.read_bytes()[:4], "big")
    for ts in ("20260105T000000Z", "20260105T003000Z"):
        _cut(_with_newer(tmp_path, ts), 10 * size + 30, garbage_to_the_end=True)  # garbage from record 10 on
    out = _segment0(tmp_path)
    assert out["message"]["uniq_key"].to_pylist() == [f"K{i:04d}" for i in range(10)]
    assert [(folder, pos) for folder, pos, _ in _problems(out)] == [
        ("snapshot_ts=20260105T000000Z", 10 * size), ("snapshot_ts=20260105T003000Z", 10 * size)]
    state = json.loads(out["progress"]["info"][0].as_py())["state"]
    assert (state["decoded_to"], state["complete"]) == (10 * size, True)


def test_an_inner_batch_record_is_its_messages_and_one_that_cannot_be_placed_stays_a_record(
        tmp_path: pathlib.Path) -> None:
    """Issue 35 (rocketmq5.md §5): the messages of a record are what a consumer receives, an INNER_BATCH record's
    inner messages at queue offsets QUEUEOFFSET + i with their own keys; a record whose INNER_BASE is not its queue
    offset (the queue's span of it unknown) stays one row, and the quarantine says why."""
    from jobs.formats import inner_batch

    seg = tmp_path / "cluster=c" / "broker=b" / "snapshot_ts=20260105T000000Z" / "store" / "commitlog"
    w = CommitLogWriter(str(seg), segment_size=SEG)
    hosts = dict(born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
    at_0, size_0 = w.append(topic="T", queue_id=0, queue_offset=0, body=b"x", properties={"UNIQ_KEY": "K0"}, **hosts)
    msgs = [{"body": b"m%d" % i, "uniq_key": f"I{i}", "keys": f"k{i}"} for i in range(3)]
    good = inner_batch.inner_batch_fields(msgs, topic="T", queue_id=0, queue_base=1, batch_uniq_key="B1", **hosts)
    at_good, size_good = w.append(**good)
    bad = inner_batch.inner_batch_fields(msgs[:2], topic="T", queue_id=0, queue_base=4, batch_uniq_key="B2", **hosts)
    bad["queue_offset"] = 9  # INNER_BASE 4
    at_bad, size_bad = w.append(**bad)
    at_10, size_10 = w.append(topic="T", queue_id=0, queue_offset=10, body=b"y", properties={"UNIQ_KEY": "K10"},
                              **hosts)
    w.close()
    snaps, _, _ = landing.discover(str(tmp_path))
    units = decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=1 << 20, batch_rows=100,
                                    trace_batch_rows=10)
    out = _run(units[0])
    rows = list(zip(*(out["message"][c].to_pylist() for c in ("physical_offset", "queue_offset", "uniq_key", "keys",
                                                              "size", "sys_flag"))))
    assert rows == [(at_0, 0, "K0", None, size_0, 0),
                    (at_good, 1, "I0", "k0", size_good, 0xC0), (at_good, 2, "I1", "k1", size_good, 0xC0),
                    (at_good, 3, "I2", "k2", size_good, 0xC0),
                    (at_bad, 9, "B2", None, size_bad, 0xC0),
                    (at_10, 10, "K10", None, size_10, 0)]
    assert out["problem"]["reason"].to_pylist() == [
        f"INNER_BATCH record at byte {at_bad}: INNER_BASE 4 but queue offset 9: the queue offsets of its inner "
        "messages are unknown; none unwrapped"]
    assert out["problem"]["position"].to_pylist() == [at_bad]
