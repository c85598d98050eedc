"""silver/key_index: one row per stored copy with a UNIQ_KEY, each with the key's hash (the rule that every copy of
silver/messages is in it is checked with silver/messages: ``jobs.ops.quality.indexed_rule``)."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import key_index

TABLE = key_index.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("physical_offset", "queue_offset") + [
        gxe.ExpectColumnValuesToNotBeNull(column="key_hash")])
