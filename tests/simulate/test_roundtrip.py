"""What the simulator writes decodes, with the project's own decoders, to exactly what it meant to write."""
from __future__ import annotations

import os
import pathlib

import pytest

from jobs.formats import commitlog, commitlog_encode, configs, consumequeue, trace
from jobs.simulate.scenarios import retry_to_dlq, broadcast


def _read(path: str) -> bytes | None:
    return pathlib.Path(path).read_bytes() if os.path.exists(path) else None


@pytest.fixture(scope="module", params=["retry-to-dlq", "broadcast"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    out = tmp_path_factory.mktemp(request.param.replace("-", "_"))
    build = {"retry-to-dlq": retry_to_dlq, "broadcast": broadcast}[request.param]
    return build(str(out), 7), out


def _last_snapshot(out: pathlib.Path, broker: str) -> pathlib.Path:
    return sorted((out / "cluster=DefaultCluster" / f"broker={broker}").glob("snapshot_ts=*"))[-1] / "store"


def test_every_record_decodes_to_the_simulators_log(world) -> None:
    w, out = world
    for b in w.brokers:
        store = _last_snapshot(out, b.name)
        decoded = {}
        for seg in sorted((store / "commitlog").iterdir()):
            for part in commitlog.decode_file(str(seg), body_topics=frozenset({"RMQ_SYS_TRACE_TOPIC"})):
                assert part.problems == []
                for r in part.table.to_pylist():
                    decoded[r["physical_offset"]] = r
        mine = [m for m in w.stored if m.broker == b.name]
        assert sorted(decoded) == [m.phys for m in mine]
        for m in mine:
            r = decoded[m.phys]
            assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"], r["reconsume_times"]) == (
                m.topic, m.queue_id, m.queue_offset, m.size, m.reconsume)
            assert dict(r["properties"]) == m.props and list(dict(r["properties"])) == list(m.props)
            assert (r["uniq_key"], r["keys"], r["tags"]) == (m.uniq, m.keys, m.tags)
            assert r["offset_msg_id"] == m.offset_msg_id()
            assert int(r["store_ts"].timestamp() * 1000) == m.store_ts
            assert int(r["born_ts"].timestamp() * 1000) == m.born_ts
            assert len(m.uniq) == 32


def test_consume_queues_and_bounds_match(world) -> None:
    w, out = world
    for b in w.brokers:
        store = _last_snapshot(out, b.name)
        oldest = min(int(p.name) for p in (store / "commitlog").iterdir())
        for (topic, qid), cq in b.cqs.items():
            files = consumequeue.read_queue_files(str(store / "consumequeue" / topic / str(qid)))
            assert consumequeue.queue_bounds(files, oldest) == (cq.min_offset, cq.max_offset)
            entries = [e for start, data in files for e in
                       zip(*(lambda d: (d.commit_offset, d.size, d.tags_code))(consumequeue.decode_cq(data, file_start_byte=start)))]
            assert [(int(o), int(s), int(t)) for o, s, t in entries] == list(zip(cq.phys, cq.size, cq.tags))


def test_trace_bodies_decode_to_the_records_written(world) -> None:
    w, out = world
    by_msg: dict[tuple[str, int], list[dict]] = {}
    for r in w.trace_log:
        by_msg.setdefault((r["_broker"], r["_phys"]), []).append({k: v for k, v in r.items() if not k.startswith("_")})
    stored = {(m.broker, m.phys): m for m in w.stored if m.topic == "RMQ_SYS_TRACE_TOPIC"}
    assert set(by_msg) == set(stored)
    for key, records in by_msg.items():
        decoded, problems = trace.decode_trace_body(stored[key].body, source_path="x", position=0)
        assert problems == []
        assert len(decoded) == len(records) <= 20
        for d, r in zip(decoded, records):
            assert {k: d.get(k) for k in r} == r


def test_config_files_parse_to_the_brokers_state(world) -> None:
    w, out = world
    b = w.brokers[0]
    t = max(w.snapshot_times)
    cfg = _last_snapshot(out, b.name) / "config"
    offsets = configs.load(_read, str(cfg / "consumerOffset.json"), "consumer_offsets")
    assert not offsets.used_backup and offsets.problems == []
    state = b.offsets.state_at(t - (t - b.start_ms - 10_000) % 5000)
    assert {(r["topic"], r["consumer_group"], r["queue_id"]): r["committed_offset"] for r in offsets.rows} == {
        (tp, g, q): off for (tp, g), qs in state.items() for q, off in qs.items()}
    groups = configs.load(_read, str(cfg / "subscriptionGroup.json"), "subscription_groups")
    assert [(r["consumer_group"], r["retry_max_times"], r["retry_queue_nums"]) for r in groups.rows] == [
        (g, 16, 1) for g in b.groups]
    topics = configs.load(_read, str(cfg / "topics.json"), "topics")
    assert {r["topic"]: (r["read_queue_nums"], r["write_queue_nums"], r["perm"]) for r in topics.rows} == {
        name: (c["readQueueNums"], c["writeQueueNums"], c["perm"]) for name, c in b.topics.items()}
    delay = configs.load(_read, str(cfg / "delayOffset.json"), "delay_offsets")
    assert {r["delay_level"]: r["offset"] for r in delay.rows} == b.delay_offsets
    for c in w.consumers:
        if c.broadcast:
            folder = sorted((out / "cluster=DefaultCluster" / "clients").glob("snapshot_ts=*"))[-1]
            parsed = configs.load(_read, str(folder / c.client_id / c.group / "offsets.json"), "client_offsets")
            assert {(r["broker"], r["topic"], r["queue_id"]): r["committed_offset"] for r in parsed.rows} == {
                (mq.broker, mq.topic, mq.queue_id): off for mq, off in c.local_offsets.items()}


def test_commitlog_records_are_byte_identical_to_the_reference_writer(world, tmp_path: pathlib.Path) -> None:
    w, _ = world
    b = w.brokers[0]
    ref = commitlog_encode.CommitLogWriter(str(tmp_path), b.cfg.segment_size)
    for m in [m for m in w.stored if m.broker == b.name][:300]:
        phys, size = ref.append(topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset, body=m.body,
                                properties=m.props, born_ts_ms=m.born_ts, store_ts_ms=m.store_ts,
                                born_host=m.born_host, store_host=m.store_host, reconsume_times=m.reconsume)
        assert (phys, size) == (m.phys, m.size)
    ref.close()
    first = sorted(os.listdir(tmp_path))[0]
    mine = b.commitlog.segments.get(int(first))
    if mine is not None:
        data = (tmp_path / first).read_bytes()
        end = ref.next_offset if ref.next_offset < b.cfg.segment_size else b.cfg.segment_size
        assert data[:end] == bytes(mine[:end])
