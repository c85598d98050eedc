"""Great Expectations 1.x suites as code, one per table, built from ``schemas``."""
from __future__ import annotations

from typing import Any, Callable

from expectations import (consumer_offsets, deliveries, gold, messages, pop, queue_bounds, store_features,
                          subscription_groups, topic_configs)

SUITES: dict[str, Callable[[], Any]] = {
    "silver/consumer_offsets": consumer_offsets.suite,
    "silver/subscription_groups": subscription_groups.suite,
    "silver/topic_configs": topic_configs.suite,
    "silver/queue_bounds": queue_bounds.suite,
    "silver/store_features": store_features.suite,
    "silver/messages": messages.suite,  # and silver/key_index with it: jobs.ops.quality.indexed_rule
    "silver/pop_checkpoints": pop.checkpoints_suite,
    "silver/pop_acks": pop.acks_suite,
    "silver/order_info": pop.order_info_suite,
    "silver/deliveries": deliveries.suite,
    "gold/duplicated_ranges": gold.duplicated_ranges_suite,
    "gold/unconsumed_ranges": gold.unconsumed_ranges_suite,
    "gold/offset_corrections": gold.offset_corrections_suite,
    "gold/dlq_candidates": gold.dlq_candidates_suite,
    "gold/consumer_status": gold.consumer_status_suite,
    "gold/coverage": gold.coverage_suite,
}
SILVER = [k for k in SUITES if k.startswith("silver/")]
GOLD = [k for k in SUITES if k.startswith("gold/")]

__all__ = ["SUITES", "SILVER", "GOLD"]
