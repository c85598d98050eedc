"""Which topics are RocketMQ's own (retry, DLQ, delay, trace...) and which hold original messages."""
from __future__ import annotations

from typing import Any

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_CHECK_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages discarded after transactionCheckMax checks
# TopicValidator.SYSTEM_TOPIC_SET, besides the RMQ_SYS_ / rmq_sys_ topics (trace, transaction half and op, revive
# logs, timer wheel): RocketMQ's own, never a user's (rocketmq5.md, the list at the top)
RESERVED_TOPICS = frozenset({SCHEDULE_TOPIC, "BenchmarkTest", "TBW102", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC",
                             "TRANS_CHECK_MAX_TIME_TOPIC", "CHECKPOINT_TOPIC"})
# MixAll's groups: RocketMQ's tools and internal consumers; their offsets are not a user's progress
SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
                           "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER",
                           "CID_ONSAPI_PULL"})
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


def is_reserved_topic(topic: str) -> bool:
    """A topic of RocketMQ's own (not a retry or DLQ topic, which belong to a user's group)."""
    return topic in RESERVED_TOPICS or topic.upper().startswith("RMQ_SYS_")


def is_system_topic(topic: str) -> bool:
    """docs/semantics.md rule 7: retry, DLQ and RocketMQ's own topics (TopicValidator) hold no original message."""
    return topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX) or is_reserved_topic(topic)


def is_system_group(group: str) -> bool:
    """A consumer group of RocketMQ's own (``CID_RMQ_SYS_*``, ``TOOLS_CONSUMER``...): never reported as a finding."""
    return group in SYSTEM_GROUPS or group.startswith(SYSTEM_GROUP_PREFIX)


def is_reserved_topic_col(col: Any) -> Any:
    from pyspark.sql import functions as F

    return col.isin(sorted(RESERVED_TOPICS)) | F.upper(col).startswith("RMQ_SYS_")


def is_system_topic_col(col: Any) -> Any:
    """:func:`is_system_topic` as a Spark column expression."""
    return col.startswith(RETRY_PREFIX) | col.startswith(DLQ_PREFIX) | is_reserved_topic_col(col)


def is_system_group_col(col: Any) -> Any:
    """:func:`is_system_group` as a Spark column expression."""
    return col.isin(sorted(SYSTEM_GROUPS)) | col.startswith(SYSTEM_GROUP_PREFIX)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
