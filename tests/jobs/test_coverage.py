"""coverage: what a run could not check (spec §4.2, docs/semantics.md 21c), on tiny inputs with exact rows."""
from __future__ import annotations

import datetime as dt

import pandas as pd

from jobs.rules import coverage, snapshots
from schemas import store_features as SF

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)


def S(minute: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def test_each_feature_once_with_its_newest_snapshots_detail_and_none_after_the_run(spark) -> None:
    rows = [("c", "b", S(0), "T", "COMPACTION_TOPIC", "old"), ("c", "b", S(5), "T", "COMPACTION_TOPIC", "new"),
            ("c", "b", S(5), "", "TIERED", "tier"), ("c", "b", S(20), "U", "BATCH_CQ", "after the run"),
            ("c", "b2", S(0), "T", "COMPACTION_TOPIC", "other broker")]
    got = coverage.features(spark.createDataFrame(rows, SF.SCHEMA), as_of=S(10)).toPandas()
    assert sorted(map(tuple, got[[*coverage.FEATURE_KEY, "detail"]].values.tolist())) == [
        ("c", "b", "", "TIERED", "tier"), ("c", "b", "T", "COMPACTION_TOPIC", "new"),
        ("c", "b2", "T", "COMPACTION_TOPIC", "other broker")]


def test_a_queue_without_bounds_is_one_row_whatever_its_groups_and_clients(spark) -> None:
    """Two groups and a broadcast client on (T, 0) without bounds at their newest snapshots: one NO_CONSUME_QUEUE row
    dated by the newest of them; the groups are those of every key."""
    cols = snapshots.TAIL_COLUMNS
    keys = [("c", "G1", "", "T", "b", 0, S(5), 7, None, None, False),
            ("c", "G2", "", "T", "b", 0, S(10), 3, None, None, False),
            ("c", "G3", "cl@1", "T", "b", 0, S(10), 3, None, None, False),
            ("c", "G1", "", "T", "b", 1, S(10), 4, None, None, False)]
    schema = "cluster string, consumer_group string, client_id string, topic string, broker string, queue_id int, " \
             "snapshot_ts timestamp, committed_offset long, min_offset long, max_offset long, bounds_known boolean"
    per_group = coverage.unknown_queues(spark.createDataFrame(keys, schema).select(*cols)).toPandas()
    assert sorted(zip(per_group["consumer_group"], per_group["queue_id"])) == [
        ("G1", 0), ("G1", 1), ("G2", 0), ("G3", 0)]
    got = coverage.no_consume_queue(per_group).sort_values(["queue_id"]).reset_index(drop=True)
    tail = " has no consume queue data for this queue, which held messages: Min and Max unknown; no BACKLOG, " \
           "correction or lag at S"
    assert got.values.tolist() == [["c", "b", "T", 0, "snapshot 2026-01-05T00:10:00Z" + tail],
                                   ["c", "b", "T", 1, "snapshot 2026-01-05T00:10:00Z" + tail]]
    assert coverage.no_consume_queue(per_group.iloc[:0]).columns.tolist() == [
        "cluster", "broker", "topic", "queue_id", "detail"]


def test_rows_are_the_features_queues_and_untraced_groups_sorted_with_empty_wider_fields() -> None:
    feats = pd.DataFrame([("c", "b", "T", "COMPACTION_TOPIC", "compacted")], columns=[*coverage.FEATURE_KEY, "detail"])
    queues = pd.DataFrame([("c", "a", "T", 2, "no cq")], columns=["cluster", "broker", "topic", "queue_id", "detail"])
    untraced = coverage.untraced_groups({("c", "G1"), ("c", "G2")}, {("c", "G1")})
    assert untraced == [("c", "G2")]
    got = coverage.rows(feats, queues, untraced)
    assert [tuple(r) for r in got[["broker", "topic", "consumer_group", "queue_id", "reason"]].astype(object)
            .where(got.notna(), None).values.tolist()] == [
        ("", "", "G2", None, "NO_TRACE"), ("a", "T", "", 2, "NO_CONSUME_QUEUE"), ("b", "T", "", None, "COMPACTION_TOPIC")]
    assert str(got["queue_id"].dtype) == "Int32"
    empty = coverage.rows(feats.iloc[:0], queues.iloc[:0], [])
    assert (len(empty), list(empty.columns)) == (0, coverage.COLUMNS)


def test_a_compaction_topic_loses_its_expired_skipped_and_below_min_rows_only() -> None:
    unc = pd.DataFrame([("c", "b", "T", "EXPIRED"), ("c", "b", "T", "SKIPPED"), ("c", "b", "T", "BACKLOG"),
                        ("c", "b", "U", "EXPIRED"), ("c", "b2", "T", "EXPIRED")],
                       columns=["cluster", "broker", "topic", "kind"])
    corr = pd.DataFrame([("c", "b", "T", "BELOW_MIN"), ("c", "b", "T", "ABOVE_MAX")],
                        columns=["cluster", "broker", "topic", "reason"])
    pdfs = {"unconsumed_ranges": unc, "offset_corrections": corr}
    out = coverage.without_unsupported(pdfs, {("c", "b", "T")})
    assert out["unconsumed_ranges"].values.tolist() == [["c", "b", "T", "BACKLOG"], ["c", "b", "U", "EXPIRED"],
                                                        ["c", "b2", "T", "EXPIRED"]]
    assert out["offset_corrections"].values.tolist() == [["c", "b", "T", "ABOVE_MAX"]]
    assert coverage.without_unsupported(pdfs, set()) is pdfs
