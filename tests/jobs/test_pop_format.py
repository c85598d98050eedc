"""POP checkpoint and ack bodies (jobs/formats/pop.py): the exact bytes fastjson 1.2.83 writes, decoding with problems
for bad bodies, covered offsets, retry topic ownership, and the properties of the records CK/ack/revive leave."""
from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from conftest import REAL
from jobs.formats import commitlog, pop
from jobs.formats.commitlog_encode import properties_to_string
from jobs.problems import Problem

ROCKETMQ_COMMIT = "8fc57f1468d182eea11c01e089c0250d647dc5f3"  # apache/rocketmq develop, 2025-09-19

CK = dict(topic="TopicA", queue_id=2, start_offset=100, consumer_group="GID_pop", pop_time=1700000000000,
          invisible_time=60000, num=3, deltas=[0, 1, 3], broker_name="broker-a")
# PopCheckPoint fields sorted by JSON name, getter-only reviveTime = pt + it, null rp skipped
CK_BODY = (b'{"bm":0,"bn":"broker-a","c":"GID_pop","d":[0,1,3],"it":60000,"n":3,"pt":1700000000000,"q":2,'
           b'"reviveTime":1700000060000,"ro":0,"so":100,"t":"TopicA"}')
ACK = dict(topic="TopicA", queue_id=2, start_offset=100, consumer_group="GID_pop", pop_time=1700000000000,
           ack_offset=101, broker_name="broker-a")
ACK_BODY = b'{"ao":101,"bn":"broker-a","c":"GID_pop","pt":1700000000000,"q":2,"so":100,"t":"TopicA"}'
BACK = dict(ACK, ack_offsets=[100, 103])
del BACK["ack_offset"]
# AckMessageProcessor.appendAck: ackOffset -1 for a batch (l.228, 275)
BACK_BODY = b'{"ao":-1,"aol":[100,103],"bn":"broker-a","c":"GID_pop","pt":1700000000000,"q":2,"so":100,"t":"TopicA"}'


def _decode(tags: list, bodies: list, **kw):  # type: ignore[no-untyped-def]
    return pop.decode_pop_bodies(tags, bodies, **kw)


# ----------------------------------------------------------------------------------------------- bodies

def test_checkpoint_body_exact_bytes_and_round_trip() -> None:
    assert pop.encode_checkpoint(CK) == CK_BODY
    cks, acks, problems = _decode(["ck"], [CK_BODY])
    assert problems == [] and acks.num_rows == 0
    row = cks.to_pylist()[0]
    assert row == {"record": 0, "topic": "TopicA", "queue_id": 2, "start_offset": 100, "consumer_group": "GID_pop",
                   "pop_time": 1700000000000, "broker_name": "broker-a", "invisible_time": 60000, "bitmap": 0,
                   "num": 3, "revive_offset": 0, "deltas": [0, 1, 3], "reput_times": None,
                   "revive_time": 1700000060000}
    assert pop.encode_checkpoint(row) == CK_BODY
    assert cks.schema == pop.CHECKPOINT_SCHEMA


def test_old_and_reput_checkpoints() -> None:
    """A CK without d and bn (RIP-19's first layout) and a rePutCK one (n=1, d=[0], rp)."""
    old = dict(topic="T", queue_id=0, start_offset=7, consumer_group="G", pop_time=1600000000000,
               invisible_time=30000, num=2)
    old_body = (b'{"bm":0,"c":"G","it":30000,"n":2,"pt":1600000000000,"q":0,"reviveTime":1600000030000,"ro":0,'
                b'"so":7,"t":"T"}')
    reput = dict(topic="%RETRY%G_T", queue_id=0, start_offset=101, consumer_group="G", pop_time=1700000000000,
                 invisible_time=70000, num=1, deltas=[0], broker_name="b", reput_times="1")
    reput_body = (b'{"bm":0,"bn":"b","c":"G","d":[0],"it":70000,"n":1,"pt":1700000000000,"q":0,'
                  b'"reviveTime":1700000070000,"ro":0,"rp":"1","so":101,"t":"%RETRY%G_T"}')
    assert pop.encode_checkpoint(old) == old_body
    assert pop.encode_checkpoint(reput) == reput_body
    cks, _, problems = _decode(["ck", "ck"], [old_body, reput_body])
    assert problems == []
    assert [(r["deltas"], r["broker_name"], r["reput_times"], r["revive_time"]) for r in cks.to_pylist()] == [
        (None, None, None, 1600000030000), ([0], "b", "1", 1700000070000)]
    assert [pop.encode_checkpoint(r) for r in cks.to_pylist()] == [old_body, reput_body]


def test_ack_and_batch_ack_exact_bytes_and_round_trip() -> None:
    assert pop.encode_ack(ACK) == ACK_BODY
    assert pop.encode_batch_ack(BACK) == BACK_BODY
    # PopBufferMergeService.putBatchAckToStore: ackOffset left 0, no brokerName
    buffered = dict(BACK, ack_offset=0, broker_name=None)
    assert pop.encode_batch_ack(buffered) == (
        b'{"ao":0,"aol":[100,103],"c":"GID_pop","pt":1700000000000,"q":2,"so":100,"t":"TopicA"}')
    cks, acks, problems = _decode(["ack", "bAck", "bAck"], [ACK_BODY, BACK_BODY, pop.encode_batch_ack(buffered)],
                                  default_broker_name="broker-b")
    assert problems == [] and cks.num_rows == 0
    assert acks.schema == pop.ACK_SCHEMA
    assert acks.to_pylist() == [
        {"record": 0, "topic": "TopicA", "queue_id": 2, "start_offset": 100, "consumer_group": "GID_pop",
         "pop_time": 1700000000000, "broker_name": "broker-a", "ack_offsets": [101], "kind": "ack"},
        {"record": 1, "topic": "TopicA", "queue_id": 2, "start_offset": 100, "consumer_group": "GID_pop",
         "pop_time": 1700000000000, "broker_name": "broker-a", "ack_offsets": [100, 103], "kind": "bAck"},
        # no bn: the reviving broker's own name (PopReviveService l.407-408)
        {"record": 2, "topic": "TopicA", "queue_id": 2, "start_offset": 100, "consumer_group": "GID_pop",
         "pop_time": 1700000000000, "broker_name": "broker-b", "ack_offsets": [100, 103], "kind": "bAck"}]


def test_rocketmq_test_strings_with_long_names_decode() -> None:
    """The JSON strings in RocketMQ's own tests (AckMsg/BatchAckMsg ``alternateNames``, the 5.0.x layout)."""
    # store/src/test/java/org/apache/rocketmq/store/pop/AckMsgTest.java l.28-29 @ ROCKETMQ_COMMIT
    ack_msg_test = ("{\"ackOffset\":100,\"brokerName\":\"brokerName\",\"consumerGroup\":\"group\","
                    "\"popTime\":1670212915531,\"queueId\":3,\"startOffset\":200,\"topic\":\"topic\"}")
    # store/src/test/java/org/apache/rocketmq/store/pop/BatchAckMsgTest.java l.31-32 @ ROCKETMQ_COMMIT
    batch_ack_msg_test = ("{\"ackOffsetList\":[100, 101],\"consumerGroup\":\"group\","
                          "\"popTime\":1679454922000,\"queueId\":3,\"startOffset\":200,\"topic\":\"topic\"}")
    _, acks, problems = _decode(["ack", "bAck"], [ack_msg_test.encode(), batch_ack_msg_test.encode()])
    assert problems == []
    assert [(r["topic"], r["queue_id"], r["start_offset"], r["consumer_group"], r["pop_time"], r["broker_name"],
             r["ack_offsets"]) for r in acks.to_pylist()] == [
        ("topic", 3, 200, "group", 1670212915531, "brokerName", [100]),
        ("topic", 3, 200, "group", 1679454922000, None, [100, 101])]
    assert pop.encode_ack(dict(topic="topic", queue_id=3, start_offset=200, consumer_group="group",
                               pop_time=1670212915531, ack_offset=100, broker_name="brokerName"),
                          long_names=True) == ack_msg_test.encode()


def test_broker_logged_5_0_ack_body() -> None:
    """An ack body a 4.9/5.0 broker logged (apache/rocketmq issue #3443, PopReviveService "find ack ... raw"):
    long names, sorted, no brokerName."""
    logged = (b'{"ackOffset":283798,"consumerGroup":"pop-consumer-1","popTime":1635476075611,"queueId":0,'
              b'"startOffset":283791,"topic":"%RETRY%pop-consumer-1_-topic"}')
    _, acks, problems = _decode(["ack"], [logged])
    assert problems == []
    row = acks.to_pylist()[0]
    assert (row["topic"], row["start_offset"], row["ack_offsets"], row["broker_name"]) == (
        "%RETRY%pop-consumer-1_-topic", 283791, [283798], None)
    row["ack_offset"] = row["ack_offsets"][0]
    assert pop.encode_ack(row, long_names=True) == logged


def test_fastjson_string_escapes() -> None:
    """SerializeWriter: \\" \\\\ \\n with a backslash, other controls and U+007F-U+009F as uppercase \\u00XX,
    U+2028; other characters (é) as UTF-8."""
    ck = dict(CK, broker_name='b"\\\n\x01\x7f\u2028\u00e9')
    body = pop.encode_checkpoint(ck)
    assert b'"bn":"b\\"\\\\\\n\\u0001\\u007F\\u2028\xc3\xa9"' in body
    cks, _, problems = _decode(["ck"], [body])
    assert problems == [] and cks.column("broker_name").to_pylist() == ['b"\\\n\x01\x7f\u2028\u00e9']


def test_bad_bodies_are_problems_and_the_rest_decode() -> None:
    good_ck, good_ack, good_back = CK_BODY, ACK_BODY, BACK_BODY
    bodies = [
        (b"ck", good_ck),
        ("ack", good_ack),
        ("ck", b'{"bm":0,"c":"G"'),
        ("ck", b"\xff\xfe{}"),
        ("ck", CK_BODY.replace(b',"so":100', b"")),
        ("ack", ACK_BODY.replace(b'"q":2', b'"q":"2"')),
        ("ck", CK_BODY.replace(b'"n":3', b'"n":33')),
        ("ck", CK_BODY.replace(b'"d":[0,1,3]', b'"d":[0,1]')),
        ("bAck", ACK_BODY),
        ("ack", b"[1]"),
        ("ck", CK_BODY.replace(b'"so":100', b'"so":NaN')),
        ("ck", None),
        ("ack", ACK_BODY.replace(b'"ao":101', b'"ao":true')),
        ("SOME_TAG", b"not a pop record"),
        ("bAck", good_back),
        ("ck", CK_BODY.replace(b'"t":"TopicA"', b'"t":null')),
        ("ck", CK_BODY.replace(b'"so":100', b'"so":1e3')),
        ("ck", CK_BODY.replace(b'"so":100', b'"so":99999999999999999999')),
        ("ck", CK_BODY.replace(b'"pt":1700000000000', b'"pt":4611686018427387904').replace(
            b'"it":60000', b'"it":4611686018427387904')),
        ("ck", CK_BODY.replace(b'"d":[0,1,3]', b'"d":[0,-1,3]')),
        ("ck", CK_BODY.replace(b'"c":"GID_pop"', b'"c":{"x":[1]}')),
        ("ack", ACK_BODY.replace(b'"so":100', b"so:{{'a':1}:2}")),  # fastjson's lenient syntax: an object key
        ("ck", good_ck),
    ]
    tags = [t.decode() if isinstance(t, bytes) else t for t, _ in bodies]
    positions = np.array([1000 + 200 * i for i in range(len(bodies))])
    cks, acks, problems = pop.decode_pop_bodies(pa.array(tags), pa.array([b for _, b in bodies], pa.binary()),
                                                positions=positions, source_path="commitlog/00000000000000000000")
    assert cks.column("record").to_pylist() == [0, 22]
    assert acks.column("record").to_pylist() == [1, 14]
    assert acks.column("kind").to_pylist() == ["ack", "bAck"]

    def p(i: int, tag: str, what: str) -> Problem:
        return Problem("commitlog/00000000000000000000", 1000 + 200 * i,
                       f"POP {tag} message {i} at byte {1000 + 200 * i}: {what}; skipped")

    assert problems == [
        p(2, "ck", "body is not JSON (0x7b22626d223a302c...)"),
        p(3, "ck", "body is not UTF-8 (invalid start byte at 0)"),
        p(4, "ck", "'so' missing"),
        p(5, "ack", "'q' is a string (0x32), not an integer"),
        p(6, "ck", "'n' out of range (0x3333)"),
        p(7, "ck", "'d' has 2 offsets, 'n' is 3"),
        p(8, "bAck", "'aol' missing"),
        p(9, "ack", "body is not a JSON object (0x5b315d)"),
        p(10, "ck", "body is not JSON (0x7b22626d223a302c...)"),
        p(11, "ck", "no body"),
        p(12, "ack", "'ao' is a boolean, not an integer"),
        p(15, "ck", "'t' is null"),
        p(16, "ck", "'so' is a decimal number (0x313030302e30), not an integer"),
        p(17, "ck", "'so' out of range (0x3939393939393939...)"),
        p(18, "ck", "'pt' + 'it' overflows a long"),
        p(19, "ck", "'d' holds a value out of range (0x2d31)"),
        p(20, "ck", "'c' is an object, not a string"),
        p(21, "ack", "'so' is an object, not an integer"),
    ]


def test_extra_columns_follow_their_record() -> None:
    extra = pa.table({"store_ts": pa.array([10, 11, 12, 13], pa.int64()),
                      "physical_offset": pa.array([0, 300, 600, 900], pa.int64())})
    cks, acks, problems = _decode(["ck", "x", "ack", "ck"], [CK_BODY, b"", ACK_BODY, b"{}"], extra=extra)
    assert len(problems) == 1 and problems[0].position == 3
    assert cks.select(["record", "store_ts", "physical_offset"]).to_pylist() == [
        {"record": 0, "store_ts": 10, "physical_offset": 0}]
    assert acks.select(["record", "store_ts", "physical_offset"]).to_pylist() == [
        {"record": 2, "store_ts": 12, "physical_offset": 600}]
    with pytest.raises(ValueError, match="clashes"):
        _decode(["ck"], [CK_BODY], extra=pa.table({"topic": ["x"]}))


def test_empty_input() -> None:
    cks, acks, problems = _decode([], [])
    assert (cks.num_rows, acks.num_rows, problems) == (0, 0, [])
    assert cks.schema == pop.CHECKPOINT_SCHEMA and acks.schema == pop.ACK_SCHEMA


def test_ten_thousand_bodies_decode_fast() -> None:
    bodies, tags = [], []
    for i in range(10_000):
        if i % 5 == 4:
            tags.append("ack")
            bodies.append(pop.encode_ack(dict(ACK, start_offset=i * 32, ack_offset=i * 32 + 1)))
        else:
            tags.append("ck")
            bodies.append(pop.encode_checkpoint(dict(CK, start_offset=i * 32, num=32, deltas=list(range(32)))))
    arr = pa.array(bodies, pa.binary())
    t0 = time.perf_counter()
    cks, acks, problems = pop.decode_pop_bodies(pa.array(tags), arr)
    elapsed = time.perf_counter() - t0
    print(f"decode_pop_bodies: 10,000 bodies in {elapsed * 1000:.1f} ms")
    assert (cks.num_rows, acks.num_rows, problems) == (8000, 2000, [])
    assert cks.column("start_offset").to_pylist()[:3] == [0, 32, 64]
    offsets = pop.checkpoint_offsets(cks)
    assert offsets.num_rows == 8000 * 32


# ---------------------------------------------------------------------------------------- covered offsets

def test_covered_offsets_and_bitmap() -> None:
    assert pop.covered_offsets(100, 3, [0, 1, 3]) == [100, 101, 103]
    assert pop.covered_offsets(100, 3, None) == [100, 101, 102]
    assert pop.covered_offsets(100, 3, []) == [100, 101, 102]  # an empty d is the old layout (ackOffsetByIndex)
    assert pop.acked_in_bitmap(0b101, 3) == [0, 2]
    assert pop.acked_in_bitmap(0b1000, 3) == []
    assert pop.acked_in_bitmap(-(1 << 31) | 1, 32) == [0, 31]  # bit 31 is the int's sign


def test_checkpoint_offsets_in_bulk() -> None:
    bodies = [CK_BODY, pop.encode_checkpoint(dict(CK, deltas=None, num=2, start_offset=7)),
              pop.encode_checkpoint(dict(CK, deltas=[], num=1, start_offset=50))]
    cks, _, _ = _decode(["ck", "ack", "ck", "ck"], [bodies[0], ACK_BODY, bodies[1], bodies[2]])
    assert pop.checkpoint_offsets(cks).to_pylist() == [
        {"record": 0, "index": 0, "offset": 100}, {"record": 0, "index": 1, "offset": 101},
        {"record": 0, "index": 2, "offset": 103}, {"record": 2, "index": 0, "offset": 7},
        {"record": 2, "index": 1, "offset": 8}, {"record": 3, "index": 0, "offset": 50}]
    assert pop.checkpoint_offsets(cks.slice(0, 0)).num_rows == 0


# --------------------------------------------------------------------------------------- identities, keys

def test_identity_and_uniq_keys() -> None:
    assert pop.ck_identity("T", 1, 100, "G", 1700000000000, "b") == ("T", 1, 100, "G", 1700000000000, "b")
    assert pop.ck_uniq_key("TopicA", 2, 100, "GID_pop", 1700000000000, "broker-a") == \
        "TopicA@2@100@GID_pop@1700000000000@broker-a@ck"
    assert pop.ck_uniq_key("T", 0, 5, "G", 1, None) == "T@0@5@G@1@null@ck"
    assert pop.ack_uniq_key("TopicA", 2, 101, "GID_pop", 1700000000000, "broker-a") == \
        "TopicA@2@101@GID_pop@1700000000000@broker-a@ack"
    assert pop.ack_uniq_key("TopicA", 2, -1, "GID_pop", 1700000000000, "broker-a") == \
        "TopicA@2@-1@GID_pop@1700000000000@broker-a@ack"
    assert pop.batch_ack_uniq_key("TopicA", 2, [100, 103], "GID_pop", 1700000000000) == \
        "TopicA@2@[100, 103]@GID_pop@1700000000000@bAck"
    assert pop.revive_merge_key("T1", "G", 0, 5, 9, "b") == pop.revive_merge_key("T", "1G", 0, 5, 9, "b") == "T1G059b"


# ------------------------------------------------------------------------------------------- topic names

def test_topic_names() -> None:
    assert pop.revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert pop.is_revive_topic("rmq_sys_REVIVE_LOG_DefaultCluster") and not pop.is_revive_topic("rmq_sys_wheel_timer")
    assert pop.TIMER_TOPIC == "rmq_sys_wheel_timer"
    assert pop.pop_retry_topic("G", "T") == "%RETRY%G_T"
    assert pop.pop_retry_topic("G", "T", v2=True) == "%RETRY%G+T"
    assert pop.is_pop_retry_topic_v2("%RETRY%G+T") and not pop.is_pop_retry_topic_v2("%RETRY%G_T")


def test_retry_topic_ownership_with_ambiguous_v1_names() -> None:
    pairs = [("a", "b_c"), ("a_b", "c"), ("a", "x"), ("g", "t")]
    assert pop.pop_retry_owner("%RETRY%a_b_c", pairs) == [("a", "b_c"), ("a_b", "c")]
    assert pop.pop_retry_owner("%RETRY%a+b_c", pairs) == [("a", "b_c")]
    assert pop.pop_retry_owner("%RETRY%a_b+c", pairs) == [("a_b", "c")]
    assert pop.pop_retry_owner("%RETRY%g_t", pairs) == [("g", "t")]
    assert pop.pop_retry_owner("%RETRY%g", pairs) == []
    assert pop.pop_retry_topics(pairs) == {
        "%RETRY%a_b_c": [("a", "b_c"), ("a_b", "c")], "%RETRY%a+b_c": [("a", "b_c")],
        "%RETRY%a_b+c": [("a_b", "c")], "%RETRY%a_x": [("a", "x")], "%RETRY%a+x": [("a", "x")],
        "%RETRY%g_t": [("g", "t")], "%RETRY%g+t": [("g", "t")]}
    assert pop.pop_retry_split("%RETRY%a_b_c", ["a", "a_b", "z"]) == [("a", "b_c"), ("a_b", "c")]


def test_push_or_pop_retry_topic() -> None:
    groups = ["a", "a_b", "g"]
    assert pop.retry_topic_kind("%RETRY%g", groups) == "push"
    assert pop.retry_topic_kind("%RETRY%g_t", groups) == "pop"
    assert pop.retry_topic_kind("%RETRY%g+t", groups) == "pop"
    assert pop.retry_topic_kind("%RETRY%a_b", groups) == "ambiguous"  # push of a_b, POP of (a, b)
    assert pop.retry_topic_kind("%RETRY%h", groups) == ""
    assert pop.retry_topic_kind("%RETRY%g_", groups) == ""
    assert pop.retry_topic_kind("TopicA", groups) == ""


# ------------------------------------------------------------------------------------------- properties

def test_java_hashmap_order_matches_a_java_written_store() -> None:
    """Every record of a store written by RocketMQ's Java store tests lists its properties in HashMap order."""
    store = REAL / "ericpan-unit-test-store" / "store" / "unit_test_store" / "commitlog"
    seen = 0
    for path in sorted(store.iterdir()):
        for part in commitlog.decode_file(str(path), segment=path.name):
            for props in part.table.column("properties").to_pylist():
                keys = [k for k, _ in props]
                assert keys == pop.java_hashmap_order(keys)
                seen += 1
    assert seen == 179
    assert pop.java_hashmap_order(["TAGS", "TIMER_DELIVER_MS", "UNIQ_KEY", "TIMER_OUT_MS", "REAL_TOPIC",
                                   "REAL_QID"]) == ["REAL_TOPIC", "TIMER_DELIVER_MS", "UNIQ_KEY", "TAGS",
                                                    "TIMER_OUT_MS", "REAL_QID"]
    # worked by hand: "K0".hashCode() = 75 * 31 + 48 = 2373 (bucket 5 of 32), ... "K9" 2382 (14); "K10" = 73642,
    # spread 73642 ^ 1 = 73643 (11), "K11" 73643 ^ 1 = 73642 (10), "K12" 73645 (13); 13 keys make the table 32;
    # ties keep insertion order
    keys = [f"K{i}" for i in range(13)]
    assert pop.java_hashmap_order(keys) == ["K0", "K1", "K2", "K3", "K4", "K5", "K11", "K6", "K10", "K7", "K8",
                                            "K12", "K9"]
    # the table size decides: REAL_QID and TIMER_OUT_MS share bucket 15 of 16 (insertion order) but not of 128
    assert pop.java_hashmap_order(["REAL_QID", "TIMER_OUT_MS"]) == ["REAL_QID", "TIMER_OUT_MS"]
    assert pop.java_hashmap_order(["REAL_QID", "TIMER_OUT_MS"], 128) == ["TIMER_OUT_MS", "REAL_QID"]


REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


def test_ck_message_properties() -> None:
    timer, revived = pop.ck_message_properties(CK, revive_topic=REVIVE, revive_queue_id=3, put_ms=1700000000005)
    key = "TopicA@2@100@GID_pop@1700000000000@broker-a@ck"
    assert (timer.topic, timer.queue_id) == ("rmq_sys_wheel_timer", 0)
    # TIMER_DELIVER_MS = pt + it - 1000; TIMER_OUT_MS: a whole second is moved one precision earlier
    assert list(timer.properties.items()) == [
        ("REAL_TOPIC", REVIVE), ("TIMER_DELIVER_MS", "1700000059000"), ("UNIQ_KEY", key), ("TAGS", "ck"),
        ("TIMER_OUT_MS", "1700000058000"), ("REAL_QID", "3")]
    assert properties_to_string(timer.properties) == (
        f"REAL_TOPIC\x01{REVIVE}\x02TIMER_DELIVER_MS\x011700000059000\x02UNIQ_KEY\x01{key}\x02TAGS\x01ck\x02"
        "TIMER_OUT_MS\x011700000058000\x02REAL_QID\x013\x02")
    assert (revived.topic, revived.queue_id) == (REVIVE, 3)
    assert list(revived.properties.items()) == [
        ("TIMER_OUT_MS", "1700000058000"), ("TIMER_DELIVER_MS", "1700000059000"), ("UNIQ_KEY", key),
        ("TIMER_ENQUEUE_MS", "1700000000000"), ("TAGS", "ck"), ("TIMER_DEQUEUE_MS", "1700000058000"),
        ("REAL_TOPIC", REVIVE), ("REAL_QID", "3")]
    # already due when put: stored in the revive topic as built, no timer properties
    [direct] = pop.ck_message_properties(CK, revive_topic=REVIVE, revive_queue_id=3, put_ms=1700000059000)
    assert (direct.topic, direct.queue_id, list(direct.properties.items())) == (
        REVIVE, 3, [("TIMER_DELIVER_MS", "1700000059000"), ("UNIQ_KEY", key), ("TAGS", "ck")])
    # more than timerMaxDelaySec ahead: rejected
    assert pop.ck_message_properties(dict(CK, invisible_time=4 * 86400_000), revive_topic=REVIVE,
                                     revive_queue_id=3, put_ms=1700000000000) == []
    # due before the wheel took it: TIMER_ENQUEUE_MS is Long.MAX_VALUE
    _, late = pop.ck_message_properties(CK, revive_topic=REVIVE, revive_queue_id=3, put_ms=1700000000005,
                                        enqueue_ms=1700000059000, dequeue_ms=1700000059100)
    assert (late.properties["TIMER_ENQUEUE_MS"], late.properties["TIMER_DEQUEUE_MS"]) == (
        "9223372036854775807", "1700000059100")
    with pytest.raises(ValueError, match="roll"):
        pop.ck_message_properties(dict(CK, invisible_time=2 * 86400_000 + 5000), revive_topic=REVIVE,
                                  revive_queue_id=3, put_ms=1700000000000)


def test_ack_message_properties() -> None:
    timer, revived = pop.ack_message_properties(ACK, invisible_time=60000, revive_topic=REVIVE, revive_queue_id=3,
                                                put_ms=1700000000005)
    key = "TopicA@2@101@GID_pop@1700000000000@broker-a@ack"
    assert list(timer.properties.items()) == [
        ("REAL_TOPIC", REVIVE), ("TIMER_DELIVER_MS", "1700000060000"), ("UNIQ_KEY", key), ("TAGS", "ack"),
        ("TIMER_OUT_MS", "1700000059000"), ("REAL_QID", "3")]
    assert revived.properties["UNIQ_KEY"] == key and revived.queue_id == 3
    timer, _ = pop.ack_message_properties(BACK, invisible_time=60000, revive_topic=REVIVE, revive_queue_id=3,
                                          put_ms=1700000000005, batch=True)
    assert (timer.properties["TAGS"], timer.properties["UNIQ_KEY"]) == (
        "bAck", "TopicA@2@-1@GID_pop@1700000000000@broker-a@ack")
    timer, _ = pop.ack_message_properties(BACK, invisible_time=60000, revive_topic=REVIVE, revive_queue_id=3,
                                          put_ms=1700000000005, batch=True, writer="buffer")
    assert timer.properties["UNIQ_KEY"] == "TopicA@2@[100, 103]@GID_pop@1700000000000@bAck"


def test_revive_copy_properties() -> None:
    original = {"KEYS": "k1", "UNIQ_KEY": "AC110001000018B4AAC2000000000000", "TAGS": "tagA",
                "CLUSTER": "DefaultCluster"}
    copy, times = pop.revive_copy_properties(original, 0, ck_topic="TopicA", consumer_group="GID_pop",
                                             pop_time=1700000000000)
    assert (copy.topic, copy.queue_id, times) == ("%RETRY%GID_pop_TopicA", 0, 1)
    assert list(copy.properties.items()) == [
        ("KEYS", "k1"), ("UNIQ_KEY", "AC110001000018B4AAC2000000000000"), ("CLUSTER", "DefaultCluster"),
        ("1ST_POP_TIME", "1700000000000"), ("TAGS", "tagA")]
    # a copy of a copy: same retry topic, 1ST_POP_TIME kept, reconsumeTimes + 1
    again, times = pop.revive_copy_properties(copy.properties, 1, ck_topic="%RETRY%GID_pop_TopicA",
                                              consumer_group="GID_pop", pop_time=1700000090000)
    assert (again.topic, times, again.properties["1ST_POP_TIME"]) == ("%RETRY%GID_pop_TopicA", 2, "1700000000000")
    assert again.properties == copy.properties
    v2, _ = pop.revive_copy_properties({"UNIQ_KEY": "X"}, 0, ck_topic="TopicA", consumer_group="GID_pop",
                                       pop_time=5, v2=True)
    assert (v2.topic, list(v2.properties.items())) == ("%RETRY%GID_pop+TopicA",
                                                       [("UNIQ_KEY", "X"), ("1ST_POP_TIME", "5")])
