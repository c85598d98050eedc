"""Which names RocketMQ can produce: anything else in an input file is bad input (quarantined, never reported).

Topics and groups follow the client's and broker's validators (``Validators.VALID_PATTERN_STR`` and
``TopicValidator``: ``^[%|a-zA-Z0-9_-]+$``; a topic at most 127 characters, a group at most 255). The broker builds
retry and DLQ topics from a group without validating them again (``MixAll.getRetryTopic``: ``%RETRY%`` + group,
``%DLQ%`` + group; a 5.x POP retry topic ``%RETRY%<group>+<topic>``, ``KeyBuilder.buildPopRetryTopicV2``), so those
may be longer and hold ``+``. Cluster, broker and client names come from configuration and paths: they must be
printable, without a path separator, and not ``.`` or ``..`` (a corrected file is written under them).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

TOPIC_MAX = 127  # TopicValidator.TOPIC_MAX_LENGTH
GROUP_MAX = 255  # Validators.CHARACTER_MAX_LENGTH
NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
_DERIVED = re.compile(r"(?:%RETRY%|%DLQ%)[%|a-zA-Z0-9_+-]+")
_DERIVED_MAX = len("%RETRY%") + GROUP_MAX + 1 + TOPIC_MAX
# Cluster, broker and client ids: printable ASCII without a path separator, no space at either end; RocketMQ's own
# are ip@instance, broker-a, [v6 addr]@DEFAULT. At most 255 characters.
_LABEL = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")


def topic_problem(name: object) -> str | None:
    """Why ``name`` cannot be a RocketMQ topic, or None when it can."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if name.startswith(("%RETRY%", "%DLQ%")):
        if _DERIVED.fullmatch(name) is None:
            return f"holds a character RocketMQ does not allow in a topic ({NAME_PATTERN}, '+' in a retry topic)"
        return f"is longer than {_DERIVED_MAX} characters" if len(name) > _DERIVED_MAX else None
    if _NAME.fullmatch(name) is None:
        return f"holds a character RocketMQ does not allow in a topic ({NAME_PATTERN})"
    return f"is longer than {TOPIC_MAX} characters" if len(name) > TOPIC_MAX else None


def group_problem(name: object) -> str | None:
    """Why ``name`` cannot be a RocketMQ consumer or producer group, or None when it can."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if _NAME.fullmatch(name) is None:
        return f"holds a character RocketMQ does not allow in a group ({NAME_PATTERN})"
    return f"is longer than {GROUP_MAX} characters" if len(name) > GROUP_MAX else None


def label_problem(name: object) -> str | None:
    """Why ``name`` cannot be a cluster, broker or client id (a folder in the landing zone and the reports)."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if name in (".", ".."):
        return "is a relative path ('.' or '..')"
    if _LABEL.fullmatch(name) is None:
        return ("holds a control character or a character outside printable ASCII, starts or ends with a space, or is "
                "over 255 characters")
    if "/" in name or "\\" in name:
        return "holds a path separator"
    return None


def shown(name: object, limit: int = 64) -> str:
    """A bad name as a quarantine reason may quote it: escaped (no newline or control character) and cut short."""
    text = str(name).encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."



def bad_rows(values: "pa.Array", problem: Callable[[object], str | None]) -> "tuple[np.ndarray, dict[str, str]]":
    """Row indices of ``values`` (nulls and empty strings pass) whose name ``problem`` rejects, and the reason per bad name. Each
    distinct value is judged once: a column of a million records holds a few hundred names."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    bad = {v: why for v in pc.unique(values).to_pylist() if v and (why := problem(v))}
    if not bad:
        return np.empty(0, dtype=np.int64), {}
    hit = pc.fill_null(pc.is_in(values, value_set=pa.array(list(bad), pa.string())), False)
    return np.flatnonzero(hit.to_numpy(zero_copy_only=False)), bad
