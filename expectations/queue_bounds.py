"""silver/queue_bounds: 0 <= Min <= Max."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import queue_bounds

TABLE = queue_bounds.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("min_offset", "max_offset", "queue_id") + [
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="max_offset", column_B="min_offset", or_equal=True)])
