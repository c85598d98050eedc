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
    from jobs.ingest.ingest import SegmentState

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
