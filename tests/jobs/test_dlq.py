"""dlq_candidates: IN_DLQ, RETRYING, BLOCKING_COMMIT, BROADCAST_DROPPED (spec §4, docs/semantics.md 16, 18-20)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from jobs.rules import dlq, snapshots
from schemas import consumer_offsets as CO
from schemas import deliveries as D
from schemas import dlq_candidates as DC
from schemas import messages as M
from schemas import queue_bounds as QB
from schemas import subscription_groups as SG

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
C5, C6 = "10.0.0.5@DEFAULT", "10.0.0.6@DEFAULT"
REPORT = StructType([f for f in DC.SCHEMA.fields if f.name != "run_id"])
T_S = 60 * 60  # the latest snapshot, seconds after T0
AS_OF = T0 + dt.timedelta(seconds=T_S)


def S(sec: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=sec)


def off(c: int, *, group: str = "G", client: str = "") -> tuple:
    return ("c", "b", S(T_S), group, "T", 0, client, c, False, "f", False)


def msg(qo: int, uniq: str, *, topic: str = "T", reconsume: int = 0, props: dict | None = None,
        store: float = 0) -> tuple:
    r = {c: None for c in M.TABLE.columns}
    r.update(cluster="c", broker="b", physical_offset=(9000 if topic != "T" else 1000) + qo, topic=topic, queue_id=0,
             queue_offset=qo, uniq_key=uniq, keys=f"order-{uniq}", store_ts=S(store), reconsume_times=reconsume,
             properties=props or {})
    return tuple(r[c] for c in M.TABLE.columns)


def dl(req: str, uniq: str, retry: int, start: float, end: float | None, success: bool | None, *, group: str = "G",
       client: str = "", host: str = "10.0.0.1") -> tuple:
    r = {c: None for c in D.TABLE.columns}
    r.update(cluster="c", consumer_group=group, request_id=req, uniq_key=uniq, retry_times=retry, start_ts=S(start),
             end_ts=None if end is None else S(end), success=success, topic="T", broker="b", queue_id=0,
             client_host=host, client_id=client)
    return tuple(r[c] for c in D.TABLE.columns)


def sg(retry_max: int, *, group: str = "G") -> tuple:
    return ("c", "b", S(0), group, retry_max, 1, True, False, False, 15, None, "f", False)


def out(qo: int, uniq: str, times: int, mx: int | None, reason: str, last: float | None, eta: float | None, *,
        topic: str = "T", group: str = "G", client: str = "") -> tuple:
    return ("c", group, client, topic, "b", 0, qo, uniq, f"order-{uniq}", times, mx, reason,
            None if last is None else S(last), None if eta is None else S(eta), None)


ETA_FROM_3 = dlq.remaining_delay_ms(3, 16) / 1000

CASES = [
    pytest.param(
        [off(8)], [msg(7, "K"), msg(0, "K", topic="%DLQ%G", reconsume=17, props={"MAX_RECONSUME_TIMES": "16"}, store=3100)],
        [dl("d0", "K", 0, 10, 11, False), dl("d16", "K", 16, 3000, 3001, False)], [],
        [out(7, "K", 16, 16, "IN_DLQ", 3000, 3100)],
        id="a_message_that_failed_every_time_is_in_dlq_at_its_original_offset_with_16_retries"),
    pytest.param(
        [off(8)], [msg(3, "Z", topic="%DLQ%G", reconsume=6)], [], [sg(5)],
        [out(3, "Z", 5, 5, "IN_DLQ", None, 0, topic="%DLQ%G")],
        id="an_unresolvable_dlq_record_is_reported_where_it_is_with_the_group_retry_max"),
    pytest.param(
        [off(8)], [msg(7, "K")] + [msg(r, "K", topic="%RETRY%G", reconsume=r) for r in (1, 2, 3)],
        [dl(f"d{r}", "K", r, 100 * r, 100 * r + 1, False) for r in range(4)], [],
        [out(7, "K", 3, 16, "RETRYING", 300, 301 + ETA_FROM_3)],
        id="three_failed_retries_is_retrying_with_the_eta_of_the_remaining_delay_levels"),
    pytest.param(
        [off(8)], [msg(2, "K", topic="%RETRY%G", reconsume=2), msg(5, "K", topic="%RETRY%G", reconsume=3),
                   msg(9, "K", topic="%RETRY%H", reconsume=5)],
        [dl(f"d{r}", "K", r, 100 * r, 100 * r + 1, False) for r in range(4)], [],
        [out(5, "K", 3, 16, "RETRYING", 300, 301 + ETA_FROM_3, topic="%RETRY%G")],
        id="retrying_without_an_original_copy_is_reported_at_the_groups_newest_retry_copy"),
    pytest.param(
        [off(8)], [],
        [dl(f"d{r}", "K", r, 100 * r, 100 * r + 1, False) for r in range(4)], [],
        [],
        id="retrying_without_any_stored_copy_has_nowhere_to_be_reported"),
    pytest.param(
        [off(8)], [msg(7, "K"), msg(6, "J")],
        [dl(f"d{r}", "K", r, 100 * r, 100 * r + 1, False) for r in range(3)]
        + [dl("j0", "J", 0, 5, 6, False), dl("j5", "J", 5, 500, 501, True)], [],
        [],
        id="two_retries_or_an_eventual_success_is_not_retrying"),
    pytest.param(
        [off(32)], [msg(32, "K32")], [dl("h", "K32", 0, T_S - 15 * 60, None, None)], [],
        [out(32, "K32", 0, 16, "BLOCKING_COMMIT", T_S - 15 * 60, None)],
        id="the_message_at_the_committed_offset_in_flight_for_15_minutes_is_blocking"),
    pytest.param(
        [off(32)], [msg(32, "K32")],
        [dl("h", "K32", 0, T_S - 14 * 60, None, None), dl("g", "K32", 0, T_S - 20 * 60, T_S - 19 * 60, True)], [],
        [],
        id="in_flight_for_less_than_15_minutes_or_finished_is_not_blocking"),
    pytest.param(
        [off(5, group="GB", client=C5), off(5, group="GB", client=C6)], [msg(3, "K3")],
        [dl("x1", "K3", 0, 10, 11, False, group="GB", client=C5, host="10.0.0.5"),
         dl("x2", "K3", 0, 20, 21, False, group="GB", client=C5, host="10.0.0.5"),
         dl("y1", "K3", 0, 10, 11, True, group="GB", client=C6, host="10.0.0.6")], [],
        [out(3, "K3", 0, 0, "BROADCAST_DROPPED", 20, None, group="GB", client=C5)],
        id="a_broadcast_failure_is_dropped_per_client_at_its_latest_attempt_with_0_of_0_reconsumes"),
]


@pytest.mark.parametrize("offsets, messages, deliveries, groups, expected", CASES)
def test_dlq_candidates(spark, offsets, messages, deliveries, groups, expected) -> None:  # noqa: ANN001
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA),
                                     spark.createDataFrame([("c", "b", S(T_S), "T", 0, 0, 100)], QB.SCHEMA), as_of=AS_OF)
    actual = dlq.dlq_candidates(series, spark.createDataFrame(deliveries, D.SCHEMA),
                                spark.createDataFrame(messages, M.SCHEMA), spark.createDataFrame(groups, SG.SCHEMA),
                                as_of=AS_OF)
    assertDataFrameEqual(actual, spark.createDataFrame(expected, REPORT))


def _candidates(spark, offsets: list, bounds: list, messages: list, deliveries: list, groups: list):  # noqa: ANN001, ANN202
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA), spark.createDataFrame(bounds, QB.SCHEMA),
                                     as_of=AS_OF)
    return dlq.dlq_candidates(series, spark.createDataFrame(deliveries, D.SCHEMA), spark.createDataFrame(messages, M.SCHEMA),
                              spark.createDataFrame(groups, SG.SCHEMA), as_of=AS_OF)


def test_blocking_commit_is_judged_at_the_newest_snapshot_even_without_queue_bounds(spark) -> None:  # noqa: ANN001
    """Snapshots at 00:30 (with consumequeue) and 01:00 (without): C = 32 in both. A delivery of offset 32 in flight
    since 00:40 has pinned the commit for 20 min at 01:00, the newest snapshot; at 00:30 it had not started. The
    bounds-based outputs skip 01:00 (rule 5); BLOCKING_COMMIT needs only C_S and t_S (rule 20)."""
    early = T_S - 30 * 60
    offsets = [("c", "b", S(early), "G", "T", 0, "", 32, False, "f", False), off(32)]
    got = _candidates(spark, offsets, [("c", "b", S(early), "T", 0, 0, 100)], [msg(32, "K32")],
                      [dl("h", "K32", 0, T_S - 20 * 60, None, None)], [])
    assertDataFrameEqual(got, spark.createDataFrame([out(32, "K32", 0, 16, "BLOCKING_COMMIT", T_S - 20 * 60, None)],
                                                    REPORT))


def test_every_record_of_a_dlq_topic_is_in_dlq_even_of_a_group_known_from_nothing_else(spark) -> None:  # noqa: ANN001
    """%DLQ%GX holds a record, and GX has no committed offset, no subscriptionGroup.json entry and no trace."""
    got = _candidates(spark, [off(8)], [("c", "b", S(T_S), "T", 0, 0, 100)],
                      [msg(7, "K"), msg(0, "K", topic="%DLQ%GX", reconsume=17, store=3100)], [], [])
    assertDataFrameEqual(got, spark.createDataFrame([out(7, "K", 16, 16, "IN_DLQ", None, 3100, group="GX")], REPORT))


def test_the_full_retry_schedule_takes_about_4h46m() -> None:
    """Levels 3..18 (10s + 30s + 1m + ... + 1h + 2h): 4 h 45 min 40 s before the 17th delivery fails."""
    assert dlq.remaining_delay_ms(0, 16) == (4 * 3600 + 45 * 60 + 40) * 1000


@pytest.mark.parametrize("retries, max_retries", [(0, 16), (3, 16), (15, 16), (16, 16), (17, 16), (0, 1), (2, 20),
                                                  (16, 20), (0, 0)],
                         ids=lambda v: str(v))
def test_the_delay_sum_column_equals_the_plain_python_rule(spark, retries, max_retries) -> None:  # noqa: ANN001
    df = spark.createDataFrame([(retries, max_retries)], "r int, m int")
    got = df.select(dlq.remaining_delay_ms_col(F.col("r"), F.col("m")).alias("ms"))
    assertDataFrameEqual(got, spark.createDataFrame([(dlq.remaining_delay_ms(retries, max_retries),)], "ms long"))


def test_a_retry_copy_hung_at_the_retry_queues_committed_offset_is_blocking_at_its_original(spark) -> None:  # noqa: ANN001
    """%RETRY%G queue 0 is committed at 12, the retry copy of K7 (the original is T offset 7); its 14th retry has been
    in flight for 20 min: it pins the retry queue as an original pins its topic's (formats §3: a send-back that
    failed is consumed again locally). Reported at the original (spec §5), beside its RETRYING row."""
    start = T_S - 20 * 60
    offsets = [("c", "b", S(T_S), "G", "%RETRY%G", 0, "", 12, False, "f", False)]
    got = _candidates(spark, offsets, [("c", "b", S(T_S), "%RETRY%G", 0, 0, 13)],
                      [msg(7, "K7"), msg(12, "K7", topic="%RETRY%G", reconsume=14)],
                      [dl("d0", "K7", 0, 10, 11, False), dl("d14", "K7", 14, start, None, None)], [])
    assertDataFrameEqual(got, spark.createDataFrame([
        out(7, "K7", 14, 16, "BLOCKING_COMMIT", start, None),
        out(7, "K7", 14, 16, "RETRYING", start, start + dlq.remaining_delay_ms(14, 16) / 1000)], REPORT))


def test_a_broadcast_clients_hung_delivery_blocks_that_clients_commit_only(spark) -> None:  # noqa: ANN001
    """GB's clients C5 and C6 are both at 3: C5's delivery of it has been in flight for 20 min, C6's for 10 (not yet
    blocking). Each client's offsets.json is pinned by its own ProcessQueue; broadcast never retries (0 of 0). GB's
    broker-side entry (no client) is not a client's progress."""
    offsets = [off(3, group="GB", client=C5), off(3, group="GB", client=C6), off(3, group="GB")]
    got = _candidates(spark, offsets, [("c", "b", S(T_S), "T", 0, 0, 100)], [msg(3, "K3")],
                      [dl("x", "K3", 0, T_S - 20 * 60, None, None, group="GB", client=C5, host="10.0.0.5"),
                       dl("y", "K3", 0, T_S - 10 * 60, None, None, group="GB", client=C6, host="10.0.0.6")], [])
    assertDataFrameEqual(got, spark.createDataFrame(
        [out(3, "K3", 0, 0, "BLOCKING_COMMIT", T_S - 20 * 60, None, group="GB", client=C5)], REPORT))


def test_retry_max_times_is_the_brokers_own_where_it_has_the_group(spark) -> None:  # noqa: ANN001
    """subscriptionGroup.json of broker b says 16, of broker x (newer) 4: the message is on b, whose broker decides
    its send-backs (formats §5). A group only broker x knows takes x's value."""
    def sg_on(broker: str, at: float, retry_max: int, group: str = "G") -> tuple:
        return ("c", broker, S(at), group, retry_max, 1, True, False, False, 15, None, "f", False)

    got = _candidates(spark, [off(8), off(8, group="H")], [("c", "b", S(T_S), "T", 0, 0, 100)],
                      [msg(7, "K"), msg(6, "J")] + [msg(r, "K", topic="%RETRY%G", reconsume=r) for r in (1, 2, 3)]
                      + [msg(r, "J", topic="%RETRY%H", reconsume=r) for r in (1, 2, 3)],
                      [dl(f"d{r}", "K", r, 100 * r, 100 * r + 1, False) for r in range(4)]
                      + [dl(f"h{r}", "J", r, 100 * r, 100 * r + 1, False, group="H") for r in range(4)],
                      [sg_on("b", 0, 16), sg_on("x", 60, 4), sg_on("x", 60, 5, group="H")])
    assertDataFrameEqual(got, spark.createDataFrame([
        out(7, "K", 3, 16, "RETRYING", 300, 301 + ETA_FROM_3),
        out(6, "J", 3, 5, "RETRYING", 300, 301 + dlq.remaining_delay_ms(3, 5) / 1000, group="H")], REPORT))


def test_the_latest_subscriptions_and_the_later_rows_answer_as_the_whole_table(spark) -> None:  # noqa: ANN001
    """What a scheduled run carries (gold/subscription_latest, jobs.reconcile.offset_state.subscriptions and with_later_subscriptions): at P (60 s)
    each (group, broker)'s latest row with a retryMaxTimes: G on b from 50 s (its 60 s row has none), G on x from 10 s
    (x's later snapshot no longer lists G), H on b from 60 s. With the rows after P, retry_max_times at P and later
    equals the whole table's, the any-broker fallback included."""
    def sg_on(broker: str, at: float, retry_max: int | None, group: str = "G") -> tuple:
        return ("c", broker, S(at), group, retry_max, 1, True, False, False, 15, None, "f", False)

    rows = [sg_on("b", 0, 16), sg_on("b", 50, 8), sg_on("b", 60, None), sg_on("x", 10, 4), sg_on("x", 30, 3, "H"),
            sg_on("b", 60, 6, "H"), sg_on("b", 90, 2), sg_on("x", 120, 7, "H"), sg_on("b", 200, 1)]
    whole = spark.createDataFrame(rows, SG.SCHEMA)
    p = S(60)
    latest = dlq.latest_subscriptions(whole, as_of=p)
    naive = [S(t).replace(tzinfo=None) for t in (50, 60, 10, 30)]  # collected as naive UTC
    assert sorted(tuple(r) for r in latest.collect()) == [
        ("c", "b", naive[0], "G", 8, False), ("c", "b", naive[1], "H", 6, False), ("c", "x", naive[2], "G", 4, False),
        ("c", "x", naive[3], "H", 3, False)]
    from jobs.reconcile.offset_state import with_later_subscriptions

    carried = with_later_subscriptions(latest, whole, p)
    for at in (60, 90, 120, 200):
        got = sorted(tuple(r) for r in dlq.retry_max_times(carried, as_of=S(at)).collect())
        assert got == sorted(tuple(r) for r in dlq.retry_max_times(whole, as_of=S(at)).collect()), at
    assert sorted(tuple(r) for r in dlq.retry_max_times(carried, as_of=S(120)).collect()) == [
        ("c", "G", "", 2), ("c", "G", "b", 2), ("c", "G", "x", 4), ("c", "H", "", 7), ("c", "H", "b", 6),
        ("c", "H", "x", 7)]
