"""Issue 35, part: store types whose files change what Min means (spec §4.2). A broker with tiered storage still
serves offsets below its local Min from the tier: EXPIRED ranges there were false, and the BELOW_MIN correction
moved the group past messages it could still consume."""
from __future__ import annotations

import csv
import pathlib
import shutil

import pytest

from jobs.formats import fastjson

TIERED = "store/config/tieredStoreMetadata.json"


def _rows(folder: pathlib.Path, name: str) -> list[dict[str, str]]:
    with open(folder / name, newline="") as f:
        return list(csv.DictReader(f))


_RUNS: dict[tuple[str, str], pathlib.Path] = {}


def _run(landing: pathlib.Path, root: pathlib.Path, name: str) -> pathlib.Path:
    """ingest + reconcile of ``landing`` into ``root``/lake_<name>, once per module (the clean run is shared)."""
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    key = (str(landing), name)
    if key not in _RUNS:
        ingest.run(str(landing), str(root / f"lake_{name}"))
        summary = reconcile.run(str(root / f"lake_{name}"), str(root / f"reports_{name}"))
        _RUNS[key] = pathlib.Path(summary["report_dir"])
    return _RUNS[key]


@pytest.fixture(scope="module")
def expired(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """expired-offset: GID_gone below Min at the last snapshot (BELOW_MIN), GID_back expired then back."""
    from jobs import simulate

    root = tmp_path_factory.mktemp("tiered")
    simulate.run("expired-offset", str(root / "clean"), seed=7)
    return root


def _with_tier(root: pathlib.Path, name: str, text: str) -> pathlib.Path:
    landing = root / name
    shutil.copytree(root / "clean", landing)
    for snap in (landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir():
        (snap / TIERED).write_text(text)
    return landing


def test_a_tier_holding_every_offset_leaves_nothing_expired_and_nothing_to_correct(expired: pathlib.Path) -> None:
    clean = _run(expired / "clean", expired, "clean")
    assert [r["reason"] for r in _rows(clean, "offset_corrections.csv")] == ["BELOW_MIN", "BELOW_MIN"]
    doc = {"queueMetadataTable": {"TopicTest": {q: {"queue": {"brokerName": "broker-a", "queueId": q, "topic":
                                                                "TopicTest"}, "minOffset": 0, "maxOffset": 10800,
                                                      "updateTimestamp": 1767571200000} for q in (0, 1)}}}
    tiered = _run(_with_tier(expired, "tiered", fastjson.dumps(doc)), expired, "tiered")
    assert _rows(tiered, "offset_corrections.csv") == []
    unconsumed = [(r["consumer_group"], r["queue_id"], r["start_offset"], r["end_offset"], r["kind"])
                  for r in _rows(tiered, "unconsumed_ranges.csv")]
    assert unconsumed == [("GID_gone", "0", "90", "10799", "BACKLOG"), ("GID_gone", "1", "90", "10799", "BACKLOG")]
    status = {(r["consumer_group"], r["queue_id"]): (r["min_offset"], r["consumable_lag"])
              for r in _rows(tiered, "consumer_status.csv")}
    assert status[("GID_gone", "0")] == ("0", "10710")


def test_unreadable_tier_metadata_leaves_the_bounds_unknown_not_local(expired: pathlib.Path) -> None:
    tiered = _run(_with_tier(expired, "broken", '{"queueMetadataTable": {"TopicTest": '), expired, "broken")
    assert _rows(tiered, "offset_corrections.csv") == []
    assert [r for r in _rows(tiered, "unconsumed_ranges.csv") if r["kind"] == "EXPIRED"] == []


def _with_topic_attributes(root: pathlib.Path, name: str, topic: str, attributes: dict[str, str]) -> pathlib.Path:
    landing = root / name
    shutil.copytree(root / "clean", landing)
    for snap in (landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir():
        path = snap / "store/config/topics.json"
        doc = fastjson.loads(path.read_text())
        doc["topicConfigTable"][topic]["attributes"] = attributes
        path.write_text(fastjson.dumps(doc))
    return landing


def test_a_compaction_topic_has_no_expired_skipped_or_below_min_and_a_coverage_row(expired: pathlib.Path) -> None:
    """Spec §4.2 COMPACTION_TOPIC: reads below the commitlog's Min are served from the compaction log, so the
    BELOW_MIN corrections of the clean run would move the groups past messages they can still read."""
    clean = _run(expired / "clean", expired, "clean")
    compacted = _run(_with_topic_attributes(expired, "compacted", "TopicTest", {"cleanup.policy": "COMPACTION"}),
                     expired, "compacted")
    assert _rows(compacted, "offset_corrections.csv") == []
    kinds = lambda folder: [(r["consumer_group"], r["queue_id"], r["start_offset"], r["end_offset"], r["kind"])  # noqa: E731
                            for r in _rows(folder, "unconsumed_ranges.csv")]
    assert [k for k in kinds(clean) if k[-1] in ("EXPIRED", "SKIPPED")] == [
        ("GID_back", "0", "90", "339", "EXPIRED"), ("GID_back", "1", "90", "338", "EXPIRED"),
        ("GID_gone", "0", "90", "2530", "EXPIRED"), ("GID_gone", "1", "90", "2530", "EXPIRED")]
    assert kinds(compacted) == [k for k in kinds(clean) if k[-1] not in ("EXPIRED", "SKIPPED")]
    coverage = [(r["broker"], r["topic"], r["consumer_group"], r["queue_id"], r["reason"])
                for r in _rows(compacted, "coverage.csv")]
    assert coverage == [("", "", "GID_back", "", "NO_TRACE"), ("", "", "GID_gone", "", "NO_TRACE"),
                        ("broker-a", "TopicTest", "", "", "COMPACTION_TOPIC")]
    assert _rows(compacted, "consumer_status.csv") == _rows(clean, "consumer_status.csv")


def _as_batch_cq(root: pathlib.Path, name: str, topic: str) -> pathlib.Path:
    """The clean landing zone with ``topic``'s consume queues on broker-a rewritten as a BatchCQ broker keeps them:
    ``store/batchconsumequeue/<topic>/<qid>/`` units of one message each (``DispatchRequest``: msgBaseOffset = its
    queue offset, batchSize 1), files named by their start byte, and ``queue.type=BatchCQ`` in topics.json."""
    from jobs.formats import batch_consumequeue as bcq
    from jobs.formats.consumequeue import CQ_STORE_UNIT_SIZE, decode_cq

    landing = _with_topic_attributes(root, name, topic, {"queue.type": "BatchCQ"})
    for snap in (landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir():
        cq = snap / "store" / "consumequeue" / topic
        if not cq.exists():
            continue
        for qdir in sorted(cq.iterdir()):
            out = snap / "store" / "batchconsumequeue" / topic / qdir.name
            out.mkdir(parents=True)
            for f in sorted(qdir.iterdir()):
                d = decode_cq(f.read_bytes(), file_start_byte=int(f.name))
                units = b"".join(bcq.encode_unit(int(o), int(s), int(t), 0, d.first_index + i, 1)
                                 for i, (o, s, t) in enumerate(zip(d.commit_offset, d.size, d.tags_code)))
                size = f.stat().st_size // CQ_STORE_UNIT_SIZE * bcq.BCQ_UNIT_SIZE
                (out / f"{d.first_index * bcq.BCQ_UNIT_SIZE:020d}").write_bytes(units.ljust(size, b"\0"))
        shutil.rmtree(cq)
    return landing


def test_a_batch_cq_topic_gives_the_bounds_its_consume_queue_gave(expired: pathlib.Path) -> None:
    """Spec §4.2 BATCH_CQ: no consumequeue/<topic>; the bounds come from the batch consume queue, so every report
    equals the plain queue's (EXPIRED and BELOW_MIN included: retention works alike), plus the coverage row."""
    clean = _run(expired / "clean", expired, "clean")
    batch = _run(_as_batch_cq(expired, "batch", "TopicTest"), expired, "batch")
    for name in ("unconsumed_ranges.csv", "offset_corrections.csv", "consumer_status.csv", "duplicated_ranges.csv"):
        assert _rows(batch, name) == _rows(clean, name), name
    coverage = [(r["broker"], r["topic"], r["consumer_group"], r["queue_id"], r["reason"])
                for r in _rows(batch, "coverage.csv")]
    assert coverage == [("", "", "GID_back", "", "NO_TRACE"), ("", "", "GID_gone", "", "NO_TRACE"),
                        ("broker-a", "TopicTest", "", "", "BATCH_CQ")]
    assert [r["reason"] for r in _rows(batch, "offset_corrections.csv")] == ["BELOW_MIN", "BELOW_MIN"]


def test_a_queue_without_consume_queue_data_at_the_newest_snapshot_is_unknown_there(expired: pathlib.Path) -> None:
    """Spec §4.2 NO_CONSUME_QUEUE: the newest snapshot lacks queue 0's consume queue (a RocksDB or BatchCQ queue the
    ingest cannot read, a copy that missed it): Min and Max unknown, status UNKNOWN at that snapshot, no BACKLOG or
    correction for it; the earlier snapshots' EXPIRED offsets stay; queue 1 is judged as before."""
    clean = _run(expired / "clean", expired, "clean")
    landing = expired / "no_cq"
    shutil.copytree(expired / "clean", landing)
    last = sorted((landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir())[-1]
    shutil.rmtree(last / "store" / "consumequeue" / "TopicTest" / "0")
    gone = _run(landing, expired, "no_cq")
    status = {(r["consumer_group"], r["queue_id"]): (r["snapshot_ts"], r["committed_offset"], r["min_offset"],
                                                     r["max_offset"], r["lag"], r["time_lag_s"], r["status"])
              for r in _rows(gone, "consumer_status.csv")}
    assert status[("GID_gone", "0")] == ("2026-01-10T00:00:00.000Z", "90", "", "", "", "", "UNKNOWN")
    assert status[("GID_back", "0")][2:] == ("", "", "", "", "UNKNOWN")
    before = {(r["consumer_group"], r["queue_id"]): r for r in _rows(clean, "consumer_status.csv")}
    assert [r for r in _rows(gone, "consumer_status.csv") if r["queue_id"] == "1"] == [
        before[(g, "1")] for g in ("GID_back", "GID_gone")]
    assert [(r["consumer_group"], r["queue_id"], r["reason"]) for r in _rows(gone, "offset_corrections.csv")] == [
        ("GID_gone", "1", "BELOW_MIN")]
    assert [(r["consumer_group"], r["queue_id"], r["start_offset"], r["end_offset"], r["kind"])
            for r in _rows(gone, "unconsumed_ranges.csv")] == [
        ("GID_back", "0", "90", "339", "EXPIRED"), ("GID_back", "1", "90", "338", "EXPIRED"),
        ("GID_gone", "0", "90", "2530", "EXPIRED"), ("GID_gone", "1", "90", "2530", "EXPIRED"),
        ("GID_gone", "1", "2531", "10799", "BACKLOG")]
    assert [(r["broker"], r["topic"], r["queue_id"], r["reason"]) for r in _rows(gone, "coverage.csv")] == [
        ("", "", "", "NO_TRACE"), ("", "", "", "NO_TRACE"), ("broker-a", "TopicTest", "0", "NO_CONSUME_QUEUE")]


def test_a_rocksdb_consume_queue_that_cannot_be_opened_gives_unknown_bounds_and_no_correction(
        tmp_path: pathlib.Path) -> None:
    """store-types' broker-a keeps its consume queues in RocksDB: read, they give the plain topic's EXPIRED range and
    BELOW_MIN corrections; damaged in the newest snapshot, that snapshot's bounds are unknown: the DB is quarantined,
    each queue is NO_CONSUME_QUEUE and UNKNOWN, and no correction is made from a guess."""
    from jobs import simulate

    simulate.run("store-types", str(tmp_path / "clean"), seed=7)
    clean = _run(tmp_path / "clean", tmp_path, "clean")
    assert [(r["broker"], r["queue_id"], r["reason"]) for r in _rows(clean, "offset_corrections.csv")] == [
        ("broker-a", "0", "BELOW_MIN"), ("broker-a", "1", "BELOW_MIN")]
    shutil.copytree(tmp_path / "clean", tmp_path / "damaged")
    last = sorted((tmp_path / "damaged" / "cluster=DefaultCluster" / "broker=broker-a").iterdir())[-1]
    (last / "store" / "consumequeue" / "CURRENT").write_bytes(b"\x00garbage")
    damaged = _run(tmp_path / "damaged", tmp_path, "damaged")
    assert _rows(damaged, "offset_corrections.csv") == []
    status = {(r["consumer_group"], r["topic"], r["broker"], r["queue_id"]): (r["min_offset"], r["status"])
              for r in _rows(damaged, "consumer_status.csv")}
    assert status[("GID_plain", "TopicTest", "broker-a", "0")] == ("", "UNKNOWN")
    assert status[("GID_plain", "TopicTest", "broker-b", "0")] == ("0", "STALL")
    coverage = [(r["topic"], r["queue_id"]) for r in _rows(damaged, "coverage.csv")
                if r["reason"] == "NO_CONSUME_QUEUE"]
    # every queue of broker-a that held messages: the snapshot holds no consume queue data at all; the retry queues
    # never used (committed 0, no entries before, no record) are the empty queues the broker reports (spec §4.2)
    assert coverage == [("TopicBatch", "0"), ("TopicBatch", "1"), ("TopicCompact", "0"), ("TopicCompact", "1"),
                        ("TopicTest", "0"), ("TopicTest", "1")]
    assert {(r["topic"], r["min_offset"], r["max_offset"], r["status"]) for r in _rows(damaged, "consumer_status.csv")
            if r["broker"] == "broker-a" and r["topic"].startswith("%RETRY%")} == {
        (f"%RETRY%{g}", "0", "0", "OK") for g in ("GID_batch", "GID_compact", "GID_plain")}
    assert [r["kind"] for r in _rows(damaged, "unconsumed_ranges.csv") if r["broker"] == "broker-a"] == [
        "EXPIRED", "EXPIRED"]


def test_static_topics_dledger_and_lmq_are_listed_as_not_checked(expired: pathlib.Path) -> None:
    """Spec §4.2 STATIC_TOPIC, DLEDGER, LMQ: listed per broker (a static topic per topic), checked only as far as
    the files allow: the reports are the clean run's."""
    clean = _run(expired / "clean", expired, "clean")
    landing = expired / "listed"
    shutil.copytree(expired / "clean", landing)
    last = sorted((landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir())[-1] / "store"
    (last / "config" / "topicQueueMapping.json").write_text(fastjson.dumps({
        "dataVersion": {"counter": 1, "timestamp": 1767571200000},
        "topicQueueMappingDetailMap": {"TopicStatic": {"topic": "TopicStatic", "scope": "__global__", "epoch": 1,
                                                       "totalQueues": 2, "bname": "broker-a"}}}))
    (last / "config" / "lmqConsumerOffset.json").write_text('{"lmqOffsetTable":{}}')
    (last / "dledger-n0" / "data").mkdir(parents=True)
    (last / "dledger-n0" / "data" / "00000000000000000000").write_bytes(b"\0" * 64)
    listed = _run(landing, expired, "listed")
    for name in ("unconsumed_ranges.csv", "offset_corrections.csv", "consumer_status.csv"):
        assert _rows(listed, name) == _rows(clean, name), name
    assert [(r["broker"], r["topic"], r["reason"]) for r in _rows(listed, "coverage.csv")] == [
        ("", "", "NO_TRACE"), ("", "", "NO_TRACE"), ("broker-a", "", "DLEDGER"), ("broker-a", "", "LMQ"),
        ("broker-a", "TopicStatic", "STATIC_TOPIC")]


def _as_rocksdb_offsets(root: pathlib.Path, name: str) -> pathlib.Path:
    """The clean landing zone with broker-a's consumerOffset.json moved into a RocksDB v1 config
    (``store/config/consumerOffsets/``, rocketmq5.md §1.2) at every snapshot, the JSON files removed."""
    from jobs.simulate import stores

    landing = root / name
    shutil.copytree(root / "clean", landing)
    for snap in (landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir():
        config = snap / "store" / "config"
        path = config / "consumerOffset.json"
        if not path.exists():
            continue
        table = fastjson.loads(path.read_text())["offsetTable"]
        stores.write_rocksdb(str(config), "v1", {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()},
                             {}, {}, now=1767571200000)
        for p in config.glob("consumerOffset.json*"):
            p.unlink()
    return landing


def test_a_rocksdb_broker_gets_the_same_corrections_as_a_script_and_no_consumer_offset_file(
        expired: pathlib.Path) -> None:
    """A broker with a RocksDB config never reads consumerOffset.json: a corrected one would be a fix that does
    nothing (it was a 4.x-style file holding only the corrections, in the engine's row order). The mqadmin lines stay;
    summary.json and index.html say why the file is missing."""
    import json

    from jobs.reconcile import reconcile

    clean = _run(expired / "clean", expired, "clean")
    rocks = _run(_as_rocksdb_offsets(expired, "rocks_offsets"), expired, "rocks_offsets")
    assert _rows(rocks, "offset_corrections.csv") == _rows(clean, "offset_corrections.csv")
    assert sorted(p.relative_to(clean / "corrected").as_posix() for p in (clean / "corrected").rglob("*")) == [
        "DefaultCluster", "DefaultCluster/broker-a", "DefaultCluster/broker-a/consumerOffset.json"]
    assert not (rocks / "corrected").exists()
    resets = lambda folder: [x for x in (folder / "offset_corrections.sh").read_text().splitlines()  # noqa: E731
                             if x.startswith("mqadmin resetOffsetByTime")]
    assert len(resets(rocks)) == 2 and resets(rocks) == resets(clean)
    summary = json.loads((rocks / "summary.json").read_text())
    assert summary["corrected_files_not_written"] == [
        {"cluster": "DefaultCluster", "broker": "broker-a", "why": reconcile.ROCKSDB_NO_FILE}]
    assert "corrected/DefaultCluster/broker-a/consumerOffset.json" not in summary["files"]
    assert "data-no-corrected='broker-a'" in (rocks / "index.html").read_text()
    assert json.loads((clean / "summary.json").read_text())["corrected_files_not_written"] == []

