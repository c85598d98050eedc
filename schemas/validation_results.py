"""gold/validation_results: every expectation's outcome per validation run and table (the data-quality history).

One row per (validation run, table, expectation): the dashboard's data-quality page and its pass-rate trend read
these rows, never the Great Expectations site. ``validation_id`` is the run that validated (the ingest or reconcile
run whose rows were checked, or a ``validate-...`` id for a command-line run); ``observed_value`` is GE's observed
value rendered as JSON text.
"""
from __future__ import annotations

from pyspark.sql.types import *  # noqa: F403

from schemas._table import Table

NAME = "validation_results"
SCHEMA = StructType(
    [
        StructField("validation_id", StringType(), True),
        StructField("layer", StringType(), True),
        StructField("table_name", StringType(), True),
        StructField("expectation", StringType(), True),
        StructField("column", StringType(), True),
        StructField("success", BooleanType(), True),
        StructField("observed_value", StringType(), True),
        StructField("element_count", LongType(), True),
        StructField("unexpected_count", LongType(), True),
        StructField("validated_at", TimestampType(), True),
    ]
)
KEY: tuple[str, ...] = ('validation_id', 'table_name', 'expectation', 'column')
PARTITION_BY: tuple[str, ...] = ()

TABLE = Table("gold", NAME, SCHEMA, KEY, PARTITION_BY)
