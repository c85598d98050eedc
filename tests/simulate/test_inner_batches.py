"""The simulator's batches on a BatchCQ topic (rocketmq5.md §5, issue 35): one INNER_BATCH record per batch, one
batch consume queue unit per record, and a pull from inside a record answered with the whole record."""
from __future__ import annotations

import pathlib

import pytest

from jobs.formats import batch_consumequeue as bcq
from jobs.formats import commitlog, inner_batch
from jobs.simulate.broker import BrokerConfig
from jobs.simulate.clock import T0_MS
from jobs.simulate.engine import World
from jobs.simulate.stores import StoreKind, batch_queue_files


@pytest.fixture()
def world(tmp_path: pathlib.Path) -> World:
    w = World(str(tmp_path), 5, broker_cfg=BrokerConfig(segment_size=64 * 1024, cq_entries_per_file=2))
    w.add_broker("broker-a", StoreKind(batch_topics={"TopicB"}))
    w.topic("TopicB", 1)
    w.loop.run_until(T0_MS + 1000)
    return w


def test_a_batch_is_one_record_whose_messages_follow_the_queue(world: World) -> None:
    b, p = world.brokers[0], world.producer()
    solo = p.send(b, "TopicB", 0, keys="solo", tags=None, body=b"x")
    batch = p.send_batch(b, "TopicB", 0, [{"keys": f"k{i}", "tags": "TagA", "body": b"b%d" % i} for i in range(3)])
    assert [(m.queue_offset, m.keys, m.inner) for m in batch] == [(1, "k0", True), (2, "k1", True), (3, "k2", True)]
    assert len({m.phys for m in batch}) == 1 and len({m.uniq for m in batch}) == 3
    seg = commitlog.decode_segment(bytes(b.commitlog.segments[0]), segment_start=0, segment="0")
    assert seg.problems == []
    t = seg.table
    assert t.column("physical_offset").to_pylist() == [solo.phys, batch[0].phys]
    assert t.column("sys_flag").to_pylist() == [0, 0xC0]  # INNER_BATCH | NEED_UNWRAP
    props = t.column("properties").to_pylist()[1]
    assert dict(props)["INNER_NUM"] == "3" and dict(props)["INNER_BASE"] == "1"
    rows, problems = inner_batch.unwrap(t)
    assert problems == []
    assert list(zip(*(rows.column(c).to_pylist() for c in ("queue_offset", "uniq_key", "keys")))) == [
        (m.queue_offset, m.uniq, m.keys) for m in batch]


def test_a_pull_from_inside_a_record_gets_the_whole_record(world: World) -> None:
    b, p = world.brokers[0], world.producer()
    p.send(b, "TopicB", 0, keys="solo", tags=None, body=b"x")
    p.send_batch(b, "TopicB", 0, [{"keys": f"k{i}", "tags": "TagA", "body": b"b%d" % i} for i in range(3)])
    p.send(b, "TopicB", 0, keys="after", tags=None, body=b"y")
    status, nxt, msgs = b.pull("TopicB", 0, 2, 1)
    assert (status, nxt, [m.queue_offset for m in msgs]) == ("FOUND", 4, [1, 2, 3])
    status, nxt, msgs = b.pull("TopicB", 0, 0, 2)  # a record is never cut: the batch comes whole
    assert (status, nxt, [m.queue_offset for m in msgs]) == ("FOUND", 4, [0, 1, 2, 3])


def test_the_batch_consume_queue_has_one_unit_per_record(world: World) -> None:
    b, p = world.brokers[0], world.producer()
    p.send(b, "TopicB", 0, keys="solo", tags=None, body=b"x")
    p.send_batch(b, "TopicB", 0, [{"keys": f"k{i}", "tags": "TagA", "body": b"b%d" % i} for i in range(3)])
    p.send_batch(b, "TopicB", 0, [{"keys": "one", "tags": "TagA", "body": b"z"}])
    files = batch_queue_files(b.cqs[("TopicB", 0)], 0)
    assert [start for start, _ in files] == [0, 2 * bcq.BCQ_UNIT_SIZE]  # 2 units a file
    units = [bcq.decode_bcq(data, file_start_byte=start) for start, data in files]
    assert [(u.msg_base_offset.tolist(), u.batch_size.tolist()) for u in units] == [([0, 1], [1, 3]), ([4], [1])]
    assert bcq.queue_bounds(files, 0) == (0, 5)
