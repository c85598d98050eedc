"""Look-ups of stored records in silver/messages: by position (``records_at``) and by UNIQ_KEY through
silver/key_index (``copies_of``), so that a run reads what it looks for, not every record of the lake's history."""
from __future__ import annotations

from typing import Any

from jobs.lake.point_index import PointIndex

# silver/messages' key (an INNER_BATCH record's messages share its physical offset); it is clustered by the first three
RECORD_KEY = ["cluster", "broker", "physical_offset", "queue_offset"]
SPAN_GAP = 8 << 20  # bytes of commitlog between two hits read as one span (records_at)
MAX_SPANS = 512


def records_at(messages: Any, hits: Any, small: Any, name: str) -> Any:
    """The records of ``messages`` with the keys (:data:`RECORD_KEY`) of ``hits``, every column.

    The hits are found by a join on narrow columns; the records are then read only from each broker's span of
    physical offsets: files and row groups outside every span are skipped by their statistics. That needs files of
    one broker: Sail writes files that span every broker (and offsets of different brokers are unrelated), which
    maintenance splits per broker (``jobs.lake.layout``): 3 spans at 41 M records, 14.6 s -> 0.12 s. Until then (the
    files of the ingests since the last maintenance) the span filter saves the join, not the read. A join that keeps
    every column reads every column of every record before it joins: 18.9 s at 46 M old records, for none found.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    from pyspark.sql import Window

    keys = small(hits.select(*RECORD_KEY).distinct(), f"{name}_keys")
    # spans of hits no more than SPAN_GAP bytes of commitlog apart (committed offsets lie all over a broker's history)
    w = Window.partitionBy("cluster", "broker").orderBy("physical_offset")
    gap = F.col("physical_offset") - F.lag("physical_offset").over(w)
    spans = (keys.withColumn("_new", F.when(gap.isNull() | (gap > SPAN_GAP), 1).otherwise(0))
             .withColumn("_span", F.sum("_new").over(w.rowsBetween(Window.unboundedPreceding, 0)))
             .groupBy("cluster", "broker", "_span").agg(F.min("physical_offset").alias("lo"),
                                                        F.max("physical_offset").alias("hi"))
             .orderBy("cluster", "broker", "lo").limit(MAX_SPANS + 1).collect())
    if not spans:
        return small(messages.where(F.lit(False)), name)
    if len(spans) > MAX_SPANS:  # hits all over: one span per broker (a pass over the broker's records)
        spans = keys.groupBy("cluster", "broker").agg(F.min("physical_offset").alias("lo"),
                                                      F.max("physical_offset").alias("hi")).collect()
    inside = reduce(lambda a, b: a | b, [
        (F.col("cluster") == r["cluster"]) & (F.col("broker") == r["broker"])
        & F.col("physical_offset").between(int(r["lo"]), int(r["hi"])) for r in spans])
    return small(keys.join(messages.where(inside), on=RECORD_KEY, how="inner").select(*messages.columns), name)


def spans(df: Any) -> dict[tuple[str, str], tuple[int, int]]:
    """(cluster, broker) -> [lowest, highest + 1) of the physical offsets ``df`` holds: the commitlog ranges a
    position-keyed read is restricted to (:func:`spans_filter` for the engine, :func:`spans_dnf` for delta-rs)."""
    from pyspark.sql import functions as F

    return {(c, b): (int(lo), int(hi) + 1) for c, b, lo, hi in df.where(F.col("physical_offset").isNotNull())
            .groupBy("cluster", "broker").agg(F.min("physical_offset"), F.max("physical_offset")).collect()}


def spans_filter(spans: dict[tuple[str, str], tuple[int, int]]) -> str:
    """SQL on ``t``: the rows of the brokers and physical ranges of ``spans`` (records and trace records alike)."""
    q = lambda s: s.replace("'", "''")  # noqa: E731
    return " OR ".join(
        f"(t.cluster = '{q(c)}' AND t.broker = '{q(b)}' AND t.physical_offset >= {lo} AND t.physical_offset < {hi})"
        for (c, b), (lo, hi) in sorted(spans.items())) or "false"


def spans_dnf(spans: dict[tuple[str, str], tuple[int, int]]) -> list[list[tuple[str, str, Any]]]:
    """The same ranges as a delta-rs partition/file filter (disjunctive normal form)."""
    return [[("cluster", "=", c), ("broker", "=", b), ("physical_offset", ">=", lo), ("physical_offset", "<", hi)]
            for (c, b), (lo, hi) in sorted(spans.items())]


def index_enabled() -> bool:
    """Whether the lake keeps silver/key_index: Delta tables (a Parquet table has no versions to tell an update what
    is new, so a Parquet lake's look-ups by key scan the key column)."""
    from jobs.lake import _delta

    return _delta.table_format() == "delta"


def key_hash(col: Any) -> Any:
    """silver/key_index's ``key_hash`` of a UNIQ_KEY column: Spark's ``xxhash64`` (seed 42), which Sail computes
    alike (tests/infra/test_spark_cluster.py: a Spark 4 cluster's ingest lands the same silver/key_index rows as
    Sail's), so a lake indexed by one engine is read by the other."""
    from pyspark.sql import functions as F

    return F.xxhash64(col)


def index_rows(messages: Any) -> Any:
    """silver/key_index rows of ``messages``: one per row with a UNIQ_KEY."""
    from pyspark.sql import functions as F

    return (messages.where(F.col("uniq_key").isNotNull())
            .select("cluster", key_hash(F.col("uniq_key")).alias("key_hash"), "broker", "physical_offset",
                    F.col("queue_offset").cast("long").alias("queue_offset")))


def copies_of(messages: Any, keys: Any, index: Any, small: Any, name: str) -> Any:
    """The records of ``messages`` whose (cluster, uniq_key) is one of ``keys``, every column of ``messages``.

    With ``index`` (silver/key_index at the version ``messages`` was read at, or later: rows it names that
    ``messages`` does not hold are simply not found): its sorted runs searched in the driver for the keys' hashes
    (a :class:`~jobs.lake.point_index.PointIndex`; up to ``point_index.MAX_KEYS`` keys), or a join on the hash over
    its five narrow columns (a DataFrame, or more keys), finds their positions, then :func:`records_at` reads them, and a hash that matched another key is dropped by the key itself.
    Without (a Parquet lake, a ledger row from before the index): a join on the key over every record's key column.
    ``keys`` is small (computed once by ``small``)."""
    from pyspark.sql import functions as F

    keys = keys.select("cluster", "uniq_key").distinct()
    if index is None:
        hits = keys.join(messages.select(*RECORD_KEY, "uniq_key"), on=["cluster", "uniq_key"], how="inner")
        return records_at(messages, hits, small, name)
    hashed = small(keys.select("cluster", key_hash(F.col("uniq_key")).alias("key_hash")).distinct(), f"{name}_hashes")
    hits = index.hits(hashed) if isinstance(index, PointIndex) else None
    if hits is None:  # a DataFrame, or too many keys for the driver's search: the engine's join
        frame = index.frame if isinstance(index, PointIndex) else index
        hits = hashed.join(frame.select("cluster", "key_hash", *RECORD_KEY[1:]), on=["cluster", "key_hash"],
                           how="inner")
    found = records_at(messages, hits, small, f"{name}_found")
    return found.join(keys, on=["cluster", "uniq_key"], how="left_semi").select(*messages.columns)
