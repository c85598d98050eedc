"""fastjson reader/writer on the broker's real files: byte-for-byte round trips and exact values."""
from __future__ import annotations

import pytest

from conftest import REAL
from jobs.formats import fastjson
from jobs.problems import ConfigParseError

ROUND_TRIP = [
    "humphery755-store/store/config/consumerOffset.json",
    "humphery755-store/store/config/consumerOffset.json.bak",
    "humphery755-store/store/config/subscriptionGroup.json",
    "humphery755-store/store/config/topics.json",
    "detectivehlh-topics/topics.json",
    "guoming-5x-store/data/broker/store/config/consumerOffset.json",
    "guoming-5x-store/data/broker/store/config/delayOffset.json",
    "guoming-5x-store/data/broker/store/config/consumerFilter.json",
    "guoming-5x-store/data/broker/store/config/consumerOrderInfo.json",
]
# Files extracted from a blog's terminal output keep the shell's trailing newline; compact single-line files.
ROUND_TRIP_STRIPPED = [
    "yunai-broadcast-offsets/store/config/consumerOffset.json",
    "yunai-broadcast-offsets/.rocketmq_offsets/192.168.17.0@DEFAULT/please_rename_unique_group_name_1/offsets.json",
]
COMPACT = [
    "humphery755-store/store/config/delayOffset.json",
    "guoming-5x-store/data/broker/store/config/timermetrics",
    "guoming-5x-store/data/broker/store/config/transactionMetrics",
]


@pytest.mark.parametrize("rel", ROUND_TRIP)
def test_pretty_files_round_trip_byte_for_byte(rel: str) -> None:
    text = (REAL / rel).read_text()
    assert fastjson.dumps(fastjson.loads(text)) == text


@pytest.mark.parametrize("rel", ROUND_TRIP_STRIPPED)
def test_blog_files_round_trip_but_for_the_shell_newline(rel: str) -> None:
    text = (REAL / rel).read_text()
    assert fastjson.dumps(fastjson.loads(text)) == text.rstrip("\n")


@pytest.mark.parametrize("rel", COMPACT)
def test_compact_files_round_trip(rel: str) -> None:
    text = (REAL / rel).read_text()
    assert fastjson.dumps(fastjson.loads(text), pretty=False) == text


def test_bare_integer_keys_become_ints() -> None:
    doc = fastjson.loads((REAL / "humphery755-store/store/config/consumerOffset.json").read_text())
    assert doc["offsetTable"]["ACC_TOPIC_TRANSLOG_NOTIFY_GROUP00@ACC_CG_TRANSLOG_REQUEST4NotifyGROUP00"] == {
        0: 1099672, 2: 1099674, 1: 1099674, 3: 1099670}


def test_message_queue_object_keys_become_object_keys() -> None:
    rel = "yunai-broadcast-offsets/.rocketmq_offsets/192.168.17.0@DEFAULT/please_rename_unique_group_name_1/offsets.json"
    doc = fastjson.loads((REAL / rel).read_text())
    assert {k.as_dict()["queueId"]: v for k, v in doc["offsetTable"].items()} == {3: 1470, 2: 1471, 1: 1470, 0: 1470}
    assert fastjson.ObjectKey.of(topic="T", queueId=0, brokerName="b") == (("brokerName", "b"), ("queueId", 0), ("topic", "T"))


@pytest.mark.parametrize(
    "text, position, reason",
    [
        pytest.param("", 0, "empty file", id="empty"),
        pytest.param('{\n\t"offsetTable":{\n\t\t"T@G":{0:12', 32, "unexpected end of input (file truncated?)",
                     id="truncated_mid_map"),
        pytest.param('{"a":1} x', 8, "trailing characters after the JSON value", id="trailing_garbage"),
        pytest.param('{"a" 1}', 5, "expected ':' after key 'a'", id="missing_colon"),
        pytest.param('{"a":"x', 5, "unterminated string (file truncated?)", id="unterminated_string"),
    ],
)
def test_invalid_text_raises_with_position(text: str, position: int, reason: str) -> None:
    with pytest.raises(ConfigParseError) as err:
        fastjson.loads(text, source_path="f.json")
    assert (err.value.source_path, err.value.position, err.value.reason) == ("f.json", position, reason)
    assert str(err.value) == f"f.json: at character {position}: {reason}"
