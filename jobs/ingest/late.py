"""Snapshot folders that land after a newer one of their broker (a failed upload retried): the records they hold
were first held at their time, not at the newer folder's."""
from __future__ import annotations

from typing import Any

from jobs.ingest import decode
from jobs.ingest.extracted import rows_folder
from jobs.ingest.landing import Snapshot
from jobs.lake import _delta, _spark, lookups
from schemas import messages, pop_acks, pop_checkpoints, trace_records


def lower_first_held(spark: Any, lake: str, late: list[Snapshot]) -> int:
    """Give the records each of ``late`` holds its time as ``first_snapshot_ts`` (and its copy as a message's
    ``segment``) where theirs is later.

    A snapshot folder that lands after a newer one of its broker holds records the lake already took from the newer
    one, stamped with that newer time; the run's decode reads nothing of them again (the segment ledger is past
    them). Which records a copy holds is what decoding it gives (commitlog files are preallocated: a copy's size says
    nothing), so the late folders' segments are decoded again, from their start, by the same tasks. Messages (trace
    messages included) are lowered, then the trace records they carry; silver/deliveries follows, being derived
    again for the rows rewritten. Rare (a failed upload retried): it costs a decode of those folders' segments.

    Returns:
        The number of messages and trace records whose time was lowered.
    """
    from pyspark.sql import functions as F

    from jobs.ingest import decode_tasks
    from jobs.lake import failpoints

    if not _delta.exists(lake, messages.TABLE):
        return 0
    copies = sorted((s for s in late if not s.is_export), key=lambda s: (s.cluster, s.broker, s.ts))
    units = decode_tasks.plan_units(copies, {}, frozenset(), lambda snap, p: None, chunk_bytes=decode.CHUNK_BYTES,
                                    batch_rows=decode.MESSAGE_BATCH_ROWS, trace_batch_rows=decode.TRACE_BATCH_ROWS)
    # an export folder's records are its parts (its host decoded them), not segments to decode again
    parts = [f.uri for s in late if s.is_export for f in s.files if f.kind == "export_part"]
    # and their messages files (export layout 2: rows of silver/messages, no kind)
    message_files = [f.uri for s in late if s.is_export for f in s.files if f.kind == "export_messages"]
    if not units and not parts:
        return 0
    folder = f"{rows_folder(lake)}/late-first-held"
    sources = []
    if units:
        decode._decode_pass(spark, units, decode.Decoded(f"{folder}/decoded"), len(units))
        sources.append(f"{folder}/decoded")
    held = (spark.read.schema(decode_tasks.output_ddl()).parquet(*sources, *parts)
            .where(F.col("kind") == decode_tasks.MESSAGE)
            .select(*messages.TABLE.key, F.col("first_snapshot_ts").alias("_ts"), F.col("segment").alias("_path")))
    if message_files:
        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in messages.TABLE.schema.fields)
        held = held.unionByName(spark.read.schema(cols).parquet(*message_files).select(
            *messages.TABLE.key, F.col("first_snapshot_ts").alias("_ts"), F.col("segment").alias("_path")))
    # From the decode alone, not from the lake's times: a run killed between the two MERGEs lowers the trace records
    # when run again, though the messages are lowered already. Computed once, read by both.
    firsts = _spark.materialize(spark, held.groupBy(*messages.TABLE.key).agg(
        F.min(F.struct("_ts", "_path")).alias("_first")).select(*messages.TABLE.key, "_first._ts", "_first._path"),
        f"{folder}/firsts")
    # The lake's rows are read, and compared by the MERGE, in the brokers' ranges the late copies hold, not whole
    # (trace records are keyed by the physical offset of the trace message that carries them).
    in_spans = lookups.spans_filter(lookups.spans(firsts))
    # the trace records, POP checkpoints and acks by the record that carries them: its first time once per record
    by_record = _spark.materialize(spark, firsts.select("cluster", "broker", "physical_offset", "_ts", "_path")
                                   .distinct(), f"{folder}/by-record")
    n = 0
    for table in (messages, trace_records, pop_checkpoints, pop_acks):
        if not _delta.exists(lake, table.TABLE):
            continue
        # the messages by their key (an INNER_BATCH record's messages share its physical offset); the others by the
        # physical offset of the record that carries them
        on = list(messages.TABLE.key) if table is messages else ["cluster", "broker", "physical_offset"]
        rows = (_delta.read(spark, lake, table.TABLE).alias("t").where(in_spans)
                .join(firsts if table is messages else by_record, on, "inner")
                .where(F.col("first_snapshot_ts") > F.col("_ts")).withColumn("first_snapshot_ts", F.col("_ts")))
        if "segment" in table.TABLE.columns:  # the copy that first held the message
            rows = rows.withColumn("segment", F.col("_path"))
        n += _delta.merge(spark, rows.select(*table.TABLE.columns), lake, table.TABLE, target_filter=in_spans)
        if table is messages:
            failpoints.hit("ingest.between_late_merges")
    return n
