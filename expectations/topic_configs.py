"""silver/topic_configs: queue counts, permission bits (PermName: 0..15), the topic attributes' enum values."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative, one_of
from schemas import topic_configs

TABLE = topic_configs.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, non_negative("read_queue_nums", "write_queue_nums") + [
        gxe.ExpectColumnValuesToBeBetween(column="perm", min_value=0, max_value=15),
        # TopicAttributes.QUEUE_TYPE_ATTRIBUTE / CLEANUP_POLICY_ATTRIBUTE (null in rows an earlier release wrote)
        one_of("queue_type", ["SimpleCQ", "BatchCQ"]), one_of("cleanup_policy", ["DELETE", "COMPACTION"])])
