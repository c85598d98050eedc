"""silver/subscription_groups: retry settings as the broker would use them."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, non_negative
from schemas import subscription_groups

TABLE = subscription_groups.TABLE


def suite() -> Any:
    return make_suite(TABLE, non_negative("retry_max_times"))
