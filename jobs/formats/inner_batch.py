"""RocketMQ 5 ``INNER_BATCH`` commitlog records (BatchCQ topics, rocketmq5.md §5): writing one, and unwrapping the
inner messages of decoded ones.

What the broker stores (apache/rocketmq master ``8fc57f14``):

- The producer (``DefaultMQProducer.batch``) gives every message of a batch its own ``UNIQ_KEY``, then the batch
  its own ``UNIQ_KEY``, and sends ``MessageBatch.encode()`` (``MessageDecoder.encodeMessages``) as the body; the
  batch's properties are ``WAIT`` (``MessageBatch.generateFromList``) and that ``UNIQ_KEY`` (plus ``INSTANCE_ID``
  with a namespace); flag 0; never compressed (``DefaultMQProducerImpl.tryToCompressMessage``).
- On a ``queue.type=BatchCQ`` topic a batch that has a ``UNIQ_KEY`` becomes ONE record
  (``SendMessageProcessor.sendBatchMessage``): sysFlag ``| NEED_UNWRAP 0x40 | INNER_BATCH 0x80``, properties
  ``+ CLUSTER``, ``+ INNER_NUM`` (``MessageDecoder.countInnerMsgNum``: the inner messages counted by their total
  size), stored through the single-message path (``putMessage``, ``MessageExtEncoder.encode(MessageExtBrokerInner)``:
  the usual record layout, BODYCRC = CRC32 of the whole body, ``CommitLog.asyncPutMessage``).
  ``BatchConsumeQueue.assignQueueOffset`` adds ``INNER_BASE`` = the queue offset, which is also the record's
  QUEUEOFFSET field; the queue then advances by INNER_NUM (``CommitLog.getMessageNum``), and the batch consume queue
  unit says msgBaseOffset = INNER_BASE, batchSize = INNER_NUM (``CommitLog.setBatchSizeIfNeeded``).
- The body is the inner messages back to back, each ``[int total][int magic=0][int bodyCRC=0][int flag][int
  bodyLen][body][short propLen][props]`` (``MessageDecoder.encodeMessage``); a consumer unwraps a record flagged
  INNER_BATCH and NEED_UNWRAP (``PullAPIWrapper.processPullResult``) into messages at queue offset QUEUEOFFSET + i
  carrying only their own flag, body and properties (``MessageDecoder.decodeMessage(MessageExt, List)``).

So the outer record's ``uniq_key`` is the batch's id (the producer's ``SendResult.msgId``,
``MQClientAPIImpl.processSendResponse``), no inner message's; the inner ``UNIQ_KEY``/``KEYS``/``TAGS`` are only in
the body. :func:`unwrap` gives one row per inner message; the walk over the bodies is one compiled pass, the
properties are split with numpy over all inner messages at once.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from jobs.formats.commitlog import INNER_BATCH as INNER_BATCH_FLAG  # MessageSysFlag.INNER_BATCH_FLAG = 0x1 << 7
from jobs.formats.commitlog_encode import properties_to_string, tags_hash
from jobs.problems import Problem, excerpt

NEED_UNWRAP_FLAG = 0x40  # MessageSysFlag.NEED_UNWRAP_FLAG = 0x1 << 6
MULTI_TAGS_FLAG = 0x2  # MessageSysFlag.MULTI_TAGS_FLAG (a MULTI_TAG topic, SendMessageProcessor.sendBatchMessage)

PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"  # MessageConst.PROPERTY_WAIT_STORE_MSG_OK
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_INSTANCE_ID = "INSTANCE_ID"

INNER_HEADER = 20  # total, magic, bodyCRC, flag, bodyLen
_INNER_MIN = INNER_HEADER + 2  # and the properties length
_SHORT_MAX = 32767

# the decoded commitlog columns unwrap needs (jobs.formats.commitlog.SCHEMA), and those it carries over per row
REQUIRED = ("physical_offset", "queue_offset", "sys_flag", "body", "properties")
CARRIED = ("topic", "queue_id", "store_ts", "born_ts", "reconsume_times", "born_host", "store_host", "offset_msg_id",
           "sys_flag", "segment")


# ------------------------------------------------------------------------------------------- flags


def is_inner_batch(sys_flag: Any) -> Any:
    """Whether sysFlag has ``INNER_BATCH`` (0x80): the record holds a batch of inner messages (the flag the store
    checks: ``DefaultMessageStore.asyncPutMessage``, ``CommitLog.getMessageNum``, ``BatchConsumeQueue
    .assignQueueOffset``). Vectorised: an int gives a bool; an array (numpy, Arrow; null counts as 0) a bool array."""
    if isinstance(sys_flag, (int, np.integer)):
        return bool(int(sys_flag) & INNER_BATCH_FLAG)
    if isinstance(sys_flag, (pa.Array, pa.ChunkedArray)):
        sys_flag = pc.fill_null(sys_flag, 0).to_numpy()
    return (np.asarray(sys_flag).astype(np.int64) & INNER_BATCH_FLAG) != 0


def needs_unwrap(sys_flag: Any) -> Any:
    """Whether a consumer unwraps the record: INNER_BATCH and NEED_UNWRAP both set (``PullAPIWrapper``)."""
    both = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
    if isinstance(sys_flag, (int, np.integer)):
        return int(sys_flag) & both == both
    if isinstance(sys_flag, (pa.Array, pa.ChunkedArray)):
        sys_flag = pc.fill_null(sys_flag, 0).to_numpy()
    return (np.asarray(sys_flag).astype(np.int64) & both) == both


# ------------------------------------------------------------------------------------------- encoding


def _java_hash_order(pairs: Iterable[tuple[str, str]], initial_capacity: int = 16) -> dict[str, str]:
    """The pairs (in insertion order) in the order a ``java.util.HashMap`` iterates them, which is the order
    ``messageProperties2String`` writes: by bucket (``(h ^ h >>> 16) & (capacity - 1)`` of ``String.hashCode``),
    then insertion order within a bucket. The table starts at ``initial_capacity`` and doubles whenever the size
    passes 3/4 of it (``new HashMap<>()``: 16; ``string2messageProperties``: ``new HashMap<>(128)``). A key put twice
    keeps its first place. (A bucket of 8+ keys would become a tree: never with a message's few properties.)"""
    items: dict[str, str] = {}
    for k, v in pairs:
        items[k] = v
    cap = initial_capacity
    while len(items) > cap * 3 // 4:
        cap *= 2

    def bucket(name: str) -> int:
        h = tags_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    order = sorted(enumerate(items), key=lambda t: (bucket(t[1]), t[0]))
    return {k: items[k] for _, k in order}


def encode_inner_message(body: bytes, properties: dict[str, str], flag: int = 0) -> bytes:
    """One inner message as ``MessageDecoder.encodeMessage`` writes it: magic 0 and bodyCRC 0 (never checked),
    the properties as ``messageProperties2String`` (their length is cast to a short: over 32767 bytes raises)."""
    props = properties_to_string(properties).encode("utf-8")
    if len(props) > _SHORT_MAX:
        raise ValueError(f"properties of {len(props)} bytes exceed Short.MAX_VALUE")
    total = INNER_HEADER + len(body) + 2 + len(props)
    return (total.to_bytes(4, "big") + bytes(8) + (flag & 0xFFFFFFFF).to_bytes(4, "big")
            + len(body).to_bytes(4, "big") + body + len(props).to_bytes(2, "big") + props)


def _inner_properties(message: dict[str, Any], wait_store_msg_ok: bool, hash_order: bool) -> dict[str, str]:
    """An inner message's properties in the order its ``Message`` puts them: TAGS, KEYS, WAIT (the public
    constructors), the caller's, then UNIQ_KEY (``DefaultMQProducer.batch`` sets it last, if absent)."""
    given = dict(message.get("properties") or {})
    pairs: list[tuple[str, str]] = []
    for name, field in ((PROPERTY_TAGS, "tags"), (PROPERTY_KEYS, "keys")):
        if message.get(field) is not None:
            pairs.append((name, str(message[field])))
    if PROPERTY_WAIT not in given:
        pairs.append((PROPERTY_WAIT, "true" if wait_store_msg_ok else "false"))
    pairs += [(k, v) for k, v in given.items() if v is not None]
    if message.get("uniq_key") is not None:
        pairs.append((PROPERTY_UNIQ_KEY, str(message["uniq_key"])))
    props = dict(pairs)
    if not props.get(PROPERTY_UNIQ_KEY):
        raise ValueError("an inner message needs a UNIQ_KEY (DefaultMQProducer.batch gives every message one)")
    return _java_hash_order(props.items()) if hash_order else props


def encode_inner_batch(messages: Sequence[dict[str, Any]], *, batch_uniq_key: str, queue_base: int,
                       cluster: str = "DefaultCluster", wait_store_msg_ok: bool = True,
                       namespace: str | None = None, multi_tags: bool = False, hash_order: bool = True
                       ) -> tuple[bytes, dict[str, str], int]:
    """What the broker stores for one batch sent to a BatchCQ topic: (body, the record's properties, its sysFlag).

    Args:
        messages: the inner messages, each ``{"body": bytes, "flag": int = 0, "properties": {...},
            "uniq_key": str, "keys": str, "tags": str}`` (``uniq_key``/``keys``/``tags`` are shortcuts for the
            UNIQ_KEY/KEYS/TAGS properties; every message needs a UNIQ_KEY). A property WAIT (= the batch's
            waitStoreMsgOK) is added when absent, as the ``Message`` constructors do.
        batch_uniq_key: the batch's own UNIQ_KEY (without one the broker splits the batch into ordinary records).
        queue_base: the queue offset the broker assigns: INNER_BASE, also the record's QUEUEOFFSET field.
        cluster: the broker's ``brokerClusterName`` (property CLUSTER).
        namespace: the producer's namespace, if any (property INSTANCE_ID).
        multi_tags: the topic's filter type is MULTI_TAG (sysFlag MULTI_TAGS).
        hash_order: write properties in Java HashMap order, as the broker's bytes are (else insertion order).

    Returns:
        ``body`` (``MessageDecoder.encodeMessages``), ``properties`` (WAIT, UNIQ_KEY [, INSTANCE_ID], CLUSTER,
        INNER_NUM, INNER_BASE) and ``sys_flag`` (INNER_BATCH | NEED_UNWRAP [| MULTI_TAGS]) for
        :func:`jobs.formats.commitlog_encode.encode_message`, with ``queue_offset=queue_base``, ``flag=0`` and
        ``reconsume_times=0``; the queue's next offset is ``queue_base + len(messages)``.
    """
    if not messages:
        raise ValueError("a batch holds at least one message (MessageBatch.generateFromList)")
    if len(messages) > _SHORT_MAX:
        raise ValueError(f"{len(messages)} inner messages: INNER_NUM is parsed as a short")
    if not batch_uniq_key:
        raise ValueError("an INNER_BATCH record needs the batch's UNIQ_KEY (SendMessageProcessor.sendBatchMessage)")
    parts = []
    for i, m in enumerate(messages):
        body = bytes(m["body"])
        if not body:
            raise ValueError(f"inner message {i}: the producer refuses an empty body (Validators.checkMessage)")
        try:
            parts.append(encode_inner_message(body, _inner_properties(m, wait_store_msg_ok, hash_order),
                                              int(m.get("flag", 0))))
        except ValueError as exc:
            raise ValueError(f"inner message {i}: {exc}") from None
    # the batch's properties as the producer sends them (WAIT, then UNIQ_KEY, then INSTANCE_ID), parsed by the broker
    # into new HashMap<>(128) (string2messageProperties), which then puts CLUSTER, INNER_NUM and INNER_BASE
    sent = [(PROPERTY_WAIT, "true" if wait_store_msg_ok else "false"), (PROPERTY_UNIQ_KEY, batch_uniq_key)]
    if namespace:
        sent.append((PROPERTY_INSTANCE_ID, namespace))
    if hash_order:
        sent = list(_java_hash_order(sent).items())
    stored = sent + [(PROPERTY_CLUSTER, cluster), (PROPERTY_INNER_NUM, str(len(messages))),
                     (PROPERTY_INNER_BASE, str(queue_base))]
    outer = _java_hash_order(stored, 128) if hash_order else dict(stored)
    sys_flag = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG | (MULTI_TAGS_FLAG if multi_tags else 0)
    return b"".join(parts), outer, sys_flag


def inner_batch_fields(messages: Sequence[dict[str, Any]], *, topic: str, queue_id: int, queue_base: int,
                       batch_uniq_key: str, born_ts_ms: int, store_ts_ms: int, born_host: tuple[str, int],
                       store_host: tuple[str, int], **options: Any) -> dict[str, Any]:
    """The keyword arguments of ``encode_message`` (without ``physical_offset``) / ``CommitLogWriter.append`` for
    the batch's record; ``options`` go to :func:`encode_inner_batch`."""
    body, properties, sys_flag = encode_inner_batch(messages, batch_uniq_key=batch_uniq_key, queue_base=queue_base,
                                                    **options)
    return dict(topic=topic, queue_id=queue_id, queue_offset=queue_base, body=body, properties=properties,
                born_ts_ms=born_ts_ms, store_ts_ms=store_ts_ms, born_host=born_host, store_host=store_host,
                sys_flag=sys_flag, reconsume_times=0, flag=0)


# ------------------------------------------------------------------------------------------- the walk

# why a body's walk stopped early (its messages from that index on are not read)
_OK, _SHORT_HEADER, _BAD_BODY_LEN, _BAD_PROPS_LEN, _BAD_TOTAL = range(5)


@njit(cache=True, nogil=True, inline="always")
def _be32(b: np.ndarray, i: int) -> int:
    v = (np.int64(b[i]) << 24) | (np.int64(b[i + 1]) << 16) | (np.int64(b[i + 2]) << 8) | np.int64(b[i + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(cache=True, nogil=True)
def _walk(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, fill: bool, first: np.ndarray,
          flag: np.ndarray, body_at: np.ndarray, body_len: np.ndarray, props_at: np.ndarray, props_len: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``MessageDecoder.decodeMessages`` over each body ``data[starts[r]:ends[r]]``: the messages read until the
    first that does not fit (its index is the count). Per body: count, why it stopped, where (byte in the body) and
    the offending values. With ``fill``, each message's flag and where its body and properties are go to the
    arrays from row ``first[r]`` (the counts of an earlier pass)."""
    n = len(starts)
    count = np.zeros(n, np.int64)
    why = np.zeros(n, np.int64)
    at = np.zeros(n, np.int64)
    v1 = np.zeros(n, np.int64)
    v2 = np.zeros(n, np.int64)
    for r in range(n):
        p = starts[r]
        end = ends[r]
        k = 0
        while p < end:
            if p + INNER_HEADER + 2 > end:  # Java reads the header, then at least the properties length
                why[r], at[r], v1[r] = _SHORT_HEADER, p - starts[r], end - p
                break
            total = _be32(data, p)
            bl = _be32(data, p + 16)
            b = p + INNER_HEADER
            if bl < 0 or b + bl + 2 > end:
                why[r], at[r], v1[r] = _BAD_BODY_LEN, p - starts[r], bl
                break
            q = b + bl
            pl = (np.int64(data[q]) << 8) | np.int64(data[q + 1])
            if pl >= 32768:
                pl -= 65536
            if pl < 0 or q + 2 + pl > end:
                why[r], at[r], v1[r] = _BAD_PROPS_LEN, p - starts[r], pl
                break
            size = q + 2 + pl - p
            if total != size:  # countInnerMsgNum (INNER_NUM) walks by total, decodeMessages by the fields
                why[r], at[r], v1[r], v2[r] = _BAD_TOTAL, p - starts[r], total, size
                break
            if fill:
                j = first[r] + k
                flag[j] = _be32(data, p + 12)
                body_at[j] = b
                body_len[j] = bl
                props_at[j] = q + 2
                props_len[j] = pl
            k += 1
            p += size
        count[r] = k
    return count, why, at, v1, v2


def _gather(data: np.ndarray, at: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges ``data[at[i]:at[i]+length[i]]`` back to back, and their int32 offsets (one numpy pass)."""
    length = length.astype(np.int64)
    offsets = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    index = np.repeat(at.astype(np.int64) - offsets[:-1], length) + np.arange(offsets[-1], dtype=np.int64)
    return data[index], offsets


def _binary(buf: np.ndarray, offsets: np.ndarray, kind: pa.DataType = pa.binary()) -> pa.Array:
    return pa.Array.from_buffers(kind, len(offsets) - 1, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                          pa.py_buffer(buf)])


def _text(buf: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A string array on the bytes; a value that is not UTF-8 is read as Java reads it (``new String(bytes,
    UTF_8)``: U+FFFD for each malformed sequence): properties are not covered by any CRC."""
    arr = _binary(buf, offsets, pa.string())
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "replace") for v in arr.view(pa.binary()).to_pylist()], pa.string())


def _split_properties(props: np.ndarray, offsets: np.ndarray) -> tuple[pa.MapArray, dict[str, pa.Array]]:
    """``string2messageProperties`` over every inner message at once: message m's text is
    ``props[offsets[m]:offsets[m+1]]``; pairs end at ``\\x02`` (or the end), a name at the pair's first ``\\x01``;
    a pair without a name or a value is skipped. The map keeps the pairs in order (as the commitlog decoder does);
    UNIQ_KEY/KEYS/TAGS come from the last pair with that name (Java's HashMap keeps the last)."""
    m = len(offsets) - 1
    twos = np.flatnonzero(props == 2)
    starts = np.sort(np.concatenate((offsets[:-1], twos + 1)))
    ends = np.sort(np.concatenate((twos, offsets[1:])))
    ones = np.flatnonzero(props == 1)
    k = np.searchsorted(ones, starts)  # the first \x01 at or after each pair's start (if it is inside the pair)
    sep = np.append(ones, -1)[k]
    valid = (starts < sep) & (sep < ends - 1)
    s, e, sep = starts[valid], ends[valid], sep[valid]
    owner = np.searchsorted(offsets, s, side="right") - 1  # a kept pair is not empty: s lies in its message
    names = _text(*_gather(props, s, sep - s))
    values = _text(*_gather(props, sep + 1, e - sep - 1))
    map_offsets = np.zeros(m + 1, np.int32)
    np.cumsum(np.bincount(owner, minlength=m), out=map_offsets[1:])
    mapped = pa.MapArray.from_arrays(pa.array(map_offsets), names, values)
    named = {}
    for name in (PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS):
        hit = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))
        last = np.full(m, -1, np.int64)
        np.maximum.at(last, owner[hit], hit)
        named[name] = values.take(pa.array(last, mask=last < 0))
    return mapped, named


# ------------------------------------------------------------------------------------------- unwrapping

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _java_short(text: str | None) -> int | None:
    """``Short.parseShort``: an optional sign and decimal digits within -32768..32767; else None."""
    if text is None or not _INTEGER.fullmatch(text):
        return None
    v = int(text)
    return v if -32768 <= v <= _SHORT_MAX else None


def _java_long(text: str | None) -> int | None:
    """``Long.parseLong``: an optional sign and decimal digits within the range of a long; else None."""
    if text is None or not _INTEGER.fullmatch(text):
        return None
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 63) else None


def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def unwrap(records: pa.Table, *, keep_body: bool = False, source_path: str = "", segment_start: int | None = None
           ) -> tuple[pa.Table, list[Problem]]:
    """One row per inner message of the ``INNER_BATCH`` records among ``records`` (other records are left out).

    Args:
        records: decoded commitlog rows (:data:`jobs.formats.commitlog.SCHEMA`) with at least ``physical_offset``,
            ``queue_offset``, ``sys_flag``, ``body`` and ``properties``. The body of an INNER_BATCH record is there
            only when the decoder was asked for its topic (``decode_segment(body_topics=...)``).
        keep_body: add each inner message's body.
        source_path: the file named in problems when ``records`` has no ``segment`` column.
        segment_start: physical offset of the segment's first byte: problems give the record's byte in the segment
            (as the decoder's do); without it, its physical offset.

    Returns:
        (rows, problems). Rows: ``physical_offset`` (of the outer record), ``inner_index`` (0..N-1),
        ``queue_offset`` (the record's QUEUEOFFSET + inner_index, as ``MessageDecoder.decodeMessage``), ``uniq_key``,
        ``keys``, ``tags`` (the inner message's), ``properties`` (its own only: not the outer CLUSTER/INNER_*),
        ``flag`` (its own), then the outer record's ``topic``, ``queue_id``, ``store_ts``, ``born_ts``,
        ``reconsume_times`` (a consumer's unwrapped message has 0; the broker refuses batches to retry topics, so
        the outer's is 0 too), ``born_host``, ``store_host``, ``offset_msg_id``, ``sys_flag``, ``segment`` where
        ``records`` has them, and ``body`` with ``keep_body``; ordered by record, then inner index.

        A problem names the record's physical offset and the inner index; the record's other rows, and every other
        record, are still unwrapped. Rows are given only for inner messages that decode and whose queue offset is
        the record's (inner index < INNER_NUM, the span the queue gave it):

        - a body that does not decode from inner message i on (a header, body or properties length that runs past
          the body, or a total size other than its fields': ``countInnerMsgNum`` counted by totals): messages
          0..i-1 only;
        - INNER_NUM other than the number of messages in the body: those below INNER_NUM only;
        - no body (topic not decoded with bodies, or its body CRC did not match), INNER_NUM or INNER_BASE missing or
          not a number, INNER_NUM < 1, INNER_BASE other than the QUEUEOFFSET field (the queue's span of the record
          is unknown): none;
        - INNER_BATCH without NEED_UNWRAP: all (a problem says a consumer receives it wrapped, as one message).
    """
    missing = [c for c in REQUIRED if c not in records.column_names]
    if missing:
        raise ValueError(f"unwrap needs the decoded commitlog columns {list(REQUIRED)}; missing {missing}")
    schema = _schema(records.schema, keep_body)
    mask = is_inner_batch(_column(records, "sys_flag"))
    if not mask.any():
        return schema.empty_table(), []
    sub = records.filter(pa.array(mask))
    n = sub.num_rows
    phys = _column(sub, "physical_offset").to_numpy(zero_copy_only=False).astype(np.int64)
    qoff = _column(sub, "queue_offset").to_numpy(zero_copy_only=False).astype(np.int64)
    flags = _column(sub, "sys_flag").to_numpy(zero_copy_only=False).astype(np.int64)
    props = _column(sub, "properties")
    inner_num = pc.map_lookup(props, PROPERTY_INNER_NUM, "last").to_pylist()
    inner_base = pc.map_lookup(props, PROPERTY_INNER_BASE, "last").to_pylist()
    paths = (_column(sub, "segment").to_pylist() if "segment" in sub.column_names else [source_path] * n)
    bodies = _column(sub, "body").cast(pa.large_binary())
    has_body = ~np.asarray(bodies.is_null().to_numpy(zero_copy_only=False), bool)
    b_off = np.frombuffer(bodies.buffers()[1], np.int64)[bodies.offset:bodies.offset + n + 1]
    data = (np.frombuffer(bodies.buffers()[2], np.uint8) if bodies.buffers()[2] is not None
            else np.zeros(0, np.uint8))
    starts, ends = b_off[:-1].copy(), np.where(has_body, b_off[1:], b_off[:-1])
    empty = np.zeros(0, np.int64)
    count, why, at, v1, v2 = _walk(data, starts, ends, False, empty, empty, empty, empty, empty, empty)

    problems: list[tuple[int, int, Problem]] = []
    limit = np.zeros(n, np.int64)  # rows given per record

    def problem(r: int, index: int, what: str) -> None:
        po = int(phys[r])
        pos = po - segment_start if segment_start is not None else po
        where = f"at byte {pos}" if segment_start is not None else f"at physical offset {po}"
        problems.append((po, index, Problem(paths[r] or source_path, pos,
                                            f"INNER_BATCH record {where}: {what}")))

    for r in range(n):
        if not has_body[r]:
            problem(r, 0, "no body (its topic was not decoded with bodies, or its body CRC did not match): "
                          "its inner messages are not unwrapped")
            continue
        num, base = _java_short(inner_num[r]), _java_long(inner_base[r])
        if num is None or base is None or num < 1 or base != qoff[r]:
            if num is None or base is None:
                bad = [f"{name} {'missing' if raw is None else excerpt(raw) + ' not a number'}"
                       for name, raw, v in ((PROPERTY_INNER_NUM, inner_num[r], num),
                                            (PROPERTY_INNER_BASE, inner_base[r], base)) if v is None]
                what = ", ".join(bad)
            elif num < 1:
                what = f"INNER_NUM {num} below 1"
            else:
                what = f"INNER_BASE {base} but queue offset {int(qoff[r])}"
            problem(r, 0, f"{what}: the queue offsets of its inner messages are unknown; none unwrapped")
            continue
        got, stop, size = int(count[r]), int(why[r]), int(ends[r] - starts[r])
        if stop != _OK:
            i, b = got, int(at[r])
            detail = {
                _SHORT_HEADER: f"{int(v1[r])} bytes left, a header needs {_INNER_MIN}",
                _BAD_BODY_LEN: f"body length {int(v1[r])} runs past the end",
                _BAD_PROPS_LEN: f"properties length {int(v1[r])} runs past the end",
                _BAD_TOTAL: f"total size {int(v1[r])} but its fields take {int(v2[r])} bytes",
            }[stop]
            problem(r, i, f"inner message {i} (queue offset {int(qoff[r]) + i}) at byte {b} of its {size}-byte "
                          f"body: {detail}; inner messages {i}.. not unwrapped")
        elif got != num:
            problem(r, min(got, num), f"INNER_NUM {num} but the body holds {got} inner messages; "
                    + (f"inner messages {num}.. are past the record's queue offsets, not unwrapped" if got > num
                       else f"queue offsets {int(qoff[r]) + got}..{int(qoff[r]) + num - 1} hold no message"))
        if not needs_unwrap(int(flags[r])):
            problem(r, 0, f"sysFlag {int(flags[r]):#x} has INNER_BATCH without NEED_UNWRAP: a consumer receives "
                          "the batch as one message (PullAPIWrapper unwraps only with both); unwrapped here")
        limit[r] = min(got, num)

    # the rows: the walk again, writing where each message's parts are
    first = np.zeros(n, np.int64)
    np.cumsum(count[:-1], out=first[1:])
    total = int(count.sum())
    flag, body_at, body_len, props_at, props_len = (np.zeros(total, np.int64) for _ in range(5))
    _walk(data, starts, ends, True, first, flag, body_at, body_len, props_at, props_len)
    record = np.repeat(np.arange(n), count)
    index = np.arange(total, dtype=np.int64) - np.repeat(first, count)
    keep = index < limit[record]
    record, index = record[keep], index[keep]
    flag, body_at, body_len, props_at, props_len = (a[keep] for a in (flag, body_at, body_len, props_at, props_len))
    properties, named = _split_properties(*_gather(data, props_at, props_len))
    take = pa.array(record)
    columns: dict[str, pa.Array] = {
        "physical_offset": pa.array(phys[record], pa.int64()),
        "inner_index": pa.array(index, pa.int32()),
        "queue_offset": pa.array(qoff[record] + index, pa.int64()),
        "uniq_key": named[PROPERTY_UNIQ_KEY], "keys": named[PROPERTY_KEYS], "tags": named[PROPERTY_TAGS],
        "properties": properties,
        "flag": pa.array(flag, pa.int32()),
    }
    for name in CARRIED:
        if name in sub.column_names:
            columns[name] = _column(sub, name).take(take)
    if keep_body:
        columns["body"] = _binary(*_gather(data, body_at, body_len))
    out = pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)
    problems.sort(key=lambda t: (t[0], t[1]))
    return out, [p for _, _, p in problems]


def _schema(records: pa.Schema, keep_body: bool) -> pa.Schema:
    fields = [pa.field("physical_offset", pa.int64()), pa.field("inner_index", pa.int32()),
              pa.field("queue_offset", pa.int64()), pa.field("uniq_key", pa.string()),
              pa.field("keys", pa.string()), pa.field("tags", pa.string()),
              pa.field("properties", pa.map_(pa.string(), pa.string())), pa.field("flag", pa.int32())]
    fields += [records.field(name) for name in CARRIED if name in records.names]
    if keep_body:
        fields.append(pa.field("body", pa.binary()))
    return pa.schema(fields)
