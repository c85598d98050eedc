"""Trace bodies (formats §7): every record layout, round trips, and undecodable records."""
from __future__ import annotations

import pytest

from jobs.formats import trace
from jobs.problems import excerpt

SB = {"type": "SubBefore", "timestamp_ms": 1000, "region_id": "R", "group": "G", "request_id": "rq1", "msg_id": "AB",
      "retry_times": 2, "keys": "k1 k2"}
SA = {"type": "SubAfter", "request_id": "rq1", "msg_id": "AB", "cost_time_ms": 5, "success": False, "keys": "k1 k2",
      "context_code": 4, "timestamp_ms": 1005, "group": "G"}
PUB = {"type": "Pub", "timestamp_ms": 1, "region_id": "R", "group": "P", "topic": "T", "msg_id": "AB", "tags": "t",
       "keys": "k", "store_host": "1.2.3.4:10911", "body_length": 3, "cost_time_ms": 2, "msg_type": 0,
       "offset_msg_id": "X", "success": True, "client_host": None}
END = {"type": "EndTransaction", "timestamp_ms": 7, "region_id": "R", "group": "P", "topic": "T", "msg_id": "AB",
       "tags": None, "keys": None, "store_host": "1.2.3.4:10911", "msg_type": 2, "transaction_id": "tx",
       "transaction_state": "COMMIT_MESSAGE", "from_transaction_check": False}
RECALL = {"type": "Recall", "timestamp_ms": 8, "region_id": "R", "group": "P", "topic": "T", "msg_id": "AB",
          "success": True}


def test_round_trip_of_every_record_type() -> None:
    body = trace.encode_trace_records([SB, SA, PUB, END, RECALL])
    assert body.startswith(b"SubBefore\x011000\x01R\x01G\x01rq1\x01AB\x012\x01k1 k2\x02SubAfter\x01rq1")
    assert trace.decode_trace_body(body, source_path="s", position=0) == ([SB, SA, PUB, END, RECALL], [])


@pytest.mark.parametrize("body, expected", [
    pytest.param(b"Pub\x011\x01R\x01P\x01T\x01AB\x01t\x01k\x01h:1\x013\x012\x010\x01true\x02",
                 {**PUB, "store_host": "h:1", "offset_msg_id": None, "success": True},
                 id="pub_with_13_fields_has_no_offset_msg_id_and_ends_with_is_success"),
    pytest.param(b"Pub\x011\x01R\x01P\x01T\x01AB\x01t\x01k\x01h:1\x013\x012\x010\x01X\x01true\x0110.0.0.9\x02",
                 {**PUB, "store_host": "h:1", "client_host": "10.0.0.9"}, id="pub_with_client_host"),
    pytest.param(b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x014\x01\x02",
                 {**SA, "timestamp_ms": None, "group": None}, id="cloud_sub_after_head_layout"),
    pytest.param(b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x014\x011005\x02",
                 {**SA, "group": None}, id="sub_after_with_8_fields_has_a_timestamp_and_no_group"),
    pytest.param(b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x02",
                 {**SA, "context_code": None, "timestamp_ms": None, "group": None},
                 id="sub_after_with_6_fields_has_no_context_code"),
])
def test_field_count_variants(body: bytes, expected: dict) -> None:
    assert trace.decode_trace_body(body, source_path="s", position=0) == ([expected], [])


def test_sub_after_layouts_in_one_body_each_decode_without_problems() -> None:
    body = (b"SubAfter\x01r1\x01A\x015\x01true\x01k\x010\x011005\x02SubAfter\x01r2\x01B\x015\x01true\x01k\x02"
            + trace.encode_trace_records([SA]))
    records, problems = trace.decode_trace_body(body, source_path="s", position=0)
    assert problems == []
    assert [(r["request_id"], r["context_code"], r["timestamp_ms"], r["group"]) for r in records] == [
        ("r1", 0, 1005, None), ("r2", None, None, None), ("rq1", 4, 1005, "G")]


def test_cloud_sub_after_without_closing_char_runs_into_the_next_record_as_in_4_9_7() -> None:
    body = b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x014\x01" + trace.encode_trace_records([SB])
    records, problems = trace.decode_trace_body(body, source_path="s", position=0)
    assert (records, problems) == ([{**SA, "timestamp_ms": None, "group": None}, SB], [])


def test_undecodable_record_is_a_problem_and_the_rest_decodes() -> None:
    body = b"SubBefore\x01notanumber\x01R\x01G\x01rq\x01AB\x010\x01k\x02Bogus\x011\x02" + trace.encode_trace_records([SA])
    records, problems = trace.decode_trace_body(body, source_path="seg", position=4096)
    assert records == [SA]
    assert [(p.source_path, p.position, p.reason) for p in problems] == [
        ("seg", 4096, "trace message at byte 4096: record 0 undecodable (not an integer (0x6e6f74616e756d62...)); skipped"),
        ("seg", 4096, "trace message at byte 4096: record 1 undecodable (unknown trace record type (0x426f677573)); skipped"),
    ]


def test_non_utf8_body_is_a_problem() -> None:
    assert trace.decode_trace_body(b"\xff\xfe", source_path="seg", position=8) == ([], [
        trace.Problem("seg", 8, "trace message at byte 8: body is not UTF-8 (invalid start byte at 0); message skipped")])


# ------------------------------------------------------------------------------------ bulk decode

def _layout_tokens(rnd: "random.Random") -> list[str]:
    """One record of a layout RocketMQ writes, as tokens."""
    def num() -> str:
        return rnd.choice(["0", "7", "-1", "1732600000123", "2147483647"])

    kind = rnd.choice(trace.TYPES)
    if kind == "Pub":
        toks = ["Pub", num(), "R", "P", "T", "AB", rnd.choice(["t", "", "null"]), rnd.choice(["k", "", "null"]),
                "1.2.3.4:10911", num(), num(), rnd.choice(["0", "1"])]
        extra = rnd.choice([[], ["X"], ["", "true"], ["X", "true", "10.0.0.9"], ["X", "false", ""]])
        return toks + (extra or ["true"])
    if kind == "SubBefore":
        return ["SubBefore", num(), "R", "G", "rq", "AB", rnd.choice(["0", "3"]), rnd.choice(["k", "", "null"])]
    if kind == "SubAfter":
        return ["SubAfter", "rq", "AB", num(), rnd.choice(["true", "false"]), "k"] + rnd.choice(
            [[], ["4"], ["4", num()], ["4", num(), "G"]])
    if kind == "EndTransaction":
        return ["EndTransaction", num(), "R", "P", "T", "AB", "t", "k", "h:1", "2", "tx", "COMMIT_MESSAGE",
                rnd.choice(["true", "false"])]
    return ["Recall", num(), "R", "P", "T", "AB", rnd.choice(["true", "false"])]


def _mutated(rnd: "random.Random", toks: list[str]) -> list[str]:
    odd = ["", "null", "x", "--5", "+3", " 4", "1_0", "٣", "Pub", "SubAfter", "9" * 19, "2147483648",
           "9223372036854776", "-9223372036854775", "True"]
    toks = list(toks)
    r = rnd.random()
    if r < 0.15:
        toks[rnd.randrange(1, len(toks))] = rnd.choice(odd)
    elif r < 0.2:
        del toks[rnd.randrange(1, len(toks))]
    elif r < 0.25:
        toks.insert(rnd.randrange(1, len(toks) + 1), rnd.choice(odd))
    return toks


def _body(rnd: "random.Random") -> bytes | None:
    if rnd.random() < 0.03:
        return None
    records = ["\x01".join(_mutated(rnd, _layout_tokens(rnd))) for _ in range(rnd.randint(0, 5))]
    text = "".join(rec + rnd.choices(["\x02", "\x01", "\x02\x02", "\x01\x02"], [90, 4, 3, 3])[0] for rec in records)
    data = text.encode()
    return data + b"\xff" if rnd.random() < 0.02 else data.replace(b"k", "ké".encode()) if rnd.random() < 0.03 else data


@pytest.mark.parametrize("seed", range(4))
def test_bulk_decode_gives_exactly_what_decoding_each_body_gives(seed: int) -> None:
    import random

    import numpy as np
    import pyarrow as pa

    rnd = random.Random(seed)
    bodies = [_body(rnd) for _ in range(1500)]
    positions = np.arange(len(bodies), dtype=np.int64) * 64
    got, problems = trace.decode_trace_messages(pa.array(bodies, pa.binary()), positions, "seg")
    want, want_problems = [], []
    for i, body in enumerate(bodies):
        records, found = trace.decode_trace_body(body or b"", source_path="seg", position=i * 64)
        want_problems += found
        want += [{"body": i, "record_index": j, **{c: r.get(c) for c, _ in trace.COLUMNS}} for j, r in enumerate(records)]
    assert got.to_pylist() == want
    assert problems == want_problems
    # both ways were taken often: the kernels decoded the bodies without odd records, the rest went body by body
    fast, rest = trace.decode_trace_bodies(pa.array(bodies, pa.binary()))
    assert len(set(fast.column("body").to_pylist())) > 400 and len(rest) > 300


def test_bulk_decode_of_every_layout_reads_the_fields_of_decode_trace_body() -> None:
    import pyarrow as pa

    body = (trace.encode_trace_records([SB, SA, PUB, END, RECALL])
            + b"Pub\x011\x01R\x01P\x01T\x01AB\x01t\x01k\x01h:1\x013\x012\x010\x01true\x02"
            + b"Pub\x011\x01R\x01P\x01T\x01AB\x01null\x01\x01h:1\x013\x012\x010\x01X\x01false\x0110.0.0.9\x02"
            + b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x014\x01\x02"
            + b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x014\x011005\x02"
            + b"SubAfter\x01rq1\x01AB\x015\x01false\x01k1 k2\x02")
    fast, rest = trace.decode_trace_bodies(pa.array([None, body, b""], pa.binary()))
    assert rest.tolist() == []
    records, _ = trace.decode_trace_body(body, source_path="s", position=0)
    assert len(records) == 10
    assert fast.to_pylist() == [{"body": 1, "record_index": j, **{c: r.get(c) for c, _ in trace.COLUMNS}}
                                for j, r in enumerate(records)]
    assert fast.column("type").to_pylist() == ["SubBefore", "SubAfter", "Pub", "EndTransaction", "Recall", "Pub",
                                               "Pub", "SubAfter", "SubAfter", "SubAfter"]


@pytest.mark.parametrize("field, value", [("retry_times", "2147483648"), ("timestamp_ms", "9223372036854776"),
                                          ("timestamp_ms", "99999999999999999999")])
def test_a_number_the_lake_cannot_hold_is_an_undecodable_record_not_a_failed_load(field: str, value: str) -> None:
    tokens = ["SubBefore", "1000", "R", "G", "rq1", "AB", "2", "k"]
    tokens[{"retry_times": 6, "timestamp_ms": 1}[field]] = value
    body = ("\x01".join(tokens) + "\x02").encode() + trace.encode_trace_records([SA])
    records, problems = trace.decode_trace_body(body, source_path="seg", position=0)
    assert records == [SA]
    assert [p.reason for p in problems] == [
        f"trace message at byte 0: record 0 undecodable (an integer out of range ({excerpt(value)})); skipped"]
