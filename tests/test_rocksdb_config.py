"""Issue 35, part: RocketMQ 5.x brokers keep their metadata in RocksDB (rocketmq5.md §1.2 v1, §1.3 v2) and stop
writing the JSON files; the stale consumerOffset.json left beside the DB was ingested as the truth (false STALL and
REWIND). The DBs are written here with RocketMQ's exact key and value layouts (rocksdict, as the broker's RocksDB)."""
from __future__ import annotations

import json
import pathlib
import shutil
import struct
import time

import pytest

from jobs.formats import fastjson, rocksdb_config
from jobs.lake._delta import arrow_filesystem

SNAP = "cluster=DefaultCluster/broker=broker-a/snapshot_ts={}"


def _db(path: pathlib.Path, records: dict[bytes, bytes]) -> None:
    from rocksdict import Options, Rdict

    path.mkdir(parents=True)
    db = Rdict(str(path), Options(raw_mode=True))
    for k, v in records.items():
        db[k] = v
    db.close()
    (path / "rocksdict-config.json").unlink(missing_ok=True)  # not the broker's: rocksdict's own


def _v2_offset_key(group: str, topic: str, qid: int, table: int = 1) -> bytes:
    g, t = group.encode(), topic.encode()
    return (b"\x01" + struct.pack(">h", table) + b"\x02" + struct.pack(">h", len(g)) + g + b"\x01"
            + struct.pack(">h", len(t)) + t + b"\x01" + struct.pack(">i", qid))


def _v2_name_key(table: int, name: str) -> bytes:
    n = name.encode()
    return b"\x01" + struct.pack(">h", table) + b"\x02" + struct.pack(">h", len(n)) + n


def v1_offsets(offsets: dict[str, dict[int, int]]) -> dict[bytes, bytes]:
    """config/consumerOffsets/: key topic@group, value fastjson BrowserCompatible {"offsetTable":{"0":250}}."""
    return {k.encode(): json.dumps({"offsetTable": {str(q): o for q, o in v.items()}}).encode()
            for k, v in offsets.items()}


def v2_records(offsets: dict[tuple[str, str, int], int], topics: dict[str, dict], groups: dict[str, dict]
               ) -> dict[bytes, bytes]:
    """config/rdb/: binary consumer offset, pull offset, topic, group and data version records."""
    out = {_v2_offset_key(g, t, q): struct.pack(">q", o) for (g, t, q), o in offsets.items()}
    out.update({_v2_offset_key(g, t, q, table=2): struct.pack(">q", o + 1000) for (g, t, q), o in offsets.items()})
    out.update({_v2_name_key(3, n): b"\x01" + json.dumps(c).encode() for n, c in topics.items()})
    out.update({_v2_name_key(4, n): b"\x01" + json.dumps(c).encode() for n, c in groups.items()})
    out[b"\x01\x00\x01\x01data_version"] = struct.pack(">qqq", 1, 1767571200000, 7)
    return out


def test_v1_and_v2_records_read_as_the_json_entries_would(tmp_path: pathlib.Path) -> None:
    _db(tmp_path / "v1", v1_offsets({"TopicTest@G": {0: 250, 1: 251}, "T@g\nx": {0: 1}}))
    files = {p.name: p.read_bytes() for p in (tmp_path / "v1").iterdir()}
    out, problems = rocksdb_config.load("consumerOffsets", files, "s/store/config/consumerOffsets")
    assert sorted((r["consumer_group"], r["topic"], r["queue_id"], r["committed_offset"])
                  for r in out["consumer_offsets"]) == [("G", "TopicTest", 0, 250), ("G", "TopicTest", 1, 251)]
    assert [p.reason for p in problems] == [
        "record 0: group 'g\\nx' of key 'T@g\\nx' holds a character RocketMQ does not allow in a group "
        "(^[%|a-zA-Z0-9_-]+$): entry skipped"]
    _db(tmp_path / "v2", v2_records({("G", "TopicTest", 0): 40, ("G", "%RETRY%G", 0): 0},
                                    {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4,
                                                   "perm": 6}},
                                    {"G": {"groupName": "G", "retryMaxTimes": 5}}))
    files = {p.name: p.read_bytes() for p in (tmp_path / "v2").iterdir()}
    out, problems = rocksdb_config.load("rdb", files, "s/store/config/rdb")
    assert problems == []
    assert sorted((r["consumer_group"], r["topic"], r["queue_id"], r["committed_offset"], r["is_retry_topic"])
                  for r in out["consumer_offsets"]) == [("G", "%RETRY%G", 0, 0, True), ("G", "TopicTest", 0, 40, False)]
    assert [(r["topic"], r["read_queue_nums"]) for r in out["topics"]] == [("TopicTest", 4)]
    assert [(r["consumer_group"], r["retry_max_times"]) for r in out["subscription_groups"]] == [("G", 5)]
    out, problems = rocksdb_config.load("rdb", {"CURRENT": b"garbage\n"}, "s/store/config/rdb")
    assert out == {} and problems[0].reason.startswith("RocksDB config (rdb) cannot be opened (")


def test_100000_offsets_read_in_under_5_seconds(tmp_path: pathlib.Path) -> None:
    _db(tmp_path / "big", v1_offsets({f"T{i // 8}@G{i % 50}": {q: i + q for q in range(2)} for i in range(50_000)}))
    files = {p.name: p.read_bytes() for p in (tmp_path / "big").iterdir()}
    t0 = time.thread_time()
    out, problems = rocksdb_config.load("consumerOffsets", files, "big")
    assert time.thread_time() - t0 < 5.0
    assert (len(out["consumer_offsets"]), problems) == (100_000, [])


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """blocked-head, and the same fleet whose broker keeps its config in RocksDB from 00:10 on (v1 at 00:10, v2 at
    00:13), the JSON files frozen at their 00:07 content beside the DBs; one more copy whose 00:13 DB is damaged."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    root = tmp_path_factory.mktemp("rocksdb")
    simulate.run("blocked-head", str(root / "clean"), seed=7)
    for name in ("rocksdb", "damaged"):
        shutil.copytree(root / "clean", root / name)
        frozen = root / name / SNAP.format("20260105T000700Z") / "store/config"
        for ts, version in (("20260105T001000Z", "v1"), ("20260105T001300Z", "v2")):
            config = root / name / SNAP.format(ts) / "store/config"
            doc = fastjson.loads((config / "consumerOffset.json").read_text())
            offsets = {k: dict(v) for k, v in doc["offsetTable"].items()}
            for f in ("consumerOffset.json", "consumerOffset.json.bak"):  # the stale JSON of 00:07
                shutil.copy(frozen / f, config / f)
            if version == "v1":
                _db(config / "consumerOffsets", v1_offsets(offsets))
            elif name == "damaged":
                (config / "rdb").mkdir()
                (config / "rdb" / "CURRENT").write_text("MANIFEST-000099\n")
            else:
                _db(config / "rdb", v2_records({(k.split("@")[1], k.split("@")[0], q): o
                                                 for k, v in offsets.items() for q, o in v.items()}, {}, {}))
    out = {}
    for name in ("clean", "rocksdb", "damaged"):
        ingest.run(str(root / name), str(root / f"lake_{name}"))
        out[name] = root / f"lake_{name}"
        out[f"reports_{name}"] = pathlib.Path(reconcile.run(str(out[name]), str(root / f"r_{name}"),
                                                            run_id="r")["report_dir"])
    return out


def _offsets(lake: pathlib.Path) -> list[tuple]:
    from deltalake import DeltaTable

    path = str(lake / "silver/consumer_offsets")
    df = DeltaTable(path).to_pandas(filesystem=arrow_filesystem(path))
    return sorted((str(r.snapshot_ts)[11:16], r.topic, r.queue_id, r.committed_offset, r.source_file.split("/")[-1])
                  for r in df.itertuples())


def test_offsets_come_from_rocksdb_and_the_stale_json_is_not_read(lakes: dict[str, pathlib.Path]) -> None:
    clean, rocks = _offsets(lakes["clean"]), _offsets(lakes["rocksdb"])
    assert [r[:4] for r in rocks] == [r[:4] for r in clean]
    assert {r[0]: r[4] for r in rocks} == {"00:04": "consumerOffset.json", "00:07": "consumerOffset.json",
                                           "00:10": "consumerOffsets", "00:13": "rdb"}
    for name in ("duplicated_ranges.csv", "unconsumed_ranges.csv", "consumer_status.csv", "offset_corrections.csv"):
        assert (lakes["reports_rocksdb"] / name).read_text() == (lakes["reports_clean"] / name).read_text()


def test_a_damaged_db_gives_no_offsets_rather_than_the_stale_ones(lakes: dict[str, pathlib.Path]) -> None:
    from deltalake import DeltaTable

    rows = _offsets(lakes["damaged"])
    assert {r[0] for r in rows} == {"00:04", "00:07", "00:10"}  # none at 00:13: the DB cannot be read
    path = str(lakes["damaged"] / "bronze/quarantine")
    q = DeltaTable(path).to_pandas(filesystem=arrow_filesystem(path))
    assert [(p.split("snapshot_ts=")[1], r.split(" (")[0] + ", " + r.split("): ")[-1])
            for p, r in zip(q["source_path"], q["reason"])] == [
        ("20260105T001300Z/store/config/rdb", "RocksDB config, its rows are not taken from this snapshot")]
