"""Deliveries: SubBefore paired with SubAfter, mapped to the original message and the broadcast client."""
from __future__ import annotations

import datetime as dt

from pyspark.testing import assertDataFrameEqual

from jobs.rules import deliveries
from schemas import deliveries as D
from schemas import messages as M
from schemas import trace_records as T

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)


def _ts(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def _trace(rows: list[dict]) -> list[tuple]:
    base = {c: None for c in T.TABLE.columns}
    return [tuple({**base, "cluster": "c", "broker": "b", **r}[c] for c in T.TABLE.columns) for r in rows]


def _msg(phys: int, topic: str, q: int, qo: int, key: str) -> tuple:
    row = {c: None for c in M.TABLE.columns}
    row.update(cluster="c", broker="b", physical_offset=phys, topic=topic, queue_id=q, queue_offset=qo, uniq_key=key)
    return tuple(row[c] for c in M.TABLE.columns)


def test_deliveries_pair_map_and_name_clients(spark) -> None:  # noqa: ANN001
    trace = spark.createDataFrame(_trace([
        # clustering group G: delivered, succeeded (9-field SubAfter with timestamp)
        dict(physical_offset=900, record_index=0, client_host="10.0.0.1", type="SubBefore", timestamp=_ts(1),
             group="G", request_id="r1", msg_id="K1", retry_times=0, first_snapshot_ts=_ts(60)),
        dict(physical_offset=905, record_index=0, client_host="10.0.0.1", type="SubAfter", timestamp=_ts(3),
             group="G", request_id="r1", msg_id="K1", success=True, context_code=0, cost_time_ms=2000,
             first_snapshot_ts=_ts(120)),
        # CLOUD layout SubAfter: no timestamp, end = start + cost
        dict(physical_offset=901, record_index=0, client_host="10.0.0.1", type="SubBefore", timestamp=_ts(10),
             group="G", request_id="r2", msg_id="K2", retry_times=1),
        dict(physical_offset=902, record_index=0, client_host="10.0.0.1", type="SubAfter", timestamp=None,
             group=None, request_id="r2", msg_id="K2", success=False, context_code=4, cost_time_ms=500),
        # in flight: no SubAfter
        dict(physical_offset=903, record_index=0, client_host="10.0.0.2", type="SubBefore", timestamp=_ts(20),
             group="G", request_id="r3", msg_id="K1", retry_times=0),
        # broadcast group B on client 10.0.0.7@DEFAULT; message unknown
        dict(physical_offset=904, record_index=0, client_host="10.0.0.7", type="SubBefore", timestamp=_ts(30),
             group="B", request_id="r4", msg_id="K9", retry_times=0),
    ]), T.SCHEMA)
    messages = spark.createDataFrame([
        _msg(100, "T", 2, 41, "K1"),
        _msg(50, "%RETRY%G", 0, 3, "K1"),  # a retry copy never counts as the original
        _msg(300, "T", 1, 7, "K2"),
        _msg(200, "T", 0, 5, "K2"),  # producer resend: the lowest physical offset wins
    ], M.SCHEMA)
    clients = spark.createDataFrame([("c", "B", "10.0.0.7@DEFAULT"), ("c", "B", "10.0.0.70@DEFAULT")],
                                    "cluster string, consumer_group string, client_id string")
    got = deliveries.deliveries(trace, messages, clients)
    expected = spark.createDataFrame([
        ("c", "G", "r1", "K1", 0, _ts(1), _ts(3), True, 0, "T", "b", 2, 41, "10.0.0.1", "", 2000, "b", 900,
         _ts(60), _ts(120), None, None),
        ("c", "G", "r2", "K2", 1, _ts(10), _ts(10.5), False, 4, "T", "b", 0, 5, "10.0.0.1", "", 500, "b", 901,
         None, None, None, None),
        ("c", "G", "r3", "K1", 0, _ts(20), None, None, None, "T", "b", 2, 41, "10.0.0.2", "", None, "b", 903,
         None, None, None, None),
        ("c", "B", "r4", "K9", 0, _ts(30), None, None, None, None, None, None, None, "10.0.0.7", "10.0.0.7@DEFAULT",
         None, "b", 904, None, None, None, None),
    ], D.SCHEMA)
    assertDataFrameEqual(got, expected)


def _delivery(req: str, before_snap: float | None, after_snap: float | None, *, end: float | None = 5) -> tuple:
    r = {c: None for c in D.TABLE.columns}
    r.update(cluster="c", consumer_group="G", request_id=req, uniq_key="K", retry_times=0, start_ts=_ts(1),
             end_ts=None if end is None else _ts(end), success=None if end is None else True,
             context_code=None if end is None else 0, cost_time_ms=None if end is None else 4000,
             first_snapshot_ts=None if before_snap is None else _ts(before_snap),
             after_snapshot_ts=None if after_snap is None else _ts(after_snap))
    return tuple(r[c] for c in D.TABLE.columns)


def test_an_as_of_run_sees_the_trace_records_its_snapshots_held(spark) -> None:  # noqa: ANN001
    """As of 01:00 (rule 0): a SubAfter first held at 02:00 is not seen yet (in flight then, as in a lake ingested
    up to 01:00); a SubBefore first held at 02:00 is not seen at all; records of no snapshot always are."""
    from jobs.rules import snapshots

    d = spark.createDataFrame([_delivery("seen", 3600, 3600), _delivery("after-later", 3600, 7200),
                               _delivery("before-later", 7200, 7200), _delivery("export", None, None),
                               _delivery("in-flight", 3600, None, end=None)], D.SCHEMA)
    got = snapshots.deliveries_as_of(d, as_of=T0 + dt.timedelta(hours=1))
    assertDataFrameEqual(got, spark.createDataFrame([
        _delivery("seen", 3600, 3600), _delivery("after-later", 3600, None, end=None), _delivery("export", None, None),
        _delivery("in-flight", 3600, None, end=None)], D.SCHEMA))


def test_a_client_id_names_its_host_as_the_trace_does() -> None:
    assert [deliveries.client_host(c) for c in (
        "10.0.0.7@DEFAULT", "10.0.0.7@i1@unit", "[2001:db8:0:0:0:0:0:5]@DEFAULT", "[fe80:0:0:0:0:0:0:1%eth0]@DEFAULT",
        "2001:db8::5@DEFAULT", "[not-an-ip]@x", None)] == [
        "10.0.0.7", "10.0.0.7", "2001:db8::5", "fe80::1", "2001:db8::5", "[not-an-ip]", None]


def test_an_ipv6_broadcast_client_gets_its_deliveries(spark) -> None:  # noqa: ANN001
    """RocketMQ writes an IPv6 client's folder as [2001:db8:0:0:0:0:0:5]@DEFAULT; the trace message's born host
    decodes to 2001:db8::5. 2001:db8::50 is another host."""
    trace = spark.createDataFrame(_trace([
        dict(physical_offset=904, record_index=0, client_host="2001:db8::5", type="SubBefore", timestamp=_ts(30),
             group="B", request_id="r4", msg_id="K9", retry_times=0),
        dict(physical_offset=905, record_index=0, client_host="2001:db8::50", type="SubBefore", timestamp=_ts(31),
             group="B", request_id="r5", msg_id="K9", retry_times=0)]), T.SCHEMA)
    clients = spark.createDataFrame([("c", "B", "[2001:db8:0:0:0:0:0:5]@DEFAULT"), ("c", "B", "10.0.0.7@DEFAULT")],
                                    "cluster string, consumer_group string, client_id string")
    got = deliveries.deliveries(trace, spark.createDataFrame([], M.SCHEMA), clients)
    assert sorted((r["request_id"], r["client_id"]) for r in got.select("request_id", "client_id").collect()) == [
        ("r4", "[2001:db8:0:0:0:0:0:5]@DEFAULT"), ("r5", "")]


def _copy(phys: int, topic: str, key: str, times: int, stored: float, snap: float) -> tuple:
    row = {c: None for c in M.TABLE.columns}
    row.update(cluster="c", broker="b", physical_offset=phys, topic=topic, queue_id=0, queue_offset=phys, uniq_key=key,
               reconsume_times=times, store_ts=_ts(stored), first_snapshot_ts=_ts(snap))
    return tuple(row[c] for c in M.TABLE.columns)


def test_a_hung_delivery_leaves_its_process_queue_when_clean_expire_sends_it_back(spark) -> None:  # noqa: ANN001
    """Rule 12a (the fifth audit: mixed seed 7, offset 73 hung at 00:14:46 and sent back at 00:30, was taken to pin
    the commit for ever, so a later duplicate was HEAD_BLOCKED instead of UNPERSISTED). The copy of K1 in
    %RETRY%G with reconsume 1 stored after r1 started is its send-back; r2 (a SubAfter: sent back after it, if ever),
    r3 (another group), r4 (a copy stored before it started) and r5 (only a copy with reconsume 2) get none."""
    before = dict(record_index=0, client_host="10.0.0.1", type="SubBefore", retry_times=0)
    trace = spark.createDataFrame(_trace([
        dict(before, physical_offset=900, timestamp=_ts(10), group="G", request_id="r1", msg_id="K1"),
        dict(before, physical_offset=901, timestamp=_ts(10), group="G", request_id="r2", msg_id="K2"),
        dict(physical_offset=902, record_index=0, client_host="10.0.0.1", type="SubAfter", timestamp=_ts(12),
             group="G", request_id="r2", msg_id="K2", success=False, context_code=1, cost_time_ms=2000),
        dict(before, physical_offset=903, timestamp=_ts(10), group="H", request_id="r3", msg_id="K1"),
        dict(before, physical_offset=904, timestamp=_ts(2000), group="G", request_id="r4", msg_id="K1"),
        dict(before, physical_offset=905, timestamp=_ts(10), group="G", request_id="r5", msg_id="K5"),
    ]), T.SCHEMA)
    messages = spark.createDataFrame([
        _copy(100, "T", "K1", 0, 1, 60), _copy(101, "T", "K2", 0, 1, 60), _copy(102, "T", "K5", 0, 1, 60),
        _copy(200, "%RETRY%G", "K1", 1, 1000, 1200), _copy(201, "%RETRY%G", "K1", 1, 1900, 1900),
        _copy(202, "%RETRY%G", "K2", 1, 14, 60), _copy(203, "%RETRY%G", "K5", 2, 1000, 1200)], M.SCHEMA)
    got = deliveries.deliveries(trace, messages, spark.createDataFrame([], "cluster string, consumer_group string, "
                                                                           "client_id string"))
    assert sorted(tuple(r) for r in got.select("consumer_group", "request_id", "sent_back_ts", "sent_back_snapshot_ts")
                  .collect()) == [("G", "r1", _ts(1000).replace(tzinfo=None), _ts(1200).replace(tzinfo=None)),
                                  ("G", "r2", None, None), ("G", "r4", None, None), ("G", "r5", None, None),
                                  ("H", "r3", None, None)]


def test_an_as_of_run_sees_a_send_back_its_snapshots_held(spark) -> None:  # noqa: ANN001
    from jobs.rules import snapshots

    def sent(req: str, snap: float) -> dict:
        r = dict(zip(D.TABLE.columns, _delivery(req, 60, None, end=None)))
        return {**r, "sent_back_ts": _ts(1000), "sent_back_snapshot_ts": _ts(snap)}

    d = spark.createDataFrame([tuple(sent(q, s)[c] for c in D.TABLE.columns) for q, s in (("a", 1200), ("b", 7200))],
                              D.SCHEMA)
    got = snapshots.deliveries_as_of(d, as_of=T0 + dt.timedelta(hours=1))
    assert sorted(tuple(r) for r in got.select("request_id", "sent_back_ts").collect()) == [
        ("a", _ts(1000).replace(tzinfo=None)), ("b", None)]
