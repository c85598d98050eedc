"""jobs._delta: a lake written before a table schema gained a column keeps working (reads null, merges add it)."""
from __future__ import annotations

import datetime as dt
import pathlib

import pandas as pd
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from jobs import _delta
from schemas._table import Table

T = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
OLD = Table("bronze", "t", StructType([StructField("k", LongType()), StructField("v", StringType())]), ("k",), ())
NEW = Table("bronze", "t", StructType([*OLD.schema.fields, StructField("ts", TimestampType())]), ("k",), ())


def test_a_column_declared_later_reads_null_and_the_next_merge_adds_it(spark, tmp_path: pathlib.Path) -> None:  # noqa: ANN001
    lake = str(tmp_path)
    assert _delta.merge(spark, spark.createDataFrame([(1, "a"), (2, "b")], OLD.schema), lake, OLD) == 2
    assert sorted(_delta.read(spark, lake, NEW).collect()) == [(1, "a", None), (2, "b", None)]
    assert _delta.merge(spark, spark.createDataFrame([(2, "b", T), (3, "c", T)], NEW.schema), lake, NEW) == 2
    got = _delta.read_pandas(lake, NEW).sort_values("k")
    assert [(r.k, r.v, None if pd.isna(r.ts) else r.ts.to_pydatetime()) for r in got.itertuples()] == [
        (1, "a", None), (2, "b", T), (3, "c", T)]
    assert [h["operation"] for h in _delta.history(lake, NEW)][:2] == ["MERGE", "ADD COLUMN"]
    assert _delta.merge(spark, spark.createDataFrame([(2, "b", T), (3, "c", T)], NEW.schema), lake, NEW) == 0
