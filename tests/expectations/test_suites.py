"""Each suite twice: a tiny valid frame passes, a tiny broken frame fails on the expected expectations."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from expectations import SUITES
from expectations.runner import validate_table

TS = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)


def _offsets(rows: list[tuple]) -> pd.DataFrame:
    cols = ["cluster", "broker", "snapshot_ts", "consumer_group", "topic", "queue_id", "client_id", "committed_offset",
            "is_retry_topic", "source_file", "used_backup"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


def _bounds(rows: list[tuple]) -> pd.DataFrame:
    cols = ["cluster", "broker", "snapshot_ts", "topic", "queue_id", "min_offset", "max_offset"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


def _ranges(rows: list[tuple]) -> pd.DataFrame:
    cols = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset", "end_offset",
            "messages", "kind", "run_id"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


CASES = [
    pytest.param("silver/consumer_offsets",
                 _offsets([("c", "b", TS, "G", "T", 0, "", 5, False, "f", False),
                           ("c", "b", TS, "G", "T", 1, "", 0, False, "f", False)]), [], id="offsets_valid"),
    pytest.param("silver/consumer_offsets",
                 _offsets([("c", "b", TS, "G", "T", 0, "", -1, False, "f", False),
                           ("c", "b", TS, "G", "T", 0, "", 3, False, "f", False),
                           ("c", None, TS, "G", "T", 1, "", 3, False, "f", False)]),
                 ["expect_column_values_to_be_between(committed_offset)", "expect_column_values_to_not_be_null(broker)",
                  "expect_compound_columns_to_be_unique"], id="offsets_negative_duplicate_and_null_key"),
    pytest.param("silver/queue_bounds", _bounds([("c", "b", TS, "T", 0, 3, 9)]), [], id="bounds_valid"),
    pytest.param("silver/queue_bounds", _bounds([("c", "b", TS, "T", 0, 9, 3)]),
                 ["expect_column_pair_values_a_to_be_greater_than_b"], id="bounds_min_above_max"),
    pytest.param("gold/unconsumed_ranges", _ranges([("c", "G", "", "T", "b", 0, 5, 9, 5, "BACKLOG", "r")]), [],
                 id="ranges_valid"),
    pytest.param("gold/unconsumed_ranges", _ranges([("c", "G", "", "T", "b", 0, 9, 5, 0, "LOST", "r")]),
                 ["expect_column_pair_values_a_to_be_greater_than_b", "expect_column_values_to_be_between(messages)",
                  "expect_column_values_to_be_in_set(kind)"], id="ranges_inverted_and_unknown_kind"),
]


@pytest.mark.parametrize("table, df, failed", CASES)
def test_suite(table: str, df: pd.DataFrame, failed: list[str]) -> None:
    outcome = validate_table(df, SUITES[table]())
    assert (outcome.success, outcome.failed) == (not failed, failed)


def test_every_suite_builds_from_its_schema() -> None:
    import schemas

    by_name = {t.qualified: t for t in schemas.ALL_TABLES}
    for name, make in SUITES.items():
        suite = make()
        unique = [e for e in suite.expectations if e.expectation_type == "expect_compound_columns_to_be_unique"]
        assert [list(e.column_list) for e in unique] == [list(by_name[name].key)], name


def test_two_contexts_in_one_process_each_write_their_own_data_docs(tmp_path) -> None:  # noqa: ANN001
    """GE hands back one project context per process: a second docs folder must replace the first, not fail."""
    from expectations.runner import ephemeral_context

    valid = _bounds([("c", "b", TS, "T", 0, 3, 9)])
    broken = _bounds([("c", "b", TS, "T", 0, 9, 3)])
    outcomes = []
    for name, df in (("first", valid), ("second", broken)):
        ctx = ephemeral_context(str(tmp_path / name))
        outcomes.append(validate_table(df, SUITES["silver/queue_bounds"](), context=ctx))
    assert [(o.success, o.failed) for o in outcomes] == [
        (True, []), (False, ["expect_column_pair_values_a_to_be_greater_than_b"])]
    for name in ("first", "second"):
        assert (tmp_path / name / "index.html").is_file()
        assert len(list((tmp_path / name / "validations").rglob("*.html"))) == 1
    assert ephemeral_context().get_site_names() == []
