"""Landing-zone discovery (spec §3): which snapshot and which RocketMQ file each path is."""
from __future__ import annotations

import datetime as dt
import pathlib

import pytest

from jobs.ingest import landing

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "rel, clients, expected",
    [
        pytest.param("store/config/consumerOffset.json", False, {"kind": "consumer_offsets"}, id="broker_offsets_file"),
        pytest.param("store/config/lmqConsumerOffset.json", False, {"kind": "consumer_offsets"}, id="lmq_offsets_file"),
        pytest.param("store/config/topics.json.bak", False, {"kind": "backup"}, id="backup_of_a_config"),
        pytest.param("store/config/consumerFilter.json", False, {"kind": "other"}, id="config_we_do_not_read"),
        pytest.param("store/config/consumerOffsets/000001.sst", False, {"kind": "rocksdb"}, id="rocksdb_offsets"),
        pytest.param("store/commitlog/00000000001073741824", False, {"kind": "commitlog", "start": 1073741824},
                     id="commitlog_segment_named_by_start_offset"),
        pytest.param("store/consumequeue/TopicTest/3/00000000000006000000", False,
                     {"kind": "consumequeue", "topic": "TopicTest", "queue_id": 3, "start": 6000000},
                     id="consumequeue_file"),
        pytest.param("store/commitlog/abc", False, {"kind": "other"}, id="not_a_segment_name"),
        pytest.param("store/commitlog/09223372036854775807", False, {"kind": "commitlog", "start": (1 << 63) - 1},
                     id="the_largest_java_long"),
        pytest.param("store/commitlog/09223372036854775808", False, {"kind": "other"}, id="beyond_a_java_long"),
        pytest.param("store/commitlog/" + "\u0660" * 20, False, {"kind": "other"}, id="arabic_indic_digits"),
        pytest.param("store/consumequeue/T/\u00b2/00000000000000000000", False, {"kind": "other"},
                     id="queue_folder_superscript_two"),
        pytest.param("store/consumequeue/T/2147483648/00000000000000000000", False, {"kind": "other"},
                     id="queue_folder_beyond_a_java_int"),
        pytest.param("10.0.0.5@DEFAULT/g1/offsets.json", True,
                     {"kind": "client_offsets", "client_id": "10.0.0.5@DEFAULT", "group": "g1"}, id="client_offsets"),
        pytest.param("10.0.0.5@DEFAULT/g1/offsets.json.bak", True,
                     {"kind": "backup", "client_id": "10.0.0.5@DEFAULT", "group": "g1"}, id="client_offsets_backup"),
        pytest.param("export/messages-0001.parquet", False, {"kind": "export"}, id="tabular_export"),
    ],
)
def test_classify(rel: str, clients: bool, expected: dict) -> None:
    assert landing.classify(rel, clients=clients) == expected


@pytest.mark.parametrize("rel, reason", [
    ("store/commitlog/99999999999999999999", "file name is beyond a Java long (2^63-1), so no start offset: not read"),
    ("store/consumequeue/T/0/99999999999999999999",
     "file name is beyond a Java long (2^63-1), so no start offset: not read"),
    ("store/commitlog/" + "\u0660" * 20, "commitlog file name is not 20 digits (the segment's start offset): not read"),
    ("store/commitlog/09223372036854775807", None),
])
def test_segment_names_beyond_a_java_long_are_quarantined_not_read(rel: str, reason: str | None) -> None:
    """Before: a commitlog named 99999999999999999999 was read with that start offset, and the ingest failed
    (OverflowError saving the segment's state; the decode task overflowed), found by fuzzing the landing zone."""
    assert landing.misplaced(rel, clients=False) == reason


def _touch(root: pathlib.Path, rel: str, data: bytes = b"{}") -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def test_discover_groups_files_into_snapshots_and_quarantines_bad_folders(tmp_path: pathlib.Path) -> None:
    _touch(tmp_path, "cluster=c1/broker=b1/snapshot_ts=20260105T000000Z/store/config/consumerOffset.json")
    _touch(tmp_path, "cluster=c1/broker=b1/snapshot_ts=20260105T001000Z/store/config/consumerOffset.json")
    _touch(tmp_path, "cluster=c1/broker=b1/snapshot_ts=20260105T001000Z/store/commitlog/00000000000000000000", b"\0" * 8)
    _touch(tmp_path, "cluster=c1/clients/snapshot_ts=20260105T001000Z/10.0.0.5@DEFAULT/g/offsets.json")
    _touch(tmp_path, "cluster=c1/broker=b1/snapshot_ts=2026-01-05/store/config/topics.json")
    _touch(tmp_path, "stray.txt")
    _touch(tmp_path, "_truth/duplicated_ranges.csv", b"x")

    snaps, problems, clusters = landing.discover(str(tmp_path))

    assert [(s.cluster, s.broker, s.ts, len(s.files)) for s in snaps] == [
        ("c1", "", dt.datetime(2026, 1, 5, 0, 10, tzinfo=UTC), 1),
        ("c1", "b1", dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC), 1),
        ("c1", "b1", dt.datetime(2026, 1, 5, 0, 10, tzinfo=UTC), 2),
    ]
    assert sorted((p.source_path, p.position, p.reason) for p in problems) == [
        ("cluster=c1/broker=b1/snapshot_ts=2026-01-05/store/config/topics.json", 0,
         "malformed snapshot folder 'snapshot_ts=2026-01-05': expected snapshot_ts=YYYYMMDDTHHMMSSZ (UTC); "
         "this snapshot is skipped"),
        ("stray.txt", 0, "path does not follow the landing layout "
         "cluster=<c>/broker=<b>|clients/snapshot_ts=<YYYYMMDDTHHMMSSZ>/...; file ignored"),
    ]
    assert clusters["cluster=c1/broker=b1/snapshot_ts=2026-01-05/store/config/topics.json"] == "c1"


def test_missing_files_are_reported_per_snapshot(tmp_path: pathlib.Path) -> None:
    """Spec §3: every file is optional; missing files are reported, never fatal (the audit's lock-only folder)."""
    b1 = "cluster=c1/broker=b1/snapshot_ts=20260105T000000Z"
    _touch(tmp_path, f"{b1}/store/config/consumerOffset.json")
    _touch(tmp_path, f"{b1}/store/config/topics.json.bak")  # the .bak stands in for its file
    _touch(tmp_path, f"{b1}/store/consumequeue/T/0/00000000000000000000", b"\0" * 20)
    b2 = "cluster=c1/broker=b2/snapshot_ts=20260105T000000Z"
    _touch(tmp_path, f"{b2}/store/lock")
    whole = "cluster=c1/broker=b3/snapshot_ts=20260105T000000Z"
    for name in ("consumerOffset.json", "subscriptionGroup.json", "topics.json", "delayOffset.json"):
        _touch(tmp_path, f"{whole}/store/config/{name}")
    _touch(tmp_path, f"{whole}/store/commitlog/00000000000000000000", b"\0" * 8)
    _touch(tmp_path, f"{whole}/store/consumequeue/T/0/00000000000000000000", b"\0" * 20)
    _touch(tmp_path, "cluster=c1/broker=b4/snapshot_ts=20260105T000000Z/export/messages-0001.parquet")
    _touch(tmp_path, "cluster=c1/clients/snapshot_ts=20260105T000000Z/10.0.0.5@DEFAULT/g/offsets.json.tmp")
    _touch(tmp_path, "cluster=c1/clients/snapshot_ts=20260105T001000Z/10.0.0.5@DEFAULT/g/offsets.json.bak")

    snaps, _, _ = landing.discover(str(tmp_path))
    got = {s.folder: landing.missing_files(s) for s in snaps}

    sg = ("store/config/subscriptionGroup.json", "its groups' retryMaxTimes comes from another snapshot, else 16")
    delay = ("store/config/delayOffset.json", "its delay-level offsets at this time are unknown")
    cl = ("store/commitlog/", "no message is read from it, and Min is each queue's first valid entry (spec §4)")
    assert got == {
        b1: [sg, delay, cl],
        b2: [("store/config/consumerOffset.json", "the broker's committed offsets at this time are unknown"), sg,
             ("store/config/topics.json", "its topic configs at this time are unknown"), delay, cl,
             ("store/consumequeue/", "its queue bounds are unknown (Min/Max outputs use the broker's latest snapshot "
              "with bounds)")],
        whole: [],
        "cluster=c1/broker=b4/snapshot_ts=20260105T000000Z": [],  # exported messages, not a store copy
        "cluster=c1/clients/snapshot_ts=20260105T000000Z": [
            ("<clientId>/<group>/offsets.json", "broadcast consumers' offsets at this time are unknown")],
        "cluster=c1/clients/snapshot_ts=20260105T001000Z": [],
    }
