"""Broker and client config files -> rows (formats §1, §2), with the broker's own ``.bak`` fallback.

Rows are plain dicts named after the silver columns; the caller adds cluster, broker, snapshot time and
provenance. A bad entry (a key without ``@``, a negative offset, a topic or group name RocketMQ cannot produce,
:mod:`jobs.formats.names`) becomes a :class:`Problem` and the rest of the file still lands; a file that cannot be
read at all falls back to ``.bak`` exactly as ``ConfigManager.load`` does. A reason quotes names through
:func:`names.shown`, so a hostile key cannot put a line break into the quarantine.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from jobs.formats import fastjson, names
from jobs.problems import ConfigParseError, Problem

Rows = list[dict[str, Any]]
KINDS = ("consumer_offsets", "subscription_groups", "topics", "delay_offsets", "client_offsets", "order_info")

_KNOWN_TOP = {
    "consumer_offsets": {"offsetTable", "dataVersion", "groupTopicMap", "lmqOffsetTable"},
    "subscription_groups": {"subscriptionGroupTable", "dataVersion", "forbiddenTable"},
    "topics": {"topicConfigTable", "dataVersion", "topicQueueMappingInfoMap", "topicQueueMappingDetailMap"},
    "delay_offsets": {"offsetTable", "dataVersion"},
    "client_offsets": {"offsetTable"},
    "order_info": {"table", "dataVersion"},
}
_REQUIRED_TOP = {
    "consumer_offsets": "offsetTable",
    "subscription_groups": "subscriptionGroupTable",
    "topics": "topicConfigTable",
    "delay_offsets": "offsetTable",
    "client_offsets": "offsetTable",
    "order_info": "table",
}


@dataclass
class Parsed:
    """One config file as loaded: the rows, which file they came from, and what was wrong."""

    kind: str
    source_path: str
    used_backup: bool = False
    missing: bool = False
    rows: Rows = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _position(text: str, needle: str) -> int:
    """Character offset of a key in the file, so a quarantined entry can be found again."""
    pos = text.find(needle)
    return max(pos, 0)


def _value(v: Any) -> str:
    """A bad value as a reason quotes it: its repr (which escapes every line break and control character), cut short."""
    text = repr(v)
    return text if len(text) <= 32 else text[:32] + "..."


def _needles(key: Any) -> Iterator[tuple[str, bool]]:
    """The texts a key may stand as in the file, most likely first; True: a quote either side may belong to it (a
    number key, bare or quoted; a string key written bare or in single quotes)."""
    if isinstance(key, fastjson.ObjectKey):  # a MessageQueue: pretty in a client's offsetTable, or compact
        yield fastjson.dumps(dict(key)).replace("\n", "\n\t\t"), False
        yield fastjson.dumps(dict(key), pretty=False), False
    elif not isinstance(key, str) or isinstance(key, fastjson.BigNumber):
        yield str(key), True
    else:
        quoted = json.dumps(key, ensure_ascii=False)  # as fastjson writes it
        yield quoted, False
        if key:
            yield quoted[1:-1], True
            if quoted[1:-1] != key:  # control characters as they are (the parser takes them)
                yield key, True


def _key_start(text: str, start: int, end: int, loose: bool) -> int:
    """Where ``text[start:end]`` begins as a key, with '{' or ',' before it and ':' after it (blanks between), else
    -1."""
    if loose and start > 0 and text[start - 1] in "\"'":
        start -= 1
    before = start - 1
    while before >= 0 and text[before].isspace():
        before -= 1
    if before < 0 or text[before] not in "{,":
        return -1
    if loose and end < len(text) and text[end] in "\"'":
        end += 1
    while end < len(text) and text[end].isspace():
        end += 1
    return start if end < len(text) and text[end] == ":" else -1


class _Keys:
    """Where the keys of bad entries are in a file: a problem's position is its quarantine key, so each bad entry
    needs its own, and only bad entries are looked up.

    A search of the whole file for each (and a regex compiled for each queue) made parsing quadratic: 37 s for one
    group of 20,000 queues. A map's entries come in the order of its text, so a :class:`_Cursor` starts each search
    where the map's previous key was found and a file is read about once however many entries are bad. The budget, a
    few reads of the file, bounds what a hostile file of keys found nowhere can cost: past it, a position is the
    cursor's default."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.budget = 8 * len(text) + (1 << 20)

    def find(self, needle: str, start: int, loose: bool) -> int:
        """Where ``needle`` first stands as a key at or after ``start``, or -1."""
        text = self.text
        i = start
        while self.budget > 0:
            j = text.find(needle, i)
            self.budget -= (len(text) if j < 0 else j + len(needle)) - i + 8  # 8: a candidate's Python cost
            if j < 0:
                return -1
            at = _key_start(text, j, j + len(needle), loose)
            if at >= 0:
                return at
            i = j + 1
        return -1


class _Cursor:
    """The keys of one map, looked up in text order from ``start``; one not found after the previous (written twice,
    or out of order) is looked for from ``start``, as the search from the top used to. Not found: ``start``."""

    def __init__(self, keys: _Keys, start: int = 0) -> None:
        self.keys = keys
        self.start = start
        self.next = start

    def at(self, key: Any) -> int:
        for needle, loose in _needles(key):
            pos = self.keys.find(needle, self.next, loose)
            if pos < 0 and self.next > self.start:
                pos = self.keys.find(needle, self.start, loose)
            if pos >= 0:
                self.next = pos + 1
                return pos
        return self.start


def _bad_name(what: str, name: str, key: Any, why: str) -> str:
    """Why an entry is skipped: its name, and the key it came from when that is not the name itself."""
    of = "" if name == str(key) else f" of key '{names.shown(key)}'"
    return f"{what} '{names.shown(name)}'{of} {why}: entry skipped"


def _offset_value(v: Any) -> int | None:
    """A committed offset: a non-negative integer (AtomicLong as a number)."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v if v >= 0 else None


def _not_an_offset(v: Any) -> str:
    if isinstance(v, fastjson.BigNumber) and not v.startswith("-"):
        return "is beyond 2^63-1 (a Java long)"
    return "is not a non-negative integer"


def _top(doc: Any, kind: str, path: str, keys: _Keys) -> tuple[dict[Any, Any], list[Problem]]:
    if not isinstance(doc, dict):
        raise ConfigParseError(path, 0, f"expected a JSON object at the top, found {type(doc).__name__}")
    required = _REQUIRED_TOP[kind]
    if required not in doc and not (kind == "consumer_offsets" and "lmqOffsetTable" in doc):
        found = sorted(map(str, doc))
        listed = ", ".join(f"'{names.shown(k)}'" for k in found[:10]) + (", ..." if len(found) > 10 else "")
        raise ConfigParseError(path, 0, f"no '{required}' in the file (keys: [{listed}])")
    fields = _Cursor(keys)
    problems = [Problem(path, fields.at(k), f"unknown field '{names.shown(k)}' ignored")
                for k in doc if k not in _KNOWN_TOP[kind]]
    return doc, problems


def _table(doc: dict[Any, Any], name: str, path: str, text: str, problems: list[Problem]) -> dict[Any, Any]:
    """The map ``name`` of the file (absent or null: empty). Any other value is a problem and the map's entries are
    skipped: the rest of the file still lands, as for consumerOffset.json's tables."""
    table = doc.get(name) or {}
    if isinstance(table, dict):
        return table
    problems.append(Problem(path, _position(text, f'"{name}"'), f"'{name}' is not a map: its entries are skipped"))
    return {}


def _topic_group(key: Any) -> tuple[str, str, str | None]:
    """A consumerOffset.json key's topic and group, or why the entry is skipped."""
    parts = str(key).split("@")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return "", "", (f"key '{names.shown(key)}' is not 'topic@group' with exactly one '@': entry skipped (as the "
                        "broker's whichTopicByConsumer does)")
    topic, group = parts
    why = names.topic_problem(topic)
    if why:
        return topic, group, _bad_name("topic", topic, key, why)
    why = names.group_problem(group)
    return topic, group, _bad_name("group", group, key, why) if why else None


def parse_consumer_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """consumerOffset.json (4.x/5.x) or lmqConsumerOffset.json: ``{"topic@group": {queueId: offset}}``."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "consumer_offsets", source_path, keys)
    rows: Rows = []
    for table_name in ("offsetTable", "lmqOffsetTable"):
        table = doc.get(table_name) or {}
        if not isinstance(table, dict):
            problems.append(Problem(source_path, _position(text, f'"{table_name}"'), f"'{table_name}' is not a map"))
            continue
        entries = _Cursor(keys)
        for key, queues in table.items():
            topic, group, why = _topic_group(key)
            if why:
                problems.append(Problem(source_path, entries.at(key), why))
                continue
            single = table_name == "lmqOffsetTable" and not isinstance(queues, dict)  # an LMQ's one offset
            if single:
                queues = {0: queues}
            if not isinstance(queues, dict):
                problems.append(Problem(source_path, entries.at(key),
                                        f"'{names.shown(key)}': expected a map of queueId to offset"))
                continue
            in_entry: _Cursor | None = None  # the entry's queues, found from its key on its first bad queue
            for qid, off in queues.items():
                value = _offset_value(off)
                good_qid = not isinstance(qid, bool) and isinstance(qid, int) and 0 <= qid < (1 << 31)
                if good_qid and value is not None:
                    rows.append({"consumer_group": group, "topic": topic, "queue_id": qid, "committed_offset": value,
                                 "is_retry_topic": topic.startswith("%RETRY%")})
                    continue
                if in_entry is None:
                    in_entry = _Cursor(keys, entries.at(key))
                at = in_entry.start if single else in_entry.at(qid)
                if not good_qid:
                    problems.append(Problem(source_path, at, f"'{names.shown(key)}': queue id {_value(qid)} is not a "
                                            "non-negative integer: entry skipped"))
                else:
                    problems.append(Problem(source_path, at, f"'{names.shown(key)}' queue {qid}: offset {_value(off)} "
                                            f"{_not_an_offset(off)}: entry skipped"))
    return rows, problems


def _bool(v: Any, default: bool) -> bool:
    return v if isinstance(v, bool) else default


def _int(v: Any, default: int | None) -> int | None:
    """A Java int field: anything else (a string, a number past 32 bits) takes the broker's default."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 31) <= v < (1 << 31) else default


def _policy_json(policy: Any) -> str:
    """The group's retry policy as compact JSON, keys sorted; keys JSON cannot sort or hold (ints beside strings, an
    object as a key) are written as their JSON text first."""
    try:
        return json.dumps(policy, sort_keys=True, separators=(",", ":"))
    except TypeError:
        def plain(v: Any) -> Any:
            if isinstance(v, dict):
                return {(k if isinstance(k, str) else fastjson.dumps(dict(k), pretty=False)
                         if isinstance(k, fastjson.ObjectKey) else json.dumps(k)): plain(x) for k, x in v.items()}
            return [plain(x) for x in v] if isinstance(v, list) else v
        return json.dumps(plain(policy), sort_keys=True, separators=(",", ":"))


def parse_subscription_groups(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """subscriptionGroup.json: ``SubscriptionGroupConfig`` per group, defaults of formats §1.4."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "subscription_groups", source_path, keys)
    rows: Rows = []
    entries = _Cursor(keys)
    for name, cfg in _table(doc, "subscriptionGroupTable", source_path, text, problems).items():
        if not isinstance(cfg, dict):
            problems.append(Problem(source_path, entries.at(name), f"group '{names.shown(name)}': not an object"))
            continue
        group = str(cfg.get("groupName") or name)
        why = names.group_problem(group)
        if why:
            problems.append(Problem(source_path, entries.at(name), _bad_name("group", group, name, why)))
            continue
        policy = cfg.get("groupRetryPolicy")
        rows.append({
            "consumer_group": group,
            "retry_max_times": _int(cfg.get("retryMaxTimes"), 16),
            "retry_queue_nums": _int(cfg.get("retryQueueNums"), 1),
            "consume_enable": _bool(cfg.get("consumeEnable"), True),
            "consume_broadcast_enable": _bool(cfg.get("consumeBroadcastEnable"), True),
            "consume_message_orderly": _bool(cfg.get("consumeMessageOrderly"), False),
            "consume_timeout_minute": _int(cfg.get("consumeTimeoutMinute"), 15),
            "group_retry_policy": None if policy is None else _policy_json(policy),
        })
    return rows, problems


def parse_topics(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """topics.json: ``TopicConfig`` per topic (formats §1.5)."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "topics", source_path, keys)
    rows: Rows = []
    entries = _Cursor(keys)
    for name, cfg in _table(doc, "topicConfigTable", source_path, text, problems).items():
        if not isinstance(cfg, dict):
            problems.append(Problem(source_path, entries.at(name), f"topic '{names.shown(name)}': not an object"))
            continue
        topic = str(cfg.get("topicName") or name)
        why = names.topic_problem(topic)
        if why:
            problems.append(Problem(source_path, entries.at(name), _bad_name("topic", topic, name, why)))
            continue
        rows.append({
            "topic": topic,
            "read_queue_nums": _int(cfg.get("readQueueNums"), 16),
            "write_queue_nums": _int(cfg.get("writeQueueNums"), 16),
            "perm": _int(cfg.get("perm"), 6),
            "topic_sys_flag": _int(cfg.get("topicSysFlag"), 0),
            "order": _bool(cfg.get("order"), False),
            "queue_type": _attribute(cfg, QUEUE_TYPE, "SimpleCQ"),
            "cleanup_policy": _attribute(cfg, CLEANUP_POLICY, "DELETE"),
        })
    return rows, problems


# TopicAttributes (5.x): both are EnumAttributes that cannot change after the topic is created
QUEUE_TYPE, CLEANUP_POLICY = "queue.type", "cleanup.policy"


def _attribute(cfg: dict[str, Any], name: str, default: str) -> str:
    """A topic attribute as the broker resolves it (``TopicConfig.getAttributes``, keys without the ``+`` of the
    admin request; absent or not a string: the attribute's default)."""
    attrs = cfg.get("attributes")
    if not isinstance(attrs, dict):
        return default
    value = attrs.get(name, attrs.get("+" + name))
    return value if isinstance(value, str) and value else default


def parse_delay_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """delayOffset.json: ``{delayLevel: offset}`` with bare integer keys (formats §1.6)."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "delay_offsets", source_path, keys)
    rows: Rows = []
    entries = _Cursor(keys)
    for level, off in _table(doc, "offsetTable", source_path, text, problems).items():
        value = _offset_value(off)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < (1 << 31) or value is None:
            problems.append(Problem(source_path, entries.at(level),
                                    f"delay level {_value(level)}: offset {_value(off)} is not a non-negative integer: "
                                    "skipped"))
            continue
        rows.append({"delay_level": level, "offset": value})
    return rows, problems


def _long(v: Any) -> int | None:
    """A Java long field as fastjson writes it (a number), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63) else None


def _long_map(v: Any, bits: int) -> dict[int, int] | None:
    """A ``Map<Long, Long|Integer>`` (bare number keys); None when it is not one."""
    if not isinstance(v, dict):
        return None
    out = {}
    for k, x in v.items():
        key, val = _long(k), _long(x)
        if key is None or val is None or not -(1 << (bits - 1)) <= val < (1 << (bits - 1)):
            return None
        out[key] = val
    return out


def parse_order_info(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """consumerOrderInfo.json (5.x ``ConsumerOrderInfoManager``, rocketmq5.md §2.1): ``{"table": {"topic@group":
    {queueId: OrderInfo}}}``, OrderInfo = ``popTime``, ``i`` invisibleTime, ``o`` offsets, ``ot`` {offset: next
    visible time}, ``oc`` {offset: consumed count}, ``l`` last consume time, ``cm`` commit bits, ``a`` attempt id.
    ``popTime`` and ``o`` are required; a field of the wrong type skips its queue's entry."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "order_info", source_path, keys)
    rows: Rows = []
    entries = _Cursor(keys)
    for key, queues in _table(doc, "table", source_path, text, problems).items():
        topic, group, why = _topic_group(key)
        if why:
            problems.append(Problem(source_path, entries.at(key), why))
            continue
        if not isinstance(queues, dict):
            problems.append(Problem(source_path, entries.at(key),
                                    f"'{names.shown(key)}': expected a map of queueId to OrderInfo"))
            continue
        in_entry: _Cursor | None = None
        for qid, info in queues.items():
            good_qid = not isinstance(qid, bool) and isinstance(qid, int) and 0 <= qid < (1 << 31)
            info = info if isinstance(info, dict) else {}
            offsets = info.get("o")
            row = {"consumer_group": group, "topic": topic, "queue_id": qid, "pop_time": _long(info.get("popTime")),
                   "invisible_time": _long(info.get("i")),
                   "offsets": [_long(o) for o in offsets] if isinstance(offsets, list) else None,
                   "next_visible_ms": _long_map(info.get("ot"), 64) if info.get("ot") is not None else None,
                   "consumed_counts": _long_map(info.get("oc"), 32) if info.get("oc") is not None else None,
                   "last_consume_ts": _long(info.get("l", 0)), "commit_offset_bit": _long(info.get("cm", 0)),
                   "attempt_id": info.get("a") if isinstance(info.get("a"), str) else None}
            bad = [name for name, col, present in (
                ("popTime", "pop_time", True), ("o", "offsets", True), ("i", "invisible_time", "i" in info),
                ("ot", "next_visible_ms", info.get("ot") is not None),
                ("oc", "consumed_counts", info.get("oc") is not None),
                ("l", "last_consume_ts", True), ("cm", "commit_offset_bit", True),
                ("a", "attempt_id", info.get("a") is not None)) if present and row[col] is None]
            if row["offsets"] is not None and None in row["offsets"]:
                bad.append("o")
            if good_qid and not bad:
                rows.append(row)
                continue
            if in_entry is None:
                in_entry = _Cursor(keys, entries.at(key))
            what = (f"queue id {_value(qid)} is not a non-negative integer" if not good_qid else
                    "not an OrderInfo object" if not info else
                    "field " + ", ".join(f"'{b}'" for b in sorted(set(bad))) + " missing or not of its Java type")
            problems.append(Problem(source_path, in_entry.at(qid), f"'{names.shown(key)}' queue {_value(qid)}: {what}: "
                                    "entry skipped"))
    return rows, problems


def _message_queue_problem(broker: str, topic: str, qid: int) -> str | None:
    """Why a client's MessageQueue key names no queue RocketMQ can have, or None."""
    why = names.label_problem(broker)
    if why:
        return (f"brokerName '{names.shown(broker)}' of the MessageQueue key (topic '{names.shown(topic)}', queue "
                f"{qid}) {why}: entry skipped")
    why = names.topic_problem(topic)
    if why:
        return (f"topic '{names.shown(topic)}' of the MessageQueue key (brokerName '{names.shown(broker)}', queue "
                f"{qid}) {why}: entry skipped")
    return None


def parse_client_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """A broadcast client's offsets.json: MessageQueue objects as keys (formats §2)."""
    keys = _Keys(text)
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "client_offsets", source_path, keys)
    rows: Rows = []
    entries = _Cursor(keys)
    for key, off in _table(doc, "offsetTable", source_path, text, problems).items():
        mq = key.as_dict() if isinstance(key, fastjson.ObjectKey) else None
        value = _offset_value(off)
        if (mq is None or not {"brokerName", "queueId", "topic"} <= set(mq) or isinstance(mq["queueId"], bool)
                or not isinstance(mq["queueId"], int) or not 0 <= mq["queueId"] < (1 << 31)):
            problems.append(Problem(source_path, 0, f"key {_value(key)} is not a MessageQueue "
                                    "{brokerName, queueId, topic}: entry skipped"))
            continue
        broker, topic, qid = str(mq["brokerName"]), str(mq["topic"]), mq["queueId"]
        why = _message_queue_problem(broker, topic, qid)
        if why:
            problems.append(Problem(source_path, entries.at(key), why))
            continue
        if value is None:
            problems.append(Problem(source_path, 0, f"{names.shown(topic)} {names.shown(broker)} queue {qid}: offset "
                                    f"{_value(off)} is not a non-negative integer: entry skipped"))
            continue
        rows.append({"broker": broker, "topic": topic, "queue_id": qid, "committed_offset": value})
    return rows, problems


PARSERS: dict[str, Callable[[str, str], tuple[Rows, list[Problem]]]] = {
    "consumer_offsets": parse_consumer_offsets,
    "subscription_groups": parse_subscription_groups,
    "topics": parse_topics,
    "delay_offsets": parse_delay_offsets,
    "client_offsets": parse_client_offsets,
    "order_info": parse_order_info,
}


def unreadable(exc: OSError) -> str:
    """``[Errno 13] Permission denied``: the error without the local path (the problem names the file)."""
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)


def _try(read: Callable[[str], bytes | None], path: str, kind: str) -> tuple[Parsed | None, Problem | None, bool]:
    """Parse one file; (result, problem, present)."""
    try:
        data = read(path)
    except OSError as exc:  # a permission, a symlink loop, an I/O error: this file only
        return None, Problem(path, 0, f"unreadable ({unreadable(exc)})"), True
    if data is None:
        return None, None, False
    if not data.strip():
        return None, Problem(path, 0, "empty file"), True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, Problem(path, exc.start, f"not valid UTF-8 (byte {exc.start}: {exc.reason})"), True
    try:
        rows, problems = PARSERS[kind](text, path)
    except ConfigParseError as exc:
        return None, Problem(path, exc.position, exc.reason), True
    return Parsed(kind, path, rows=rows, problems=problems), None, True


def load(read: Callable[[str], bytes | None], path: str, kind: str) -> Parsed:
    """Load a config file the way the broker does (``ConfigManager.load``, formats §1.2).

    Read ``path``; when it is missing, empty, not UTF-8, truncated or unparseable, load ``path + ".bak"`` and
    record ``used_backup``. Never raises for bad content: the problems say what was wrong.
    """
    if kind not in PARSERS:
        raise ValueError(f"unknown config kind {kind!r}; expected one of {KINDS}")
    main, main_problem, main_present = _try(read, path, kind)
    if main is not None:
        return main
    bak_path = path + ".bak"
    bak, bak_problem, bak_present = _try(read, bak_path, kind)
    problems: list[Problem] = []
    if main_problem is not None:
        suffix = "; loaded the .bak instead" if bak is not None else "; the .bak could not be used either"
        problems.append(Problem(main_problem.source_path, main_problem.position, main_problem.reason + suffix))
    if bak is not None:
        bak.used_backup = True
        bak.problems = problems + bak.problems
        return bak
    if bak_problem is not None:
        problems.append(bak_problem)
    if not main_present and not bak_present:
        return Parsed(kind, path, missing=True)
    return Parsed(kind, path, used_backup=False, problems=problems)
