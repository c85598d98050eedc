"""Tabular exports (Parquet or JSON lines with the silver/messages columns): an input beside the commitlog
segments, read and loaded into silver/messages on their own."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.ingest.extracted import Extracted
from jobs.ingest.landing import Snapshot
from jobs.lake import _delta, storage
from jobs.problems import Problem
from schemas import messages


def extract_exports(snap: Snapshot, out: Extracted) -> list[pa.Table]:
    """Tabular exports (Parquet or JSON lines with the silver/messages columns) as an alternative input."""
    import io

    import pandas as pd
    import pyarrow.parquet as pq

    tables = []
    for f in snap.of_kind("export"):
        data = storage.read_bytes(f.uri) or b""
        try:
            if f.path.endswith(".parquet"):
                t = pq.read_table(io.BytesIO(data))
            else:
                t = pa.Table.from_pandas(pd.read_json(io.BytesIO(data), lines=True), preserve_index=False)
            tables.append(_conform_messages(t, snap))
        except Exception as exc:  # noqa: BLE001 - any unreadable export is quarantined, never fatal
            out.problem(snap.cluster, snap.broker, snap.ts, Problem(
                f.path, 0, f"tabular export unreadable ({type(exc).__name__}: {exc}); expected Parquet or JSON lines "
                f"with the silver/messages columns"))
    return tables


def _conform_messages(t: pa.Table, snap: Snapshot) -> pa.Table:
    """Cast an export to the silver/messages columns; cluster/broker default to the snapshot's."""
    import pandas as pd

    df = t.to_pandas()
    missing = {"physical_offset", "topic", "queue_id", "queue_offset"} - set(df.columns)
    if missing:
        raise ValueError(f"missing required columns {sorted(missing)}; present: {sorted(df.columns)}")
    df["cluster"] = df.get("cluster", snap.cluster)
    df["broker"] = df.get("broker", snap.broker)
    df["first_snapshot_ts"] = snap.ts
    for c in messages.TABLE.columns:
        if c not in df.columns:
            df[c] = None
    for c in ("store_ts", "born_ts", "first_snapshot_ts"):
        df[c] = pd.to_datetime(df[c], utc=True)
    df["properties"] = [_property_pairs(p) for p in df["properties"]]
    # The declared schema, not pandas' guess: an all-null or JSON-decoded column must still be a string map.
    return pa.Table.from_pandas(df[messages.TABLE.columns], schema=_delta._arrow_schema(messages.TABLE),
                                preserve_index=False)


def _property_pairs(value: Any) -> list[tuple[str, str]] | None:
    """A properties cell of an export (a dict from JSON, (key, value) pairs from a Parquet map) as pairs."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    items = value.items() if isinstance(value, dict) else value
    return [(str(k), None if v is None else str(v)) for k, v in items]


def _props_as_entries(tbl: pa.Table) -> pa.Table:
    """Arrow maps name their entries differently across writers; hand Spark a list of (key, value) structs."""
    col = tbl.column("properties").combine_chunks()
    if isinstance(col.type, pa.MapType):
        entries = pa.StructArray.from_arrays([col.keys, col.items], names=["key", "value"])
        lst = pa.ListArray.from_arrays(col.offsets, entries, mask=col.is_null())
        tbl = tbl.set_column(tbl.column_names.index("properties"), "properties", lst)
    return tbl


def messages_frame(spark: Any, tbl: pa.Table) -> Any:
    """A Spark frame with the silver/messages columns and types from decoded (or exported) records."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(_props_as_entries(tbl.select(messages.TABLE.columns)))
    cols = []
    for c in messages.TABLE.columns:
        if c == "properties":
            cols.append(F.map_from_entries(F.col("properties")).alias(c))
        else:
            cols.append(F.col(c).cast(messages.TABLE.schema[c].dataType).alias(c))
    return df.select(*cols)


def load_exports(spark: Any, lake: str, snaps: list[Snapshot], out: Extracted) -> int:
    """Insert each snapshot's tabular exports into silver/messages where their key is new (one MERGE each); an
    unreadable one is quarantined in ``out``. Returns the number of rows read."""
    n = 0
    for snap in snaps:
        for t in extract_exports(snap, out):
            _delta.merge(spark, messages_frame(spark, t), lake, messages.TABLE, insert_only=True)
            n += t.num_rows
    return n
