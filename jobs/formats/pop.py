"""POP consumption records (rocketmq5.md §2, reconciliation.md §4.1): the checkpoint (tag ``ck``) and ack (``ack``,
``bAck``) messages a 5.x broker writes to its revive topic, their bodies byte for byte, the properties of the records
they leave in the commitlog, the retry copies revive writes, and POP retry topic names.

Every fact below is read from apache/rocketmq at 8fc57f1468d182eea11c01e089c0250d647dc5f3 (develop, 2025-09-19;
paths shortened: ``PopCheckPoint`` = store/src/main/java/org/apache/rocketmq/store/pop/PopCheckPoint.java, the
processors under broker/src/main/java/org/apache/rocketmq/broker/processor/) and alibaba/fastjson at tag 1.2.83
(26f13f84fdd522de10678e43f55fde918ab7b347; pom.xml ``fastjson.version`` 1.2.83; every body is written with
``com.alibaba.fastjson.JSON.toJSONString``: PopMessageProcessor l.19/939, AckMessageProcessor l.286,
PopBufferMergeService l.651/707, ChangeInvisibleTimeProcessor l.278/321).

Bodies (fastjson 1.2.83 ``JSON.toJSONString(bean)``, compact):
- Names are the ``@JSONField(name=...)`` of the field behind each public getter (TypeUtils.computeGetters
  l.2053-2126). ``PopCheckPoint.getCId()`` (l.117) gives property ``cId``, which ``ParserConfig.getFieldFromCache``
  (l.1218-1228: a name with lowercase then uppercase is matched case-insensitively) resolves to field ``cid``, so its
  name is ``c``. The getter-only ``getReviveTime()`` (PopCheckPoint l.81-83, ``popTime + invisibleTime``) has no
  field and is written as ``reviveTime``; it is ignored on read (no setter).
- Fields are written in ``FieldInfo.compareTo`` order (ordinal, then ``String.compareTo`` of the name, FieldInfo
  l.493-513) because ``SerializerFeature.SortField`` is in ``JSON.DEFAULT_GENERATE_FEATURE`` (JSON l.89-96) and
  ``JavaBeanSerializer.write`` then uses ``sortedGetters`` (l.185-186; the ASM serializer likewise, ASMSerializerFactory
  l.270-293). Null fields are skipped (no WriteMapNullValue); lists as ``[1,2]``; numbers as decimal.
  CK: ``bm,bn,c,d,it,n,pt,q,reviveTime,ro,rp,so,t``; ack: ``ao,bn,c,pt,q,so,t``; bAck: ``ao,aol,bn,c,pt,q,so,t``.
- Strings: ``SerializeWriter.writeFieldValueStringWithDoubleQuoteCheck`` (l.1868-2089) escapes ``"`` ``\\`` and
  \\b \\t \\n \\f \\r with a backslash, other U+0000-U+001F and U+007F-U+009F as ``\\u00XX`` (IOUtils l.110-160,
  uppercase ``DIGITS`` l.45), and U+2028/U+2029; everything else is written as is (UTF-8).
- ``AckMsg`` had no short names before 5.1.0 (commit b56706423f, first in rocketmq-all-5.1.0): a 5.0.x ack reads
  ``{"ackOffset":..,"brokerName":..,"consumerGroup":..,"popTime":..,"queueId":..,"startOffset":..,"topic":..}``
  (same sort; AckMsg l.23-42 keep those as ``alternateNames``, so both are read). ``BatchAckMsg`` (5.1.2+) extends it
  with ``aol`` (alternate ``ackOffsetList``, BatchAckMsg l.25-26).
- What the writers put in them: ``bm`` and ``ro`` are always 0 in a stored CK (every writer calls ``setBitMap(0)``:
  PopMessageProcessor l.957, PopReviveService l.588, ChangeInvisibleTimeProcessor l.310; ``setReviveOffset`` is only
  called on read, PopReviveService l.369): acks are separate messages. ``n`` = messages popped (``(byte) size``,
  PopMessageProcessor l.958; ``maxMsgNums <= 32``, l.267) and ``d`` their offsets minus ``so`` (l.966-968).
  ``AckMessageProcessor.appendAck`` writes a bAck with ``ao`` = -1 (l.228, 275) and ``bn`` = the request's broker
  name; ``PopBufferMergeService.putBatchAckToStore`` (only with ``enablePopBufferMerge``, default false) leaves
  ``ao`` 0 and no ``bn`` (l.692-714). A re-put CK (``PopReviveService.rePutCK`` l.579-606) has n=1, d=[0],
  so = the unrevived offset, the old pt, ``rp`` = times + 1 and, once overdue, ``it`` + ckRewriteIntervals[k]; in
  5.1.0 its ``bn`` could be null (issue #7412).

Matching (``PopReviveService.consumeReviveMessage`` l.357-431): a CK is keyed by t+c+q+so+pt+bn (l.367), an ack or
bAck by the same fields, with an absent or blank ``bn`` replaced by the reviving broker's own name (l.380-382,
407-409); ``indexOfAck`` (PopCheckPoint l.156-173) finds ``ao - so`` in ``d`` (or ``ao - so < n`` without ``d``).
A CK with t or c null is skipped (l.364).

Properties (all through ``Message.putProperty``'s ``new HashMap<>()``, Message l.69-75, and
``MessageDecoder.messageProperties2String`` l.605, so a stored properties string lists its keys in Java HashMap
iteration order: see :func:`java_hashmap_order`):
- CK (``buildCkMsg`` l.935-950; the same in ChangeInvisibleTimeProcessor.appendCheckPointThenAckOrigin l.302-328):
  TAGS=ck, TIMER_DELIVER_MS = pt + it - 1000 (``ackTimeInterval``, PopAckConstants l.22), UNIQ_KEY =
  ``t@q@so@c@pt@bn@ck`` (``genCkUniqueId`` l.167-175).
- ack (``AckMessageProcessor.appendAck`` l.284-299): TAGS=ack or bAck, UNIQ_KEY, TIMER_DELIVER_MS = pt + it. The
  UNIQ_KEY is ``genAckUniqueId`` = ``t@q@ao@c@pt@bn@ack`` (l.148-156) *for a bAck too*: l.290 sets the batch key and
  l.299 overwrites it, so a processor bAck's key is ``t@q@-1@c@pt@bn@ack``. Only PopBufferMergeService writes the
  batch key ``t@q@[o1, o2]@c@pt@bAck`` (``genBatchAckUniqueId`` l.158-165, Java ``List.toString``) and it inserts
  TIMER_DELIVER_MS before UNIQ_KEY (l.657-658, 713-714), as ``ackOrigin`` does (ChangeInvisibleTimeProcessor
  l.255-285).
- On put, ``HookUtils.transformTimerMessage`` (l.179-220, via handleScheduleMessage l.129-152, a put hook on every
  ``MessageStore.putMessage``: BrokerController l.1011-1020, DefaultMessageStore l.594-596) turns a message whose
  TIMER_DELIVER_MS is in the future into a timer message: TIMER_OUT_MS = deliver rounded down to
  ``timerPrecisionMs`` (1000), minus one precision when already a multiple (l.200-205), REAL_TOPIC, REAL_QID added,
  the properties string rebuilt from the map (l.213), topic
  ``rmq_sys_wheel_timer`` queue 0. A deliver time already passed: stored as is in the revive topic (l.195). More than
  ``timerMaxDelaySec`` (3 days) ahead: rejected, nothing stored (l.196-197).
- When it fires, ``TimerMessageStore.convert`` (l.1138-1151) decodes the stored record (properties in a
  ``new HashMap<>(128)``, MessageDecoder l.639), adds TIMER_ENQUEUE_MS (the wheel's write time when it was
  enqueued, a whole second, l.622/809/1024; Long.MAX_VALUE when already due then, l.1441-1442/1591-1593) and
  TIMER_DEQUEUE_MS (now), and ``convertMessage`` (l.1209-1238) builds the properties string from that map *before*
  clearing REAL_TOPIC/REAL_QID: the copy in topic REAL_TOPIC, queue REAL_QID keeps every key. Messages due more than
  ``timerRollWindowSlot`` (2 days) ahead roll through the timer topic again (TIMER_ROLL_TIMES, l.810-820): not
  modelled here (:func:`ck_message_properties` raises).
- Revive (``PopReviveService.reviveRetry`` l.108-151): the copy goes to ``buildPopRetryTopic(t, c,
  enableRetryTopicV2)`` (or to t when t is already a ``%RETRY%`` topic), queue 0, reconsumeTimes + 1 (the record
  field, not a property), body, flag, sysFlag and bornTimestamp of the original, born and store host the broker's.
  Its properties: a fresh map holding TAGS (when the original has tags), then ``putAll`` of the original's (read
  with ``MessageDecoder.decode``, EscapeBridge l.342: a HashMap(128)), then ``1ST_POP_TIME`` = the CK's pt
  (MessageConst l.62 ``PROPERTY_FIRST_POP_TIME``; l.129-130) when the original's reconsumeTimes is 0 or it has
  none. Nothing else is added (no RETRY_TOPIC, no ORIGIN_MESSAGE_ID); UNIQ_KEY is kept.

Topics (PopAckConstants l.28-47, KeyBuilder l.20-81, TimerMessageStore l.83): revive topic
``rmq_sys_REVIVE_LOG_<brokerClusterName>``, its scan group ``CID_RMQ_SYS_REVIVE_GROUP``, CK queue
``ckMessageNumber++ % reviveQueueNum`` (8; PopMessageProcessor l.503) or 999 for orderly; POP retry topics
``%RETRY%{group}_{topic}`` (V1) and ``%RETRY%{group}+{topic}`` (V2, ``enableRetryTopicV2``). RocketMQ itself cannot
split a V1 name (``KeyBuilder.parseGroup`` returns ``group_topic``): :func:`pop_retry_owner` needs the known pairs.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from jobs.formats import fastjson
from jobs.problems import ConfigParseError, Problem, excerpt

# ------------------------------------------------------------------------------------------------ constants

CK_TAG = "ck"  # PopAckConstants l.31-33
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
TAGS = (CK_TAG, ACK_TAG, BATCH_ACK_TAG)
SPLIT = "@"
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # TopicValidator.SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore l.83
RETRY_PREFIX = "%RETRY%"
POP_ORDER_REVIVE_QUEUE = 999  # KeyBuilder l.20: orderly POP acks go to ConsumerOrderInfoManager, no CK message
REVIVE_QUEUE_NUM = 8  # BrokerConfig.reviveQueueNum
ACK_TIME_INTERVAL_MS = 1000  # PopAckConstants.ackTimeInterval: a CK is due 1 s before its acks
TIMER_PRECISION_MS = 1000  # MessageStoreConfig.timerPrecisionMs
TIMER_MAX_DELAY_MS = 3 * 24 * 3600 * 1000  # MessageStoreConfig.timerMaxDelaySec
TIMER_ROLL_WINDOW_MS = 2 * 24 * 3600 * 1000  # MessageStoreConfig.timerRollWindowSlot (s) * precision
MAX_POP_NUM = 32  # PopMessageProcessor l.267: maxMsgNums > 32 is refused, so n <= 32 and bm (an int) holds every bit
CK_REWRITE_INTERVALS_S = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
JAVA_LONG_MAX = (1 << 63) - 1  # TIMER_ENQUEUE_MS of a message already due when the wheel took it

# MessageConst
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"

# the match key between a CK and its acks (PopReviveService l.367, 382, 409), as decoded column names
IDENTITY = ("topic", "queue_id", "start_offset", "consumer_group", "pop_time", "broker_name")

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)


def revive_topic(cluster: str) -> str:
    """``PopAckConstants.buildClusterReviveTopic``."""
    return REVIVE_TOPIC_PREFIX + cluster


def is_revive_topic(topic: str) -> bool:
    """``PopAckConstants.isStartWithRevivePrefix``."""
    return topic.startswith(REVIVE_TOPIC_PREFIX)


# ------------------------------------------------------------------------------------------ retry topic names

def pop_retry_topic(group: str, topic: str, v2: bool = False) -> str:
    """``KeyBuilder.buildPopRetryTopic(topic, group, v2)``: ``%RETRY%G_T``, or ``%RETRY%G+T`` with
    ``enableRetryTopicV2``."""
    return RETRY_PREFIX + group + ("+" if v2 else "_") + topic


def is_pop_retry_topic_v2(name: str) -> bool:
    """``KeyBuilder.isPopRetryTopicV2``."""
    return name.startswith(RETRY_PREFIX) and "+" in name


def pop_retry_topics(pairs: Iterable[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Both retry topic names (V1 and V2) of every known (group, topic), each with every pair that builds it, sorted.

    Group and topic names may hold ``_`` (TopicValidator: ``[%|a-zA-Z0-9_-]``) but not ``+``, so a V2 name has one
    owner while a V1 name can have several: ``%RETRY%a_b_c`` is built by (``a``, ``b_c``) and by (``a_b``, ``c``).
    The broker never records which pair a retry topic serves (``KeyBuilder.parseGroup`` returns ``a_b_c``), so an
    ambiguous name stays ambiguous: the caller decides, given which pairs are POP at all.
    """
    index: dict[str, set[tuple[str, str]]] = {}
    for group, topic in pairs:
        for v2 in (False, True):
            index.setdefault(pop_retry_topic(group, topic, v2), set()).add((group, topic))
    return {name: sorted(owners) for name, owners in index.items()}


def pop_retry_owner(retry_topic: str, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every known (group, topic) whose POP retry topic (V1 or V2) is ``retry_topic``, sorted; more than one only for
    an ambiguous V1 name (:func:`pop_retry_topics`), none for a name no known pair builds."""
    return sorted({(g, t) for g, t in pairs
                   if retry_topic in (pop_retry_topic(g, t, False), pop_retry_topic(g, t, True))})


def pop_retry_split(retry_topic: str, groups: Iterable[str]) -> list[tuple[str, str]]:
    """Every (group, topic) a retry topic name can be the POP retry topic of, given only the known groups
    (``KeyBuilder.parseNormalTopic(topic, cid)`` for each): group G and a non-empty rest after ``%RETRY%G_`` or
    ``%RETRY%G+``."""
    out: set[tuple[str, str]] = set()
    for g in groups:
        for sep in ("_", "+"):
            head = RETRY_PREFIX + g + sep
            if retry_topic.startswith(head) and len(retry_topic) > len(head):
                out.add((g, retry_topic[len(head):]))
    return sorted(out)


def retry_topic_kind(name: str, groups: Iterable[str]) -> str:
    """What a ``%RETRY%`` topic is, given the known groups: ``"push"`` (``%RETRY%G``, the retry topic a push
    consumer's send-back writes), ``"pop"`` (``%RETRY%G_T`` / ``%RETRY%G+T`` of a known G), ``"ambiguous"`` (both:
    groups ``a`` and ``a_b`` make ``%RETRY%a_b`` the push retry topic of ``a_b`` and a POP retry topic of ``a``) or
    ``""`` (not a retry topic of these groups)."""
    if not name.startswith(RETRY_PREFIX):
        return ""
    groups = set(groups)
    push = name[len(RETRY_PREFIX):] in groups
    pop = bool(pop_retry_split(name, groups))
    return "ambiguous" if push and pop else "push" if push else "pop" if pop else ""


# ----------------------------------------------------------------------------------------------- identities

def ck_identity(topic: str, queue_id: int, start_offset: int, consumer_group: str, pop_time: int,
                broker_name: str | None) -> tuple[str, int, int, str, int, str | None]:
    """The key a CK and its acks share (PopReviveService l.367/382/409). For an ack with no ``bn`` pass the broker
    whose revive topic holds it (:func:`decode_pop_bodies` ``default_broker_name``)."""
    return (topic, queue_id, start_offset, consumer_group, pop_time, broker_name)


def _j(v: object) -> str:
    """Java string concatenation of a value (null is "null")."""
    return "null" if v is None else str(v)


def revive_merge_key(topic: str | None, consumer_group: str | None, queue_id: int, start_offset: int, pop_time: int,
                     broker_name: str | None) -> str:
    """The revive scan's map key, the identity concatenated without separators (l.367): two identities can give
    the same key (topic ``T1`` group ``G`` and topic ``T`` group ``1G``), and then an ack matches the wrong CK."""
    return f"{_j(topic)}{_j(consumer_group)}{queue_id}{start_offset}{pop_time}{_j(broker_name)}"


def ck_uniq_key(topic: str, queue_id: int, start_offset: int, consumer_group: str, pop_time: int,
                broker_name: str | None) -> str:
    """``PopMessageProcessor.genCkUniqueId``: ``t@q@so@c@pt@bn@ck`` (every CK writer, re-puts included)."""
    return SPLIT.join((_j(topic), str(queue_id), str(start_offset), _j(consumer_group), str(pop_time),
                       _j(broker_name), CK_TAG))


def ack_uniq_key(topic: str, queue_id: int, ack_offset: int, consumer_group: str, pop_time: int,
                 broker_name: str | None) -> str:
    """``genAckUniqueId``: ``t@q@ao@c@pt@bn@ack``; AckMessageProcessor also gives it to a bAck, with ao = -1."""
    return SPLIT.join((_j(topic), str(queue_id), str(ack_offset), _j(consumer_group), str(pop_time),
                       _j(broker_name), ACK_TAG))


def batch_ack_uniq_key(topic: str, queue_id: int, ack_offsets: Sequence[int], consumer_group: str,
                       pop_time: int) -> str:
    """``genBatchAckUniqueId`` (only PopBufferMergeService's bAcks keep it): ``t@q@[o1, o2]@c@pt@bAck``, no broker."""
    offsets = "[" + ", ".join(str(o) for o in ack_offsets) + "]"
    return SPLIT.join((_j(topic), str(queue_id), offsets, _j(consumer_group), str(pop_time), BATCH_ACK_TAG))


# ------------------------------------------------------------------------------------------ covered offsets

def covered_offsets(start_offset: int, num: int, deltas: Sequence[int] | None) -> list[int]:
    """The queue offsets a CK popped (``PopCheckPoint.ackOffsetByIndex``): ``so + d[i]`` for each delta, or
    ``so .. so + n - 1`` for a CK without ``d`` or with an empty one ("old version of checkpoint", PopCheckPoint
    l.161-169; every open-source writer adds ``d``)."""
    if deltas:
        return [start_offset + d for d in deltas]
    return list(range(start_offset, start_offset + num))


def acked_in_bitmap(bitmap: int, num: int) -> list[int]:
    """The indexes ``i < num`` whose bit is set (``DataConverter.getBit``: ``bm & (1L << i)``)."""
    return [i for i in range(num) if bitmap & (1 << i)]


def checkpoint_offsets(checkpoints: pa.Table) -> pa.Table:
    """One row per offset a CK covers, in bulk: ``record``, ``index`` (the position in ``d``, the bit of ``bm``)
    and ``offset`` (:func:`covered_offsets`), by checkpoint row then index."""
    n = len(checkpoints)
    if not n:
        return pa.table({"record": pa.array([], pa.int64()), "index": pa.array([], pa.int32()),
                         "offset": pa.array([], pa.int64())})
    record = checkpoints.column("record").to_numpy()
    so = checkpoints.column("start_offset").to_numpy()
    num = checkpoints.column("num").to_numpy().astype(np.int64)
    deltas = checkpoints.column("deltas").combine_chunks()
    lengths = np.asarray(deltas.value_lengths().fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    has = lengths > 0
    count = np.where(has, lengths, num)
    row = np.repeat(np.arange(n), count)
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    index = np.arange(len(row)) - np.repeat(starts, count)
    flat = np.asarray(deltas.flatten().to_numpy(zero_copy_only=False), np.int64)  # only non-null, non-empty lists
    delta = index.copy()
    from_d = has[row]
    delta[from_d] = flat
    return pa.table({"record": pa.array(record[row], pa.int64()), "index": pa.array(index, pa.int32()),
                     "offset": pa.array(so[row] + delta, pa.int64())})


# --------------------------------------------------------------------------------------------- body writers

_SPECIAL = re.compile("[\x00-\x1f\"\\\\\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _fj_string(s: str) -> str:
    """A string as fastjson 1.2.83 writes it (module docstring)."""
    if not _SPECIAL.search(s):
        return '"' + s + '"'
    return '"' + _SPECIAL.sub(lambda m: _SHORT_ESCAPES.get(m.group()) or "\\u%04X" % ord(m.group()), s) + '"'


def _java_long(v: int) -> int:
    """``v`` wrapped to a Java long (``popTime + invisibleTime`` overflows as Java's does)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")  # Java's getBytes(UTF_8) writes '?' for a lone surrogate


def encode_checkpoint(ck: Mapping[str, Any]) -> bytes:
    """A ``PopCheckPoint`` body exactly as the broker stores it (``JSON.toJSONString(ck)``).

    ``ck`` uses :func:`decode_pop_bodies`' column names: topic, queue_id, start_offset, consumer_group, pop_time,
    invisible_time, num; optional bitmap (0), revive_offset (0), deltas, broker_name, reput_times (None: not
    written). ``reviveTime`` is computed, as the getter does.
    """
    pt, it = int(ck["pop_time"]), int(ck["invisible_time"])
    out = ['{"bm":', str(int(ck.get("bitmap") or 0))]
    if ck.get("broker_name") is not None:
        out += [',"bn":', _fj_string(ck["broker_name"])]
    if ck.get("consumer_group") is not None:
        out += [',"c":', _fj_string(ck["consumer_group"])]
    if ck.get("deltas") is not None:
        out += [',"d":[', ",".join(str(int(d)) for d in ck["deltas"]), "]"]
    out += [',"it":', str(it), ',"n":', str(int(ck["num"])), ',"pt":', str(pt), ',"q":', str(int(ck["queue_id"])),
            ',"reviveTime":', str(_java_long(pt + it)), ',"ro":', str(int(ck.get("revive_offset") or 0))]
    if ck.get("reput_times") is not None:
        out += [',"rp":', _fj_string(ck["reput_times"])]
    out += [',"so":', str(int(ck["start_offset"]))]
    if ck.get("topic") is not None:
        out += [',"t":', _fj_string(ck["topic"])]
    out.append("}")
    return _utf8("".join(out))


def _ack_json(ack: Mapping[str, Any], ack_offset: int, ack_offsets: Sequence[int] | None, long_names: bool) -> bytes:
    names = (("ackOffset", "ackOffsetList", "brokerName", "consumerGroup", "popTime", "queueId", "startOffset",
              "topic") if long_names else ("ao", "aol", "bn", "c", "pt", "q", "so", "t"))
    out = ['{"', names[0], '":', str(int(ack_offset))]
    if ack_offsets is not None:
        out += [',"', names[1], '":[', ",".join(str(int(o)) for o in ack_offsets), "]"]
    for name, value in ((names[2], ack.get("broker_name")), (names[3], ack.get("consumer_group"))):
        if value is not None:
            out += [',"', name, '":', _fj_string(value)]
    out += [',"', names[4], '":', str(int(ack["pop_time"])), ',"', names[5], '":', str(int(ack["queue_id"])),
            ',"', names[6], '":', str(int(ack["start_offset"]))]
    if ack.get("topic") is not None:
        out += [',"', names[7], '":', _fj_string(ack["topic"])]
    out.append("}")
    return _utf8("".join(out))


def encode_ack(ack: Mapping[str, Any], *, long_names: bool = False) -> bytes:
    """An ``AckMsg`` body (tag ``ack``) as stored: keys topic, queue_id, start_offset, consumer_group, pop_time,
    ack_offset, broker_name (None: not written). ``long_names``: the 5.0.x layout (before 5.1.0's short names)."""
    return _ack_json(ack, int(ack["ack_offset"]), None, long_names)


def encode_batch_ack(ack: Mapping[str, Any], *, long_names: bool = False) -> bytes:
    """A ``BatchAckMsg`` body (tag ``bAck``): ``ack_offsets`` plus the ack fields; ``ack_offset`` defaults to -1,
    what AckMessageProcessor writes (PopBufferMergeService leaves 0 and no broker_name)."""
    ao = ack.get("ack_offset")
    return _ack_json(ack, -1 if ao is None else int(ao), list(ack["ack_offsets"]), long_names)


# --------------------------------------------------------------------------------------------- body decoder

CHECKPOINT_SCHEMA = pa.schema([
    ("record", pa.int64()), ("topic", pa.string()), ("queue_id", pa.int32()), ("start_offset", pa.int64()),
    ("consumer_group", pa.string()), ("pop_time", pa.int64()), ("broker_name", pa.string()),
    ("invisible_time", pa.int64()), ("bitmap", pa.int32()), ("num", pa.int32()), ("revive_offset", pa.int64()),
    ("deltas", pa.list_(pa.int32())), ("reput_times", pa.string()), ("revive_time", pa.int64())])
ACK_SCHEMA = pa.schema([
    ("record", pa.int64()), ("topic", pa.string()), ("queue_id", pa.int32()), ("start_offset", pa.int64()),
    ("consumer_group", pa.string()), ("pop_time", pa.int64()), ("broker_name", pa.string()),
    ("ack_offsets", pa.list_(pa.int64())), ("kind", pa.string())])


class _Bad(ValueError):
    pass


class _NotJson(ValueError):
    pass


_MISSING = object()


def _reject_constant(name: str) -> Any:
    raise _NotJson(name)  # NaN, Infinity: neither JSON nor what fastjson writes


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse(body: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """The body's JSON object: strict JSON through the C parser, else fastjson's lenient syntax."""
    text = body if isinstance(body, str) else bytes(body).decode("utf-8")
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        try:
            value = fastjson.loads(text)
        except (ConfigParseError, RecursionError) as e:
            raise _NotJson(str(e)) from None
    if not isinstance(value, dict):
        raise _Bad(f"body is not a JSON object ({excerpt(text)})")
    return value


def _what(v: Any) -> str:
    """A wrong value, described without echoing the body (a number or string only through ``excerpt``)."""
    if isinstance(v, str):
        return f"a string ({excerpt(v)})"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return f"an integer ({excerpt(str(v))})"
    if isinstance(v, float):
        return f"a decimal number ({excerpt(repr(v))})"
    return "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) else type(v).__name__


def _field(d: dict[str, Any], name: str, alt: str | None) -> Any:
    """``d[name]`` or its fastjson alternate name; when both are present the later one wins, as fastjson sets the
    field once per key in text order."""
    v = d.get(name, _MISSING)
    if alt is not None and alt in d:
        if v is _MISSING:
            return d[alt]
        keys = list(d)
        return d[alt] if keys.index(alt) > keys.index(name) else v
    return v


def _int(d: dict[str, Any], name: str, lo: int, hi: int, alt: str | None = None, default: Any = _MISSING) -> int:
    v = _field(d, name, alt)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise _Bad(f"'{name}' {'missing' if v is _MISSING else 'is null'}")
        return default  # fastjson leaves a primitive at 0 for an absent key or a null
    if type(v) is not int:  # strict: fastjson would coerce "2", 1e3 or true, but the broker never writes them
        if isinstance(v, fastjson.BigNumber):
            raise _Bad(f"'{name}' out of range ({excerpt(v)})")
        raise _Bad(f"'{name}' is {_what(v)}, not an integer")
    if not lo <= v <= hi:
        raise _Bad(f"'{name}' out of range ({excerpt(str(v))})")
    return v


def _str(d: dict[str, Any], name: str, alt: str | None = None, required: bool = True) -> str | None:
    v = _field(d, name, alt)
    if v is _MISSING or v is None:
        if required:
            raise _Bad(f"'{name}' {'missing' if v is _MISSING else 'is null'}")
        return None
    if isinstance(v, fastjson.BigNumber):
        raise _Bad(f"'{name}' is an integer ({excerpt(v)}), not a string")
    if not isinstance(v, str):
        raise _Bad(f"'{name}' is {_what(v)}, not a string")
    if required and not v:
        raise _Bad(f"'{name}' is empty")
    return v


def _int_list(d: dict[str, Any], name: str, lo: int, hi: int, alt: str | None = None) -> list[int] | None:
    v = _field(d, name, alt)
    if v is _MISSING or v is None:
        return None
    if not isinstance(v, list):
        raise _Bad(f"'{name}' is {_what(v)}, not a list")
    for x in v:
        if type(x) is not int:
            raise _Bad(f"'{name}' holds {_what(x)}, not an integer")
        if not lo <= x <= hi:
            raise _Bad(f"'{name}' holds a value out of range ({excerpt(str(x))})")
    return v


def _checkpoint(d: dict[str, Any]) -> tuple[Any, ...]:
    """A CK body's values, in CHECKPOINT_SCHEMA order after ``record``."""
    topic = _str(d, "t")
    group = _str(d, "c")
    queue_id = _int(d, "q", 0, _I32[1])
    so = _int(d, "so", 0, _I64[1])
    pt = _int(d, "pt", 0, _I64[1])
    it = _int(d, "it", *_I64)
    num = _int(d, "n", 0, MAX_POP_NUM)
    bitmap = _int(d, "bm", *_I32, default=0)  # primitives: fastjson leaves 0 when absent (always written, always 0)
    ro = _int(d, "ro", *_I64, default=0)
    deltas = _int_list(d, "d", 0, _I32[1])
    if deltas is not None and deltas and len(deltas) != num:
        raise _Bad(f"'d' has {len(deltas)} offsets, 'n' is {num}")
    if pt + it > _I64[1]:
        raise _Bad("'pt' + 'it' overflows a long")
    return (topic, queue_id, so, group, pt, _str(d, "bn", required=False), it, bitmap, num, ro, deltas,
            _str(d, "rp", required=False), pt + it)


def _ack(d: dict[str, Any], batch: bool, default_broker: str | None) -> tuple[Any, ...]:
    """An ack or bAck body's values, in ACK_SCHEMA order after ``record`` (without ``kind``)."""
    topic = _str(d, "t", "topic")
    group = _str(d, "c", "consumerGroup")
    queue_id = _int(d, "q", 0, _I32[1], "queueId")
    so = _int(d, "so", 0, _I64[1], "startOffset")
    pt = _int(d, "pt", 0, _I64[1], "popTime")
    if batch:
        offsets = _int_list(d, "aol", 0, _I64[1], "ackOffsetList")
        if offsets is None:
            raise _Bad("'aol' missing")
    else:
        offsets = [_int(d, "ao", 0, _I64[1], "ackOffset")]
    bn = _str(d, "bn", "brokerName", required=False)
    if bn is None or not bn.strip():
        bn = default_broker  # StringUtils.isNotBlank(bn) ? bn : the reviving broker's name
    return (topic, queue_id, so, group, pt, bn, offsets)


def _pylist(values: Any) -> list[Any]:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    return list(values)


def decode_pop_bodies(tags: Any, bodies: Any, *, positions: Sequence[int] | np.ndarray | None = None,
                      source_path: str = "", extra: pa.Table | None = None,
                      default_broker_name: str | None = None) -> tuple[pa.Table, pa.Table, list[Problem]]:
    """The checkpoints and acks among revive-topic (or timer-topic) message bodies.

    Args:
        tags: each message's tags (Arrow array or sequence); ``ck``, ``ack`` and ``bAck`` are decoded, any other
            message is not a POP record and is left out without a problem.
        bodies: each message's body (bytes or str).
        positions: each message's byte position in ``source_path``, for problems (default: its index).
        source_path: the commitlog segment the messages come from, for problems.
        extra: columns to carry over, one row per message (store time, physical offset...): appended to both
            tables, taken at ``record``.
        default_broker_name: the broker whose revive topic holds the records, the ``broker_name`` of an ack without
            (or with a blank) ``bn`` (PopReviveService l.380-381); None leaves it null.

    Returns:
        (checkpoints, acks, problems): :data:`CHECKPOINT_SCHEMA` and :data:`ACK_SCHEMA` rows in input order, with
        ``record`` the message's index; one problem per undecodable body (not UTF-8 or JSON, a field missing, of
        the wrong type or out of range), which is left out while the rest decode. Types are strict: fastjson would
        read ``"2"``, ``1e3`` or ``true`` as a number, but no broker writes them, so such a body is not a broker's.
        Required: t, c, q, so, pt, it, n (CK; bm and ro default to 0 as fastjson leaves an absent primitive, d, bn
        and rp to null); t, c, q, so, pt and ao (ack) or aol (bAck), short or 5.0.x long names.
    """
    tag_list = _pylist(tags)
    body_list = _pylist(bodies)
    if len(tag_list) != len(body_list):
        raise ValueError(f"{len(tag_list)} tags for {len(body_list)} bodies")
    if extra is not None and len(extra) != len(body_list):
        raise ValueError(f"extra has {len(extra)} rows for {len(body_list)} bodies")
    pos = None if positions is None else [int(p) for p in positions]
    cks: list[tuple[Any, ...]] = []
    ck_rec: list[int] = []
    acks: list[tuple[Any, ...]] = []
    ack_rec: list[int] = []
    ack_kind: list[str] = []
    problems: list[Problem] = []
    for i, (tag, body) in enumerate(zip(tag_list, body_list)):
        if tag != CK_TAG and tag != ACK_TAG and tag != BATCH_ACK_TAG:
            continue
        try:
            if body is None:
                raise _Bad("no body")
            d = _parse(body)
            if tag == CK_TAG:
                cks.append(_checkpoint(d))
                ck_rec.append(i)
            else:
                acks.append(_ack(d, tag == BATCH_ACK_TAG, default_broker_name))
                ack_rec.append(i)
                ack_kind.append(tag)
        except UnicodeDecodeError as e:
            problems.append(_problem(source_path, pos, i, tag, f"body is not UTF-8 ({e.reason} at {e.start})"))
        except _NotJson:
            problems.append(_problem(source_path, pos, i, tag, f"body is not JSON ({excerpt(body)})"))
        except _Bad as e:
            problems.append(_problem(source_path, pos, i, tag, str(e)))
    ck_cols = list(zip(*cks)) if cks else [()] * 13
    checkpoints = pa.table([pa.array(ck_rec, pa.int64())]
                           + [pa.array(list(c), f.type) for c, f in zip(ck_cols, list(CHECKPOINT_SCHEMA)[1:])],
                           schema=CHECKPOINT_SCHEMA)
    ack_cols = list(zip(*acks)) if acks else [()] * 7
    ack_table = pa.table([pa.array(ack_rec, pa.int64())]
                         + [pa.array(list(c), f.type) for c, f in zip(ack_cols, list(ACK_SCHEMA)[1:-1])]
                         + [pa.array(ack_kind, pa.string())], schema=ACK_SCHEMA)
    if extra is not None:
        checkpoints = _with_extra(checkpoints, extra, ck_rec)
        ack_table = _with_extra(ack_table, extra, ack_rec)
    return checkpoints, ack_table, problems


def _problem(source_path: str, positions: list[int] | None, i: int, tag: str, what: str) -> Problem:
    at = i if positions is None else positions[i]
    return Problem(source_path, at, f"POP {tag} message {i} at byte {at}: {what}; skipped")


def _with_extra(table: pa.Table, extra: pa.Table, records: list[int]) -> pa.Table:
    taken = extra.take(pa.array(records, pa.int64()))
    for name in taken.column_names:
        if name in table.column_names:
            raise ValueError(f"extra column {name!r} clashes with a decoded column")
        table = table.append_column(name, taken.column(name))
    return table


# ------------------------------------------------------------------------------------- message properties

@functools.lru_cache(maxsize=4096)
def _java_spread_hash(key: str) -> int:
    """``HashMap.hash(key)``: ``String.hashCode`` (over UTF-16 units) xor its high half."""
    h = 0
    units = key.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """The order a ``java.util.HashMap`` iterates keys put in this order (a repeated put keeps the first place).

    Java 8+ HashMap: table size ``tableSizeFor(initial_capacity)`` (16 for ``new HashMap<>()``), doubled whenever
    the size passes 0.75 of it; a bucket is ``hash & (size - 1)`` and keeps its keys in insertion order (a resize
    splits buckets keeping that order), so iteration is by final bucket, then insertion. A bucket reaching 9 keys
    (treeified, or an early resize) is not modelled and raises ValueError.
    """
    unique = list(dict.fromkeys(keys))
    first = 1
    while first < initial_capacity:  # tableSizeFor
        first <<= 1
    # putVal treeifies (below 64 buckets: resizes early) when a 9th key joins a bucket; buckets only split as the
    # table grows, so none reaches 9 if none does at the first size
    if unique and max(np.bincount([_java_spread_hash(k) & (first - 1) for k in unique])) >= 9:
        raise ValueError("a HashMap bucket of 9 keys (treeified, or an early resize) is not modelled")
    cap = first
    while len(unique) > cap * 3 // 4:
        cap <<= 1
    buckets = [_java_spread_hash(k) & (cap - 1) for k in unique]
    return [k for _, _, k in sorted(zip(buckets, range(len(unique)), unique))]


def _java_map(items: Iterable[tuple[str, str]], initial_capacity: int = 16) -> dict[str, str]:
    """The (key, value) puts as a dict in the HashMap's iteration order (a later put of a key replaces its value)."""
    values: dict[str, str] = {}
    order: list[str] = []
    for k, v in items:
        if k not in values:
            order.append(k)
        values[k] = v
    return {k: values[k] for k in java_hashmap_order(order, initial_capacity)}


@dataclass(frozen=True)
class StoredCopy:
    """One record a message leaves in the commitlog: its topic, queue and properties in stored order (feed them to
    ``commitlog_encode.properties_to_string``)."""

    topic: str
    queue_id: int
    properties: dict[str, str]


def timer_copies(puts: Sequence[tuple[str, str]], *, real_topic: str, real_queue_id: int, deliver_ms: int,
                 put_ms: int, enqueue_ms: int | None = None, dequeue_ms: int | None = None,
                 precision_ms: int = TIMER_PRECISION_MS) -> list[StoredCopy]:
    """The records a broker-built message with ``TIMER_DELIVER_MS`` leaves, in write order.

    Args:
        puts: its properties in the order they were put (all in a ``new HashMap<>()``).
        real_topic, real_queue_id: where it was addressed.
        deliver_ms: its TIMER_DELIVER_MS; put_ms: the broker's clock at the put.
        enqueue_ms: the timer wheel's write time when it took the message (default: ``put_ms`` rounded down to the
            precision); dequeue_ms: the clock when it fired (default: its TIMER_OUT_MS).

    Returns:
        ``[timer copy in rmq_sys_wheel_timer queue 0, copy in real_topic/real_queue_id]``; ``[the message in
        real_topic]`` when ``deliver_ms <= put_ms`` (HookUtils l.195: no timer); ``[]`` when more than 3 days ahead
        (rejected, l.196-197). Raises ValueError for a delay past the 2-day roll window (not modelled).
    """
    if deliver_ms <= put_ms:
        return [StoredCopy(real_topic, real_queue_id, _java_map(puts))]
    if deliver_ms - put_ms > TIMER_MAX_DELAY_MS:
        return []
    out_ms = deliver_ms - precision_ms if deliver_ms % precision_ms == 0 else deliver_ms // precision_ms * precision_ms
    timer = _java_map(list(puts) + [(PROPERTY_TIMER_OUT_MS, str(out_ms)), (PROPERTY_REAL_TOPIC, real_topic),
                                    (PROPERTY_REAL_QID, str(real_queue_id))])
    write_ms = put_ms // precision_ms * precision_ms if enqueue_ms is None else enqueue_ms
    if out_ms - write_ms >= TIMER_ROLL_WINDOW_MS:
        raise ValueError("a timer message past the roll window (TIMER_ROLL_TIMES) is not modelled")
    enqueue = JAVA_LONG_MAX if out_ms < write_ms else write_ms  # TimerMessageStore l.1441-1442
    fired = _java_map(list(timer.items()) + [(PROPERTY_TIMER_ENQUEUE_MS, str(enqueue)),
                                             (PROPERTY_TIMER_DEQUEUE_MS, str(out_ms if dequeue_ms is None
                                                                             else dequeue_ms))], 128)
    return [StoredCopy(TIMER_TOPIC, 0, timer), StoredCopy(real_topic, real_queue_id, fired)]


def ck_message_properties(ck: Mapping[str, Any], *, revive_topic: str, revive_queue_id: int, put_ms: int,
                          enqueue_ms: int | None = None, dequeue_ms: int | None = None) -> list[StoredCopy]:
    """The records a CK message leaves (``buildCkMsg`` then :func:`timer_copies`): TAGS=ck,
    TIMER_DELIVER_MS = pt + it - 1000, UNIQ_KEY = :func:`ck_uniq_key`, in that put order. ``ck`` as for
    :func:`encode_checkpoint`."""
    key = ck_uniq_key(ck["topic"], ck["queue_id"], ck["start_offset"], ck["consumer_group"], ck["pop_time"],
                      ck.get("broker_name"))
    deliver = int(ck["pop_time"]) + int(ck["invisible_time"]) - ACK_TIME_INTERVAL_MS
    puts = [(PROPERTY_TAGS, CK_TAG), (PROPERTY_TIMER_DELIVER_MS, str(deliver)), (PROPERTY_UNIQ_KEY, key)]
    return timer_copies(puts, real_topic=revive_topic, real_queue_id=revive_queue_id, deliver_ms=deliver,
                        put_ms=put_ms, enqueue_ms=enqueue_ms, dequeue_ms=dequeue_ms)


ACK_WRITERS = ("processor", "buffer", "change_invisible")


def ack_message_properties(ack: Mapping[str, Any], *, invisible_time: int, revive_topic: str, revive_queue_id: int,
                           put_ms: int, batch: bool = False, writer: str = "processor",
                           enqueue_ms: int | None = None, dequeue_ms: int | None = None) -> list[StoredCopy]:
    """The records an ack (``batch``: bAck) message leaves; TIMER_DELIVER_MS = pt + invisible_time.

    ``writer``: ``"processor"`` (AckMessageProcessor.appendAck, the default path: puts TAGS, UNIQ_KEY,
    TIMER_DELIVER_MS; a bAck gets :func:`ack_uniq_key` with its ``ack_offset``, -1), ``"buffer"``
    (PopBufferMergeService, ``enablePopBufferMerge``: TAGS, TIMER_DELIVER_MS, UNIQ_KEY; a bAck gets
    :func:`batch_ack_uniq_key`) or ``"change_invisible"`` (ChangeInvisibleTimeProcessor.ackOrigin, an ``ack``:
    TAGS, TIMER_DELIVER_MS, UNIQ_KEY). ``ack`` as for :func:`encode_ack` / :func:`encode_batch_ack`.
    """
    if writer not in ACK_WRITERS:
        raise ValueError(f"writer must be one of {ACK_WRITERS}, not {writer!r}")
    tag = BATCH_ACK_TAG if batch else ACK_TAG
    if batch and writer == "buffer":
        key = batch_ack_uniq_key(ack["topic"], ack["queue_id"], ack["ack_offsets"], ack["consumer_group"],
                                 ack["pop_time"])
    else:
        ao = ack.get("ack_offset")
        ao = (-1 if writer == "processor" else 0) if batch and ao is None else ao
        key = ack_uniq_key(ack["topic"], ack["queue_id"], ao, ack["consumer_group"], ack["pop_time"],
                           ack.get("broker_name"))
    deliver = int(ack["pop_time"]) + int(invisible_time)
    if writer == "processor":
        puts = [(PROPERTY_TAGS, tag), (PROPERTY_UNIQ_KEY, key), (PROPERTY_TIMER_DELIVER_MS, str(deliver))]
    else:
        puts = [(PROPERTY_TAGS, tag), (PROPERTY_TIMER_DELIVER_MS, str(deliver)), (PROPERTY_UNIQ_KEY, key)]
    return timer_copies(puts, real_topic=revive_topic, real_queue_id=revive_queue_id, deliver_ms=deliver,
                        put_ms=put_ms, enqueue_ms=enqueue_ms, dequeue_ms=dequeue_ms)


def revive_copy_properties(original_properties: Mapping[str, str], reconsume_times: int, *, ck_topic: str,
                           consumer_group: str, pop_time: int, v2: bool = False) -> tuple[StoredCopy, int]:
    """The retry copy ``PopReviveService.reviveRetry`` writes of an unacked message, and its reconsumeTimes.

    Args:
        original_properties: the original record's properties in stored order (as decoded from the commitlog).
        reconsume_times: the original record's reconsumeTimes.
        ck_topic, consumer_group, pop_time: the CK's ``t``, ``c``, ``pt``.
        v2: the reviving broker's ``enableRetryTopicV2``.

    Returns:
        (the copy: topic ``%RETRY%G_T`` / ``%RETRY%G+T`` or ``ck_topic`` when already a retry topic, queue 0,
        properties = TAGS, the original's, then ``1ST_POP_TIME`` = pt when ``reconsume_times`` is 0 or the
        original has none; ``reconsume_times + 1``).
    """
    topic = ck_topic if ck_topic.startswith(RETRY_PREFIX) else pop_retry_topic(consumer_group, ck_topic, v2)
    original = _java_map(original_properties.items(), 128)  # MessageDecoder.string2messageProperties
    puts: list[tuple[str, str]] = []
    if original.get(PROPERTY_TAGS) is not None:
        puts.append((PROPERTY_TAGS, original[PROPERTY_TAGS]))
    puts += list(original.items())
    if reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in original:
        puts.append((PROPERTY_FIRST_POP_TIME, str(pop_time)))
    return StoredCopy(topic, 0, _java_map(puts)), reconsume_times + 1
