"""Ingest job on the real broker stores: exact rows, idempotent re-runs, bad input quarantined, never fatal."""
from __future__ import annotations

import datetime as dt
import os
import pathlib
import shutil

import pytest

from jobs.ingest import decode, ingest, sample_landing
from jobs.lake import _delta
from jobs.problems import UsageError
from schemas import (consumer_offsets, delay_offsets, files, messages, quarantine, queue_bounds, segments, snapshots,
                     subscription_groups, topic_configs)

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 6, tzinfo=UTC)
TABLES = [files.TABLE, quarantine.TABLE, segments.TABLE, consumer_offsets.TABLE, subscription_groups.TABLE,
          topic_configs.TABLE, delay_offsets.TABLE, queue_bounds.TABLE, messages.TABLE]


def _counts(lake: str) -> dict[str, int]:
    return {t.qualified: len(_delta.read_pandas(lake, t)) if _delta.exists(lake, t) else 0 for t in TABLES}


def _versions(lake: str) -> dict[str, int]:
    return {t.qualified: len(_delta.history(lake, t)) for t in TABLES if _delta.exists(lake, t)}


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict]:
    root = tmp_path_factory.mktemp("real")
    landing = str(sample_landing.build(root / "landing"))
    lake = str(root / "lake")
    first = ingest.run(landing, lake, now=NOW)
    return landing, lake, first


def test_real_stores_land_with_exact_counts(real_lake: tuple[str, str, dict]) -> None:
    _, lake, _ = real_lake
    assert _counts(lake) == {
        # configs: 7 (3.x) + 1 (4.x) + 13 (5.x, incl. consumerFilter, timer and transaction files); 5 commitlog
        # segments; 6 consumequeue files; 1 client offsets.json
        "bronze/files": 33,
        "bronze/quarantine": 0,
        "bronze/segments": 5,
        "silver/consumer_offsets": 117 + 2 + 0 + 4,  # humphery755, yunai broker, guoming 5.x (empty), yunai client
        "silver/subscription_groups": 81,
        "silver/topic_configs": 112,
        "silver/delay_offsets": 16,
        "silver/queue_bounds": 1,
        "silver/messages": 179,
    }


def test_exact_values_reach_silver(real_lake: tuple[str, str, dict]) -> None:
    _, lake, _ = real_lake
    off = _delta.read_pandas(lake, consumer_offsets.TABLE)
    row = off[(off.consumer_group == "ACC_CG_TRANSLOG_REQUEST4NotifyGROUP00") & (off.queue_id == 2)].iloc[0]
    assert (row.broker, row.topic, row.committed_offset, row.client_id, row.used_backup) == (
        "broker-a", "ACC_TOPIC_TRANSLOG_NOTIFY_GROUP00", 1099674, "", False)
    client = off[off.client_id != ""].sort_values("queue_id")
    assert client[["consumer_group", "client_id", "broker", "queue_id", "committed_offset"]].values.tolist() == [
        ["please_rename_unique_group_name_1", "192.168.17.0@DEFAULT", "broker-a", q, o]
        for q, o in [(0, 1470), (1, 1470), (2, 1471), (3, 1470)]]
    qb = _delta.read_pandas(lake, queue_bounds.TABLE)
    assert qb[["broker", "topic", "queue_id", "min_offset", "max_offset"]].values.tolist() == [
        ["broker-ut", "abc", 0, 0, 56]]
    msgs = _delta.read_pandas(lake, messages.TABLE).sort_values("physical_offset")
    assert (msgs.physical_offset.iloc[0], msgs.physical_offset.iloc[-1], msgs.queue_offset.max()) == (0, 30940, 178)
    assert msgs.offset_msg_id.iloc[1] == "C0A8C77C00001FBB00000000000000AC"


def test_second_run_changes_nothing(real_lake: tuple[str, str, dict]) -> None:
    landing, lake, _ = real_lake
    before, versions = _counts(lake), _versions(lake)
    again = ingest.run(landing, lake, now=NOW + dt.timedelta(hours=1))
    assert (again["snapshots"], again["changed_rows"]) == (0, {})  # the snapshot ledger: nothing new to take
    again = ingest.run(landing, lake, now=NOW + dt.timedelta(hours=1), retake=True)
    assert (again["snapshots"], set(again["changed_rows"].values())) == (again["snapshots_seen"], {0})
    assert _counts(lake) == before
    assert _versions(lake) == versions  # not even an empty commit
    # the small tables' rows went to the engine as files below the lake; a run leaves none behind
    assert not os.path.exists(ingest.rows_folder(lake)) and os.path.isdir(os.path.join(lake, "_staging"))


def _one_broker_landing(root: pathlib.Path, files_: dict[str, bytes], folder: str = "snapshot_ts=20260105T000000Z") -> str:
    base = root / "landing" / "cluster=c" / "broker=b" / folder / "store" / "config"
    base.mkdir(parents=True)
    for name, data in files_.items():
        (base / name).write_bytes(data)
    return str(root / "landing")


GOOD = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:5,1:7\n\t\t}\n\t}\n}'
TOPICS = b'{"topicConfigTable":{"T":{"perm":6,"readQueueNums":2,"topicName":"T","writeQueueNums":2}}}'


@pytest.mark.parametrize(
    "files_, offsets, reasons",
    [
        pytest.param({"consumerOffset.json": GOOD[:25], "consumerOffset.json.bak": b"{\"offsetTable\":{", "topics.json": TOPICS},
                     [], {("store/config/consumerOffset.json", 21, "unterminated string (file truncated?); the .bak "
                          "could not be used either"),
                         ("store/config/consumerOffset.json.bak", 16, "unexpected end of input (file truncated?)")},
                     id="truncated_json_with_broken_bak"),
        pytest.param({"consumerOffset.json": b"", "topics.json": TOPICS}, [],
                     {("store/config/consumerOffset.json", 0, "empty file; the .bak could not be used either")},
                     id="empty_file"),
        pytest.param({"consumerOffset.json": GOOD + b"\xff", "consumerOffset.json.bak": GOOD, "topics.json": TOPICS},
                     [("G", "T", 0, 5), ("G", "T", 1, 7)],
                     {("store/config/consumerOffset.json", 44, "not valid UTF-8 (byte 44: invalid start byte); loaded "
                       "the .bak instead")}, id="non_utf8_bytes_fall_back_to_bak"),
        pytest.param({"consumerOffset.json": GOOD.replace(b"T@G", b"TG"), "topics.json": TOPICS}, [],
                     {("store/config/consumerOffset.json", 21, "key 'TG' is not 'topic@group' with exactly one '@': "
                       "entry skipped (as the broker's whichTopicByConsumer does)")}, id="key_without_at"),
        pytest.param({"consumerOffset.json": GOOD.replace(b"0:5", b"0:-5"), "topics.json": TOPICS}, [("G", "T", 1, 7)],
                     {("store/config/consumerOffset.json", 28, "'T@G' queue 0: offset -5 is not a non-negative "
                       "integer: entry skipped")}, id="negative_offset"),
        pytest.param({"consumerOffset.json": GOOD.replace(b"1:7", b"1:\"7x\""), "topics.json": TOPICS},
                     [("G", "T", 0, 5)],
                     {("store/config/consumerOffset.json", 32, "'T@G' queue 1: offset '7x' is not a non-negative "
                       "integer: entry skipped")}, id="non_numeric_offset"),
        pytest.param({"consumerOffset.json": GOOD.replace(b'"offsetTable"', b'"zzz":[],"offsetTable"'),
                      "topics.json": TOPICS}, [("G", "T", 0, 5), ("G", "T", 1, 7)],
                     {("store/config/consumerOffset.json", 3, "unknown field 'zzz' ignored")}, id="unknown_field"),
    ],
)
def test_bad_input_is_quarantined_and_the_rest_lands(tmp_path: pathlib.Path, files_: dict, offsets: list,
                                                     reasons: set) -> None:
    landing = _one_broker_landing(tmp_path, files_)
    lake = str(tmp_path / "lake")
    ingest.run(landing, lake, now=NOW)
    prefix = "cluster=c/broker=b/snapshot_ts=20260105T000000Z/"
    q = _delta.read_pandas(lake, quarantine.TABLE)
    assert {(r.source_path.removeprefix(prefix), r.position, r.reason) for r in q.itertuples()} == reasons
    off = _delta.read_pandas(lake, consumer_offsets.TABLE) if _delta.exists(lake, consumer_offsets.TABLE) else None
    got = [] if off is None else sorted(off[["consumer_group", "topic", "queue_id", "committed_offset"]].itertuples(
        index=False, name=None))
    assert got == offsets
    # the good file of the same snapshot always lands
    assert _delta.read_pandas(lake, topic_configs.TABLE)[["topic", "read_queue_nums"]].values.tolist() == [["T", 2]]


def test_consumer_order_info_lands_per_queue_and_a_bad_entry_is_quarantined(tmp_path: pathlib.Path) -> None:
    """consumerOrderInfo.json (issue 35): silver/order_info holds each orderly POP queue's OrderInfo as the broker
    wrote it; an entry of the wrong type is quarantined by position and the rest of the snapshot lands; a second
    run changes nothing."""
    from schemas import order_info

    text = (b'{\n\t"table":{\n\t\t"T@GF":{0:{\n\t\t\t\t"a":"0A0B",\n\t\t\t\t"cm":1,\n\t\t\t\t"i":30000,\n'
            b'\t\t\t\t"l":1767571200500,\n\t\t\t\t"o":[10,11,12],\n\t\t\t\t"oc":{10:2,11:1},\n'
            b'\t\t\t\t"ot":{10:1767571231000},\n\t\t\t\t"popTime":1767571201000\n\t\t\t},1:{"o":7,"popTime":5}'
            b'\n\t\t}\n\t}\n}')
    landing = _one_broker_landing(tmp_path, {"consumerOrderInfo.json": text, "consumerOffset.json": GOOD,
                                             "topics.json": TOPICS})
    lake = str(tmp_path / "lake")
    first = ingest.run(landing, lake, now=NOW)
    got = _delta.read_pandas(lake, order_info.TABLE)
    assert [(r.cluster, r.broker, r.consumer_group, r.topic, r.queue_id, r.pop_time, r.invisible_time,
             list(r.offsets), dict(r.next_visible_ms), dict(r.consumed_counts), r.last_consume_ts,
             r.commit_offset_bit, r.attempt_id, r.source_file.rsplit("/", 1)[-1], r.used_backup)
            for r in got.itertuples()] == [
        ("c", "b", "GF", "T", 0, 1767571201000, 30000, [10, 11, 12], {10: 1767571231000}, {10: 2, 11: 1},
         1767571200500, 1, "0A0B", "consumerOrderInfo.json", False)]
    q = _delta.read_pandas(lake, quarantine.TABLE)
    assert [(r.source_path.rsplit("/", 1)[-1], r.position, r.reason) for r in q.itertuples()] == [
        ("consumerOrderInfo.json", text.index(b"1:{"),
         "'T@GF' queue 1: field 'o' missing or not of its Java type: entry skipped")]
    assert first["changed_rows"]["silver/order_info"] == 1 and len(_delta.read_pandas(lake, consumer_offsets.TABLE)) == 2
    again = ingest.run(landing, lake, now=NOW)
    assert again["changed_rows"] == {}
    from jobs.ops import quality

    checked = quality.validate_layer(lake, "silver", now=NOW, docs_dir=None)["tables"]["silver/order_info"]
    assert (checked["success"], checked["rows"], checked["failed"], checked["evaluated"]) == (True, 1, [], 12)


def test_malformed_snapshot_folder_is_quarantined_and_other_snapshots_land(tmp_path: pathlib.Path) -> None:
    landing = _one_broker_landing(tmp_path, {"consumerOffset.json": GOOD})
    bad = pathlib.Path(landing) / "cluster=c" / "broker=b" / "snapshot_ts=2026-01-05T00:00" / "store" / "config"
    bad.mkdir(parents=True)
    (bad / "consumerOffset.json").write_bytes(GOOD)
    lake = str(tmp_path / "lake")
    ingest.run(landing, lake, now=NOW)
    q = _delta.read_pandas(lake, quarantine.TABLE)
    assert q[["cluster", "source_path", "position", "reason"]].values.tolist() == [[
        "c", "cluster=c/broker=b/snapshot_ts=2026-01-05T00:00/store/config/consumerOffset.json", 0,
        "malformed snapshot folder 'snapshot_ts=2026-01-05T00:00': expected snapshot_ts=YYYYMMDDTHHMMSSZ (UTC); "
        "this snapshot is skipped"]]
    assert len(_delta.read_pandas(lake, consumer_offsets.TABLE)) == 2


def test_missing_files_are_not_fatal_and_are_reported(tmp_path: pathlib.Path) -> None:
    landing = _one_broker_landing(tmp_path, {"topics.json": TOPICS})
    lake = str(tmp_path / "lake")
    said: list[str] = []
    summary = ingest.run(landing, lake, now=NOW, progress=said.append)
    assert (summary["snapshots"], summary["quarantined"], _delta.exists(lake, consumer_offsets.TABLE)) == (1, 0, False)
    folder = "cluster=c/broker=b/snapshot_ts=20260105T000000Z"
    lacks = ["store/config/consumerOffset.json", "store/config/subscriptionGroup.json",
             "store/config/delayOffset.json", "store/commitlog/", "store/consumequeue/"]
    assert summary["missing_files"] == {folder: lacks}
    assert [s for s in said if "lacks" in s] == [
        f"ingest: {folder} lacks store/config/consumerOffset.json (the broker's committed offsets at this time are "
        "unknown); store/config/subscriptionGroup.json (its groups' retryMaxTimes comes from another snapshot, else "
        "16); store/config/delayOffset.json (its delay-level offsets at this time are unknown); store/commitlog/ (no "
        "message is read from it, and Min is each queue's first valid entry (spec §4)); store/consumequeue/ (its "
        "queue bounds are unknown (Min/Max outputs use the broker's latest snapshot with bounds))"]
    ledger = _delta.read_pandas(lake, snapshots.TABLE)
    assert ledger[["folder", "missing"]].values.tolist() == [[folder, ", ".join(lacks)]]


def test_a_run_whose_snapshots_hold_no_rocketmq_file_fails_and_lands_nothing(tmp_path: pathlib.Path) -> None:
    """The audit's lock-only folder: ingest said "0 problem(s) quarantined" and succeeded on nothing (spec §6)."""
    folder = tmp_path / "landing" / "cluster=c" / "broker=b" / "snapshot_ts=20260105T000000Z" / "store"
    folder.mkdir(parents=True)
    (folder / "lock").write_bytes(b"")
    lake = tmp_path / "lake"
    with pytest.raises(UsageError) as err:
        ingest.run(str(tmp_path / "landing"), str(lake), now=NOW)
    assert str(err.value) == (
        f"--landing {tmp_path / 'landing'}: the 1 new snapshot folder(s) hold no RocketMQ file (e.g. "
        "cluster=c/broker=b/snapshot_ts=20260105T000000Z: no store/config/*.json, store/commitlog, store/consumequeue "
        "or clients' offsets.json); nothing ingested: check the sync job's source and target")
    assert not _delta.exists(str(lake), snapshots.TABLE)


def _segment(root: pathlib.Path, body: bytes, size: int, folder: str = "snapshot_ts=20260105T000000Z") -> None:
    seg = root / "landing" / "cluster=c" / "broker=b" / folder / "store" / "commitlog"
    seg.mkdir(parents=True)
    (seg / f"{0:020d}").write_bytes(body + bytes(size - len(body)))


def test_the_newest_segment_s_zero_filled_tail_ends_decoding_quietly(tmp_path: pathlib.Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker preallocates its newest segment: written records, then zeros running past several read windows."""
    from jobs.formats.commitlog_encode import CommitLogWriter

    seg = tmp_path / "landing" / "cluster=c" / "broker=b" / "snapshot_ts=20260105T000000Z" / "store" / "commitlog"
    w = CommitLogWriter(str(seg), segment_size=64 * 1024)
    for i in range(40):
        w.append(topic="T", queue_id=0, queue_offset=i, body=b"x" * 100, properties={"UNIQ_KEY": f"K{i:04d}"},
                 born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
    w.close()
    monkeypatch.setattr(decode, "CHUNK_BYTES", 2048)  # 40 records of ~200 bytes, then 56 KiB of zeros
    lake = str(tmp_path / "lake")
    summary = ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    rows = _delta.read_pandas(lake, messages.TABLE).sort_values("physical_offset")
    assert (summary["quarantined"], rows["uniq_key"].tolist()) == (0, [f"K{i:04d}" for i in range(40)])


def test_a_record_larger_than_the_read_window_is_quarantined_not_fatal(tmp_path: pathlib.Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "CHUNK_BYTES", 2048)
    # TOTALSIZE 4096 with the v1 magic: a plausible header whose record does not fit one window.
    _segment(tmp_path, (4096).to_bytes(4, "big") + bytes.fromhex("DAA320A7") + bytes(4088), 16 * 1024)
    lake = str(tmp_path / "lake")
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    q = _delta.read_pandas(lake, quarantine.TABLE)
    assert q[["source_path", "position", "reason"]].values.tolist() == [[
        "cluster=c/broker=b/snapshot_ts=20260105T000000Z/store/commitlog/00000000000000000000", 0,
        "a record at byte 0 is larger than the 2048-byte read window; decoding of this segment stops here"]]


def test_tabular_exports_land_as_messages_and_a_broken_one_is_quarantined(tmp_path: pathlib.Path) -> None:
    """Issue 3: Parquet or JSON-lines exports with the silver/messages columns are an alternative to segments."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    snap = tmp_path / "landing" / "cluster=c" / "broker=b" / "snapshot_ts=20260105T010000Z" / "export"
    snap.mkdir(parents=True)
    pq.write_table(pa.table({
        "physical_offset": pa.array([0, 200], pa.int64()), "topic": ["T", "T"], "queue_id": pa.array([0, 0], pa.int32()),
        "queue_offset": pa.array([0, 1], pa.int64()), "uniq_key": ["K0", "K1"],
        "store_ts": pa.array([1767571200000, 1767571201000], pa.timestamp("ms", tz="UTC")),
        "properties": pa.array([[("UNIQ_KEY", "K0")], [("UNIQ_KEY", "K1"), ("TAGS", "a")]],
                               pa.map_(pa.string(), pa.string())),
    }), snap / "messages.parquet")
    (snap / "more.jsonl").write_text(json.dumps({"physical_offset": 400, "topic": "T", "queue_id": 1, "queue_offset": 0,
                                                 "uniq_key": "K2", "store_ts": "2026-01-05T00:00:02Z"}) + "\n")
    (snap / "broken.jsonl").write_text(json.dumps({"topic": "T"}) + "\n")
    lake = str(tmp_path / "lake")
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    versions = _versions(lake)
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    assert _versions(lake) == versions  # the re-run merged nothing new: not even an empty commit

    m = _delta.read_pandas(lake, messages.TABLE).sort_values("physical_offset")
    got = [(r.broker, r.physical_offset, r.topic, r.queue_id, r.queue_offset, r.uniq_key, r.store_ts.isoformat(),
            dict(r.properties) if r.properties is not None else None, r.first_snapshot_ts.isoformat())
           for r in m.itertuples()]
    snap_ts = "2026-01-05T01:00:00+00:00"
    assert got == [
        ("b", 0, "T", 0, 0, "K0", "2026-01-05T00:00:00+00:00", {"UNIQ_KEY": "K0"}, snap_ts),
        ("b", 200, "T", 0, 1, "K1", "2026-01-05T00:00:01+00:00", {"UNIQ_KEY": "K1", "TAGS": "a"}, snap_ts),
        ("b", 400, "T", 1, 0, "K2", "2026-01-05T00:00:02+00:00", None, snap_ts),
    ]
    q = _delta.read_pandas(lake, quarantine.TABLE)
    assert q[["source_path", "position", "reason"]].values.tolist() == [[
        "cluster=c/broker=b/snapshot_ts=20260105T010000Z/export/broken.jsonl", 0,
        "tabular export unreadable (ValueError: missing required columns ['physical_offset', 'queue_id', "
        "'queue_offset']; present: ['topic']); expected Parquet or JSON lines with the silver/messages columns"]]


def _store_with_bad_entries(tmp_path: pathlib.Path, broker: str, ts: str, records: int, *, pad: int = 0,
                            key_prefix: str = "") -> list[tuple[int, int]]:
    """A snapshot of ``broker`` holding ``records`` records of queue T/0 (bodies of 100 + ``pad`` bytes) and a consume
    queue with an entry into the middle of record 3, one giving record 4 a wrong size and, past 15 records, one into
    record 15; the records' (offset, size)."""
    from jobs.formats import consumequeue
    from jobs.formats.commitlog_encode import CommitLogWriter

    store = tmp_path / "landing" / "cluster=c" / f"broker={broker}" / f"snapshot_ts={ts}" / "store"
    w = CommitLogWriter(str(store / "commitlog"), segment_size=64 * 1024)
    at = [w.append(topic="T", queue_id=0, queue_offset=i, body=b"x" * (100 + pad),
                   properties={"UNIQ_KEY": f"{key_prefix}K{i}"}, born_ts_ms=1, store_ts_ms=2,
                   born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911)) for i in range(records)]
    w.close()
    entries = [consumequeue.encode_cq_entry(o, s, 0) for o, s in at]
    entries[3] = consumequeue.encode_cq_entry(at[3][0] + 5, at[3][1], 0)
    entries[4] = consumequeue.encode_cq_entry(at[4][0], 99, 0)
    if records > 15:
        entries[15] = consumequeue.encode_cq_entry(at[15][0] + 7, at[15][1], 0)
    cq = store / "consumequeue" / "T" / "0"
    cq.mkdir(parents=True)
    (cq / f"{0:020d}").write_bytes(b"".join(entries) + bytes(20 * (1000 - records)))
    return at


def test_queue_entries_into_a_record_are_checked_against_the_records_each_snapshot_saw(tmp_path: pathlib.Path) -> None:
    """Two snapshots of one broker: 10 records, then 20. Each snapshot's consume queue has an entry into the middle of
    record 3, and one giving record 4 a wrong size; the second's also points into record 15, which only it holds.
    Each entry is quarantined against the records of its own snapshot and those before it (issue 13: the decode runs
    in engine tasks, the checks afterwards on the driver)."""
    _store_with_bad_entries(tmp_path, "b", "20260105T000000Z", 10)
    at = _store_with_bad_entries(tmp_path, "b", "20260105T003000Z", 20)
    lake = str(tmp_path / "lake")
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    q = _delta.read_pandas(lake, quarantine.TABLE).sort_values(["source_path", "position"])
    cq = "cluster=c/broker=b/snapshot_ts=20260105T00{}00Z/store/consumequeue/T/0/00000000000000000000"
    inside = "entry {} points at commitlog offset {}, where no message starts; entry ignored"
    size = f"entry 4 says size 99 but the message at commitlog offset {at[4][0]} has size {at[4][1]}"
    assert q[["source_path", "position", "reason"]].values.tolist() == [
        [cq.format("00"), 60, inside.format(3, at[3][0] + 5)], [cq.format("00"), 80, size],
        [cq.format("30"), 60, inside.format(3, at[3][0] + 5)], [cq.format("30"), 80, size],
        [cq.format("30"), 300, inside.format(15, at[15][0] + 7)]]
    assert len(_delta.read_pandas(lake, messages.TABLE)) == 20


def test_a_grown_queue_file_checks_only_its_new_entries_unless_its_earlier_ones_changed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue's last file grows between two snapshots of one run (10 entries, then 20). The second snapshot checks
    only entries 10-19 against the records (its first 10 are the earlier copy's bytes, checked against the same
    records) and still quarantines all three bad entries. Where the broker's file differs inside those first 10 (entry
    6 rewritten to point into its record), the second snapshot checks every entry again and finds it."""
    from jobs.formats import consumequeue

    checked: list[int] = []
    real = consumequeue.dangling_entries
    monkeypatch.setattr(consumequeue, "dangling_entries",
                        lambda cq, offs, sizes, rng, start=0: checked.append(start) or real(cq, offs, sizes, rng, start))
    cq = "cluster=c/broker=b/snapshot_ts=20260105T00{}00Z/store/consumequeue/T/0/00000000000000000000"
    inside = "entry {} points at commitlog offset {}, where no message starts; entry ignored"
    for rewrite in (False, True):
        root = tmp_path / str(rewrite)
        _store_with_bad_entries(root, "b", "20260105T000000Z", 10)
        at = _store_with_bad_entries(root, "b", "20260105T003000Z", 20)
        if rewrite:
            f = root / "landing" / cq.format("30")
            data = bytearray(f.read_bytes())
            data[120:140] = consumequeue.encode_cq_entry(at[6][0] + 9, at[6][1], 0)
            f.write_bytes(bytes(data))
        checked.clear()
        ingest.run(str(root / "landing"), str(root / "lake"), now=NOW)
        assert checked == [0, 0 if rewrite else 10]
        q = _delta.read_pandas(str(root / "lake"), quarantine.TABLE).sort_values(["source_path", "position"])
        size = f"entry 4 says size 99 but the message at commitlog offset {at[4][0]} has size {at[4][1]}"
        second = [[cq.format("30"), 60, inside.format(3, at[3][0] + 5)], [cq.format("30"), 80, size]]
        if rewrite:
            second.append([cq.format("30"), 120, inside.format(6, at[6][0] + 9)])
        assert q[["source_path", "position", "reason"]].values.tolist() == [
            [cq.format("00"), 60, inside.format(3, at[3][0] + 5)], [cq.format("00"), 80, size],
            *second, [cq.format("30"), 300, inside.format(15, at[15][0] + 7)]]


def test_queue_entries_of_a_later_run_are_checked_against_the_lakes_records_of_each_broker(
        tmp_path: pathlib.Path) -> None:
    """Two brokers, each 10 records in a first run's snapshot, then 20 in a second run's: the second run checks its
    entries into records 3 and 4 (held by the lake, read once for both brokers) and record 15 (staged by it), each
    broker against its own records (broker b2's records lie 50 bytes further on, so b1's would not match them)."""
    lake = str(tmp_path / "lake")
    for broker, pad in (("b1", 0), ("b2", 50)):
        _store_with_bad_entries(tmp_path, broker, "20260105T000000Z", 10, pad=pad, key_prefix=broker)
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    at = {broker: _store_with_bad_entries(tmp_path, broker, "20260105T003000Z", 20, pad=pad, key_prefix=broker)
          for broker, pad in (("b1", 0), ("b2", 50))}
    ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    q = _delta.read_pandas(lake, quarantine.TABLE)
    q = q[q["source_path"].str.contains("T003000Z")].sort_values(["source_path", "position"])
    cq = "cluster=c/broker={}/snapshot_ts=20260105T003000Z/store/consumequeue/T/0/00000000000000000000"
    inside = "entry {} points at commitlog offset {}, where no message starts; entry ignored"
    rows = []
    for b in ("b1", "b2"):
        rows += [[cq.format(b), 60, inside.format(3, at[b][3][0] + 5)],
                 [cq.format(b), 80, f"entry 4 says size 99 but the message at commitlog offset {at[b][4][0]} has "
                                    f"size {at[b][4][1]}"],
                 [cq.format(b), 300, inside.format(15, at[b][15][0] + 7)]]
    assert q[["source_path", "position", "reason"]].values.tolist() == rows
    assert len(_delta.read_pandas(lake, messages.TABLE)) == 40


def test_a_batch_is_split_by_broker_exactly_whatever_its_order_and_encoding() -> None:
    """_of_brokers: each wanted (cluster, broker) gets exactly its rows in their order, from sorted and unsorted
    batches, plain or dictionary-encoded key columns, with nulls and brokers not wanted."""
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    from jobs.ingest.known_records import _of_brokers

    rng = random.Random(3)
    wanted = [("c1", "a"), ("c2", "b"), ("c1", "c"), ("zz", "a")]
    for trial in range(200):
        n = rng.randint(1, 200)
        rows = [(rng.choice(["c1", "c2", None]), rng.choice(["a", "b", "c", None])) for _ in range(n)]
        if trial % 2:
            rows.sort(key=lambda r: (str(r[0]), str(r[1])))
        cl, br = pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows])
        if trial % 3 == 0:
            cl, br = pc.dictionary_encode(cl), pc.dictionary_encode(br)
        batch = pa.record_batch({"cluster": cl, "broker": br, "i": pa.array(range(n))})
        got: dict = {}
        for key, part in _of_brokers(batch, wanted):
            got.setdefault(key, []).extend(part.column("i").to_pylist())
        expected: dict = {}
        for i, r in enumerate(rows):
            if r in wanted:
                expected.setdefault(r, []).append(i)
        assert got == expected, trial
    unsorted = pa.record_batch({"cluster": pa.array(["c1"] * 200), "broker": pa.array(["a", "c"] * 100),
                                "i": pa.array(range(200))})  # 199 runs: sorted first
    assert {k: p.column("i").to_pylist() for k, p in _of_brokers(unsorted, wanted)} == {
        ("c1", "a"): list(range(0, 200, 2)), ("c1", "c"): list(range(1, 200, 2))}


def test_records_spilled_per_broker_come_back_whole_and_a_killed_runs_folder_is_swept(tmp_path, monkeypatch) -> None:
    import subprocess
    import sys
    import tempfile

    import numpy as np

    from jobs.ingest.known_records import _Spilled

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{_Spilled.PREFIX}{int(dead.stdout)}-x1"
    left.mkdir()
    (left / "0.0").write_bytes(b"12345678")
    mine = tmp_path / f"{_Spilled.PREFIX}{os.getpid()}-x2"  # a live process's: kept
    mine.mkdir()
    spill = _Spilled((np.int64, np.int32))
    assert not left.exists() and mine.exists()
    spill.add(("c", "a"), (np.array([1, 2]), np.array([10, 20])))
    spill.add(("c", "b"), (np.array([5]), np.array([50])))
    spill.add(("c", "a"), (np.array([3]), np.array([30])))
    spill.close()
    offsets, sizes = spill.pop(("c", "a"))
    assert offsets.tolist() == [1, 2, 3] and offsets.dtype == np.int64 and sizes.tolist() == [10, 20, 30]
    assert sizes.dtype == np.int32
    assert spill.pop(("c", "a")) is None and spill.pop(("c", "z")) is None
    assert [a.tolist() for a in spill.pop(("c", "b"))] == [[5], [50]]
    spill.remove()
    assert not pathlib.Path(spill.folder).exists()


def test_rows_extracted_beside_later_steps_are_spliced_where_they_would_have_come() -> None:
    from jobs.problems import Problem

    ex = ingest.Extracted()
    ex.add("t", {"i": 1})
    ex.problem("c", "b", None, Problem("p1", 0, "first"))
    mark, side = ex.mark(), ingest.Extracted()
    ex.add("t", {"i": 4})  # added by the main thread after the mark
    ex.add("u", {"i": 5})
    ex.problem("c", "b", None, Problem("p4", 0, "later"))
    side.add("t", {"i": 2})
    side.add("t", {"i": 3})
    side.add("u", {"i": 0})
    side.add("v", {"i": 9})
    side.problem("c", "b", None, Problem("p2", 0, "beside"))
    ex.splice(mark, side)
    assert {t: [r["i"] for r in rows] for t, rows in ex.rows.items()} == {"t": [1, 2, 3, 4], "u": [0, 5], "v": [9]}
    assert [p.source_path for *_, p in ex.problems] == ["p1", "p2", "p4"]


def test_a_background_step_gives_its_value_or_raises_its_error_in_the_waiting_thread() -> None:
    import threading

    never = threading.Event()
    ok = ingest._Background(lambda: 42)
    assert ok.result() == 42

    def fail():
        raise ValueError("no such consume queue")

    bad = ingest._Background(fail)
    with pytest.raises(ValueError, match="no such consume queue"):
        bad.wait_for(never)  # it ended without setting the event: its error, not a wait for ever
    with pytest.raises(ValueError, match="no such consume queue"):
        bad.result()


def test_reconcile_reports_the_newest_snapshot_s_missing_files(tmp_path: pathlib.Path) -> None:
    """summary.json and the dashboard name what the newest snapshot of each broker lacks (spec §3: reported)."""
    from jobs.reconcile import reconcile

    landing = _one_broker_landing(tmp_path, {"consumerOffset.json": GOOD, "topics.json": TOPICS})
    lake = str(tmp_path / "lake")
    ingest.run(landing, lake, now=NOW)
    summary = reconcile.run(lake, str(tmp_path / "reports"), run_id="r1")
    assert summary["missing_inputs"] == [{
        "cluster": "c", "broker": "b", "snapshot_ts": "2026-01-05T00:00:00.000Z",
        "folder": "cluster=c/broker=b/snapshot_ts=20260105T000000Z",
        "missing": ["store/config/subscriptionGroup.json", "store/config/delayOffset.json", "store/commitlog/",
                    "store/consumequeue/"]}]
    page = (tmp_path / "reports" / "r1" / "index.html").read_text()
    assert ("<tr><td>c</td><td>b</td><td>2026-01-05T00:00:00.000Z</td><td>store/config/subscriptionGroup.json, "
            "store/config/delayOffset.json, store/commitlog/, store/consumequeue/</td></tr>") in page
