"""Config parsers on every real broker/client file, and the broker's .bak fallback on bad input."""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from conftest import REAL
from jobs.formats import configs, fastjson
from jobs.problems import Problem


def _read_real(path: str) -> bytes | None:
    p = REAL / path
    return p.read_bytes() if p.exists() else None


def _mem(files: dict[str, bytes]):  # noqa: ANN202 - test helper
    return lambda path: files.get(path)


def test_humphery755_consumer_offsets_exact() -> None:
    parsed = configs.load(_read_real, "humphery755-store/store/config/consumerOffset.json", "consumer_offsets")
    assert (parsed.used_backup, parsed.missing, parsed.problems) == (False, False, [])
    assert len(parsed.rows) == 117
    by_key = {(r["topic"], r["consumer_group"], r["queue_id"]): r["committed_offset"] for r in parsed.rows}
    assert by_key[("ACC_TOPIC_TRANSLOG_NOTIFY_GROUP00", "ACC_CG_TRANSLOG_REQUEST4NotifyGROUP00", 2)] == 1099674
    assert by_key[("ACC_TOPIC_TRANSLOG_31", "ACC_CG_TRANSLOG_REQUEST31", 1)] == 2009086
    assert by_key[("%RETRY%GAME_MATCH_MSG_NOTIFY_CG", "GAME_MATCH_MSG_NOTIFY_CG", 0)] == 480
    assert sum(r["is_retry_topic"] for r in parsed.rows) == sum(t.startswith("%RETRY%") for t, _, _ in by_key)


def test_humphery755_backup_holds_the_same_offsets() -> None:
    main = configs.load(_read_real, "humphery755-store/store/config/consumerOffset.json", "consumer_offsets")
    bak = configs.parse_consumer_offsets(
        (REAL / "humphery755-store/store/config/consumerOffset.json.bak").read_text(), "x")[0]
    assert bak == main.rows


def test_humphery755_subscription_groups_and_topics_exact() -> None:
    groups = configs.load(_read_real, "humphery755-store/store/config/subscriptionGroup.json", "subscription_groups")
    assert len(groups.rows) == 81
    g = next(r for r in groups.rows if r["consumer_group"] == "ACC_CG_TRANSLOG_REQUEST36")
    assert g == {"consumer_group": "ACC_CG_TRANSLOG_REQUEST36", "retry_max_times": 16, "retry_queue_nums": 1,
                 "consume_enable": True, "consume_broadcast_enable": True, "consume_message_orderly": False,
                 "consume_timeout_minute": 15, "group_retry_policy": None}
    topics = configs.load(_read_real, "humphery755-store/store/config/topics.json", "topics")
    assert len(topics.rows) == 112
    assert next(r for r in topics.rows if r["topic"] == "ACC_TOPIC_TRANSLOG_31") == {
        "topic": "ACC_TOPIC_TRANSLOG_31", "read_queue_nums": 2, "write_queue_nums": 2, "perm": 6,
        "topic_sys_flag": 0, "order": False, "queue_type": "SimpleCQ", "cleanup_policy": "DELETE"}


def test_humphery755_delay_offsets_exact() -> None:
    parsed = configs.load(_read_real, "humphery755-store/store/config/delayOffset.json", "delay_offsets")
    assert {r["delay_level"]: r["offset"] for r in parsed.rows} == {
        12: 37, 6: 41, 13: 37, 5: 41, 18: 74, 7: 40, 8: 39, 17: 37, 9: 39, 10: 37, 16: 37, 15: 37, 14: 37, 3: 46,
        11: 37, 4: 46}


def test_consumer_order_info_exact() -> None:
    """consumerOrderInfo.json: the real 5.x broker's (no orderly POP yet: an empty table, and its .bak), then one
    written as ConsumerOrderInfoManager.encode(true) writes it (fastjson: fields sorted, Integer/Long map keys bare)
    with a FIFO group's queue 0 (offsets 10-12 popped, 10 consumed twice) and three bad entries, each skipped."""
    for name in ("consumerOrderInfo.json", "consumerOrderInfo.json.bak"):
        parsed = configs.load(_read_real, f"guoming-5x-store/data/broker/store/config/{name}", "order_info")
        assert (parsed.rows, parsed.problems, parsed.used_backup) == ([], [], False)
    text = ('{\n\t"table":{\n\t\t"TopicFifo@GID_fifo":{0:{\n\t\t\t\t"a":"0A0B",\n\t\t\t\t"cm":1,\n'
            '\t\t\t\t"i":30000,\n\t\t\t\t"l":1767571200500,\n\t\t\t\t"o":[10,11,12],\n'
            '\t\t\t\t"oc":{10:2,11:1},\n\t\t\t\t"ot":{10:1767571231000},\n\t\t\t\t"popTime":1767571201000\n'
            '\t\t\t},1:{"o":["x"],"popTime":5},2:{"o":[],"oc":{1:4294967296},"popTime":5}\n\t\t},\n'
            '\t\t"no-at":{}\n\t}\n}')
    rows, problems = configs.parse_order_info(text, "c.json")
    assert rows == [{"consumer_group": "GID_fifo", "topic": "TopicFifo", "queue_id": 0, "pop_time": 1767571201000,
                     "invisible_time": 30000, "offsets": [10, 11, 12], "next_visible_ms": {10: 1767571231000},
                     "consumed_counts": {10: 2, 11: 1}, "last_consume_ts": 1767571200500, "commit_offset_bit": 1,
                     "attempt_id": "0A0B"}]
    assert [(p.position, p.reason) for p in problems] == [
        (text.index("1:{"), "'TopicFifo@GID_fifo' queue 1: field 'o' missing or not of its Java type: entry skipped"),
        (text.index("2:{"), "'TopicFifo@GID_fifo' queue 2: field 'oc' missing or not of its Java type: entry skipped"),
        (text.index('"no-at"'), "key 'no-at' is not 'topic@group' with exactly one '@': entry skipped (as the "
                                "broker's whichTopicByConsumer does)")]


def test_detectivehlh_topics_exact() -> None:
    parsed = configs.load(_read_real, "detectivehlh-topics/topics.json", "topics")
    assert sorted(r["topic"] for r in parsed.rows) == [
        "BenchmarkTest", "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "OFFSET_MOVED_EVENT",
        "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "TBW102", "broker-a"]
    assert next(r for r in parsed.rows if r["topic"] == "SCHEDULE_TOPIC_XXXX")["read_queue_nums"] == 18


def test_yunai_broadcast_client_offsets_exact() -> None:
    rel = "yunai-broadcast-offsets/.rocketmq_offsets/192.168.17.0@DEFAULT/please_rename_unique_group_name_1/offsets.json"
    parsed = configs.load(_read_real, rel, "client_offsets")
    assert parsed.rows == [
        {"broker": "broker-a", "topic": "TopicTest", "queue_id": 3, "committed_offset": 1470},
        {"broker": "broker-a", "topic": "TopicTest", "queue_id": 2, "committed_offset": 1471},
        {"broker": "broker-a", "topic": "TopicTest", "queue_id": 1, "committed_offset": 1470},
        {"broker": "broker-a", "topic": "TopicTest", "queue_id": 0, "committed_offset": 1470},
    ]


def test_yunai_broker_offsets_exact() -> None:
    parsed = configs.load(_read_real, "yunai-broadcast-offsets/store/config/consumerOffset.json", "consumer_offsets")
    assert parsed.rows == [
        {"consumer_group": "please_rename_unique_group_name_4", "topic": "%RETRY%please_rename_unique_group_name_4",
         "queue_id": 0, "committed_offset": 0, "is_retry_topic": True},
        {"consumer_group": "please_rename_unique_group_name_4", "topic": "TopicRead3", "queue_id": 1,
         "committed_offset": 5, "is_retry_topic": False},
    ]


def test_guoming_5x_files_parse_empty() -> None:
    base = "guoming-5x-store/data/broker/store/config/"
    offsets = configs.load(_read_real, base + "consumerOffset.json", "consumer_offsets")
    delay = configs.load(_read_real, base + "delayOffset.json", "delay_offsets")
    assert (offsets.rows, offsets.problems, delay.rows, delay.problems) == ([], [], [], [])


GOOD = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:5,1:7\n\t\t}\n\t}\n}'
GOOD_ROWS = [{"consumer_group": "G", "topic": "T", "queue_id": 0, "committed_offset": 5, "is_retry_topic": False},
             {"consumer_group": "G", "topic": "T", "queue_id": 1, "committed_offset": 7, "is_retry_topic": False}]


@pytest.mark.parametrize(
    "files, used_backup, rows, problems",
    [
        pytest.param({"c.json": GOOD[:30], "c.json.bak": GOOD}, True, GOOD_ROWS,
                     [Problem("c.json", 30, "unexpected end of input (file truncated?); loaded the .bak instead")],
                     id="truncated_file_falls_back_to_bak"),
        pytest.param({"c.json": GOOD[:30], "c.json.bak": GOOD[:10]}, False, [],
                     [Problem("c.json", 30, "unexpected end of input (file truncated?); the .bak could not be used either"),
                      Problem("c.json.bak", 3, "unterminated string (file truncated?)")],
                     id="truncated_file_and_broken_bak_give_no_rows"),
        pytest.param({"c.json": b"", "c.json.bak": GOOD}, True, GOOD_ROWS,
                     [Problem("c.json", 0, "empty file; loaded the .bak instead")], id="empty_file_falls_back"),
        pytest.param({"c.json": b'{"offsetTable":{"T@G":{0:5}}}\xff\xfe', "c.json.bak": GOOD}, True, GOOD_ROWS,
                     [Problem("c.json", 29, "not valid UTF-8 (byte 29: invalid start byte); loaded the .bak instead")],
                     id="non_utf8_bytes_fall_back"),
        pytest.param({"c.json": GOOD.replace(b"T@G", b"T@\\u00zzG"), "c.json.bak": GOOD}, True, GOOD_ROWS,
                     [Problem("c.json", 24, "invalid \\u escape (0x5c7530307a7a); loaded the .bak instead")],
                     id="bad_unicode_escape_falls_back"),
        pytest.param({"c.json": GOOD.replace(b"T@G", b"TG")}, False, [],
                     [Problem("c.json", 21, "key 'TG' is not 'topic@group' with exactly one '@': entry skipped "
                              "(as the broker's whichTopicByConsumer does)")], id="key_without_at_is_skipped"),
        pytest.param({"c.json": GOOD.replace(b"0:5", b"0:-5")}, False, GOOD_ROWS[1:],
                     [Problem("c.json", 28, "'T@G' queue 0: offset -5 is not a non-negative integer: entry skipped")],
                     id="negative_offset_is_skipped_rest_lands"),
        pytest.param({"c.json": GOOD.replace(b"0:5", b'0:"x"')}, False, GOOD_ROWS[1:],
                     [Problem("c.json", 28, "'T@G' queue 0: offset 'x' is not a non-negative integer: entry skipped")],
                     id="non_numeric_offset_is_skipped_rest_lands"),
        pytest.param({"c.json": GOOD.replace(b'"offsetTable"', b'"extra":1,"offsetTable"')}, False, GOOD_ROWS,
                     [Problem("c.json", 3, "unknown field 'extra' ignored")], id="unknown_field_is_noted_data_lands"),
        pytest.param({"c.json": b'{"offsetTable":{"T@G":{0:-1,1:7,2:-2},"U@G":{0:1,2:-3}}}'}, False,
                     [GOOD_ROWS[1], {**GOOD_ROWS[0], "topic": "U", "committed_offset": 1}],
                     [Problem("c.json", 23, "'T@G' queue 0: offset -1 is not a non-negative integer: entry skipped"),
                      Problem("c.json", 32, "'T@G' queue 2: offset -2 is not a non-negative integer: entry skipped"),
                      Problem("c.json", 49, "'U@G' queue 2: offset -3 is not a non-negative integer: entry skipped")],
                     id="each_bad_queue_has_its_own_position"),
        pytest.param({"c.json": b'{"offsetTable":{"T@G":{0:-1},"U@G":{0:1},"T@G":{0:-2}}}'}, False,
                     [{**GOOD_ROWS[0], "topic": "U", "committed_offset": 1}],
                     [Problem("c.json", 23, "'T@G' queue 0: offset -2 is not a non-negative integer: entry skipped")],
                     id="a_key_written_twice_is_found_first_as_it_keeps_its_first_place"),
        pytest.param({"c.json": b'{"offsetTable":{"T@G":{0:5,1:7},7:{0:1}},"lmqOffsetTable":{"%LMQ%x@G":-1}}'}, False,
                     GOOD_ROWS,
                     [Problem("c.json", 32, "key '7' is not 'topic@group' with exactly one '@': entry skipped (as the "
                                            "broker's whichTopicByConsumer does)"),
                      Problem("c.json", 59, "'%LMQ%x@G' queue 0: offset -1 is not a non-negative integer: entry "
                                            "skipped")],
                     id="a_number_key_and_an_lmq_offset_are_found_at_their_keys"),
    ],
)
def test_bad_input(files: dict[str, bytes], used_backup: bool, rows: list, problems: list) -> None:
    parsed = configs.load(_mem(files), "c.json", "consumer_offsets")
    assert (parsed.used_backup, parsed.rows, parsed.problems) == (used_backup, rows, problems)


def test_missing_file_is_reported_not_fatal() -> None:
    parsed = configs.load(_mem({}), "c.json", "consumer_offsets")
    assert (parsed.missing, parsed.rows, parsed.problems) == (True, [], [])


def test_missing_main_loads_bak_like_the_broker() -> None:
    parsed = configs.load(_mem({"c.json.bak": GOOD}), "c.json", "consumer_offsets")
    assert (parsed.used_backup, parsed.source_path, parsed.rows) == (True, "c.json.bak", GOOD_ROWS)


@pytest.mark.parametrize(
    "kind, text, position, reason",
    [
        pytest.param("subscription_groups", '{"subscriptionGroupTable":"x"}', 1, "'subscriptionGroupTable'",
                     id="groups_table_a_string"),
        pytest.param("topics", '{"dataVersion":{},"topicConfigTable":[1]}', 18, "'topicConfigTable'",
                     id="topics_table_a_list"),
        pytest.param("delay_offsets", '{"offsetTable":7}', 1, "'offsetTable'", id="delay_table_a_number"),
        pytest.param("client_offsets", '{"offsetTable":true}', 1, "'offsetTable'", id="client_table_a_boolean"),
    ],
)
def test_a_table_that_is_not_a_map_is_a_problem_not_a_crash(kind: str, text: str, position: int,
                                                            reason: str) -> None:
    """Before: ``'str' object has no attribute 'items'`` failed the whole ingest (found by fuzzing)."""
    parsed = configs.load(_mem({"c.json": text.encode()}), "c.json", kind)
    assert (parsed.used_backup, parsed.rows, parsed.problems) == (
        False, [], [Problem("c.json", position, f"{reason} is not a map: its entries are skipped")])


def test_a_client_key_object_holding_an_object_is_a_parse_error_and_the_bak_is_used() -> None:
    """Before: ``unhashable type: 'dict'`` failed the whole ingest (found by fuzzing)."""
    good = b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:5}}'
    bad = b'{"offsetTable":{{"brokerName":{"x":1},"queueId":1,"topic":"T"}:5}}'
    parsed = configs.load(_mem({"o.json": bad, "o.json.bak": good}), "o.json", "client_offsets")
    assert (parsed.used_backup, parsed.rows, parsed.problems) == (
        True, [{"broker": "b", "topic": "T", "queue_id": 1, "committed_offset": 5}],
        [Problem("o.json", 16, "an object used as a key holds an object or an array; loaded the .bak instead")])


@pytest.mark.parametrize("policy, stored", [
    ('{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1,2]}}',
     '{"customizedRetryPolicy":{"next":[1,2]},"type":"CUSTOMIZED"}'),
    ('{2:1,10:2}', '{"2":1,"10":2}'),  # sorted as numbers, as before
    ('{1:"a","b":2}', '{"1":"a","b":2}'),  # before: TypeError ('<' between str and int)
    ('{{"x":1}:2}', '{"{\\"x\\":1}":2}'),  # before: TypeError (an ObjectKey as a JSON key)
])
def test_a_group_retry_policy_is_stored_as_sorted_compact_json(policy: str, stored: str) -> None:
    text = '{"subscriptionGroupTable":{"G":{"groupName":"G","groupRetryPolicy":' + policy + '}}}'
    parsed = configs.load(_mem({"s.json": text.encode()}), "s.json", "subscription_groups")
    assert ([r["group_retry_policy"] for r in parsed.rows], parsed.problems) == ([stored], [])


@pytest.mark.parametrize("seed", [1, 2])
def test_no_damage_to_a_real_config_file_makes_loading_raise(seed: int) -> None:
    """3,000 random edits (bytes inserted, deleted, overwritten, cut; JSON tokens inserted) of the real broker and
    client files, each loaded as its own kind and as another: every outcome is rows and problems, never an error
    (which would fail the whole ingest instead of quarantining one file)."""
    import random

    kinds = {"consumerOffset.json": "consumer_offsets", "subscriptionGroup.json": "subscription_groups",
             "topics.json": "topics", "delayOffset.json": "delay_offsets", "offsets.json": "client_offsets",
             "consumerOrderInfo.json": "order_info"}
    sources = sorted((p.read_bytes(), kinds[p.name.removesuffix(".bak")]) for p in REAL.rglob("*")
                     if p.is_file() and p.name.removesuffix(".bak") in kinds)
    assert len(sources) == 16
    tokens = [b"{", b"}", b"[", b"]", b":", b",", b'"', b"\\", b"\\u", b"\\u00zz", b"-1", b"99999999999999999999",
              b"1.5", b"true", b"null", b"NaN", b"@", b"\x00", b"\xff", b"{0:1}", b'{"a":1}', b"[]", b'"x"']
    rng = random.Random(seed)
    outcomes = {"rows": 0, "no rows": 0}
    for _ in range(3000):
        data, kind = rng.choice(sources)
        data = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            op, at = rng.random(), rng.randint(0, len(data))
            if op < 0.45:
                data[at:at] = rng.choice(tokens)
            elif op < 0.65:
                del data[at:at + rng.randint(1, 8)]
            elif op < 0.85 and data:
                data[min(at, len(data) - 1)] = rng.randint(0, 255)
            else:
                data = data[:at]
        loaded = configs.load(_mem({"f": bytes(data)}), "f", kind if rng.random() < 0.8 else rng.choice(configs.KINDS))
        outcomes["rows" if loaded.rows else "no rows"] += 1
    assert min(outcomes.values()) > 150  # both kinds of outcome are exercised


def _mq(broker: str, qid: int, topic: str) -> fastjson.ObjectKey:
    return fastjson.ObjectKey.of(brokerName=broker, queueId=qid, topic=topic)


def _co_row(topic: str, group: str, qid: int, offset: int) -> dict[str, Any]:
    return {"consumer_group": group, "topic": topic, "queue_id": qid, "committed_offset": offset,
            "is_retry_topic": topic.startswith("%RETRY%")}


def _group_row(group: str) -> dict[str, Any]:
    return {"consumer_group": group, "retry_max_times": 16, "retry_queue_nums": 1, "consume_enable": True,
            "consume_broadcast_enable": True, "consume_message_orderly": False, "consume_timeout_minute": 15,
            "group_retry_policy": None}


def _topic_row(topic: str, queues: int = 16) -> dict[str, Any]:
    return {"topic": topic, "read_queue_nums": queues, "write_queue_nums": 16, "perm": 6, "topic_sys_flag": 0,
            "order": False, "queue_type": "SimpleCQ", "cleanup_policy": "DELETE"}


PWNED = "g\ntouch /tmp/pwned\n#"
HYPERLINK = '=HYPERLINK("http://x")'
T127, T128, G255, G256 = "T" * 127, "T" * 128, "G" * 255, "G" * 256
T_SHOWN, G_SHOWN = "T" * 64 + "...", "G" * 64 + "..."
CHARS = "holds a character RocketMQ does not allow in a {} (^[%|a-zA-Z0-9_-]+$): entry skipped"


@pytest.mark.parametrize("kind, doc, rows, problems", [
    pytest.param("consumer_offsets", {"offsetTable": {f"T@{PWNED}": {0: 1}, "T@G": {0: 5, 1: 7}}}, GOOD_ROWS,
                 [(21, "group 'g\\ntouch /tmp/pwned\\n#' of key 'T@g\\ntouch /tmp/pwned\\n#' "
                       + CHARS.format("group"))],
                 id="group_holding_a_shell_command"),
    pytest.param("consumer_offsets", {"offsetTable": {"T@G": {0: 5, 1: 7}, f"{HYPERLINK}@G": {0: 2}}}, GOOD_ROWS,
                 [(43, f"topic '{HYPERLINK}' of key '{HYPERLINK}@G' " + CHARS.format("topic"))],
                 id="topic_holding_a_spreadsheet_formula"),
    pytest.param("consumer_offsets", {"offsetTable": {"app$\\foo{$@G": {0: 3}, "T@G": {0: 5, 1: 7}}}, GOOD_ROWS,
                 [(21, "topic 'app$\\\\foo{$' of key 'app$\\\\foo{$@G' " + CHARS.format("topic"))],
                 id="topic_holding_a_backslash_and_braces"),
    pytest.param("consumer_offsets", {"offsetTable": {"..@G": {0: 4}, "T@..": {0: 4}, "T@G": {0: 5, 1: 7}}}, GOOD_ROWS,
                 [(21, "topic '..' of key '..@G' " + CHARS.format("topic")),
                  (40, "group '..' of key 'T@..' " + CHARS.format("group"))],
                 id="dot_dot_topic_and_group"),
    pytest.param("consumer_offsets", {"offsetTable": {f"{T128}@G": {0: 1}, f"{T127}@G": {0: 2}, f"T@{G256}": {3: 4},
                                                      f"T@{G255}": {5: 6}}},
                 [_co_row(T127, "G", 0, 2), _co_row("T", G255, 5, 6)],
                 [(21, f"topic '{T_SHOWN}' of key '{T_SHOWN}' is longer than 127 characters: entry skipped"),
                  (310, f"group '{G_SHOWN}' of key 'T@{G_SHOWN[:-5]}...' is longer than 255 characters: entry "
                        "skipped")],
                 id="topic_of_128_and_group_of_256_characters_127_and_255_land"),
    pytest.param("consumer_offsets", {"offsetTable": {"%RETRY%G+T@G": {0: 9}, "%DLQ%G@G": {0: 1}, "T@G": {0: 5}}},
                 [_co_row("%RETRY%G+T", "G", 0, 9), _co_row("%DLQ%G", "G", 0, 1), _co_row("T", "G", 0, 5)], [],
                 id="pop_retry_topic_and_dlq_topic_land"),
    pytest.param("consumer_offsets", {"offsetTable": {"T@G": {0: 5, 1: 7}},
                                      "lmqOffsetTable": {"%LMQ%x@g;rm": 4, "%LMQ%x@G": 3}},
                 GOOD_ROWS + [_co_row("%LMQ%x", "G", 0, 3)],
                 [(66, "group 'g;rm' of key '%LMQ%x@g;rm' " + CHARS.format("group"))], id="lmq_key"),
    pytest.param("subscription_groups", {"subscriptionGroupTable": {
        PWNED: {"groupName": PWNED}, "G": {"groupName": "G"}, "H": {"groupName": G256}, "K": {"groupName": "K;"},
        "L": {}}},
                 [_group_row("G"), _group_row("L")],
                 [(32, f"group 'g\\ntouch /tmp/pwned\\n#' " + CHARS.format("group")),
                  (138, f"group '{G_SHOWN}' of key 'H' is longer than 255 characters: entry skipped"),
                  (425, "group 'K;' of key 'K' " + CHARS.format("group"))],
                 id="subscription_groups_by_group_name"),
    pytest.param("topics", {"topicConfigTable": {
        "T": {"topicName": "T", "readQueueNums": 2}, "X": {"topicName": HYPERLINK}, T128: {"topicName": T128},
        "%RETRY%G+T": {"topicName": "%RETRY%G+T"}, "a\nb": {}}},
                 [_topic_row("T", 2), _topic_row("%RETRY%G+T")],
                 [(80, f"topic '{HYPERLINK}' of key 'X' " + CHARS.format("topic")),
                  (135, f"topic '{T_SHOWN}' is longer than 127 characters: entry skipped"),
                  (471, "topic 'a\\nb' " + CHARS.format("topic"))],
                 id="topics_by_topic_name"),
    pytest.param("client_offsets", {"offsetTable": {
        _mq("b", 0, "T"): 5, _mq("b", 1, "a\nb"): 6, _mq("..", 0, "T"): 7, _mq("b", 1, "T"): 8}},
                 [{"broker": "b", "topic": "T", "queue_id": 0, "committed_offset": 5},
                  {"broker": "b", "topic": "T", "queue_id": 1, "committed_offset": 8}],
                 [(78, "topic 'a\\nb' of the MessageQueue key (brokerName 'b', queue 1) " + CHARS.format("topic")),
                  (141, "brokerName '..' of the MessageQueue key (topic 'T', queue 0) is a relative path ('.' or "
                        "'..'): entry skipped")],
                 id="client_message_queue_topic_and_broker"),
])
def test_names_rocketmq_cannot_produce_are_skipped_rest_lands(kind: str, doc: dict[str, Any], rows: list,
                                                              problems: list[tuple[int, str]]) -> None:
    """Files as fastjson writes them (``fastjson.dumps``): each bad entry is a problem at its key, with its name
    escaped (no line break reaches the quarantine), and every other entry lands."""
    text = fastjson.dumps(doc)
    parsed = configs.load(_mem({"c.json": text.encode()}), "c.json", kind)
    assert (parsed.used_backup, parsed.rows, parsed.problems) == (
        False, rows, [Problem("c.json", position, reason) for position, reason in problems])


N = 100_000
LINEAR: dict[str, tuple[str, Callable[[], Any], int, dict[int, dict[str, Any]]]] = {
    # kind, the document, how many rows, some rows by index
    "one_group_of_100000_queues": (
        "consumer_offsets", lambda: {"offsetTable": {"T@G": {q: 3 * q for q in range(N)}}}, N,
        {0: _co_row("T", "G", 0, 0), 54321: _co_row("T", "G", 54321, 162963), -1: _co_row("T", "G", 99999, 299997)}),
    "one_group_of_20000_queues": (
        "consumer_offsets", lambda: {"offsetTable": {"T@G": {q: 3 * q for q in range(20_000)}}}, 20_000,
        {0: _co_row("T", "G", 0, 0), -1: _co_row("T", "G", 19999, 59997)}),
    "100000_keys_of_one_queue": (
        "consumer_offsets", lambda: {"offsetTable": {f"T{i}@G{i % 7}": {0: i} for i in range(N)}}, N,
        {0: _co_row("T0", "G0", 0, 0), 12345: _co_row("T12345", "G4", 0, 12345),
         -1: _co_row("T99999", "G4", 0, 99999)}),
    "100000_subscription_groups": (
        "subscription_groups", lambda: {"subscriptionGroupTable": {f"G{i}": {"groupName": f"G{i}"} for i in range(N)}},
        N, {0: _group_row("G0"), -1: _group_row("G99999")}),
    "100000_topics": (
        "topics", lambda: {"topicConfigTable": {f"T{i}": {"topicName": f"T{i}", "readQueueNums": 2} for i in range(N)}},
        N, {0: _topic_row("T0", 2), -1: _topic_row("T99999", 2)}),
    "100000_client_offsets": (
        "client_offsets", lambda: {"offsetTable": {_mq(f"broker-{i % 4}", i % 32, f"T{i // 32}"): i for i in range(N)}},
        N, {0: {"broker": "broker-0", "topic": "T0", "queue_id": 0, "committed_offset": 0},
            -1: {"broker": "broker-3", "topic": "T3124", "queue_id": 31, "committed_offset": 99999}}),
}


@pytest.mark.parametrize("shape", list(LINEAR))
def test_100000_entries_parse_in_linear_time(shape: str) -> None:
    """Before: a position search from the top of the file per key and a regex compiled per queue made parsing
    quadratic (one group of 20,000 queues 36.9 s, 100,000 keys 45.5 s). Timed in this thread's CPU seconds: another
    job may share the machine, and the embedded engine's threads in this process (process_time counted them: the
    every_key case failed in make test at 2.0 s) do work of their own."""
    kind, doc, count, some = LINEAR[shape]
    data = fastjson.dumps(doc()).encode()
    start = time.thread_time()
    parsed = configs.load(_mem({"c.json": data}), "c.json", kind)
    seconds = time.thread_time() - start
    assert (len(parsed.rows), parsed.problems) == (count, [])
    assert {i: parsed.rows[i] for i in some} == some
    assert seconds < 5.0  # quadratic was 36-46 s; linear is 0.1-1.5 s


@pytest.mark.parametrize("shape", ["every_queue", "every_key"])
def test_100000_bad_entries_each_have_their_position_in_linear_time(shape: str) -> None:
    """The positions of bad entries are found moving forward through the file, each at its own key."""
    if shape == "every_queue":
        text = fastjson.dumps({"offsetTable": {"T@G": {q: -1 for q in range(N)}}})
        first, last = "'T@G' queue 0: offset -1", f"'T@G' queue {N - 1}: offset -1"
        at_first, at_last = text.index("{0:") + 1, text.index(f",{N - 1}:") + 1
    else:
        text = fastjson.dumps({"offsetTable": {f"T{i}@G;": {0: i} for i in range(N)}})
        first, last = "group 'G;' of key 'T0@G;'", f"group 'G;' of key 'T{N - 1}@G;'"
        at_first, at_last = text.index('"T0@G;"'), text.index(f'"T{N - 1}@G;"')
    start = time.thread_time()
    parsed = configs.load(_mem({"c.json": text.encode()}), "c.json", "consumer_offsets")
    seconds = time.thread_time() - start
    assert (len(parsed.rows), len(parsed.problems), len({p.position for p in parsed.problems})) == (0, N, N)
    assert (parsed.problems[0].position, parsed.problems[-1].position) == (at_first, at_last)
    assert parsed.problems[0].reason.startswith(first) and parsed.problems[-1].reason.startswith(last)
    assert seconds < 5.0  # quadratic was 36-46 s; linear is 0.1-1.5 s


def test_keys_found_nowhere_cannot_make_parsing_slow() -> None:
    """100,000 bad keys written with escapes fastjson does not use: no key text matches, and the searches stop
    after a few reads of the file (their positions are then the file's start)."""
    text = "{\"offsetTable\":{" + ",".join(f'"T\\u0041{i}@G;":{{0:1}}' for i in range(N)) + "}}"
    start = time.thread_time()
    parsed = configs.load(_mem({"c.json": text.encode()}), "c.json", "consumer_offsets")
    seconds = time.thread_time() - start
    assert (len(parsed.rows), len(parsed.problems)) == (0, N)
    assert parsed.problems[-1] == Problem("c.json", 0, f"group 'G;' of key 'TA{N - 1}@G;' " + CHARS.format("group"))
    assert seconds < 5.0  # quadratic was 36-46 s; linear is 0.1-1.5 s


def test_topic_attributes_are_read_with_the_brokers_defaults() -> None:
    """TopicAttributes (5.x): queue.type and cleanup.policy as TopicConfig.attributes holds them (no '+' of the admin
    request; tolerated), their defaults when absent or not a string (spec §4.2)."""
    text = fastjson.dumps({"topicConfigTable": {
        "plain": {"topicName": "plain"},
        "batch": {"topicName": "batch", "attributes": {"queue.type": "BatchCQ"}},
        "compact": {"topicName": "compact", "attributes": {"+cleanup.policy": "COMPACTION"}},
        "odd": {"topicName": "odd", "attributes": {"queue.type": 3, "cleanup.policy": ""}},
        "listed": {"topicName": "listed", "attributes": ["queue.type"]}}})
    rows, problems = configs.parse_topics(text, "topics.json")
    assert problems == []
    assert {r["topic"]: (r["queue_type"], r["cleanup_policy"]) for r in rows} == {
        "plain": ("SimpleCQ", "DELETE"), "batch": ("BatchCQ", "DELETE"), "compact": ("SimpleCQ", "COMPACTION"),
        "odd": ("SimpleCQ", "DELETE"), "listed": ("SimpleCQ", "DELETE")}


def test_a_fetched_read_gives_its_bytes_or_raises_its_error_as_a_direct_read_would(tmp_path) -> None:  # noqa: ANN001
    """jobs.ingest.snapshot_configs._reader with reads started beforehand (on S3 a snapshot's files are fetched 16 at
    a time): a fetched file gives its bytes, a failed fetch raises its error at the read (the config's load then
    quarantines it), a file not fetched is read directly, a file the snapshot did not list is never read."""
    from concurrent.futures import Future

    from jobs.ingest.snapshot_configs import _reader

    (tmp_path / "direct.json").write_bytes(b"{}")
    (tmp_path / "unlisted.json").write_bytes(b"{}")
    done, failed = Future(), Future()
    done.set_result(b'{"offsetTable":{}}')
    failed.set_exception(PermissionError(13, "Permission denied"))
    read = _reader(str(tmp_path), {"a.json", "b.json", "direct.json"}, {"a.json": done, "b.json": failed})
    assert (read("a.json"), read("direct.json"), read("unlisted.json")) == (b'{"offsetTable":{}}', b"{}", None)
    with pytest.raises(PermissionError):
        read("b.json")
