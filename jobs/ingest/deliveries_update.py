"""The deliveries update: silver/deliveries brought up to date with what the lake holds, derived again only for the
requests that what was added since the last completed ingest touches."""
from __future__ import annotations

from typing import Any, Callable

from jobs.lake import _delta, _spark, lookups, point_index, storage
from schemas import consumer_offsets, deliveries, key_index, messages, trace_records

DELIVERIES_STAGING = "_staging/deliveries"  # the rows silver/deliveries gains or changes, computed once
DELIVERIES_INPUTS_STAGING = "_staging/deliveries_inputs"  # the requests an update derives again, and their keys
# What silver/deliveries is derived from (deliveries.deliveries: trace records, the original copies of their
# messages, the broadcast clients' ids).
DELIVERIES_INPUTS = [trace_records.TABLE, messages.TABLE, consumer_offsets.TABLE]


def deliveries_stale(lake: str, previous: dict[str, Any] | None) -> bool:
    """Whether silver/deliveries must be rebuilt: trace records exist and the table is missing, or its inputs moved
    since the newest completed ingest (which left it up to date with them), or no ingest completed before."""
    if not _delta.exists(lake, trace_records.TABLE):
        return False
    if not _delta.exists(lake, deliveries.TABLE) or previous is None:
        return True
    recorded = previous["table_versions"]
    return any(_delta.version(lake, t) != recorded.get(t.qualified) for t in DELIVERIES_INPUTS)


def build_deliveries(spark: Any, lake: str, since: dict[str, int] | None = None,
                     index_ready: Callable[[], Any] = lambda: None) -> int:
    """Bring silver/deliveries up to date with the trace records, messages and broadcast clients the lake holds.

    A delivery's row depends only on the trace records of its (cluster, request_id), the original copies of their
    messages and its group's broadcast client ids (jobs.rules.deliveries). So with ``since`` (the table versions the
    last completed ingest left) only the requests touched by what was added since are derived again and merged:
    new trace records, new original copies of traced keys, and groups with a new client id. Without it (no
    completed ingest, or Parquet tables, which have no versions) every request is.

    ``index_ready``: waits until silver/key_index's segments are built (the ingest builds them on a thread beside
    this update); called only before the touched requests' keys are looked up through them.
    """
    from pyspark.sql import functions as F

    from jobs.rules import deliveries as deliveries_job

    if not _delta.exists(lake, trace_records.TABLE):
        return 0
    trace = _delta.read(spark, lake, trace_records.TABLE)
    msgs = _delta.read(spark, lake, messages.TABLE)
    offs = _delta.read(spark, lake, consumer_offsets.TABLE)
    client_ids = offs.where("client_id <> ''").select("cluster", "consumer_group", "client_id").distinct()
    new_trace = new_msgs = None
    if since is not None and _delta.exists(lake, deliveries.TABLE):
        new_trace = _delta.added_since(spark, lake, trace_records.TABLE, since.get(trace_records.TABLE.qualified))
        new_msgs = _delta.added_since(spark, lake, messages.TABLE, since.get(messages.TABLE.qualified))
    if new_trace is not None and new_msgs is not None:
        at = since.get(consumer_offsets.TABLE.qualified) if since else None
        old_clients = (_delta.read(spark, lake, consumer_offsets.TABLE, at=at) if at is not None
                       else spark.createDataFrame([], consumer_offsets.TABLE.schema))
        new_groups = client_ids.join(old_clients.where("client_id <> ''").select(
            "cluster", "consumer_group", "client_id"), ["cluster", "consumer_group", "client_id"], "left_anti") \
            .select("cluster", F.col("consumer_group").alias("group")).distinct()
        new_keys = new_msgs.where(F.col("uniq_key").isNotNull()).select(
            "cluster", F.col("uniq_key").alias("msg_id")).distinct()
        requests = (
            new_trace.select("cluster", "request_id")
            .unionByName(trace.join(new_keys, ["cluster", "msg_id"], "left_semi").select("cluster", "request_id"))
            .unionByName(trace.join(new_groups, ["cluster", "group"], "left_semi").select("cluster", "request_id"))
            .where(F.col("request_id").isNotNull()).distinct()
        )
    else:
        requests = None  # every request
    # The requests, their trace records and their keys are computed once, small, before silver/messages is read:
    # the engine builds a join's hash table on its left input, so the keys go left and the table's 7 columns are
    # only streamed past them (the update had computed the requests again inside the scan of every message; the
    # first build, joining every message whole, spent 39 s and 2.9 GiB at 10 M messages).
    inputs = f"{lake.rstrip('/')}/{DELIVERIES_INPUTS_STAGING}"
    small = _spark.materializer(spark, inputs)
    try:
        if requests is not None:
            requests = small(requests, "requests")
            trace = small(requests.join(trace, ["cluster", "request_id"], "inner")
                          .select(*trace_records.TABLE.columns), "trace")
        keys = small(trace.where(F.col("msg_id").isNotNull())
                     .select("cluster", F.col("msg_id").alias("uniq_key")).distinct(), "keys")
        msgs = msgs.select(*deliveries_job.MESSAGE_COLUMNS)
        if requests is not None and lookups.index_enabled() and _delta.exists(lake, key_index.TABLE):
            # the copies of the touched requests' keys, found through silver/key_index (up to date: the ingest
            # updates it first) and read by position, not by a scan of every message's key
            index_ready()
            msgs = lookups.copies_of(msgs, keys, point_index.PointIndex.of_delta(spark, lake, key_index.TABLE, None),
                                     small, "copies")
        else:  # every request: every message's copies are read anyway
            msgs = keys.join(msgs, ["cluster", "uniq_key"], "inner")
        df = deliveries_job.deliveries(trace, msgs, client_ids)
        return _delta.merge(spark, df, lake, deliveries.TABLE, stage=f"{lake.rstrip('/')}/{DELIVERIES_STAGING}")
    finally:
        storage.delete_tree(inputs)
