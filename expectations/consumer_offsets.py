"""silver/consumer_offsets: committed offsets are next-to-consume indexes, never negative."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import consumer_offsets

TABLE = consumer_offsets.TABLE


def suite() -> Any:
    return make_suite(TABLE, non_negative("committed_offset", "queue_id"))
