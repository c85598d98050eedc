"""jobs.lake.lookups: records read by position, and by UNIQ_KEY through silver/key_index, exact rows."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

T = dt.datetime(2026, 1, 5, 1, 0)


def _record(broker: str, phys: int, key: str | None, props: dict | None = None, inner: int = 0) -> tuple:
    return ("C", broker, phys, "T", 0, phys // 10 + inner, T, T, key, f"k-{key}", None, 0, props or {}, 10,
            0xC0 if inner else 0, "10.0.0.1:1", "10.0.0.2:10911", None, "00000000000000000000", T)


@pytest.mark.parametrize("max_spans", [512, 1], ids=["spans", "a span per broker"])
def test_records_at_reads_the_hits_whole_and_nothing_else(spark: Any, monkeypatch: pytest.MonkeyPatch,
                                                          max_spans: int) -> None:
    """lookups.records_at: the records at the hits' (cluster, broker, physical_offset, queue_offset), every column as
    stored (the map and timestamps too), read through span filters on the commitlog offsets (the embedded engine
    decodes the other columns only for the rows inside a span); a hit with no record reads nothing; of an
    INNER_BATCH record's messages (one physical offset) only the one hit; with more spans than MAX_SPANS, one span
    per broker gives the same rows."""
    import datetime as dt

    from jobs.lake import lookups
    from schemas import messages

    monkeypatch.setattr(lookups, "MAX_SPANS", max_spans)
    t = dt.datetime(2026, 1, 5, 1, 0)
    far = lookups.SPAN_GAP * 3

    stored = [_record("a", 0, "A0"), _record("a", 100, "A1", {"REAL_TOPIC": "%RETRY%G"}), _record("a", 200, "A2"),
              _record("a", far, "A3"), _record("b", 0, "B0"), _record("b", 50, "B1", {"TAGS": "x"}),
              _record("b", 60, "B2", inner=1), _record("b", 60, "B3", inner=2), _record("c", 10, "C0")]
    df = spark.createDataFrame(stored, messages.TABLE.schema)
    hits = spark.createDataFrame([("C", "a", 100, 10), ("C", "a", far, far // 10), ("C", "b", 50, 5),
                                  ("C", "b", 60, 8), ("C", "c", 999, 99)],
                                 "cluster string, broker string, physical_offset long, queue_offset long")

    got = sorted(tuple(r) for r in lookups.records_at(df, hits, lambda d, _name: d, "t").collect())

    assert got == sorted([stored[1], stored[3], stored[5], stored[7]])
    assert lookups.records_at(df, hits.where("broker = 'c'"), lambda d, _name: d, "t").count() == 0


@pytest.mark.parametrize("indexed", ["point", "join", None],
                         ids=["through the index's sorted runs", "through a join with the index", "without an index"])
def test_copies_of_reads_every_copy_of_the_keys_and_no_other_record(spark: Any, tmp_path: Any,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    indexed: str | None) -> None:
    """copies_of: every stored copy of the looked-up keys (on two brokers, two inner messages of one record), none of
    a key not looked up, nothing for a key never stored; a record the index names under a looked-up key's hash but
    whose UNIQ_KEY differs (what a hash collision gives) is dropped; the same rows through the index's sorted runs
    (runs of 2 rows), a join with it, and without it."""
    from pyspark.sql import functions as F

    from jobs.lake import lookups
    from schemas import key_index, messages

    stored = [_record("a", 0, "K1"), _record("a", 100, "K2"), _record("a", 200, "K1", {"REAL_TOPIC": "%RETRY%G"}),
              _record("b", 0, "K3"), _record("b", 60, "K1", inner=1), _record("b", 60, "K4", inner=2),
              _record("b", 90, None)]
    df = spark.createDataFrame(stored, messages.TABLE.schema)
    index = lookups.index_rows(df)
    assert index.columns == key_index.TABLE.columns
    assert index.count() == 6
    # a collision: K2's record also indexed under K1's hash
    k1 = index.where((F.col("broker") == "a") & (F.col("physical_offset") == 0)).select("key_hash").first()[0]
    index = index.unionByName(spark.createDataFrame([("C", k1, "a", 100, 10)], key_index.TABLE.schema))
    keys = spark.createDataFrame([("C", "K1"), ("C", "K4"), ("C", "K9"), ("D", "K3")], "cluster string, uniq_key string")

    if indexed == "point":
        from jobs.lake import point_index

        monkeypatch.setattr(point_index, "RUN_ROWS", 2)
        index.write.parquet(str(tmp_path / "index"))
        point_index.build(tmp_path / "runs", -1, 0, [str(p) for p in sorted((tmp_path / "index").glob("*.parquet"))],
                          "t")
        index = point_index.PointIndex(None, tmp_path / "runs", 0)  # no frame: the segments alone must find them

    got = lookups.copies_of(df, keys, index if indexed else None, lambda d, _name: d, "t")

    assert got.columns == df.columns
    assert sorted(tuple(r) for r in got.collect()) == sorted([stored[0], stored[2], stored[4], stored[5]])


def test_spans_as_an_engine_filter_and_a_delta_rs_filter() -> None:
    """lookups.spans_filter and spans_dnf: the same [lo, hi) ranges per broker, in key order, quotes escaped; no span
    reads nothing."""
    from jobs.lake import lookups

    spans = {("c", "b'2"): (10, 20), ("c", "a"): (0, 5)}
    assert lookups.spans_filter(spans) == (
        "(t.cluster = 'c' AND t.broker = 'a' AND t.physical_offset >= 0 AND t.physical_offset < 5) OR "
        "(t.cluster = 'c' AND t.broker = 'b''2' AND t.physical_offset >= 10 AND t.physical_offset < 20)")
    assert lookups.spans_dnf(spans) == [
        [("cluster", "=", "c"), ("broker", "=", "a"), ("physical_offset", ">=", 0), ("physical_offset", "<", 5)],
        [("cluster", "=", "c"), ("broker", "=", "b'2"), ("physical_offset", ">=", 10), ("physical_offset", "<", 20)]]
    assert (lookups.spans_filter({}), lookups.spans_dnf({})) == ("false", [])
