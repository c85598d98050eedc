"""silver/messages: decoded records have a topic, non-negative offsets and a positive size."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import messages

TABLE = messages.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("physical_offset", "queue_offset", "reconsume_times") + [
        gxe.ExpectColumnValuesToNotBeNull(column="topic"),
        gxe.ExpectColumnValuesToBeBetween(column="size", min_value=1)])
