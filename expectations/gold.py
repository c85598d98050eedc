"""gold/*: the report rows of spec §5 (ranges well formed, kinds from the fixed sets)."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative, one_of
from schemas import consumer_status, coverage, dlq_candidates, duplicated_ranges, offset_corrections, unconsumed_ranges


def duplicated_ranges_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(duplicated_ranges.TABLE, non_negative("start_offset") + [
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="end_offset", column_B="start_offset", or_equal=True),
        gxe.ExpectColumnValuesToBeBetween(column="messages", min_value=1),
        one_of("evidence", ["TRACE", "REWIND"]),
        one_of("cause", ["HEAD_BLOCKED", "UNPERSISTED", "REWIND", "UNKNOWN"])])


def unconsumed_ranges_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(unconsumed_ranges.TABLE, non_negative("start_offset") + [
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="end_offset", column_B="start_offset", or_equal=True),
        gxe.ExpectColumnValuesToBeBetween(column="messages", min_value=1),
        one_of("kind", ["BACKLOG", "EXPIRED", "SKIPPED", "BROADCAST_DROPPED"])])


def offset_corrections_suite() -> Any:
    return make_suite(offset_corrections.TABLE, non_negative("corrected_offset", "lost_messages") + [
        one_of("reason", ["BELOW_MIN", "ABOVE_MAX"])])


def dlq_candidates_suite() -> Any:
    return make_suite(dlq_candidates.TABLE, non_negative("reconsume_times") + [
        one_of("reason", ["IN_DLQ", "RETRYING", "BLOCKING_COMMIT", "BROADCAST_DROPPED", "ORDERLY_BLOCKED",
                          "TRANSACTION_DISCARDED"])])


def consumer_status_suite() -> Any:
    return make_suite(consumer_status.TABLE, non_negative("time_lag_s") + [
        one_of("status", ["OK", "WARN", "STALL", "REWIND", "UNKNOWN"]),
        one_of("consume_mode", ["CONCURRENT", "ORDERLY", "BROADCAST"])])


def coverage_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(coverage.TABLE, [one_of("reason", list(coverage.REASONS)),
                                       gxe.ExpectColumnValuesToNotBeNull(column="detail")])
