"""The key index update (jobs.ingest.key_index): silver/key_index follows silver/messages from what was added since
the last completed ingest, one row per stored copy with a UNIQ_KEY, whatever is run again."""
from __future__ import annotations

from jobs.ingest import key_index as key_index_update
from jobs.lake import _delta, ledger
from schemas import key_index as K
from schemas import messages as M

KEY = "7F0000011F2A18B4AAC2"
KEY_HASH = -396143034392301366  # Spark's xxhash64 of KEY (Sail and classic Spark alike)


def _msgs(spark, rows: list[tuple]):  # noqa: ANN001, ANN202
    out = []
    for broker, phys, qo, key in rows:
        row = {c: None for c in M.TABLE.columns}
        row.update(cluster="c", broker=broker, physical_offset=phys, topic="T", queue_id=0, queue_offset=qo,
                   uniq_key=key)
        out.append(tuple(row[c] for c in M.TABLE.columns))
    return spark.createDataFrame(out, M.SCHEMA)


def _index(lake: str) -> list[tuple]:
    return sorted(tuple(r) for r in _delta.read_pandas(lake, K.TABLE)[K.TABLE.columns].itertuples(index=False))


def test_the_index_follows_messages_once_per_copy(spark, lake: str) -> None:  # noqa: ANN001
    """Run 1 indexes the two copies with a key (not the record without one). Nothing new: not stale, and an update
    adds nothing and makes no commit. Run 2 adds two inner messages of one record and a retry copy of KEY: three rows.
    Rows rewritten (messages MERGEd again) or an update from the start add none."""
    assert key_index_update.stale(lake, None) is False  # no messages yet
    _delta.merge(spark, _msgs(spark, [("b", 100, 10, KEY), ("b", 200, 11, None), ("a", 50, 3, "K2")]), lake, M.TABLE)
    assert key_index_update.stale(lake, None) is True
    assert key_index_update.update(spark, lake, None) == 2
    assert _index(lake)[1] == ("c", KEY_HASH, "b", 100, 10)
    since = ledger.versions(lake, [M.TABLE, K.TABLE])
    previous = {"table_versions": since}
    assert key_index_update.stale(lake, previous) is False
    assert key_index_update.update(spark, lake, since) == 0
    assert _delta.version(lake, K.TABLE) == since[K.TABLE.qualified]

    _delta.merge(spark, _msgs(spark, [("b", 300, 12, "K3"), ("b", 300, 13, "K4"), ("a", 90, 0, KEY)]), lake, M.TABLE)
    assert key_index_update.stale(lake, previous) is True
    assert key_index_update.update(spark, lake, since) == 3
    want = _index(lake)
    assert len(want) == 5 and [r[2:] for r in want if r[1] == KEY_HASH] == [("a", 90, 0), ("b", 100, 10)]
    assert sorted(r[2:] for r in want) == [("a", 50, 3), ("a", 90, 0), ("b", 100, 10), ("b", 300, 12),
                                           ("b", 300, 13)]

    since = ledger.versions(lake, [M.TABLE, K.TABLE])
    _delta.merge(spark, _msgs(spark, [("b", 100, 10, KEY)]).withColumn("topic", _lit("T2")), lake, M.TABLE)
    assert _delta.rows_added(lake, M.TABLE, since[M.TABLE.qualified]) > 0  # the rewrite adds a file again
    assert key_index_update.update(spark, lake, since) == 0
    assert key_index_update.update(spark, lake, None) == 0
    assert _index(lake) == want


def test_messages_without_a_key_leave_an_empty_index_that_is_up_to_date(spark, lake: str) -> None:  # noqa: ANN001
    """Records without a UNIQ_KEY (a 4.x client that sets none): the index is created empty, so the next run does
    not index the whole table again."""
    _delta.merge(spark, _msgs(spark, [("b", 100, 10, None)]), lake, M.TABLE)
    assert key_index_update.update(spark, lake, None) == 0
    assert _delta.exists(lake, K.TABLE) and _index(lake) == []
    assert key_index_update.stale(lake, {"table_versions": ledger.versions(lake, [M.TABLE, K.TABLE])}) is False


def _lit(v):  # noqa: ANN001, ANN202
    from pyspark.sql import functions as F

    return F.lit(v)


def test_after_appends_only_the_index_rows_added_since_are_checked(spark, lake: str, monkeypatch) -> None:  # noqa: ANN001
    """The hourly case: silver/messages only gained files since the last completed ingest, so the update looks for
    existing rows of the new copies among the index files added since (none: a plain append) and never reads the
    whole index (its files span every broker, so statistics skip none). A run killed after its index update and run
    again finds that run's rows there and adds nothing; a rewrite since (MERGE) checks the whole index again."""
    _delta.merge(spark, _msgs(spark, [("b", 100, 10, KEY), ("a", 50, 3, "K2")]), lake, M.TABLE)
    assert key_index_update.update(spark, lake, None) == 2
    since = ledger.versions(lake, [M.TABLE, K.TABLE])
    _delta.insert_new(spark, _msgs(spark, [("b", 300, 12, "K3"), ("a", 90, 0, KEY)]), lake, M.TABLE,
                      target_filter="false", target_rows=False)
    assert _delta.removed_since(lake, M.TABLE, since[M.TABLE.qualified]) is False

    def whole_index(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the whole index was read")

    with monkeypatch.context() as m:
        m.setattr(_delta, "any_rows", whole_index)
        assert key_index_update.update(spark, lake, since) == 2  # nothing added since: appended as it is
        assert key_index_update.update(spark, lake, since) == 0  # the killed run's rows are found among the new files
    want = [("c", KEY_HASH, "a", 90, 0), ("c", KEY_HASH, "b", 100, 10)]
    assert [r for r in _index(lake) if r[1] == KEY_HASH] == want and len(_index(lake)) == 4

    _delta.merge(spark, _msgs(spark, [("b", 100, 10, KEY)]).withColumn("topic", _lit("T2")), lake, M.TABLE)
    assert _delta.removed_since(lake, M.TABLE, since[M.TABLE.qualified]) is True
    calls = []
    real = _delta.any_rows
    monkeypatch.setattr(_delta, "any_rows", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert key_index_update.update(spark, lake, since) == 0
    assert calls == [1] and len(_index(lake)) == 4


def test_files_of_one_broker_each_give_the_new_ranges_from_their_statistics(spark, lake: str, monkeypatch) -> None:  # noqa: ANN001
    """As the ingest writes silver/messages (a file per broker): the ranges the update restricts its check to come
    from the files' statistics, not from the engine, and the index is the same; then a file of two brokers sends
    the update back to the engine's aggregate."""
    for rows in ([("b", 100, 10, KEY), ("b", 120, 11, None)], [("a", 50, 3, "K2")]):
        _delta.insert_new(spark, _msgs(spark, rows), lake, M.TABLE, target_filter="false", target_rows=False)
    assert _delta.added_spans(lake, M.TABLE, None) == {("c", "a"): (50, 50, 1), ("c", "b"): (100, 120, 2)}
    spans = []
    real = _delta.insert_new
    monkeypatch.setattr(_delta, "insert_new", lambda *a, **k: spans.append(k["target_filter"]) or real(*a, **k))
    assert key_index_update.update(spark, lake, None) == 2
    assert spans == ["(t.cluster = 'c' AND t.broker = 'a' AND t.physical_offset >= 50 AND t.physical_offset < 51) OR "
                     "(t.cluster = 'c' AND t.broker = 'b' AND t.physical_offset >= 100 AND t.physical_offset < 121)"]
    since = ledger.versions(lake, [M.TABLE, K.TABLE])
    _delta.insert_new(spark, _msgs(spark, [("b", 300, 12, "K3"), ("a", 90, 0, "K4")]), lake, M.TABLE,
                      target_filter="false", target_rows=False)
    assert _delta.added_spans(lake, M.TABLE, since[M.TABLE.qualified]) is None  # one file holds both brokers
    assert key_index_update.update(spark, lake, since) == 2
    assert spans[-1] == ("(t.cluster = 'c' AND t.broker = 'a' AND t.physical_offset >= 90 AND t.physical_offset < 91)"
                         " OR (t.cluster = 'c' AND t.broker = 'b' AND t.physical_offset >= 300 AND "
                         "t.physical_offset < 301)")
    assert sorted(r[2:] for r in _index(lake)) == [("a", 50, 3), ("a", 90, 0), ("b", 100, 10), ("b", 300, 12)]
