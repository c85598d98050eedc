"""INNER_BATCH records (BatchCQ topics): written as the broker writes them, decoded by the commitlog decoder, unwrapped
into their inner messages; damaged inner data is a problem that costs only what it damaged."""
from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from jobs.formats import batch_consumequeue as bcq
from jobs.formats import commitlog, commitlog_encode
from jobs.formats import inner_batch as ib

TOPIC = "BatchTopic"
HOSTS = dict(born_host=("10.0.0.5", 51000), store_host=("10.0.0.1", 10911))
U = "0A000005C7381B6F4AAC1F2B0000"  # + 4 hex digits: a UNIQ_KEY


def _msgs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"body": f"order-{start + i}".encode(), "uniq_key": f"{U}{start + i:04X}", "keys": f"o{start + i}",
             "tags": "created" if i % 2 == 0 else None, "flag": i, "properties": {"shop": "ü" * (i % 3)}}
            for i in range(n)]


def _segment(records: list[dict[str, Any]]) -> bytes:
    """Records (``encode_message`` keywords without ``physical_offset``) back to back from physical offset 0."""
    out = b""
    for r in records:
        out += commitlog_encode.encode_message(physical_offset=len(out), born_ts_ms=1_700_000_000_000,
                                               store_ts_ms=1_700_000_000_100, **HOSTS, **r)
    return out


def _batch(messages: list[dict[str, Any]], base: int, *, body: bytes | None = None, queue_id: int = 0,
           **props: str) -> dict[str, Any]:
    """An INNER_BATCH record; ``body`` replaces the encoded body (damage), ``props`` override properties."""
    encoded, properties, sys_flag = ib.encode_inner_batch(messages, batch_uniq_key=f"{U}FF{base:02X}",
                                                          queue_base=base)
    properties.update(props)
    return dict(topic=TOPIC, queue_id=queue_id, queue_offset=base, body=encoded if body is None else body,
                properties={k: v for k, v in properties.items() if v is not None}, sys_flag=sys_flag)


def _plain(offset: int, uniq: str = f"{U}AAAA") -> dict[str, Any]:
    return dict(topic="Plain", queue_id=0, queue_offset=offset, body=b"plain",
                properties={"UNIQ_KEY": uniq, "TAGS": "p"})


def _decode(data: bytes, *, bodies: bool = True) -> pa.Table:
    d = commitlog.decode_segment(data, segment_start=0, segment="00000000000000000000",
                                 body_topics=frozenset({TOPIC}) if bodies else frozenset())
    assert d.problems == []
    return d.table


def _rows(table: pa.Table, *columns: str) -> list[tuple[Any, ...]]:
    cols = columns or ("physical_offset", "inner_index", "queue_offset", "uniq_key")
    return list(zip(*(table.column(c).to_pylist() for c in cols)))


def _body(*messages: tuple[bytes, bytes], total: dict[int, int] | None = None) -> bytes:
    """Inner messages from raw (body, properties bytes); ``total`` gives a wrong total size to some of them."""
    out = b""
    for i, (payload, props) in enumerate(messages):
        size = (total or {}).get(i, 20 + len(payload) + 2 + len(props))
        out += struct.pack(">iiiii", size, 0, 0, 0, len(payload)) + payload + struct.pack(">h", len(props)) + props
    return out


# ------------------------------------------------------------------------------------------- encoding


def test_inner_message_bytes_are_encode_message_s() -> None:
    body, props, sys_flag = ib.encode_inner_batch([{"body": b"hi", "uniq_key": "AB"}], batch_uniq_key="B",
                                                  queue_base=7, hash_order=False)
    # [int total][int magic 0][int bodyCRC 0][int flag][int bodyLen][body][short propLen][props]
    assert body == (bytes.fromhex("0000002e" "00000000" "00000000" "00000000" "00000002") + b"hi"
                    + bytes.fromhex("0016") + b"WAIT\x01true\x02UNIQ_KEY\x01AB\x02")
    assert sys_flag == 0xC0  # INNER_BATCH 0x80 | NEED_UNWRAP 0x40
    assert props == {"WAIT": "true", "UNIQ_KEY": "B", "CLUSTER": "DefaultCluster", "INNER_NUM": "1",
                     "INNER_BASE": "7"}


def test_properties_in_java_hashmap_order() -> None:
    """The orders java.util.HashMap iterates these keys in (checked with JDK 17): the inner message's map is a
    ``new HashMap<>()`` (16 buckets, 32 past 12 keys), the record's the broker's ``new HashMap<>(128)``."""
    body, props, _ = ib.encode_inner_batch(
        [{"body": b"x", "uniq_key": "u", "keys": "k", "tags": "t",
          "properties": {f"p{7 * i}x": "v" for i in range(15)}},
         {"body": b"y", "uniq_key": "u", "tags": "t", "properties": {"a": "1", "zz": "2"}}],
        batch_uniq_key="B", queue_base=0, namespace="ns1", cluster="c1", multi_tags=True)
    assert list(props) == ["INNER_BASE", "INSTANCE_ID", "UNIQ_KEY", "CLUSTER", "WAIT", "INNER_NUM"]
    names = [[k for k, _ in m["properties"].items()] for m in bcq.inner_messages(body)]
    assert names == [["p91x", "p7x", "p49x", "p28x", "p56x", "p35x", "p14x", "KEYS", "p63x", "p0x", "p42x", "p21x",
                      "p98x", "p77x", "p70x", "UNIQ_KEY", "WAIT", "TAGS", "p84x"],
                     ["zz", "a", "UNIQ_KEY", "WAIT", "TAGS"]]
    assert ib.encode_inner_batch([{"body": b"x", "uniq_key": "u"}], batch_uniq_key="B", queue_base=0,
                                 multi_tags=True)[2] == 0xC2


def test_encoder_refuses_what_the_producer_refuses() -> None:
    with pytest.raises(ValueError, match="UNIQ_KEY"):
        ib.encode_inner_batch([{"body": b"x"}], batch_uniq_key="B", queue_base=0)
    with pytest.raises(ValueError, match="empty body"):
        ib.encode_inner_batch([{"body": b"", "uniq_key": "u"}], batch_uniq_key="B", queue_base=0)
    with pytest.raises(ValueError, match="batch's UNIQ_KEY"):
        ib.encode_inner_batch([{"body": b"x", "uniq_key": "u"}], batch_uniq_key="", queue_base=0)
    with pytest.raises(ValueError, match="Short.MAX_VALUE"):
        ib.encode_inner_batch([{"body": b"x", "uniq_key": "u", "properties": {"big": "v" * 40000}}],
                              batch_uniq_key="B", queue_base=0)


# ------------------------------------------------------------------------------------------- round trip


def test_round_trip_through_the_commitlog_decoder() -> None:
    first, second = _msgs(3), _msgs(2, start=3)
    data = _segment([_batch(first, 0), _plain(0), _batch(second, 3)])
    records = _decode(data)
    # the decoder sees one record per batch: the batch's own UNIQ_KEY, INNER_* properties, QUEUEOFFSET = base
    assert _rows(records, "queue_offset", "uniq_key", "sys_flag", "keys", "tags") == [
        (0, f"{U}FF00", 0xC0, None, None), (0, f"{U}AAAA", 0, None, "p"), (3, f"{U}FF03", 0xC0, None, None)]
    assert {k: v for k, v in records.column("properties")[0].as_py() if k.startswith("INNER")} == {
        "INNER_NUM": "3", "INNER_BASE": "0"}
    inner, problems = ib.unwrap(records, keep_body=True)
    assert problems == []
    phys = records.column("physical_offset").to_pylist()
    expected = [(phys[0] if q < 3 else phys[2], q if q < 3 else q - 3, q, m["uniq_key"], m["keys"], m["tags"],
                 m["flag"], m["body"], TOPIC, 0) for q, m in enumerate(first + second)]
    assert _rows(inner, "physical_offset", "inner_index", "queue_offset", "uniq_key", "keys", "tags", "flag", "body",
                 "topic", "queue_id") == expected
    assert sorted(inner.column("properties")[4].as_py()) == [("KEYS", "o4"), ("UNIQ_KEY", f"{U}0004"),
                                                             ("WAIT", "true"), ("shop", "ü")]
    assert inner.column("store_host").to_pylist() == ["10.0.0.1:10911"] * 5
    assert inner.column("segment").to_pylist() == ["00000000000000000000"] * 5
    assert inner.schema.field("properties").type == pa.map_(pa.string(), pa.string())
    # the same messages as the batch consume queue module's reader gives
    for i, m in enumerate(bcq.inner_messages(records.column("body")[0].as_py())):
        assert (m["flag"], m["body"], m["properties"]) == (
            inner.column("flag")[i].as_py(), inner.column("body")[i].as_py(),
            dict(inner.column("properties")[i].as_py()))
    # without keep_body, no body column; the plain record never appears
    assert "body" not in ib.unwrap(records)[0].column_names


def test_records_without_inner_batch_pass_through_untouched() -> None:
    records = _decode(_segment([_plain(0), _plain(1, f"{U}BBBB")]))
    inner, problems = ib.unwrap(records, keep_body=True)
    assert (inner.num_rows, problems) == (0, [])
    assert inner.schema.names[:8] == ["physical_offset", "inner_index", "queue_offset", "uniq_key", "keys", "tags",
                                      "properties", "flag"]
    mixed = _decode(_segment([_plain(0), _batch(_msgs(2), 0), _plain(1, f"{U}BBBB")]))
    assert _rows(ib.unwrap(mixed)[0], "inner_index", "queue_offset") == [(0, 0), (1, 1)]


def test_is_inner_batch_is_vectorised() -> None:
    flags = np.array([0, 0x80, 0xC0, 0x40, 0x1C2, -1], np.int32)
    assert ib.is_inner_batch(flags).tolist() == [False, True, True, False, True, True]
    assert ib.is_inner_batch(pa.array([0xC0, None, 0], pa.int32())).tolist() == [True, False, False]
    assert ib.is_inner_batch(0xC0) is True and ib.is_inner_batch(0x40) is False
    assert ib.needs_unwrap(flags).tolist() == [False, False, True, False, True, True]


def test_properties_follow_string2messageProperties() -> None:
    """A pair without a value, a name, or \\x01 is skipped; a name given twice: the map keeps both pairs (as the
    commitlog decoder does), the column the last (as Java's HashMap); the last pair may lack its \\x02."""
    props = b"UNIQ_KEY\x01first\x02\x01novalue\x02E\x01\x02NOSEP\x02KEYS\x01a\x01b\x02UNIQ_KEY\x01last\x02TAGS\x01t"
    body = _body((b"payload", props), (b"", b""))
    inner, problems = ib.unwrap(_decode(_segment([_batch(_msgs(2), 5, body=body)])), keep_body=True)
    assert problems == []
    assert _rows(inner, "queue_offset", "uniq_key", "keys", "tags", "body") == [
        (5, "last", "a\x01b", "t", b"payload"), (6, None, None, None, b"")]
    assert inner.column("properties").to_pylist() == [
        [("UNIQ_KEY", "first"), ("KEYS", "a\x01b"), ("UNIQ_KEY", "last"), ("TAGS", "t")], []]


def test_properties_that_are_not_utf8_read_as_java_reads_them() -> None:
    body = _body((b"x", b"UNIQ_KEY\x01u1\x02k\x01\xff\xfe\x02"), (b"y", b"UNIQ_KEY\x01u2\x02"))
    inner, problems = ib.unwrap(_decode(_segment([_batch(_msgs(2), 0, body=body)])))
    assert problems == []
    assert inner.column("properties").to_pylist() == [[("UNIQ_KEY", "u1"), ("k", "\ufffd\ufffd")],
                                                      [("UNIQ_KEY", "u2")]]


# ------------------------------------------------------------------------------------------- damage


def _damaged(body: bytes) -> tuple[pa.Table, list, pa.Table]:
    """A damaged batch (3 inner messages declared) between two good ones; unwrapped."""
    data = _segment([_batch(_msgs(2), 0), _batch(_msgs(3), 2, body=body), _batch(_msgs(2, 5), 5)])
    records = _decode(data)
    inner, problems = ib.unwrap(records)
    return inner, problems, records


def test_bad_inner_length_is_a_problem_and_the_rest_unwraps() -> None:
    good = ib.encode_inner_batch(_msgs(3), batch_uniq_key="B", queue_base=2)[0]
    at = struct.unpack(">i", good[:4])[0]  # inner message 1 starts after message 0's total size
    bad = good[:at + 16] + struct.pack(">i", 1 << 20) + good[at + 20:]  # message 1's body length runs past the end
    inner, problems, records = _damaged(bad)
    phys = records.column("physical_offset").to_pylist()
    assert _rows(inner, "physical_offset", "inner_index", "queue_offset") == [
        (phys[0], 0, 0), (phys[0], 1, 1), (phys[1], 0, 2), (phys[2], 0, 5), (phys[2], 1, 6)]
    assert [(p.source_path, p.position) for p in problems] == [("00000000000000000000", phys[1])]
    assert problems[0].reason == (
        f"INNER_BATCH record at physical offset {phys[1]}: inner message 1 (queue offset 3) at byte {at} of its "
        f"{len(bad)}-byte body: body length 1048576 runs past the end; inner messages 1.. not unwrapped")
    negative = good[:at + 16] + struct.pack(">i", -3) + good[at + 20:]
    assert "body length -3 runs past the end" in _damaged(negative)[1][0].reason


def test_truncated_body_and_wrong_sizes_are_problems() -> None:
    good = ib.encode_inner_batch(_msgs(3), batch_uniq_key="B", queue_base=2)[0]
    cut = good[:-5]  # the last message's properties run past the end
    inner, problems, _ = _damaged(cut)
    assert _rows(inner, "queue_offset") == [(0,), (1,), (2,), (3,), (5,), (6,)]
    assert len(problems) == 1 and "inner message 2 (queue offset 4)" in problems[0].reason
    assert "properties length" in problems[0].reason and "runs past the end" in problems[0].reason
    # a header cut short
    inner, problems, _ = _damaged(good + b"\x00" * 10)
    assert len(problems) == 1 and "inner message 3 (queue offset 5)" in problems[0].reason
    assert "10 bytes left, a header needs 22" in problems[0].reason
    assert _rows(inner, "queue_offset") == [(0,), (1,), (2,), (3,), (4,), (5,), (6,)]
    # a total size that is not its fields' (countInnerMsgNum and decodeMessages would disagree)
    wrong = _body((b"a", b"UNIQ_KEY\x01x\x02"), (b"b", b"UNIQ_KEY\x01y\x02"), (b"c", b"UNIQ_KEY\x01z\x02"),
                  total={0: 99})
    inner, problems, _ = _damaged(wrong)
    assert "inner message 0 (queue offset 2) at byte 0" in problems[0].reason
    assert "total size 99 but its fields take 34 bytes" in problems[0].reason
    assert _rows(inner, "queue_offset") == [(0,), (1,), (5,), (6,)]


def test_inner_num_disagreeing_with_the_body_is_a_problem() -> None:
    two = _segment([_batch(_msgs(2), 0, INNER_NUM="3"), _batch(_msgs(4), 3, INNER_NUM="2")])
    records = _decode(two)
    phys = records.column("physical_offset").to_pylist()
    inner, problems = ib.unwrap(records)
    # fewer messages than INNER_NUM: all of them; more: only those inside the record's queue span
    assert _rows(inner, "physical_offset", "queue_offset") == [(phys[0], 0), (phys[0], 1), (phys[1], 3),
                                                               (phys[1], 4)]
    assert [p.reason for p in problems] == [
        f"INNER_BATCH record at physical offset {phys[0]}: INNER_NUM 3 but the body holds 2 inner messages; "
        "queue offsets 2..2 hold no message",
        f"INNER_BATCH record at physical offset {phys[1]}: INNER_NUM 2 but the body holds 4 inner messages; "
        "inner messages 2.. are past the record's queue offsets, not unwrapped"]


def test_unknown_queue_span_unwraps_nothing_of_that_record() -> None:
    data = _segment([_batch(_msgs(2), 0, INNER_NUM=None), _batch(_msgs(2), 2, INNER_NUM="two"),
                     _batch(_msgs(2), 4, INNER_BASE="9"), _batch(_msgs(2), 6, INNER_NUM="0"),
                     _batch(_msgs(2), 8)])
    records = _decode(data)
    inner, problems = ib.unwrap(records, segment_start=0)
    assert _rows(inner, "queue_offset") == [(8,), (9,)]
    reasons = [p.reason.split(": ", 1)[1] for p in problems]
    assert reasons == [
        "INNER_NUM missing: the queue offsets of its inner messages are unknown; none unwrapped",
        "INNER_NUM 0x74776f not a number: the queue offsets of its inner messages are unknown; none unwrapped",
        "INNER_BASE 9 but queue offset 4: the queue offsets of its inner messages are unknown; none unwrapped",
        "INNER_NUM 0 below 1: the queue offsets of its inner messages are unknown; none unwrapped"]
    assert [p.position for p in problems] == records.column("physical_offset").to_pylist()[:4]
    assert problems[0].reason.startswith("INNER_BATCH record at byte 0: ")


def test_the_decoder_keeps_the_body_of_every_inner_batch_record_only() -> None:
    """Its inner messages are the messages a consumer sees: the body is kept whatever topics were asked for."""
    records = _decode(_segment([_plain(0), _batch(_msgs(2), 0)]), bodies=False)
    assert [b is not None for b in records.column("body").to_pylist()] == [False, True]
    assert _rows(ib.unwrap(records)[0], "queue_offset", "keys") == [(0, "o0"), (1, "o1")]


def test_a_record_decoded_without_its_body_is_a_problem() -> None:
    records = _decode(_segment([_plain(0), _batch(_msgs(2), 0)]))
    at = records.schema.get_field_index("body")  # as when its body CRC did not match
    records = records.set_column(at, "body", pa.nulls(records.num_rows, records.schema.field("body").type))
    inner, problems = ib.unwrap(records)
    assert inner.num_rows == 0
    assert len(problems) == 1 and "no body" in problems[0].reason
    assert problems[0].position == records.column("physical_offset")[1].as_py()


def test_inner_batch_without_need_unwrap_is_unwrapped_and_reported() -> None:
    rec = _batch(_msgs(2), 0)
    rec["sys_flag"] = 0x80
    inner, problems = ib.unwrap(_decode(_segment([rec])))
    assert _rows(inner, "queue_offset") == [(0,), (1,)]
    assert len(problems) == 1 and "INNER_BATCH without NEED_UNWRAP" in problems[0].reason


def test_missing_columns_are_a_usage_error() -> None:
    with pytest.raises(ValueError, match="missing"):
        ib.unwrap(_decode(_segment([_plain(0)])).drop_columns(["body"]))


def test_many_inner_messages_unwrap_in_bulk() -> None:
    messages = _msgs(50)
    body, props, sys_flag = ib.encode_inner_batch(messages, batch_uniq_key="B", queue_base=0)
    parts, phys = [], 0
    for r in range(4000):
        props = dict(props, INNER_BASE=str(50 * r))
        rec = commitlog_encode.encode_message(topic=TOPIC, queue_id=0, queue_offset=50 * r, physical_offset=phys,
                                              body=body, properties=props, born_ts_ms=1, store_ts_ms=2,
                                              sys_flag=sys_flag, **HOSTS)
        parts.append(rec)
        phys += len(rec)
    records = _decode(b"".join(parts))
    ib.unwrap(records.slice(0, 2))  # compiled (or loaded from the cache) before the clock starts
    t = time.perf_counter()
    inner, problems = ib.unwrap(records, keep_body=True)
    elapsed = time.perf_counter() - t
    assert problems == [] and inner.num_rows == 200_000
    assert inner.column("queue_offset").to_numpy().tolist() == list(range(200_000))
    assert inner.column("uniq_key")[123_456].as_py() == messages[123_456 % 50]["uniq_key"]
    assert elapsed < 5, elapsed


def test_the_simulator_s_writer_stores_a_batch_the_batch_consume_queue_indexes(tmp_path: Any) -> None:
    """``inner_batch_fields`` -> ``CommitLogWriter.append`` -> ``decode_file`` -> ``unwrap``: the (queue offset,
    physical offset) pairs are those the batch consume queue unit for the record gives."""
    writer = commitlog_encode.CommitLogWriter(str(tmp_path), segment_size=1 << 16)
    writer.append(**_plain(0), born_ts_ms=1, store_ts_ms=2, **HOSTS)
    messages = _msgs(4)
    phys, size = writer.append(**ib.inner_batch_fields(messages, topic=TOPIC, queue_id=1, queue_base=40,
                                                       batch_uniq_key=f"{U}FFFF", born_ts_ms=1, store_ts_ms=2,
                                                       cluster="c1", **HOSTS))
    writer.close()
    (decoded,) = commitlog.decode_file(str(tmp_path / f"{0:020d}"), body_topics=frozenset({TOPIC}))
    assert decoded.problems == []
    inner, problems = ib.unwrap(decoded.table, segment_start=0)
    assert problems == []
    unit = bcq.decode_bcq(bcq.encode_unit(phys, size, 0, 2, 40, len(messages)), file_start_byte=0)
    queue_offsets, physical = bcq.offsets_of(unit)
    assert _rows(inner, "queue_offset", "physical_offset") == list(zip(queue_offsets.tolist(), physical.tolist()))
    assert inner.column("uniq_key").to_pylist() == [m["uniq_key"] for m in messages]
    assert set(inner.column("queue_id").to_pylist()) == {1}
