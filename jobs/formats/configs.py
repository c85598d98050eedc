"""Broker and client config files -> rows (formats §1, §2), with the broker's own ``.bak`` fallback.

Rows are plain dicts named after the silver columns; the caller adds cluster, broker, snapshot time and
provenance. A bad entry (a key without ``@``, a negative offset) becomes a :class:`Problem` and the rest of
the file still lands; a file that cannot be read at all falls back to ``.bak`` exactly as
``ConfigManager.load`` does.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from jobs.formats import fastjson
from jobs.problems import ConfigParseError, Problem

Rows = list[dict[str, Any]]
KINDS = ("consumer_offsets", "subscription_groups", "topics", "delay_offsets", "client_offsets")

_KNOWN_TOP = {
    "consumer_offsets": {"offsetTable", "dataVersion", "groupTopicMap", "lmqOffsetTable"},
    "subscription_groups": {"subscriptionGroupTable", "dataVersion", "forbiddenTable"},
    "topics": {"topicConfigTable", "dataVersion", "topicQueueMappingInfoMap", "topicQueueMappingDetailMap"},
    "delay_offsets": {"offsetTable", "dataVersion"},
    "client_offsets": {"offsetTable"},
}
_REQUIRED_TOP = {
    "consumer_offsets": "offsetTable",
    "subscription_groups": "subscriptionGroupTable",
    "topics": "topicConfigTable",
    "delay_offsets": "offsetTable",
    "client_offsets": "offsetTable",
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


def _offset_value(v: Any) -> int | None:
    """A committed offset: a non-negative integer (AtomicLong as a number)."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v if v >= 0 else None


def _entry_position(text: str, start: int, qid: Any) -> int:
    """Where the queue's entry starts after its group's key: each bad entry has its own position (the quarantine's
    key), so two bad queues of one group are both kept."""
    m = re.compile(r'[{,]\s*("?' + re.escape(str(qid)) + r'"?)\s*:').search(text, start)
    return m.start(1) if m else start


def _not_an_offset(v: Any) -> str:
    if isinstance(v, fastjson.BigNumber) and not v.startswith("-"):
        return "is beyond 2^63-1 (a Java long)"
    return "is not a non-negative integer"


def _top(doc: Any, kind: str, path: str, text: str) -> tuple[dict[Any, Any], list[Problem]]:
    if not isinstance(doc, dict):
        raise ConfigParseError(path, 0, f"expected a JSON object at the top, found {type(doc).__name__}")
    required = _REQUIRED_TOP[kind]
    if required not in doc and not (kind == "consumer_offsets" and "lmqOffsetTable" in doc):
        raise ConfigParseError(path, 0, f"no '{required}' in the file (keys: {sorted(map(str, doc))})")
    problems = [Problem(path, _position(text, f'"{k}"'), f"unknown field '{k}' ignored")
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


def parse_consumer_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """consumerOffset.json (4.x/5.x) or lmqConsumerOffset.json: ``{"topic@group": {queueId: offset}}``."""
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "consumer_offsets", source_path, text)
    rows: Rows = []
    for table_name in ("offsetTable", "lmqOffsetTable"):
        table = doc.get(table_name) or {}
        if not isinstance(table, dict):
            problems.append(Problem(source_path, _position(text, f'"{table_name}"'), f"'{table_name}' is not a map"))
            continue
        for key, queues in table.items():
            pos = _position(text, json.dumps(str(key), ensure_ascii=False))
            parts = str(key).split("@")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                problems.append(Problem(source_path, pos, f"key '{key}' is not 'topic@group' with exactly one '@': "
                                        "entry skipped (as the broker's whichTopicByConsumer does)"))
                continue
            topic, group = parts
            if table_name == "lmqOffsetTable":
                queues = {0: queues} if not isinstance(queues, dict) else queues
            if not isinstance(queues, dict):
                problems.append(Problem(source_path, pos, f"'{key}': expected a map of queueId to offset"))
                continue
            for qid, off in queues.items():
                at = _entry_position(text, pos, qid)
                if isinstance(qid, bool) or not isinstance(qid, int) or not 0 <= qid < (1 << 31):
                    problems.append(Problem(source_path, at, f"'{key}': queue id {qid!r} is not a non-negative "
                                            "integer: entry skipped"))
                    continue
                value = _offset_value(off)
                if value is None:
                    problems.append(Problem(source_path, at, f"'{key}' queue {qid}: offset {off!r} "
                                            f"{_not_an_offset(off)}: entry skipped"))
                    continue
                rows.append({"consumer_group": group, "topic": topic, "queue_id": qid, "committed_offset": value,
                             "is_retry_topic": topic.startswith("%RETRY%")})
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
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "subscription_groups", source_path, text)
    rows: Rows = []
    for name, cfg in _table(doc, "subscriptionGroupTable", source_path, text, problems).items():
        if not isinstance(cfg, dict):
            problems.append(Problem(source_path, _position(text, f'"{name}"'), f"group '{name}': not an object"))
            continue
        policy = cfg.get("groupRetryPolicy")
        rows.append({
            "consumer_group": str(cfg.get("groupName") or name),
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
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "topics", source_path, text)
    rows: Rows = []
    for name, cfg in _table(doc, "topicConfigTable", source_path, text, problems).items():
        if not isinstance(cfg, dict):
            problems.append(Problem(source_path, _position(text, f'"{name}"'), f"topic '{name}': not an object"))
            continue
        rows.append({
            "topic": str(cfg.get("topicName") or name),
            "read_queue_nums": _int(cfg.get("readQueueNums"), 16),
            "write_queue_nums": _int(cfg.get("writeQueueNums"), 16),
            "perm": _int(cfg.get("perm"), 6),
            "topic_sys_flag": _int(cfg.get("topicSysFlag"), 0),
            "order": _bool(cfg.get("order"), False),
        })
    return rows, problems


def parse_delay_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """delayOffset.json: ``{delayLevel: offset}`` with bare integer keys (formats §1.6)."""
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "delay_offsets", source_path, text)
    rows: Rows = []
    for level, off in _table(doc, "offsetTable", source_path, text, problems).items():
        value = _offset_value(off)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < (1 << 31) or value is None:
            problems.append(Problem(source_path, _position(text, f"{level}:"),
                                    f"delay level {level!r}: offset {off!r} is not a non-negative integer: skipped"))
            continue
        rows.append({"delay_level": level, "offset": value})
    return rows, problems


def parse_client_offsets(text: str, source_path: str) -> tuple[Rows, list[Problem]]:
    """A broadcast client's offsets.json: MessageQueue objects as keys (formats §2)."""
    doc, problems = _top(fastjson.loads(text, source_path=source_path), "client_offsets", source_path, text)
    rows: Rows = []
    for key, off in _table(doc, "offsetTable", source_path, text, problems).items():
        mq = key.as_dict() if isinstance(key, fastjson.ObjectKey) else None
        value = _offset_value(off)
        if (mq is None or not {"brokerName", "queueId", "topic"} <= set(mq) or isinstance(mq["queueId"], bool)
                or not isinstance(mq["queueId"], int) or not 0 <= mq["queueId"] < (1 << 31)):
            problems.append(Problem(source_path, 0, f"key {key!r} is not a MessageQueue "
                                    "{brokerName, queueId, topic}: entry skipped"))
            continue
        if value is None:
            problems.append(Problem(source_path, 0, f"{mq['topic']} {mq['brokerName']} queue {mq['queueId']}: offset "
                                    f"{off!r} is not a non-negative integer: entry skipped"))
            continue
        rows.append({"broker": str(mq["brokerName"]), "topic": str(mq["topic"]), "queue_id": mq["queueId"],
                     "committed_offset": value})
    return rows, problems


PARSERS: dict[str, Callable[[str, str], tuple[Rows, list[Problem]]]] = {
    "consumer_offsets": parse_consumer_offsets,
    "subscription_groups": parse_subscription_groups,
    "topics": parse_topics,
    "delay_offsets": parse_delay_offsets,
    "client_offsets": parse_client_offsets,
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
