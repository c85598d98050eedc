"""fastjson reader/writer on the broker's real files: byte-for-byte round trips and exact values."""
from __future__ import annotations

import random
import re
from typing import Any

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
        pytest.param('{"a" 1}', 5, "expected ':' after a key", id="missing_colon"),
        pytest.param('{"a":"x', 5, "unterminated string (file truncated?)", id="unterminated_string"),
        pytest.param('{"a":"x\\u00zz"}', 7, "invalid \\u escape (0x5c7530307a7a)", id="bad_unicode_escape"),
        pytest.param('{"a":"\\u 1a2"}', 6, "invalid \\u escape (0x5c7520316132)", id="unicode_escape_with_a_space"),
        # before: read as {"a": [1]} (a map or an array ended by the other's bracket was taken as ended)
        pytest.param('{"a":[1}', 7, "expected ',' or ']', found 0x7d", id="array_closed_by_a_brace"),
        pytest.param('{"a":{"b":1]}', 11, "expected ',' or '}', found 0x5d", id="map_closed_by_a_bracket"),
        pytest.param('{"a":1 "b":2}', 7, "expected ',' or '}', found 0x22", id="missing_comma"),
        pytest.param("{0:1 1:2}", 5, "expected ',' or '}', found 0x31", id="missing_comma_between_bare_keys"),
    ],
)
def test_invalid_text_raises_with_position(text: str, position: int, reason: str) -> None:
    with pytest.raises(ConfigParseError) as err:
        fastjson.loads(text, source_path="f.json")
    assert (err.value.source_path, err.value.position, err.value.reason) == ("f.json", position, reason)
    assert str(err.value) == f"f.json: at character {position}: {reason}"


def _lenient(text: str) -> object:
    """What the lenient parser alone gives: the value, or the error's (position, reason)."""
    p = fastjson._Parser(text, "f.json")
    try:
        p.ws()
        if p.i >= len(text):
            raise ConfigParseError("f.json", 0, "empty file")
        v = p.value()
        p.ws()
        if p.i != len(text):
            raise p.fail("trailing characters after the JSON value")
        return ("value", v, _types(v))
    except ConfigParseError as e:
        return ("error", e.position, e.reason)


def _loads(text: str) -> object:
    try:
        v = fastjson.loads(text, source_path="f.json")
        return ("value", v, _types(v))
    except ConfigParseError as e:
        return ("error", e.position, e.reason)


def _types(v: object) -> object:
    """The value's shape with every type named (1 == 1.0 == True in Python; the parsers must agree on types too)."""
    if isinstance(v, dict):
        return [(type(k).__name__, _types(k), _types(x)) for k, x in v.items()]
    if isinstance(v, (list, tuple)):
        return [_types(x) for x in v]
    return (type(v).__name__, repr(v))


def _random_text(rng: "random.Random") -> str:
    import json
    import random  # noqa: F401 - for the annotation

    def scalar() -> object:
        return rng.choice([
            rng.randint(-5, 5), rng.randint(-(1 << 70), 1 << 70), rng.choice([(1 << 63) - 1, 1 << 63, -(1 << 63),
                                                                              -(1 << 63) - 1]),
            rng.random() * 10 ** rng.randint(-5, 5), True, False, None, "",
            "".join(rng.choice('ab "\\/\t\n\u00e9\u4e2d\U0001F600{}[]:,') for _ in range(rng.randint(1, 8)))])

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 4 or r < 0.4:
            return scalar()
        if r < 0.75:
            return {rng.choice(["a", "b", "topic@group", "0", "x y", "\u00e9"]): value(depth + 1)
                    for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    text = json.dumps(value(0), ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, 1, "\t"]),
                      separators=rng.choice([None, (",", ":"), (", ", ": ")]))
    mutate = rng.random()
    if mutate < 0.15 and "{" in text:  # a repeated key
        i = text.index("{")
        text = text[:i + 1] + '"a":1,' + text[i + 1:] if text[i + 1] != "}" else text
    elif mutate < 0.3:  # a byte the strict parser refuses or reads otherwise, somewhere
        i = rng.randint(0, len(text))
        text = text[:i] + rng.choice(["\u0001", "\t", "\\u00e9", "\\ud83d\\ude00", "NaN", "Infinity", "-0", "1e400",
                                      "01", "'", "\ufeff", " ", "{0:1}", ",", "]", "}"]) + text[i:]
    elif mutate < 0.35:  # cut short
        text = text[:rng.randint(0, len(text))]
    return text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_strict_fast_path_reads_every_text_as_the_lenient_parser(seed: int) -> None:
    """``loads`` tries the C parser first (strict JSON); on 3,000 random texts, valid and broken, it gives the lenient
    parser's value with the same types, or its error at the same position."""
    import random

    rng = random.Random(seed)
    fast = 0
    for _ in range(3000):
        text = _random_text(rng)
        assert _loads(text) == _lenient(text), text
        try:
            fastjson._strict(text)
            fast += 1
        except fastjson._NotStrict:
            pass
    assert fast > 1000  # the fast path is taken, and so is the other way
    assert fast < 2900


@pytest.mark.parametrize("depth, ok", [(200, True), (201, False)])
def test_nesting_beyond_the_limit_fails_the_same_way_on_the_fast_path(depth: int, ok: bool) -> None:
    text = "[" * (depth - 1) + "{}" + "]" * (depth - 1)
    assert _loads(text) == _lenient(text)
    assert (_loads(text)[0] == "value") is ok
    if not ok:
        assert _loads(text) == ("error", 200, f"nesting deeper than {fastjson.MAX_DEPTH} levels")


@pytest.mark.parametrize("rel", ROUND_TRIP + ROUND_TRIP_STRIPPED + COMPACT)
def test_real_files_read_the_same_on_either_path(rel: str) -> None:
    text = (REAL / rel).read_text()
    assert _loads(text) == _lenient(text)


def _fastjson_text(rng: random.Random) -> str:
    """A random document as fastjson writes it (bare integer keys, MessageQueue keys, pretty or compact), often
    damaged."""
    def scalar() -> object:
        return rng.choice([rng.randint(-5, 30), rng.choice([(1 << 63) - 1, 1 << 63, 10 ** 17, -10 ** 18, 10 ** 30]),
                           rng.random(), True, False, None, "", "".join(rng.choice('ab "\\\t\n\u00e9{}[]:,\'')
                                                                     for _ in range(rng.randint(1, 6)))])

    def key() -> object:
        r = rng.random()
        if r < 0.35:
            return rng.randint(-3, 30)
        if r < 0.45:
            return fastjson.ObjectKey.of(brokerName=rng.choice(["b", 'a"b']), queueId=rng.randint(0, 3), topic="T")
        return rng.choice(["a", "b", "T@G", "0", "x y", "\u00e9", 'q"', ""])

    def value(depth: int) -> Any:
        r = rng.random()
        if depth > 3 or r < 0.45:
            return scalar()
        if r < 0.85:
            return {key(): value(depth + 1) for _ in range(rng.randint(0, 5))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    text = fastjson.dumps(value(0), pretty=rng.random() < 0.6)
    if rng.random() < 0.3:
        text = text.replace(":", rng.choice([" : ", ":\n\t", ": "]))
    for _ in range(rng.choice([0, 0, 1, 2])):
        at = rng.randint(0, len(text))
        text = text[:at] + rng.choice(["{", "}", "[", "]", ":", ",", '"', "'", "\\", "-", "01", "1.5", "1e3", "nul", " ",
                                       "\n", "x", "{0:1}", "1 2"]) + text[at + rng.choice([0, 0, 1, 2]):]
    return text


class _Counted:
    """A pattern that counts its matches."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.hits = pattern, 0

    def match(self, text: str, at: int) -> re.Match[str] | None:
        m = self.pattern.match(text, at)
        self.hits += m is not None
        return m


@pytest.mark.parametrize("seed", [1, 2])
def test_entries_read_in_one_match_read_as_the_general_path_reads_them(seed: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The lenient parser reads a usual map entry with one regex match (a 100,000-queue consumerOffset.json 4x
    faster); on 3,000 random fastjson texts, valid and broken, it gives what the general path alone gives: the same
    value with the same types, or the same error at the same position."""
    rng = random.Random(seed)
    texts = [_fastjson_text(rng) for _ in range(3000)]
    entry = _Counted(fastjson._ENTRY)
    monkeypatch.setattr(fastjson, "_ENTRY", entry)
    fast = [_lenient(t) for t in texts]
    assert entry.hits > 5000 and 500 < sum(r[0] == "error" for r in fast) < 2500  # both ways, both outcomes
    never = re.compile(r"(?!)")
    for name in ("_ENTRY", "_PLAIN_KEY", "_PLAIN_VALUE"):
        monkeypatch.setattr(fastjson, name, never)
    assert [_lenient(t) for t in texts] == fast
