"""gold/coverage: what a run could not check exactly (spec §4.2), and the findings its files cannot support.

The rules were written for a 4.x concurrent consumer on a broker with JSON configs and a plain consume queue. Where
the files show something else the report says so, per queue, topic, group or broker, instead of guessing:

* store features a broker snapshot's files show (silver/store_features, written by the ingest): ``COMPACTION_TOPIC``,
  ``BATCH_CQ``, ``TIERED``, ``STALE_JSON_IGNORED``; each once per (broker, topic) over the snapshots up to the run's
  time, with the newest snapshot's wording. A topic's ``cleanup.policy`` cannot change after it is created
  (``TopicAttributes.CLEANUP_POLICY_ATTRIBUTE`` is not changeable), so a topic compacted in any snapshot is one;
* ``NO_CONSUME_QUEUE``: a queue whose newest snapshot gives no bounds though it held messages (rule 5, 5a): Min and
  Max unknown, so no BACKLOG, correction or lag there;
* ``NO_TRACE``: a group with offsets and no delivery by the run's time (offsets-only mode: no TRACE duplicates,
  SKIPPED, RETRYING or BLOCKING_COMMIT can be found for it).

A compaction topic's reads below the commitlog's Min are served from the compaction log, and compaction removes
every record but the newest of each key (``CompactionStore``): offsets below Min were not lost and gaps were not
skipped, so its EXPIRED and SKIPPED ranges and BELOW_MIN corrections are left out (:func:`without_unsupported`).
"""
from __future__ import annotations

import datetime as dt

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import Window
from pyspark.sql import functions as F

from schemas import coverage as schema

COLUMNS = schema.REPORT_COLUMNS
FEATURE_KEY = ["cluster", "broker", "topic", "feature"]
# what a compaction topic's files cannot support (spec §4.2)
UNSUPPORTED_ON_COMPACTION = {"unconsumed_ranges": ("kind", ("EXPIRED", "SKIPPED")),
                             "offset_corrections": ("reason", ("BELOW_MIN",))}


def features(store_features: DataFrame, *, as_of: dt.datetime) -> DataFrame:
    """(cluster, broker, topic, feature, detail): each feature of the snapshots at or before ``as_of`` once, with
    its newest snapshot's detail."""
    from jobs.rules.snapshots import _ts

    w = Window.partitionBy(*FEATURE_KEY).orderBy(F.col("snapshot_ts").desc())
    return (store_features.where(F.col("snapshot_ts") <= _ts(as_of))
            .withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1)
            .select(*FEATURE_KEY, "detail"))


def unknown_queues(unknown_newest: DataFrame) -> DataFrame:
    """(cluster, consumer_group, broker, topic, queue_id, snapshot_ts) of the keys whose newest snapshot has no
    bounds (:func:`jobs.rules.snapshots.unknown_newest`), clients folded: report-sized, collected once a run for
    :func:`no_consume_queue` and the groups those queues belong to."""
    return (unknown_newest.groupBy("cluster", "consumer_group", "broker", "topic", "queue_id")
            .agg(F.max("snapshot_ts").alias("snapshot_ts")))


def no_consume_queue(unknown: pd.DataFrame) -> pd.DataFrame:
    """(cluster, broker, topic, queue_id, detail) of the queues in ``unknown`` (:func:`unknown_queues`, as pandas),
    once per queue whatever the groups."""
    cols = ["cluster", "broker", "topic", "queue_id", "detail"]
    if not len(unknown):
        return pd.DataFrame(columns=cols)
    q = unknown.groupby(["cluster", "broker", "topic", "queue_id"], as_index=False)["snapshot_ts"].max()
    when = pd.to_datetime(q["snapshot_ts"], utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    q["detail"] = ("snapshot " + when + " has no consume queue data for this queue, which held messages: Min and Max "
                   "unknown; no BACKLOG, correction or lag at S")
    return q[cols]


def rows(feature_rows: pd.DataFrame, queues: pd.DataFrame, untraced: list[tuple[str, str]]) -> pd.DataFrame:
    """The coverage report's rows from :func:`features`, :func:`no_consume_queue` (both as pandas, report-sized) and
    the (cluster, group) pairs with no delivery."""
    parts = []
    if len(feature_rows):
        parts.append(feature_rows.rename(columns={"feature": "reason"}).assign(consumer_group="", client_id="",
                                                                               queue_id=None))
    if len(queues):
        parts.append(queues.assign(reason="NO_CONSUME_QUEUE", consumer_group="", client_id=""))
    if untraced:
        parts.append(pd.DataFrame([{"cluster": c, "broker": "", "topic": "", "consumer_group": g, "client_id": "",
                                    "queue_id": None, "reason": "NO_TRACE",
                                    "detail": "no delivery of this group in the trace topic by the run's time: offsets "
                                              "only (no TRACE duplicates, SKIPPED, RETRYING or BLOCKING_COMMIT can be "
                                              "found)"} for c, g in untraced]))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="Int32" if c == "queue_id" else object) for c in COLUMNS})
    out = pd.concat(parts, ignore_index=True)[COLUMNS]
    out["queue_id"] = out["queue_id"].astype("Int32")
    return out.sort_values(schema.SORT_KEY, kind="mergesort", na_position="first").reset_index(drop=True)


def untraced_groups(groups: set[tuple[str, str]], traced: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The groups with offsets and no delivery (spec §4.2 NO_TRACE)."""
    return sorted(groups - traced)


def without_unsupported(pdfs: dict[str, pd.DataFrame], compaction: set[tuple[str, str, str]]
                        ) -> dict[str, pd.DataFrame]:
    """The report rows less the findings a compaction topic's files cannot support (EXPIRED, SKIPPED, BELOW_MIN on
    its queues, keyed (cluster, broker, topic))."""
    if not compaction:
        return pdfs
    out = dict(pdfs)
    for name, (col, values) in UNSUPPORTED_ON_COMPACTION.items():
        df = out[name]
        if not len(df):
            continue
        on = pd.Series([(c, b, t) in compaction for c, b, t in zip(df["cluster"], df["broker"], df["topic"])],
                       index=df.index)
        out[name] = df[~(on & df[col].isin(values))].reset_index(drop=True)
    return out
