"""Trace bodies (formats §7): every record layout, round trips, and undecodable records."""
from __future__ import annotations

import pytest

from jobs.formats import trace

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
        ("seg", 4096, "trace message at byte 4096: record 0 undecodable (invalid literal for int() with base 10: "
         "'notanumber'); skipped"),
        ("seg", 4096, "trace message at byte 4096: record 1 undecodable (unknown trace record type 'Bogus'); skipped"),
    ]


def test_non_utf8_body_is_a_problem() -> None:
    assert trace.decode_trace_body(b"\xff\xfe", source_path="seg", position=8) == ([], [
        trace.Problem("seg", 8, "trace message at byte 8: body is not UTF-8 (invalid start byte at 0); message skipped")])
