"""Ingest's update of silver/deliveries (jobs.ingest.deliveries_update.build_deliveries): derived again only for
what was added since the last completed ingest, yet the same rows as a derivation from the whole lake."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.ingest import ingest
from jobs.ingest import key_index as key_index_update
from jobs.lake import _delta, ledger, point_index
from schemas import deliveries as D
from schemas import key_index as K
from schemas import messages as M
from schemas import trace_records as T

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
INPUTS = [T.TABLE, M.TABLE, D.TABLE, K.TABLE]


def _ts(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def _trace(spark, rows: list[dict]):  # noqa: ANN001, ANN202
    base = {c: None for c in T.TABLE.columns}
    return spark.createDataFrame([tuple({**base, "cluster": "c", "broker": "tb", "record_index": 0, "group": "G",
                                         "client_host": "10.0.0.1", **r}[c] for c in T.TABLE.columns)
                                  for r in rows], T.SCHEMA)


def _msgs(spark, rows: list[tuple]):  # noqa: ANN001, ANN202
    out = []
    for broker, phys, q, qo, key in rows:
        row = {c: None for c in M.TABLE.columns}
        row.update(cluster="c", broker=broker, physical_offset=phys, topic="T", queue_id=q, queue_offset=qo,
                   uniq_key=key)
        out.append(tuple(row[c] for c in M.TABLE.columns))
    return spark.createDataFrame(out, M.SCHEMA)


def _before(req: str, key: str, phys: int, sec: float) -> dict:
    return dict(physical_offset=phys, type="SubBefore", timestamp=_ts(sec), request_id=req, msg_id=key,
                retry_times=0)


def _after(req: str, key: str, phys: int, sec: float) -> dict:
    return dict(physical_offset=phys, type="SubAfter", timestamp=_ts(sec), request_id=req, msg_id=key, success=True,
                context_code=0, cost_time_ms=1000)


def _row(req: str, key: str, start: float, end: float | None, where: tuple | None, trace_phys: int) -> tuple:
    topic, broker, q, qo = ("T", *where) if where else (None, None, None, None)
    done = end is not None
    return ("c", "G", req, key, 0, _ts(start), _ts(end) if done else None, True if done else None,
            0 if done else None, topic, broker, q, qo, "10.0.0.1", "", 1000 if done else None, "tb", trace_phys,
            None, None, None, None)


@pytest.mark.parametrize("indexed", [True, False], ids=["keys through silver/key_index", "no index"])
def test_an_update_finds_old_messages_and_messages_that_land_after_their_trace(spark, lake: str,  # noqa: ANN001
                                                                                indexed: bool) -> None:
    """Run 1 stores K1 (never delivered yet) and derives r0. Run 2 adds r1, a late delivery of the old K1 (its copy
    is found among the messages stored before), and r2, traced before its message K2 was stored. Run 3 adds no
    trace record, only K2's copy and a copy of K1 on a lower broker (the new original): both rows change. The same
    with the copies found through silver/key_index (updated first, as the ingest does) and without it. The
    index's segments are awaited only by an update that looks keys up through them (the ingest builds them beside
    the update)."""
    waits: list[int] = []

    def build(since: dict | None) -> int:
        if indexed:
            key_index_update.update(spark, lake, since)
        return ingest.build_deliveries(spark, lake, since,
                                       index_ready=lambda: waits.append(point_index.warm(lake)))

    _delta.merge(spark, _msgs(spark, [("b", 50, 0, 5, "K0"), ("b", 100, 0, 10, "K1")]), lake, M.TABLE)
    _delta.merge(spark, _trace(spark, [_before("r0", "K0", 1, 1), _after("r0", "K0", 2, 2)]), lake, T.TABLE)
    assert build(None) == 1
    assert waits == []  # every request derived: no key looked up
    since = ledger.versions(lake, INPUTS)

    _delta.merge(spark, _trace(spark, [_before("r1", "K1", 3, 100), _after("r1", "K1", 4, 101),
                                       _before("r2", "K2", 5, 110)]), lake, T.TABLE)
    _delta.merge(spark, _msgs(spark, [("b", 200, 0, 11, "K5")]), lake, M.TABLE)
    assert build(since) == 2
    assertDataFrameEqual(_delta.read(spark, lake, D.TABLE), spark.createDataFrame([
        _row("r0", "K0", 1, 2, ("b", 0, 5), 1), _row("r1", "K1", 100, 101, ("b", 0, 10), 3),
        _row("r2", "K2", 110, None, None, 5)], D.SCHEMA))
    since = ledger.versions(lake, INPUTS)

    _delta.merge(spark, _msgs(spark, [("b", 300, 1, 20, "K2"), ("a", 900, 3, 30, "K1")]), lake, M.TABLE)
    assert build(since) == 2
    # run 2 built the segments of K0, K1 and K5 (none before: run 1 looked nothing up), run 3 those of K2 and K1's copy
    assert waits == ([3, 2] if indexed else [])
    want = spark.createDataFrame([
        _row("r0", "K0", 1, 2, ("b", 0, 5), 1), _row("r1", "K1", 100, 101, ("a", 3, 30), 3),
        _row("r2", "K2", 110, None, ("b", 1, 20), 5)], D.SCHEMA)
    assertDataFrameEqual(_delta.read(spark, lake, D.TABLE), want)
    assert ingest.build_deliveries(spark, lake, None) == 0  # a derivation from the whole lake: the same rows
    assertDataFrameEqual(_delta.read(spark, lake, D.TABLE), want)
    assert _delta.exists(lake, K.TABLE) is indexed
