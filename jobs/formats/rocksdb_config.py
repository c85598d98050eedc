"""RocketMQ 5.x metadata kept in RocksDB instead of JSON (rocketmq5.md §1.2-§1.3), read into the same rows as the
JSON parsers of :mod:`jobs.formats.configs`.

With ``storeType=defaultRocksDB`` (v1: ``config/consumerOffsets/``, ``config/topics/``, ``config/subscriptionGroups/``)
or ``configManagerVersion=v2`` (one DB, ``config/rdb/``) the broker stops writing ``consumerOffset.json``,
``topics.json`` and ``subscriptionGroup.json``: a JSON file beside the DB is stale and must not be read as the truth
(false STALL and REWIND). A DB is opened from a temporary copy, never in place: rocksdict writes
``rocksdict-config.json`` into the folder even read-only, and a landing zone is not ours to write.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from typing import Any, Iterator

from jobs.formats import configs, fastjson, names
from jobs.problems import Problem, excerpt

# The config folders of v1 (one DB each) and v2 (one DB for all), under store/config/: the JSON file each replaces.
V1 = {"consumerOffsets": "consumer_offsets", "topics": "topics", "subscriptionGroups": "subscription_groups"}
V2 = "rdb"
JSON_OF = {"consumer_offsets": "consumerOffset.json", "topics": "topics.json",
           "subscription_groups": "subscriptionGroup.json"}
# v2 key layout (broker/.../config/v2/ConfigStorage, TableId, TablePrefix, RecordPrefix)
_TABLE, _DATA, _CTRL = 1, 2, 1
_TABLE_IDS = {1: "consumer_offsets", 3: "topics", 4: "subscription_groups"}  # 2: pull offsets, not progress

Rows = list[dict[str, Any]]


def open_copy(files: dict[str, bytes]) -> tuple[Any, str]:
    """A read-only rocksdict DB opened from a temporary copy of ``files`` (name in the DB folder -> bytes); the
    caller closes it and removes the folder."""
    from rocksdict import AccessType, Options, Rdict

    tmp = tempfile.mkdtemp(prefix="rmq-recon-rocksdb-")
    for name, data in files.items():
        path = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    try:
        return Rdict(tmp, Options(raw_mode=True), access_type=AccessType.read_only()), tmp
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def items(files: dict[str, bytes]) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the DB's default column family."""
    db, tmp = open_copy(files)
    try:
        yield from db.items()
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _json(value: bytes) -> Any:
    return json.loads(value.decode("utf-8"))


def _v1_rows(kind: str, key: bytes, value: bytes, where: str) -> tuple[Rows, list[str]]:
    """One v1 record as the JSON file's entry: (rows, problems as reasons)."""
    name = key.decode("utf-8")
    if kind == "consumer_offsets":
        # key topic@group, value {"offsetTable":{"0":250}} (fastjson BrowserCompatible: quoted int keys)
        queues = {int(q): o for q, o in (_json(value).get("offsetTable") or {}).items()}
        rows, problems = configs.parse_consumer_offsets(fastjson.dumps({"offsetTable": {name: queues}}), where)
    else:
        table = "topicConfigTable" if kind == "topics" else "subscriptionGroupTable"
        rows, problems = configs.PARSERS[kind](fastjson.dumps({table: {name: _json(value)}}), where)
    return rows, [p.reason for p in problems]


def read_v1(kind: str, files: dict[str, bytes], where: str) -> tuple[Rows, list[Problem]]:
    """The rows of a v1 config DB (``kind``: consumer_offsets, topics or subscription_groups), each record parsed as
    the JSON file's entry would be (the same names and values checked); a record that is not the JSON it should be
    is a problem at its index, the rest land."""
    rows: Rows = []
    problems: list[Problem] = []
    for i, (key, value) in enumerate(items(files)):
        try:
            got, bad = _v1_rows(kind, key, value, where)
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as exc:
            problems.append(Problem(where, i, f"record {i} (key {excerpt(key)}) is not a {kind} record "
                                    f"({type(exc).__name__}): skipped"))
            continue
        rows += got
        problems += [Problem(where, i, f"record {i}: {reason}") for reason in bad]
    return rows, problems


def _short_str(key: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", key, at)
    return key[at + 2: at + 2 + n].decode("utf-8"), at + 2 + n


def read_v2(files: dict[str, bytes], where: str) -> tuple[dict[str, Rows], list[Problem]]:
    """The rows of the v2 DB (``config/rdb/``) by kind: consumer offsets from their binary records
    ``[01][short table][02][short len][group][01][short len][topic][01][int queueId]`` -> ``[long offset]``, topics
    and groups from ``[01][short table][02][short len][name]`` -> ``[01][fastjson]``; data versions and pull offsets
    are skipped. Names and offsets are checked as the JSON parsers check them."""
    out: dict[str, Rows] = {"consumer_offsets": [], "topics": [], "subscription_groups": []}
    problems: list[Problem] = []
    for i, (key, value) in enumerate(items(files)):
        try:
            if len(key) < 4 or key[0] != _TABLE or key[3] != _DATA:
                continue  # a data version record
            (table,) = struct.unpack_from(">h", key, 1)
            kind = _TABLE_IDS.get(table)
            if kind is None:
                continue
            if kind == "consumer_offsets":
                group, at = _short_str(key, 4)
                if key[at] != _CTRL:
                    raise ValueError("no separator after the group")
                topic, at = _short_str(key, at + 1)
                if key[at] != _CTRL:
                    raise ValueError("no separator after the topic")
                (qid,) = struct.unpack_from(">i", key, at + 1)
                (offset,) = struct.unpack(">q", value)
                why = names.topic_problem(topic) or names.group_problem(group)
                if why:
                    problems.append(Problem(where, i, f"record {i}: '{names.shown(topic)}@{names.shown(group)}' "
                                            f"{why}: skipped"))
                elif qid < 0 or offset < 0:
                    problems.append(Problem(where, i, f"record {i}: queue {qid} offset {offset} is not a "
                                            "non-negative integer: skipped"))
                else:
                    out[kind].append({"consumer_group": group, "topic": topic, "queue_id": qid,
                                      "committed_offset": offset, "is_retry_topic": topic.startswith("%RETRY%")})
                continue
            name, _ = _short_str(key, 4)
            if not value or value[0] != 1:
                raise ValueError("value is not JSON (first byte not 0x01)")
            table_name = "topicConfigTable" if kind == "topics" else "subscriptionGroupTable"
            rows, bad = configs.PARSERS[kind](fastjson.dumps({table_name: {name: _json(value[1:])}}), where)
            out[kind] += rows
            problems += [Problem(where, i, f"record {i}: {p.reason}") for p in bad]
        except (ValueError, UnicodeDecodeError, struct.error, IndexError, AttributeError, TypeError) as exc:
            problems.append(Problem(where, i, f"record {i} (key {excerpt(key)}) cannot be read ({exc}): skipped"))
    return out, problems


def db_of(rel: str) -> str | None:
    """Which config DB a path inside a snapshot belongs to (``consumerOffsets``, ``topics``, ``subscriptionGroups``,
    ``rdb``), or None."""
    parts = rel.split("/")
    if len(parts) >= 4 and parts[:2] == ["store", "config"] and (parts[2] in V1 or parts[2] == V2):
        return parts[2]
    return None


def load(db: str, files: dict[str, bytes], where: str) -> tuple[dict[str, Rows], list[Problem]]:
    """The rows of one config DB of a snapshot, by kind; a DB that cannot be opened is one problem and no rows."""
    try:
        if db == V2:
            return read_v2(files, where)
        rows, problems = read_v1(V1[db], files, where)
        return {V1[db]: rows}, problems
    except Exception as exc:  # noqa: BLE001 - rocksdict raises its own errors for a DB it cannot open
        return {}, [Problem(where, 0, f"RocksDB config ({db}) cannot be opened ({type(exc).__name__}: "
                                      f"{str(exc)[:120]}): its rows are not taken from this snapshot")]
