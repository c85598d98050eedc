"""Config parsers on every real broker/client file, and the broker's .bak fallback on bad input."""
from __future__ import annotations

import pytest

from conftest import REAL
from jobs.formats import configs
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
        "topic_sys_flag": 0, "order": False}


def test_humphery755_delay_offsets_exact() -> None:
    parsed = configs.load(_read_real, "humphery755-store/store/config/delayOffset.json", "delay_offsets")
    assert {r["delay_level"]: r["offset"] for r in parsed.rows} == {
        12: 37, 6: 41, 13: 37, 5: 41, 18: 74, 7: 40, 8: 39, 17: 37, 9: 39, 10: 37, 16: 37, 15: 37, 14: 37, 3: 46,
        11: 37, 4: 46}


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
                     [Problem("c.json", 24, "invalid \\u escape '\\\\u00zz'; loaded the .bak instead")],
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
