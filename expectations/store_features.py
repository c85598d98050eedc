"""silver/store_features: the features the ingest knows (spec §4.2), each with words for people."""
from __future__ import annotations

from typing import Any

from expectations._build import make_suite, one_of
from schemas import store_features

TABLE = store_features.TABLE


def suite() -> Any:
    import great_expectations.expectations as gxe

    return make_suite(TABLE, [one_of("feature", ["COMPACTION_TOPIC", "BATCH_CQ", "TIERED", "STALE_JSON_IGNORED",
                                                          "STATIC_TOPIC", "DLEDGER", "LMQ"]),
                              gxe.ExpectColumnValuesToNotBeNull(column="detail")])
