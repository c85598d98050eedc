"""silver/deliveries: retry counts are non-negative and a delivery never ends before it starts."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import deliveries

TABLE = deliveries.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("retry_times") + [
        gxe.ExpectColumnValuesToNotBeNull(column="start_ts"),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="end_ts", column_B="start_ts", or_equal=True,
                                                    ignore_row_if="either_value_is_missing")])
