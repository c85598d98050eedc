"""Which topics are RocketMQ's own (retry, DLQ, delay, trace...) and which hold original messages."""
from __future__ import annotations

from typing import Any

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


def is_system_topic(topic: str) -> bool:
    """docs/semantics.md rule 7: retry, DLQ, the delay topic and RocketMQ's ``RMQ_SYS_`` topics."""
    return (topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX) or topic == SCHEDULE_TOPIC
            or topic.upper().startswith("RMQ_SYS_"))


def is_system_topic_col(col: Any) -> Any:
    """The same rule as a Spark column expression."""
    from pyspark.sql import functions as F

    return (col.startswith(RETRY_PREFIX) | col.startswith(DLQ_PREFIX) | (col == F.lit(SCHEDULE_TOPIC))
            | F.upper(col).startswith("RMQ_SYS_"))


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
