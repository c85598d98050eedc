"""silver/topic_configs: queue counts and permission bits (PermName: 0..15)."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import topic_configs

TABLE = topic_configs.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("read_queue_nums", "write_queue_nums") + [
        gxe.ExpectColumnValuesToBeBetween(column="perm", min_value=0, max_value=15)])
