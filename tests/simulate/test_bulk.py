"""The simulator's bulk path (jobs/simulate/bulk.py): same bytes as ``Broker.put``, seeded, closed-form offsets."""
from __future__ import annotations

import hashlib
import os
import pathlib

import numpy as np
import pytest

from jobs.formats import commitlog, commitlog_encode, consumequeue, fastjson
from jobs.formats.commitlog_encode import encode_message
from jobs.formats.msgid import make_uniq_key
from jobs.simulate import java
from jobs.simulate.broker import BrokerConfig
from jobs.simulate.bulk import CONSUME_MS, QUEUES
from jobs.simulate.clock import HOUR, MINUTE, SECOND, T0_MS, month_start_ms
from jobs.simulate.engine import World

CFG = BrokerConfig(segment_size=256 * 1024, cq_entries_per_file=500, file_reserved_ms=HOUR)


def _world(out: pathlib.Path, seed: int = 3, messages: int = 6_000) -> World:
    w = World(str(out), seed)
    w.add_bulk(1, 3, messages, cfg=CFG, start=T0_MS + 10 * SECOND, end=T0_MS + 2 * HOUR,
               group_start=T0_MS + 5 * SECOND)
    w.snapshots([T0_MS + m * 30 * MINUTE for m in range(1, 6)])
    w.run()
    return w


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return _world(tmp_path_factory.mktemp("bulk"))


def _digest(folder: pathlib.Path) -> str:
    h = hashlib.sha256()
    for d, _, names in sorted(os.walk(folder)):
        for n in sorted(names):
            p = os.path.join(d, n)
            h.update(os.path.relpath(p, folder).encode() + open(p, "rb").read())
    return h.hexdigest()


def test_records_decode_to_what_was_meant_and_equal_encode_message(world: World) -> None:
    b = world.bulk_brokers[0]
    fleet = world.bulk
    assert fleet is not None
    records = []
    for start in sorted(b.commitlog.segments):
        res = commitlog.decode_segment(bytes(b.commitlog.segments[start]), segment_start=start, segment="s")
        assert res.problems == []
        records += res.table.to_pylist()
    # Poisson counts around the 6,000 asked for, fixed by the seed
    assert len(records) == world.bulk_messages == world.message_count() - len(world.stored) == 5_940
    sent: dict[str, int] = {}
    for r in records:
        t = fleet.topics[(b.name, r["topic"])]
        n = sent.get(t.name, 0)
        sent[t.name] = n + 1
        store = int(r["store_ts"].timestamp() * 1000)
        born = int(r["born_ts"].timestamp() * 1000)
        assert (born, r["keys"], r["tags"]) == (store - 1 - n % 3, f"b{t.index:04d}-{n:010d}", "TagA")
        assert r["uniq_key"] == make_uniq_key(t.ip, t.pid, t.classloader_hash, born - month_start_ms(born), n + 1)
        props = java.ordered({"TAGS": "TagA", "KEYS": r["keys"], "WAIT": "true", "UNIQ_KEY": r["uniq_key"]})
        want = encode_message(topic=t.name, queue_id=r["queue_id"], queue_offset=r["queue_offset"],
                              physical_offset=r["physical_offset"], body=b"payload-%010d" % n, properties=props,
                              born_ts_ms=born, store_ts_ms=store, born_host=(t.ip, t.port), store_host=b.addr)
        seg = r["physical_offset"] - r["physical_offset"] % CFG.segment_size
        pos = r["physical_offset"] - seg
        assert bytes(b.commitlog.segments[seg][pos:pos + r["size"]]) == want
    # every consume queue entry points at its record (offset, size, tags code)
    by_phys = {r["physical_offset"]: r for r in records}
    for (topic, qid), cq in b.cqs.items():
        if topic.startswith("Bulk"):
            for off in range(cq.min_offset, cq.max_offset):
                r = by_phys[cq.phys[off]]
                assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"]) == (topic, qid, off, cq.size[off])
                assert cq.tags[off] == commitlog_encode.tags_hash("TagA")


def test_consume_queue_files_parse_with_the_pipeline_decoder(world: World) -> None:
    b = world.bulk_brokers[0]
    for (topic, qid), cq in b.cqs.items():
        if not topic.startswith("Bulk"):
            continue
        files = cq.file_numbers()
        decoded = [consumequeue.decode_cq(cq.file(f), file_start_byte=f * cq.file_bytes) for f in files]
        assert decoded[0].first_index == files[0] * CFG.cq_entries_per_file and decoded[-1].end_index == cq.max_offset
        first = decoded[0].first_index
        assert np.concatenate([d.commit_offset for d in decoded]).tolist() == cq.phys[first:]
        assert np.concatenate([d.size for d in decoded]).tolist() == cq.size[first:]


def test_group_offsets_in_consumer_offset_json_follow_the_closed_form(world: World) -> None:
    b = world.bulk_brokers[0]
    fleet = world.bulk
    stopped = [t for t in fleet.by_broker[b.name] if t.stop_at is not None]
    assert [t.index for t in stopped] == [1]
    t_snap = T0_MS + 90 * MINUTE
    cur, _ = b.consumer_offset_files(t_snap)
    table = fastjson.loads(cur)["offsetTable"]
    flushed = T0_MS + 10 * SECOND + (t_snap - T0_MS - 10 * SECOND) // (5 * SECOND) * (5 * SECOND)
    for t in fleet.by_broker[b.name]:
        last = min(flushed, t.stop_at) if t.stop_at is not None else flushed
        want = {}
        for q in range(QUEUES):
            n = sum(1 for ts in t.times[q] if ts + CONSUME_MS <= last)
            if n:
                want[q] = t.counts[q][n - 1]
        assert {int(k): v for k, v in table[f"{t.name}@{t.group}"].items()} == want
    # the stopped group's offsets do not move after its shutdown (persisted once, at stop)
    later, _ = b.consumer_offset_files(T0_MS + 150 * MINUTE)
    assert fastjson.loads(later)["offsetTable"][f"{stopped[0].name}@{stopped[0].group}"] == \
        table[f"{stopped[0].name}@{stopped[0].group}"]


def test_same_seed_same_bytes(tmp_path: pathlib.Path) -> None:
    _world(tmp_path / "a", seed=5, messages=2_000)
    _world(tmp_path / "b", seed=5, messages=2_000)
    _world(tmp_path / "c", seed=6, messages=2_000)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != _digest(tmp_path / "c")


def test_mapped_files_are_written_as_a_broker_host_holds_them(world: World) -> None:
    """Commitlog segments and consume queue files are written up to their last block with data and extended to their
    full size without writing the zeros (jobs.simulate.snapshot._write_mapped): the exporter on a broker host finds
    their data by seeking, and the bytes are the broker's."""
    from jobs.export.queues import data_extent_end

    b = world.bulk_brokers[0]
    folder = pathlib.Path(world.out) / f"cluster={b.cluster}" / f"broker={b.name}"
    store = sorted(folder.iterdir())[-1] / "store"  # the last snapshot: every queue and the segments as they end
    seen = 0
    for path, want in [(store / "commitlog" / f"{s:020d}", bytes(seg)) for s, seg in b.commitlog.segments.items()] + [
            (store / "consumequeue" / t / str(q) / f"{f * cq.file_bytes:020d}", cq.file(f))
            for (t, q), cq in b.cqs.items() if t.startswith("Bulk") for f in cq.file_numbers()]:
        assert path.read_bytes() == want
        data = len(want.rstrip(b"\0"))
        with open(path, "rb") as fh:
            end = data_extent_end(fh.fileno(), 0, len(want))
        assert end == min(len(want), -(-data // 4096) * 4096), path
        seen += end < len(want)
    # with holes: the active segment (145,524 bytes of records: 147,456 written of 262,144) and the four queue files
    # whose 10,000 bytes hold under 4 KiB of entries; the others' data reaches their last block
    assert seen == 5
