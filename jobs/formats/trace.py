"""Message trace records (formats §7): the bodies of ``RMQ_SYS_TRACE_TOPIC`` messages.

``TraceDataEncoder`` joins fields with char 1 and ends each record with char 2; one trace message holds many
records. Every layout RocketMQ writes is read: Pub with 13, 14 or >= 15 fields, SubBefore (8), SubAfter (9, 8 in
older clients, 6 before contextCode, or the CLOUD access channel's 7 with or without the closing char 2),
EndTransaction (13) and Recall (7).
"""
from __future__ import annotations

from typing import Any

from jobs.problems import Problem  # noqa: F401 - re-exported for callers

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall")


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return text == "true"


def _int(text: str) -> int:
    return int(text)


def _opt(text: str) -> str | None:
    return None if text in ("", "null") else text


def _pub(f: list[str]) -> dict[str, Any]:
    r = {"type": "Pub", "timestamp_ms": _int(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
         "msg_id": f[5], "tags": _opt(f[6]), "keys": _opt(f[7]), "store_host": f[8], "body_length": _int(f[9]),
         "cost_time_ms": _int(f[10]), "msg_type": _int(f[11])}
    # 13 fields: the older layout without offsetMsgId, isSuccess last (TraceDataEncoder.decoderFromTraceDataString)
    r["offset_msg_id"] = _opt(f[12]) if len(f) > 13 else None
    r["success"] = _bool(f[13]) if len(f) > 13 else _bool(f[12])
    r["client_host"] = _opt(f[14]) if len(f) > 14 else None
    return r


def _sub_before(f: list[str]) -> dict[str, Any]:
    return {"type": "SubBefore", "timestamp_ms": _int(f[1]), "region_id": f[2], "group": f[3], "request_id": f[4],
            "msg_id": f[5], "retry_times": _int(f[6]), "keys": _opt(f[7])}


def _sub_after(f: list[str]) -> dict[str, Any]:
    """6 fields (before contextCode), 7 (CLOUD), 8 (timeStamp, before groupName was added) or 9."""
    return {"type": "SubAfter", "request_id": f[1], "msg_id": f[2], "cost_time_ms": _int(f[3]),
            "success": _bool(f[4]), "keys": _opt(f[5]), "context_code": _int(f[6]) if len(f) > 6 else None,
            "timestamp_ms": _int(f[7]) if len(f) > 7 else None, "group": f[8] if len(f) > 8 else None}


def _end_tx(f: list[str]) -> dict[str, Any]:
    return {"type": "EndTransaction", "timestamp_ms": _int(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
            "msg_id": f[5], "tags": _opt(f[6]), "keys": _opt(f[7]), "store_host": f[8], "msg_type": _int(f[9]),
            "transaction_id": _opt(f[10]), "transaction_state": f[11], "from_transaction_check": _bool(f[12])}


def _recall(f: list[str]) -> dict[str, Any]:
    return {"type": "Recall", "timestamp_ms": _int(f[1]), "region_id": f[2], "group": f[3], "topic": f[4],
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
    raise ValueError(f"unknown trace record type {kind!r}")


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
