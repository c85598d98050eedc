"""Message trace records (formats §7): the bodies of ``RMQ_SYS_TRACE_TOPIC`` messages.

``TraceDataEncoder`` joins fields with char 1 and ends each record with char 2; one trace message holds many
records. Every layout RocketMQ writes is read: Pub with 13, 14 or >= 15 fields, SubBefore (8), SubAfter (9, 8 in
older clients, 6 before contextCode, or the CLOUD access channel's 7 with or without the closing char 2),
EndTransaction (13) and Recall (7).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.problems import Problem, excerpt  # noqa: F401 - Problem re-exported for callers

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall")


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"not a boolean ({excerpt(text)})")
    return text == "true"


_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
# epoch milliseconds the lake can hold as a microsecond timestamp
_MS = (_INT64[0] // 1000 + 1, _INT64[1] // 1000)


def _int(text: str, bounds: tuple[int, int] = _INT64) -> int:
    """``int(text)`` as the Java client parses it, within the column's range (a value outside it is undecodable,
    not a failed load)."""
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"not an integer ({excerpt(text)})") from None
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError(f"an integer out of range ({excerpt(text)})")
    return v


def _int32(text: str) -> int:
    return _int(text, _INT32)


def _ms(text: str) -> int:
    return _int(text, _MS)


def _opt(text: str) -> str | None:
    return None if text in ("", "null") else text


def _pub(f: list[str]) -> dict[str, Any]:
    r = {"type": "Pub", "timestamp_ms": _ms(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
         "msg_id": f[5], "tags": _opt(f[6]), "keys": _opt(f[7]), "store_host": f[8], "body_length": _int(f[9]),
         "cost_time_ms": _int(f[10]), "msg_type": _int32(f[11])}
    # 13 fields: the older layout without offsetMsgId, isSuccess last (TraceDataEncoder.decoderFromTraceDataString)
    r["offset_msg_id"] = _opt(f[12]) if len(f) > 13 else None
    r["success"] = _bool(f[13]) if len(f) > 13 else _bool(f[12])
    r["client_host"] = _opt(f[14]) if len(f) > 14 else None
    return r


def _sub_before(f: list[str]) -> dict[str, Any]:
    return {"type": "SubBefore", "timestamp_ms": _ms(f[1]), "region_id": f[2], "group": f[3], "request_id": f[4],
            "msg_id": f[5], "retry_times": _int32(f[6]), "keys": _opt(f[7])}


def _sub_after(f: list[str]) -> dict[str, Any]:
    """6 fields (before contextCode), 7 (CLOUD), 8 (timeStamp, before groupName was added) or 9."""
    return {"type": "SubAfter", "request_id": f[1], "msg_id": f[2], "cost_time_ms": _int(f[3]),
            "success": _bool(f[4]), "keys": _opt(f[5]), "context_code": _int32(f[6]) if len(f) > 6 else None,
            "timestamp_ms": _ms(f[7]) if len(f) > 7 else None, "group": f[8] if len(f) > 8 else None}


def _end_tx(f: list[str]) -> dict[str, Any]:
    return {"type": "EndTransaction", "timestamp_ms": _ms(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
            "msg_id": f[5], "tags": _opt(f[6]), "keys": _opt(f[7]), "store_host": f[8], "msg_type": _int32(f[9]),
            "transaction_id": _opt(f[10]), "transaction_state": f[11], "from_transaction_check": _bool(f[12])}


def _recall(f: list[str]) -> dict[str, Any]:
    return {"type": "Recall", "timestamp_ms": _ms(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
            "msg_id": f[5], "success": _bool(f[6])}


def _ends(tokens: list[str], j: int) -> bool:
    """Whether a record can end before ``tokens[j]``: the end, an empty token (char 1 + char 2) or a new record."""
    return j >= len(tokens) or tokens[j] == "" or tokens[j] in TYPES


def _width(tokens: list[str], i: int) -> int:
    """How many tokens the record starting at ``tokens[i]`` uses (SubAfter and Pub vary)."""
    kind = tokens[i]
    rest = len(tokens) - i
    if kind == "SubBefore":
        return 8
    if kind == "EndTransaction":
        return 13
    if kind == "Recall":
        return 7
    if kind == "SubAfter":
        # 9 or 8 fields (a timeStamp at 7, then the record ends); else the CLOUD layout's 7, which 4.9.7 runs into
        # the next record; 6 when the record ends before a contextCode
        for width in (9, 8):
            if rest >= width and tokens[i + 7].lstrip("-").isdigit() and _ends(tokens, i + width):
                return width
        return 6 if rest >= 6 and _ends(tokens, i + 6) else 7
    if kind == "Pub":
        if _ends(tokens, i + 13):
            return 13
        if _ends(tokens, i + 14):
            return 14
        return 15
    raise ValueError(f"unknown trace record type ({excerpt(kind)})")


_PARSE = {"Pub": _pub, "SubBefore": _sub_before, "SubAfter": _sub_after, "EndTransaction": _end_tx,
          "Recall": _recall}


def decode_trace_body(body: bytes, *, source_path: str, position: int) -> tuple[list[dict[str, Any]], list[Problem]]:
    """All records of one trace message body; an undecodable record is a problem and decoding goes on.

    Args:
        body: the message body (UTF-8).
        source_path: the commitlog segment, for problems.
        position: the byte position of the trace message in that segment, for problems.
    """
    records: list[dict[str, Any]] = []
    problems: list[Problem] = []
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [Problem(source_path, position, f"trace message at byte {position}: body is not UTF-8 "
                            f"({exc.reason} at {exc.start}); message skipped")]
    for seg_no, segment in enumerate(text.split(FIELD_SPLITOR)):
        tokens = segment.split(CONTENT_SPLITOR)
        i = 0
        while i < len(tokens):
            if tokens[i] == "":
                i += 1
                continue
            try:
                width = _width(tokens, i)
                fields = tokens[i: i + width]
                if len(fields) < width:
                    raise ValueError(f"{tokens[i]} record has {len(fields)} fields, expected {width}")
                records.append(_PARSE[tokens[i]](fields))
                i += width
            except (ValueError, IndexError) as exc:
                problems.append(Problem(source_path, position, f"trace message at byte {position}: record "
                                        f"{seg_no} undecodable ({exc}); skipped"))
                break
    return records, problems


# ------------------------------------------------------------------------------------------- bulk decode

# the fields of a record the lake keeps (bronze/trace_records), with their Arrow types
COLUMNS = [("type", pa.string()), ("timestamp_ms", pa.int64()), ("group", pa.string()),
           ("request_id", pa.string()), ("msg_id", pa.string()), ("retry_times", pa.int32()), ("keys", pa.string()),
           ("cost_time_ms", pa.int64()), ("success", pa.bool_()), ("context_code", pa.int32()),
           ("topic", pa.string()), ("tags", pa.string()), ("store_host", pa.string()),
           ("offset_msg_id", pa.string()), ("msg_type", pa.int32())]

# How each layout :func:`decode_trace_body` reads from a record that is one segment (between two char 2) of
# exactly that many tokens: column -> (token, how: s string, o optional string, i/i32/ms integer, b boolean), and
# the tokens it checks without keeping them. These are the cases in which :func:`_width` picks exactly that width:
# the checks below (an integer where _width looks for digits, a boolean or a non-type where it looks for the end of
# a record) make sure of it; anything else is left to :func:`decode_trace_body`.
_PUB = {"timestamp_ms": (1, "ms"), "group": (3, "s"), "topic": (4, "s"), "msg_id": (5, "s"), "tags": (6, "o"),
        "keys": (7, "o"), "store_host": (8, "s"), "cost_time_ms": (10, "i"), "msg_type": (11, "i32")}
_SUB_AFTER = {"request_id": (1, "s"), "msg_id": (2, "s"), "cost_time_ms": (3, "i"), "success": (4, "b"),
              "keys": (5, "o")}
_LAYOUTS: list[tuple[str, int, dict[str, tuple[int, str]], dict[int, str]]] = [
    ("Pub", 13, {**_PUB, "success": (12, "b")}, {9: "i"}),
    ("Pub", 14, {**_PUB, "offset_msg_id": (12, "o"), "success": (13, "b")}, {9: "i"}),
    # a 15th token that is empty ends the record at 14 tokens: the same record
    ("Pub", 15, {**_PUB, "offset_msg_id": (12, "o"), "success": (13, "b")}, {9: "i", 14: "not_type"}),
    ("SubBefore", 8, {"timestamp_ms": (1, "ms"), "group": (3, "s"), "request_id": (4, "s"), "msg_id": (5, "s"),
                      "retry_times": (6, "i32"), "keys": (7, "o")}, {}),
    ("SubAfter", 9, {**_SUB_AFTER, "context_code": (6, "i32"), "timestamp_ms": (7, "ms"), "group": (8, "s")}, {}),
    ("SubAfter", 8, {**_SUB_AFTER, "context_code": (6, "i32"), "timestamp_ms": (7, "ms")}, {}),
    ("SubAfter", 7, {**_SUB_AFTER, "context_code": (6, "i32")}, {}),
    # the CLOUD access channel's 7 fields, then char 1 and char 2
    ("SubAfter", 8, {**_SUB_AFTER, "context_code": (6, "i32")}, {7: "empty"}),
    ("SubAfter", 6, _SUB_AFTER, {}),
    ("EndTransaction", 13, {"timestamp_ms": (1, "ms"), "group": (3, "s"), "topic": (4, "s"), "msg_id": (5, "s"),
                            "tags": (6, "o"), "keys": (7, "o"), "store_host": (8, "s"), "msg_type": (9, "i32")},
     {12: "b"}),
    ("Recall", 7, {"timestamp_ms": (1, "ms"), "group": (3, "s"), "topic": (4, "s"), "msg_id": (5, "s"),
                   "success": (6, "b")}, {}),
]
_BOUNDS = {"i": _INT64, "i32": _INT32, "ms": _MS}
_INT_RE = "^-?[0-9]{1,18}$"  # what int() takes and int64 holds; other spellings go the slow way


def decode_trace_bodies(bodies: pa.Array) -> tuple[pa.Table, np.ndarray]:
    """The records of many trace message bodies at once, as :func:`decode_trace_body` gives them, in Arrow compute
    kernels (no Python per record: a decode task shares its interpreter with the engine's other tasks on Sail).

    A body is decoded here when it is ASCII and every segment between two char 2 is blank or one record of a layout
    of :data:`_LAYOUTS` whose fields convert; any other body (several records run together, other spellings of
    numbers, undecodable records, non-ASCII text) is left to :func:`decode_trace_body`, which the caller runs on it.

    Returns:
        The records (columns ``body``: the body's index, ``record_index``: the record's index in its body, and
        :data:`COLUMNS`), by body then record; and the indices of the bodies left to :func:`decode_trace_body`.
    """
    import pyarrow.compute as pc

    n = len(bodies)
    bodies = bodies.cast(pa.binary())
    valid = np.asarray(bodies.is_valid().to_numpy(zero_copy_only=False), bool)
    offs = np.frombuffer(bodies.buffers()[1], np.int32, n + 1, bodies.offset * 4) if n else np.zeros(1, np.int32)
    data = bodies.buffers()[2]
    high = np.frombuffer(data, np.uint8) >= 0x80 if data is not None and data.size else np.zeros(0, bool)
    seen = np.concatenate(([0], np.cumsum(high, dtype=np.int64)))
    ascii_ = (seen[offs[1:]] - seen[offs[:-1]]) == 0 if n else np.zeros(0, bool)
    rest = np.zeros(n, bool)
    rest[valid & ~ascii_] = True
    idx = np.flatnonzero(valid & ascii_)
    empty = pa.table({"body": pa.array([], pa.int64()), "record_index": pa.array([], pa.int32()),
                      **{c: pa.array([], t) for c, t in COLUMNS}})
    if not len(idx):
        return empty, np.flatnonzero(rest)
    segs = pc.split_pattern(bodies.take(pa.array(idx)).cast(pa.string()), FIELD_SPLITOR)
    seg_body = idx[pc.list_parent_indices(segs).to_numpy()]
    toks = pc.split_pattern(pc.list_flatten(segs), CONTENT_SPLITOR)
    words = pc.list_flatten(toks)
    starts = np.asarray(toks.offsets.to_numpy(), np.int64)
    starts -= starts[0]
    ntok, starts = np.diff(starts), starts[:-1]
    first = words.take(pa.array(starts))
    layout = np.full(len(starts), -1, np.int64)
    blank = (ntok == 1) & np.asarray(pc.equal(first, "").to_numpy(zero_copy_only=False), bool)

    def token(rows: np.ndarray, at: int) -> pa.Array:
        return words.take(pa.array(starts[rows] + at))

    ok = blank.copy()
    for k, (kind, width, fields, checks) in enumerate(_LAYOUTS):
        rows = np.flatnonzero((ntok == width) & ~blank)
        if not len(rows):
            continue
        rows = rows[np.asarray(pc.equal(first.take(pa.array(rows)), kind).to_numpy(zero_copy_only=False), bool)]
        good = np.ones(len(rows), bool)
        for at, how in [(at, how) for at, how in fields.values()] + list(checks.items()):
            if not len(rows):
                break
            t = token(rows, at)
            if how in _BOUNDS:
                lo, hi = _BOUNDS[how]
                fits = np.asarray(pc.match_substring_regex(t, _INT_RE).to_numpy(zero_copy_only=False), bool)
                v = np.zeros(len(rows), np.int64)
                v[fits] = pc.cast(t.filter(pa.array(fits)), pa.int64()).to_numpy()
                good &= fits & (v >= lo) & (v <= hi)
            elif how == "b":
                good &= np.asarray(pc.is_in(t, pa.array(["true", "false"])).to_numpy(zero_copy_only=False), bool)
            elif how == "empty":
                good &= np.asarray(pc.equal(t, "").to_numpy(zero_copy_only=False), bool)
            elif how == "not_type":
                good &= ~np.asarray(pc.is_in(t, pa.array(TYPES)).to_numpy(zero_copy_only=False), bool)
        layout[rows[good]] = k
        ok[rows[good]] = True
    rest[np.unique(seg_body[~ok])] = True
    rec = np.flatnonzero((layout >= 0) & ~rest[seg_body])
    if not len(rec):
        return empty, np.flatnonzero(rest)
    body = seg_body[rec]
    lay = layout[rec]
    new = np.flatnonzero(np.concatenate(([True], body[1:] != body[:-1])))
    index = np.arange(len(rec)) - np.repeat(new, np.diff(np.append(new, len(rec))))
    cols: dict[str, pa.Array] = {"body": pa.array(body, pa.int64()), "record_index": pa.array(index, pa.int32())}
    for name, typ in COLUMNS:
        if name == "type":
            cols[name] = first.take(pa.array(rec))
            continue
        at = np.full(len(rec), -1, np.int64)
        how = None
        for k, (_, _, fields, _) in enumerate(_LAYOUTS):
            if name in fields:
                at[lay == k] = fields[name][0]
                how = fields[name][1]  # one way per column in every layout
        if how is None:
            cols[name] = pa.nulls(len(rec), typ)
            continue
        t = words.take(pa.array(starts[rec] + np.maximum(at, 0), mask=at < 0))
        if how == "o":
            t = pc.if_else(pc.is_in(t, pa.array(["", "null"])), pa.scalar(None, pa.string()), t)
        elif how == "b":
            t = pc.equal(t, "true")
        elif how in _BOUNDS:
            t = pc.cast(t, pa.int64())
        cols[name] = t.cast(typ)
    return pa.table(cols), np.flatnonzero(rest)


def decode_trace_messages(bodies: pa.Array, positions: np.ndarray, source_path: str
                          ) -> tuple[pa.Table, list[Problem]]:
    """Every record of the trace message bodies (:func:`decode_trace_bodies`, the rest by
    :func:`decode_trace_body`), by body then record, and the problems in body order: what decoding each body with
    :func:`decode_trace_body` gives. ``positions``: each message's byte position in ``source_path``, for problems."""
    fast, rest = decode_trace_bodies(bodies)
    if not len(rest):
        return fast, []
    problems: list[Problem] = []
    slow: dict[str, list[Any]] = {name: [] for name in ["body", "record_index"] + [c for c, _ in COLUMNS]}
    for i in rest.tolist():
        recs, found = decode_trace_body(bodies[i].as_py() or b"", source_path=source_path,
                                        position=int(positions[i]))
        problems.extend(found)
        for j, r in enumerate(recs):
            slow["body"].append(i)
            slow["record_index"].append(j)
            for c, _ in COLUMNS:
                slow[c].append(r.get(c))
    types = {"body": pa.int64(), "record_index": pa.int32(), **dict(COLUMNS)}
    both = pa.concat_tables([fast, pa.table({c: pa.array(v, types[c]) for c, v in slow.items()})])
    return both.sort_by([("body", "ascending"), ("record_index", "ascending")]), problems


def _s(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def encode_trace_records(records: list[dict[str, Any]], *, cloud: bool = False) -> bytes:
    """The inverse of :func:`decode_trace_body`, as ``TraceDataEncoder.encoderFromContextBean`` writes."""
    out = []
    for r in records:
        t = r["type"]
        if t == "Pub":
            f = [t, r["timestamp_ms"], r.get("region_id", "DefaultRegion"), r["group"], r["topic"], r["msg_id"],
                 r.get("tags"), r.get("keys"), r["store_host"], r.get("body_length", 0), r.get("cost_time_ms", 0),
                 r.get("msg_type", 0), r.get("offset_msg_id"), r.get("success", True)]
        elif t == "SubBefore":
            f = [t, r["timestamp_ms"], r.get("region_id", "DefaultRegion"), r["group"], r["request_id"], r["msg_id"],
                 r.get("retry_times", 0), r.get("keys")]
        elif t == "SubAfter":
            f = [t, r["request_id"], r["msg_id"], r.get("cost_time_ms", 0), r["success"], r.get("keys"),
                 r.get("context_code", 0)]
            if not cloud:
                f += [r["timestamp_ms"], r["group"]]
            else:
                out.append(CONTENT_SPLITOR.join(_s(x) for x in f) + CONTENT_SPLITOR + FIELD_SPLITOR)
                continue
        elif t == "EndTransaction":
            f = [t, r["timestamp_ms"], r.get("region_id", "DefaultRegion"), r["group"], r["topic"], r["msg_id"],
                 r.get("tags"), r.get("keys"), r["store_host"], r.get("msg_type", 1), r.get("transaction_id"),
                 r["transaction_state"], r.get("from_transaction_check", False)]
        elif t == "Recall":
            f = [t, r["timestamp_ms"], r.get("region_id", "DefaultRegion"), r["group"], r["topic"], r["msg_id"],
                 r.get("success", True)]
        else:
            raise ValueError(f"unknown trace record type {t!r}")
        out.append(CONTENT_SPLITOR.join(_s(x) for x in f) + FIELD_SPLITOR)
    return "".join(out).encode("utf-8")
