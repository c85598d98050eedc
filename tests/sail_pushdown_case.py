"""The smallest table found on which Sail's Parquet filter pushdown fails (issue 33, README "Known issues").

Shaped like the silver/messages file a plain ingest of ``mixed --scale 13 --seed 2`` wrote: one row group, written by
the engine as one coalesced file from many staged parts of odd sizes (so the columns' pages end at different rows),
broker runs of traced producers (their keys ``0A01...``, 73 % of their rows trace messages in ``rmq_sys_TRACE_DATA``)
between runs of bulk producers (``0A02...``, never traced) long enough to fill whole pages. The deliveries update
reads it as :func:`read_like_the_ingest` does: the traced keys joined with the table, then the original copies
(``jobs.rules.deliveries.original_copies``: not a system topic, ``upper(topic)`` included). The join's dynamic
filter prunes the bulk pages of ``uniq_key``, the topic filter is read with a row mask across them, and parquet-rs
59.2 asks for a topic page it never fetched.

Run it on its own to check an engine (a Sail upgrade)::

    SAIL_PARQUET__PUSHDOWN_FILTERS=true .venv/bin/python tests/sail_pushdown_case.py /tmp/case

It prints ``ok <rows>`` (exit 0) or the engine's error (exit 1). pysail 0.7.2: ``ok 10951`` with the setting false,
"Invalid offset in sparse column chunk data" with true. 150,000 rows did not fail; 200,000 fail with every seed tried.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 200_000
SEED = 4
PART_ROWS = 4_999  # the staged parts' size: pages end at odd rows, not at multiples of the writer's batch
COLUMNS = ["cluster", "uniq_key", "topic", "broker", "physical_offset", "queue_id", "queue_offset"]


def build(folder: str, rows: int = ROWS, seed: int = SEED) -> list[tuple[Any, ...]]:
    """Write ``folder/src`` (the staged parts) and ``folder/keys``; return the rows the read must give, sorted."""
    rng = np.random.default_rng(seed)
    traced = np.zeros(rows, bool)
    i, run_traced = 0, True
    while i < rows:
        n = int(rng.integers(500, 8_000 if run_traced else 45_000))
        traced[i:i + n] = run_traced
        i += n
        run_traced = not run_traced
    trace_topic = traced & (rng.random(rows) < 0.73)
    wanted = traced & ~trace_topic
    keys = np.char.add(np.where(traced, "0A01", "0A02"),
                       np.char.zfill(np.char.mod("%X", rng.integers(0, 2**62, rows)), 28))
    topics = np.where(trace_topic, "rmq_sys_TRACE_DATA", np.char.add("Topic", rng.integers(0, 15, rows).astype(str)))
    brokers = np.char.add("broker-", (np.cumsum(np.r_[0, traced[1:] != traced[:-1]]) % 4).astype(str))
    queue_ids = rng.integers(0, 8, rows).astype("int32")
    table = pa.table({"cluster": pa.array(["c"] * rows), "uniq_key": keys, "topic": topics, "broker": brokers,
                      "physical_offset": np.arange(rows, dtype="int64") * 300, "queue_id": queue_ids,
                      "queue_offset": np.arange(rows, dtype="int64")})
    os.makedirs(f"{folder}/src", exist_ok=True)
    os.makedirs(f"{folder}/keys", exist_ok=True)
    for j, start in enumerate(range(0, rows, PART_ROWS)):
        pq.write_table(table.slice(start, PART_ROWS), f"{folder}/src/part-{j:05d}.parquet")
    pq.write_table(pa.table({"cluster": pa.array(["c"] * int(wanted.sum())), "uniq_key": keys[wanted]}),
                   f"{folder}/keys/keys.parquet")
    picked = table.filter(pa.array(wanted)).select(["cluster", "uniq_key", "topic", "broker", "queue_id", "queue_offset"])
    return sorted(zip(*(picked.column(c).to_pylist() for c in picked.column_names)))


def write_table(spark: Any, folder: str) -> str:
    """The Delta table, written as the ingest appends new rows (one coalesced file, ``jobs.lake._delta``)."""
    path = f"{folder}/table"
    spark.read.parquet(f"{folder}/src").coalesce(1).write.format("delta").mode("append").save(path)
    return path


def read_like_the_ingest(spark: Any, folder: str, table_path: str) -> list[tuple[Any, ...]]:
    """The deliveries update's read: traced keys joined with the table, then their original copies."""
    from jobs.rules import deliveries

    keys = spark.read.parquet(f"{folder}/keys")
    joined = keys.join(spark.read.format("delta").load(table_path).select(*COLUMNS), ["cluster", "uniq_key"], "inner")
    out = f"{folder}/out"
    deliveries.original_copies(joined).write.mode("overwrite").parquet(out)  # written, as the MERGE's stage is
    got = spark.read.parquet(out).select("cluster", "uniq_key", "topic", "broker", "queue_id", "queue_offset")
    return sorted(tuple(r) for r in got.collect())


def main(folder: str) -> int:
    from jobs.lake._spark import session

    expected = build(folder)
    with session("sail") as spark:
        try:
            got = read_like_the_ingest(spark, folder, write_table(spark, folder))
        except Exception as exc:  # noqa: BLE001 - the engine's error is the answer
            print(" ".join(str(exc).split())[:500])
            return 1
    if got != expected:
        print(f"wrong rows: {len(got)} read, {len(expected)} expected")
        return 1
    print(f"ok {len(got)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main(sys.argv[1]))
