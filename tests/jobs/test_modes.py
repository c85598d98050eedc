"""Consume modes (spec §4.1, docs/semantics.md rule 25) and the orderly rules: ORDERLY_BLOCKED, no RETRYING."""
from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.rules import dlq, modes, snapshots, status
from schemas import consumer_offsets as CO
from schemas import deliveries as D
from schemas import messages as M
from schemas import queue_bounds as QB
from schemas import subscription_groups as SG
from tests.jobs.test_dlq import AS_OF, C5, REPORT, T_S, S, dl, msg, off, out

ORDERLY_MAX = 2147483647


def sg_flag(orderly: bool, *, group: str = "G", retry_max: int = 5) -> tuple:
    return ("c", "b", S(0), group, retry_max, 1, True, False, orderly, 15, None, "f", False)


def _frames(spark, offsets, messages, deliveries, groups):  # noqa: ANN001, ANN202
    series = snapshots.offset_series(spark.createDataFrame(offsets, CO.SCHEMA),
                                     spark.createDataFrame([("c", "b", S(T_S), "T", 0, 0, 100),
                                                            ("c", "b", S(T_S), "%RETRY%G", 0, 0, 100)], QB.SCHEMA),
                                     as_of=AS_OF)
    return (series, spark.createDataFrame(deliveries, D.SCHEMA), spark.createDataFrame(messages, M.SCHEMA),
            spark.createDataFrame(groups, SG.SCHEMA))


EVIDENCE = [
    pytest.param([msg(7, "K"), msg(1, "K", topic="%RETRY%G", reconsume=1)],
                 [dl("a", "K", 0, 10, 11, False), dl("b", "K", 1, 20, 21, True)], [],
                 id="a_retry_delivered_from_its_retry_copy_is_concurrent"),
    pytest.param([msg(7, "K"), msg(1, "K", topic="SCHEDULE_TOPIC_XXXX", reconsume=1)],
                 [dl("a", "K", 0, 10, 11, False), dl("b", "K", 1, 20, 21, True)], [],
                 id="a_copy_waiting_in_the_schedule_topic_counts_as_the_copy"),
    pytest.param([msg(7, "K"), msg(1, "K", topic="%RETRY%G", reconsume=1)],
                 [dl("a", "K", 0, 10, 11, False), dl("b", "K", 1, 20, 21, False), dl("c", "K", 2, 22, 23, True)],
                 [("c", "G", "T")],
                 id="retry_2_with_no_copy_of_reconsume_times_2_is_a_local_redelivery_of_the_originals_topic"),
    pytest.param([msg(7, "K"), msg(1, "K", topic="%RETRY%H", reconsume=1)],
                 [dl("a", "K", 0, 10, 11, False), dl("b", "K", 1, 20, 21, True)], [("c", "G", "T")],
                 id="another_groups_retry_copy_is_not_this_groups"),
    pytest.param([msg(1, "K", topic="%RETRY%G", reconsume=2)],
                 [dl("b", "K", 1, 20, 21, True)], [],
                 id="no_original_copy_no_topic_to_name"),
]


@pytest.mark.parametrize("messages, deliveries, expected", EVIDENCE)
def test_local_redeliveries(spark, messages, deliveries, expected) -> None:  # noqa: ANN001
    got = modes.local_redeliveries(spark.createDataFrame(deliveries, D.SCHEMA), spark.createDataFrame(messages, M.SCHEMA))
    assertDataFrameEqual(got, spark.createDataFrame(expected, "cluster string, consumer_group string, topic string"))


def _failing(n: int, *, success_at: int | None = None) -> list[tuple]:
    """n deliveries of K at offset 8, one a second, retryTimes 0..n-1 (an orderly client's local retries)."""
    return [dl(f"d{r}", "K", r, 100 + r, 100.5 + r, r == success_at) for r in range(n)]


BLOCKED = [
    pytest.param([], _failing(3), [out(8, "K", 2, ORDERLY_MAX, "ORDERLY_BLOCKED", 102, None)],
                 id="a_4x_orderly_head_delivered_3_times_never_successfully_is_blocked_with_max_integer_max_value"),
    pytest.param([sg_flag(True)], _failing(3), [out(8, "K", 2, 5, "ORDERLY_BLOCKED", 102, None)],
                 id="a_fifo_group_flag_gives_its_retry_max_times"),
    pytest.param([sg_flag(True)], _failing(2), [],
                 id="two_deliveries_are_not_blocked_yet"),
    pytest.param([], _failing(4, success_at=3), [],
                 id="a_successful_delivery_is_not_blocked"),
    pytest.param([sg_flag(False)], _failing(5)[:1], [],
                 id="one_failed_delivery_without_the_flag_is_not_even_orderly"),
]


@pytest.mark.parametrize("groups, deliveries, expected", BLOCKED)
def test_orderly_blocked_at_the_committed_offset_and_never_retrying(spark, groups, deliveries, expected) -> None:  # noqa: ANN001
    series, d, m, sg = _frames(spark, [off(8)], [msg(8, "K")], deliveries, groups)
    got = dlq.dlq_candidates(series, d, m, sg, as_of=AS_OF)
    # every case has >= 3 retries of K where it is blocked: never also RETRYING with a delay-level ETA
    assertDataFrameEqual(got, spark.createDataFrame(expected, REPORT))


def test_a_concurrent_group_with_the_same_retries_and_copies_is_retrying_not_blocked(spark) -> None:  # noqa: ANN001
    copies = [msg(r, "K", topic="%RETRY%G", reconsume=r) for r in (1, 2, 3)]
    series, d, m, sg = _frames(spark, [off(8)], [msg(8, "K"), *copies], _failing(4), [])
    got = dlq.dlq_candidates(series, d, m, sg, as_of=AS_OF)
    assertDataFrameEqual(got.select("reason", "reconsume_times", "max_reconsume_times"),
                         spark.createDataFrame([("RETRYING", 3, 16)], "reason string, reconsume_times int, "
                                                                      "max_reconsume_times int"))


def test_consumer_status_names_each_pairs_mode(spark) -> None:  # noqa: ANN001
    """G: local redeliveries on T (its %RETRY%G stays concurrent); F: the FIFO flag (every topic); B: broadcast."""
    offsets = [off(8), ("c", "b", S(T_S), "G", "%RETRY%G", 0, "", 0, True, "f", False), off(8, group="F"),
               off(8, group="B", client=C5)]
    series, d, m, sg = _frames(spark, offsets, [msg(8, "K")], _failing(3), [sg_flag(True, group="F")])
    ev = modes.local_redeliveries(snapshots.deliveries_in_window(d, series, as_of=AS_OF), m)
    rows = modes.mode_rows(series, ev, modes.fifo_groups(sg, as_of=AS_OF))
    got = status.consumer_status(series, m, modes=rows).select("consumer_group", "client_id", "topic", "consume_mode",
                                                               "inflight")
    assertDataFrameEqual(got, spark.createDataFrame(
        [("G", "", "T", "ORDERLY", 0), ("G", "", "%RETRY%G", "CONCURRENT", 0), ("F", "", "T", "ORDERLY", 0),
         ("B", C5, "T", "BROADCAST", 0)],
        "consumer_group string, client_id string, topic string, consume_mode string, inflight long"))
