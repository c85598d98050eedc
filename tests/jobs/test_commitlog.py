"""Commitlog decoding on RocketMQ's own segments, corrupted copies of them, and encoder round trips."""
from __future__ import annotations

import datetime as dt
import pathlib
import shutil
import struct
import zlib

import numpy as np
import pytest

from conftest import REAL
from jobs.formats import commitlog, commitlog_encode, msgid

STORE = REAL / "ericpan-unit-test-store" / "store" / "unit_test_store"
SEGMENTS = sorted((STORE / "commitlog").iterdir())


def _decode_all(paths: list[pathlib.Path]) -> tuple[list[dict], list]:
    rows, problems = [], []
    for p in paths:
        for r in commitlog.decode_file(str(p), segment=p.name):
            rows += r.table.drop_columns(["body"]).to_pylist()
            problems += r.problems
    return rows, problems


def test_real_segments_decode_to_179_messages() -> None:
    rows, problems = _decode_all(SEGMENTS)
    assert problems == []
    assert len(rows) == 179
    assert [r["queue_offset"] for r in rows] == list(range(179))
    assert {r["topic"] for r in rows} == {"abc"} and {r["queue_id"] for r in rows} == {0} and {r["size"] for r in rows} == {172}
    assert [(r["physical_offset"], r["segment"]) for r in rows if r["queue_offset"] in (0, 46, 47, 178)] == [
        (0, "00000000000000000000"), (7912, "00000000000000000000"), (8192, "00000000000000008192"),
        (30940, "00000000000000024576")]
    first = rows[0]
    assert (first["store_host"], first["born_host"], first["keys"], first["tags"], first["uniq_key"]) == (
        "192.168.199.124:8123", "127.0.0.1:0", "1532257321553", "TAG1", None)
    assert first["properties"] == [("0", "imagoodperson0"), ("KEYS", "1532257321553"), ("TAGS", "TAG1")]
    assert first["store_ts"] == dt.datetime(2018, 7, 22, 11, 2, 1, 553000, tzinfo=dt.timezone.utc)
    assert first["offset_msg_id"] == "C0A8C77C00001FBB0000000000000000"


def test_segment_end_markers_and_growing_tail() -> None:
    ends = [[(r.end, r.complete) for r in commitlog.decode_file(str(p))][-1] for p in SEGMENTS]
    # three full segments end with the blank marker; the fourth is still being written; the fifth is empty
    assert ends == [(8084, True), (8084, True), (8084, True), (6536, False), (0, False)]


def test_incremental_decode_resumes_where_the_previous_run_stopped() -> None:
    data = SEGMENTS[3].read_bytes()
    first = commitlog.decode_segment(data[:3000], segment_start=24576, segment="s", final=False)
    rest = commitlog.decode_segment(data, segment_start=24576, segment="s", begin=first.end)
    assert (first.table.num_rows, first.end, rest.table.num_rows, rest.end) == (17, 2924, 21, 6536)
    assert first.problems == [] and rest.problems == []


def _corrupt(tmp_path: pathlib.Path, pos: int, patch: bytes) -> pathlib.Path:
    p = tmp_path / SEGMENTS[0].name
    shutil.copy(SEGMENTS[0], p)
    with open(p, "r+b") as f:
        f.seek(pos)
        f.write(patch)
    return p


@pytest.mark.parametrize(
    "pos, patch, lost, reason",
    [
        pytest.param(172 * 5 + 4, b"\x00\x00\x00\x01", [5],
                     "record at byte 860: bad magic code 0x00000001 (size field 172); skipped to the next valid record",
                     id="bad_magic_loses_one_record"),
        pytest.param(172 * 9, struct.pack(">i", 999_999), [9],
                     "record at byte 1548: size 999999 runs past the end of the segment (8192 bytes); skipped to the "
                     "next valid record", id="size_past_segment_loses_one_record"),
        pytest.param(172 * 12 + 28, struct.pack(">q", 7), [12],
                     "record at byte 2064: physical offset field 7 does not match its position 2064; skipped to the "
                     "next valid record", id="wrong_physical_offset_loses_one_record"),
    ],
)
def test_corrupted_record_is_reported_and_decoding_resumes(tmp_path: pathlib.Path, pos: int, patch: bytes,
                                                           lost: list[int], reason: str) -> None:
    rows, problems = _decode_all([_corrupt(tmp_path, pos, patch)])
    assert [(p.source_path, p.position, p.reason) for p in problems] == [(SEGMENTS[0].name, lost[0] * 172, reason)]
    assert [r["queue_offset"] for r in rows] == [i for i in range(47) if i not in lost]


def test_field_lengths_that_do_not_add_up_lose_only_that_record(tmp_path: pathlib.Path) -> None:
    # topic length byte of record 3 says 9 instead of 3: header is fine, the fields overrun the record
    data = SEGMENTS[0].read_bytes()
    rec = 172 * 3
    body_len = struct.unpack_from(">i", data, rec + 84)[0]
    p = _corrupt(tmp_path, rec + 88 + body_len, b"\x09")
    rows, problems = _decode_all([p])
    assert [(p_.position, p_.reason) for p_ in problems] == [
        (516, "record at byte 516: field lengths do not add up to its size; record skipped")]
    assert len(rows) == 46


@pytest.mark.parametrize("topic_len, born, store, compression", [
    pytest.param(3, "10.1.2.3", "10.9.8.7", 0, id="v1_ipv4"),
    pytest.param(200, "10.1.2.3", "10.9.8.7", 0, id="v2_long_topic"),
    pytest.param(5, "fe80::1", "2001:db8::7", 0, id="ipv6_hosts"),
    pytest.param(5, "10.1.2.3", "10.9.8.7", commitlog.COMPRESSION_ZLIB, id="zlib_body"),
    pytest.param(5, "10.1.2.3", "10.9.8.7", commitlog.COMPRESSION_ZSTD, id="zstd_body"),
])
def test_encode_decode_round_trip(tmp_path: pathlib.Path, topic_len: int, born: str, store: str, compression: int) -> None:
    topic = ("T" * topic_len) if topic_len != 5 else commitlog.TRACE_TOPIC
    body = b"SubBefore\x01" * 20
    stored = commitlog_encode.compress_body(body, compression) if compression else body
    flag = (commitlog.COMPRESSED | (compression << commitlog.COMPRESSION_SHIFT)) if compression else 0
    w = commitlog_encode.CommitLogWriter(str(tmp_path), segment_size=4096)
    props = {"UNIQ_KEY": "0A0102030001AABBCCDD00000001", "KEYS": "k1 k2", "TAGS": "tag", "WAIT": "true"}
    written = [w.append(topic=topic, queue_id=i % 3, queue_offset=i, body=stored, properties=props,
                        born_ts_ms=1_700_000_000_000 + i, store_ts_ms=1_700_000_000_100 + i, born_host=(born, 5000 + i),
                        store_host=(store, 10911), sys_flag=flag, reconsume_times=i % 2) for i in range(40)]
    w.close()
    segs = sorted(tmp_path.iterdir())
    decoded = []
    for s in segs:
        for r in commitlog.decode_file(str(s), body_topics=frozenset({topic})):
            assert r.problems == []
            decoded += r.table.to_pylist()
    assert [(d["physical_offset"], d["size"]) for d in decoded] == written
    assert len(segs) > 1  # rolled over with blank markers
    d = decoded[7]
    assert (d["topic"], d["queue_id"], d["queue_offset"], d["reconsume_times"], d["uniq_key"], d["keys"], d["tags"]) == (
        topic, 1, 7, 1, "0A0102030001AABBCCDD00000001", "k1 k2", "tag")
    assert d["born_host"] == f"{born}:5007" and d["store_host"] == f"{store}:10911"
    assert d["body"] == body
    assert d["offset_msg_id"] == msgid.offset_msg_id(f"{store}:10911", d["physical_offset"])


def test_query_msg_by_offset_output_is_reproduced() -> None:
    """mqadmin queryMsgByOffset (queryMsgByOffset-doc): the OffsetID comes from store host + commitlog offset."""
    text = (REAL / "queryMsgByOffset-doc" / "queryMsgByOffset_orderTopic.txt").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines()[1:] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    cst = dt.timezone(dt.timedelta(hours=8))
    def ms(s: str) -> int:
        return int(dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=cst).timestamp() * 1000)
    props = dict(kv.split("=", 1) for kv in fields["Properties"].strip("{}").split(", "))
    born_ip, born_port = fields["Born Host"].rsplit(":", 1)
    store_ip, store_port = fields["Store Host"].rsplit(":", 1)
    rec = commitlog_encode.encode_message(topic=fields["Topic"], queue_id=int(fields["Queue ID"]),
                                   queue_offset=int(fields["Queue Offset"]),
                                   physical_offset=int(fields["CommitLog Offset"]), body=b"book",
                                   properties=props, born_ts_ms=ms(fields["Born Timestamp"]),
                                   store_ts_ms=ms(fields["Store Timestamp"]), born_host=(born_ip, int(born_port)),
                                   store_host=(store_ip, int(store_port)))
    buf = np.zeros(223080 + len(rec), dtype=np.uint8)
    buf[223080:] = np.frombuffer(rec, dtype=np.uint8)
    r = commitlog.decode_segment(buf, segment_start=0, segment="seg", begin=223080).table.to_pylist()[0]
    assert r["offset_msg_id"] == fields["OffsetID"] == "C0A8016500002A9F0000000000036768"
    assert msgid.parse_offset_msg_id(fields["OffsetID"]) == ("192.168.1.101", 10911, 223080)
    assert (r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"]) == ("orderTopic", 4, 0, 223080)
    assert (r["born_host"], r["store_host"], r["tags"], r["uniq_key"]) == (
        "192.168.1.101:56242", "192.168.1.101:10911", "book", "7F000001841018B4AAC28A9BE9B50000")
    assert r["store_ts"].astimezone(cst).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] == fields["Store Timestamp"]
    assert msgid.uniq_key_ip(r["uniq_key"]) == "127.0.0.1"


def test_tags_hash_is_java_string_hashcode_and_real_tags_slots_are_ext_addresses() -> None:
    from jobs.formats import consumequeue

    assert [commitlog_encode.tags_hash(t) for t in ("", "TAG1", "TagA", "book")] == [0, 2567159, 2598919, 3029737]
    assert commitlog_encode.tags_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair, as Java hashes it
    # This store ran with enableConsumeQueueExt: its tags slots hold ext addresses (ConsumeQueueExt.isExtAddr:
    # value <= Integer.MIN_VALUE - 1), Long.MIN_VALUE + the entry's byte position in consumequeue_ext.
    cq = consumequeue.decode_cq((STORE / "consumequeue/abc/0/00000000000000000000").read_bytes(), file_start_byte=0)
    assert (cq.tags_code - np.iinfo(np.int64).min).tolist() == list(range(0, 200, 20))


def test_property_pairs_without_a_name_or_a_value_are_dropped_as_the_broker_does() -> None:
    """``MessageDecoder.string2messageProperties`` keeps a pair only with a name and a value: an empty UNIQ_KEY is no
    UNIQ_KEY (the msgId is then the offsetMsgId), not a key ''."""
    rec = commitlog_encode.encode_message(topic="T", queue_id=0, queue_offset=0, physical_offset=0, body=b"x",
                                   properties={"UNIQ_KEY": "", "": "v", "KEYS": "k", "TAGS": "t"}, born_ts_ms=1,
                                   store_ts_ms=2, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
    out = commitlog.decode_segment(rec, segment_start=0, segment="s")
    [r] = out.table.to_pylist()
    assert (r["uniq_key"], r["keys"], r["tags"], r["properties"]) == (None, "k", "t", [("KEYS", "k"), ("TAGS", "t")])


def test_topic_and_properties_that_are_not_utf8_are_read_as_the_broker_reads_them() -> None:
    """Topics and properties are outside the body CRC: damaged bytes there are decoded as ``new String(bytes,
    UTF_8)`` does (each malformed sequence becomes U+FFFD), the record and the one after it kept. Before, the
    invalid string reached the Parquet writer and failed the whole load (found by fuzzing the landing zone)."""
    def rec(pos: int, topic: str, keys: str) -> bytes:
        return commitlog_encode.encode_message(
            topic=topic, queue_id=0, queue_offset=pos, physical_offset=pos, body=b"x",
            properties={"KEYS": keys, "TAGS": "t"}, born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1),
            store_host=("10.0.0.2", 10911))

    first = bytearray(rec(0, "TopicAB", "kkkk"))
    first[first.index(b"TopicAB") + 5] = 0xFF  # not a UTF-8 byte
    at = first.index(b"kkkk")
    first[at + 1:at + 3] = b"\xc3("  # a lead byte without its continuation
    second = rec(len(first), "TopicAB", "ok")
    out = commitlog.decode_segment(bytes(first) + second, segment_start=0, segment="s")
    rows = out.table.to_pylist()
    assert [(r["topic"], r["keys"], r["properties"]) for r in rows] == [
        ("Topic\ufffdB", "k\ufffd(k", [("KEYS", "k\ufffd(k"), ("TAGS", "t")]),
        ("TopicAB", "ok", [("KEYS", "ok"), ("TAGS", "t")])]
    assert out.problems == []
    out.table.validate(full=True)


def test_a_body_whose_crc_does_not_match_is_dropped_with_a_problem() -> None:
    """BODYCRC = CRC32(body) & 0x7FFFFFFF (the broker checks it on recovery, for every record); a corrupted body is
    not decoded, the record's header is kept."""
    rec = bytearray(commitlog_encode.encode_message(
        topic=commitlog.TRACE_TOPIC, queue_id=0, queue_offset=0, physical_offset=0, body=b"SubBefore\x011\x02",
        properties={"UNIQ_KEY": "AB"}, born_ts_ms=1, store_ts_ms=2, born_host=("10.0.0.1", 1),
        store_host=("10.0.0.2", 10911)))
    good = commitlog.decode_segment(bytes(rec), segment_start=0, segment="s")
    rec[rec.index(b"SubBefore")] = ord("X")
    bad = commitlog.decode_segment(bytes(rec), segment_start=0, segment="s")
    assert (good.table.column("body").to_pylist(), good.problems) == ([b"SubBefore\x011\x02"], [])
    crc = struct.unpack(">i", bytes(rec[8:12]))[0]
    assert bad.table.column("body").to_pylist() == [None]
    assert [p.reason for p in bad.problems] == [
        f"record at byte 0: body CRC {zlib.crc32(b'XubBefore' + bytes([1]) + b'1' + bytes([2])) & 0x7FFFFFFF} "
        f"does not match the stored {crc} (body or CRC damaged in this copy); header kept, body not used"]


def test_every_body_of_the_real_segments_matches_its_crc() -> None:
    for seg in SEGMENTS:
        data = seg.read_bytes()
        topics = frozenset(commitlog.decode_segment(data, segment_start=int(seg.name), segment=seg.name,
                                                    body_topics=frozenset()).table.column("topic").to_pylist())
        out = commitlog.decode_segment(data, segment_start=int(seg.name), segment=seg.name, body_topics=topics)
        assert [p for p in out.problems if "CRC" in p.reason] == []
        assert out.table.column("body").null_count == 0
