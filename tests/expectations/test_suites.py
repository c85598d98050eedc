"""Each suite twice, on Spark frames (GE's Spark datasource over Sail's Spark Connect): a tiny valid frame passes, a
tiny broken frame fails on the expected expectations."""
from __future__ import annotations

import datetime as dt

import pytest

from expectations import SUITES
from expectations.runner import Result, row_rules, validate_table
from schemas import consumer_offsets, queue_bounds, unconsumed_ranges

TS = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
TABLES = {"silver/consumer_offsets": consumer_offsets.TABLE, "silver/queue_bounds": queue_bounds.TABLE,
          "gold/unconsumed_ranges": unconsumed_ranges.TABLE}

OFFSETS_BAD = [("c", "b", TS, "G", "T", 0, "", -1, False, "f", False),
               ("c", "b", TS, "G", "T", 0, "", 3, False, "f", False),
               ("c", None, TS, "G", "T", 1, "", 3, False, "f", False)]

CASES = [
    pytest.param("silver/consumer_offsets", [("c", "b", TS, "G", "T", 0, "", 5, False, "f", False),
                                             ("c", "b", TS, "G", "T", 1, "", 0, False, "f", False)], [],
                 id="offsets_valid"),
    pytest.param("silver/consumer_offsets", OFFSETS_BAD,
                 ["expect_column_values_to_be_between(committed_offset)", "expect_column_values_to_not_be_null(broker)",
                  "expect_compound_columns_to_be_unique(cluster,broker,snapshot_ts,consumer_group,topic,queue_id,"
                  "client_id)"], id="offsets_negative_duplicate_and_null_key"),
    pytest.param("silver/queue_bounds", [("c", "b", TS, "T", 0, 3, 9)], [], id="bounds_valid"),
    pytest.param("silver/queue_bounds", [("c", "b", TS, "T", 0, 9, 3)],
                 ["expect_column_pair_values_a_to_be_greater_than_b(max_offset,min_offset)"],
                 id="bounds_min_above_max"),
    pytest.param("gold/unconsumed_ranges", [("c", "G", "", "T", "b", 0, 5, 9, 5, "BACKLOG", "r")], [],
                 id="ranges_valid"),
    pytest.param("gold/unconsumed_ranges", [("c", "G", "", "T", "b", 0, 9, 5, 0, "LOST", "r")],
                 ["expect_column_pair_values_a_to_be_greater_than_b(end_offset,start_offset)",
                  "expect_column_values_to_be_between(messages)", "expect_column_values_to_be_in_set(kind)"],
                 id="ranges_inverted_and_unknown_kind"),
]


@pytest.mark.parametrize("table, rows, failed", CASES)
def test_suite(spark, table: str, rows: list[tuple], failed: list[str]) -> None:  # noqa: ANN001
    outcome = validate_table(spark.createDataFrame(rows, TABLES[table].schema), SUITES[table]())
    assert (outcome.success, outcome.failed, outcome.rows) == (not failed, failed, len(rows))


def test_results_carry_counts_and_unexpected_values(spark) -> None:  # noqa: ANN001
    """What gold/validation_results keeps per expectation: counts, and the unexpected values (sorted JSON)."""
    outcome = validate_table(spark.createDataFrame(OFFSETS_BAD, consumer_offsets.TABLE.schema),
                             row_rules(SUITES["silver/consumer_offsets"]()))
    columns = ('["broker", "client_id", "cluster", "committed_offset", "consumer_group", "is_retry_topic", "queue_id", '
               '"snapshot_ts", "source_file", "topic", "used_backup"]')
    ok = [("expect_column_values_to_not_be_null", c) for c in
          ("client_id", "cluster", "consumer_group", "queue_id", "snapshot_ts", "topic")]
    assert outcome.results == sorted([
        Result("expect_column_values_to_be_between", "committed_offset", False, '["-1"]', 3, 1),
        Result("expect_column_values_to_be_between", "queue_id", True, "[]", 3, 0),
        Result("expect_column_values_to_not_be_null", "broker", False, '["null"]', 3, 1),
        *[Result(e, c, True, "[]", 3, 0) for e, c in ok],
        Result("expect_table_columns_to_match_set", "", True, columns, None, None),
    ], key=lambda r: (r.expectation, r.column))


def test_row_rules_leave_out_the_table_wide_key_rule() -> None:
    suite = SUITES["silver/messages"]()
    kept = row_rules(suite)
    assert sorted(e.expectation_type for e in kept.expectations) == sorted(
        e.expectation_type for e in suite.expectations if e.expectation_type != "expect_compound_columns_to_be_unique")
    # (10: the key's four columns not null, queue_offset since an INNER_BATCH record's messages share its offset)
    assert len(kept.expectations) == len(suite.expectations) - 1 == 10


def test_every_suite_builds_from_its_schema() -> None:
    import schemas

    by_name = {t.qualified: t for t in schemas.ALL_TABLES}
    for name, make in SUITES.items():
        suite = make()
        unique = [e for e in suite.expectations if e.expectation_type == "expect_compound_columns_to_be_unique"]
        assert [list(e.column_list) for e in unique] == [list(by_name[name].key)], name


def test_two_contexts_in_one_process_each_write_their_own_data_docs(spark, tmp_path) -> None:  # noqa: ANN001
    """GE hands back one project context per process: a second docs folder must replace the first, not fail."""
    from expectations.runner import ephemeral_context

    valid = spark.createDataFrame([("c", "b", TS, "T", 0, 3, 9)], queue_bounds.TABLE.schema)
    broken = spark.createDataFrame([("c", "b", TS, "T", 0, 9, 3)], queue_bounds.TABLE.schema)
    outcomes = []
    for name, df in (("first", valid), ("second", broken)):
        ctx = ephemeral_context(str(tmp_path / name))
        outcomes.append(validate_table(df, SUITES["silver/queue_bounds"](), context=ctx))
    assert [(o.success, o.failed) for o in outcomes] == [
        (True, []), (False, ["expect_column_pair_values_a_to_be_greater_than_b(max_offset,min_offset)"])]
    for name in ("first", "second"):
        assert (tmp_path / name / "index.html").is_file()
        assert len(list((tmp_path / name / "validations").rglob("*.html"))) == 1
    assert ephemeral_context().get_site_names() == []
