"""silver/pop_checkpoints, silver/pop_acks and silver/order_info: POP checkpoints and acks as the broker writes them
(rocketmq5.md §2.2): offsets and times are never negative, a checkpoint covers 1-32 offsets, an ack is ``ack`` or
``bAck``; an orderly POP queue's OrderInfo (§2.1) has a pop time and its batch's offsets."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative, one_of
from schemas import order_info, pop_acks, pop_checkpoints


def checkpoints_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(pop_checkpoints.TABLE, [
        *non_negative("start_offset", "pop_time", "invisible_time", "queue_id"),
        gxe.ExpectColumnValuesToBeBetween(column="num", min_value=1, max_value=32),
        gxe.ExpectColumnValuesToNotBeNull(column="consumer_group"),
        gxe.ExpectColumnValuesToMatchRegex(column="stored_topic",
                                           regex=r"^(rmq_sys_wheel_timer|rmq_sys_REVIVE_LOG_.+)$")])


def acks_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(pop_acks.TABLE, [
        *non_negative("start_offset", "pop_time", "queue_id"),
        one_of("kind", ["ack", "bAck"]),
        gxe.ExpectColumnValuesToNotBeNull(column="consumer_group"),
        gxe.ExpectColumnValuesToMatchRegex(column="stored_topic",
                                           regex=r"^(rmq_sys_wheel_timer|rmq_sys_REVIVE_LOG_.+)$")])


def order_info_suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(order_info.TABLE, [
        *non_negative("pop_time", "queue_id"),
        gxe.ExpectColumnValuesToNotBeNull(column="offsets"),
        gxe.ExpectColumnValuesToNotBeNull(column="consumer_group")])
