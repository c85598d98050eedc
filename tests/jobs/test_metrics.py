"""Metrics: a run's figures as Prometheus samples (exact), pushed to a real Pushgateway on 127.0.0.1 and read back.

`queue2-offset32` (seed 7) as of 00:10: queue 2 of TopicTest is pinned at 32 (lag 115, time lag 460 s, STALL),
queues 0, 1, 3 lag by one message (WARN); as of 00:20 queue 2 lags 265 (1060 s) and offset 32 is BLOCKING_COMMIT.
"""
from __future__ import annotations

import pathlib
import urllib.request

import pandas as pd
import pytest

from alert_servers import pushgateway  # noqa: F401 - a fixture
from jobs.ops import metrics

QUEUE = ["C", "G", "", "T", "b"]


def _labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def test_samples_of_one_queue_and_its_group() -> None:
    status = pd.DataFrame([(*QUEUE, 2, 115, 110, 460, "STALL", "ORDERLY")],
                          columns=metrics.QUEUE + ["lag", "consumable_lag", "time_lag_s", "status", "consume_mode"])
    # 10 offsets of TRACE evidence, 5 of REWIND, 3 of them the same: 12 offsets (issue 38: each once)
    duplicated = pd.DataFrame([(*QUEUE, 2, 100, 109), (*QUEUE, 2, 107, 111)],
                              columns=metrics.QUEUE + ["start_offset", "end_offset"])
    unconsumed = pd.DataFrame([(*QUEUE, 2, "BACKLOG", 115), (*QUEUE, 2, "EXPIRED", 7)],
                              columns=metrics.QUEUE + ["kind", "messages"])
    dlq = pd.DataFrame([(*QUEUE, 2, "BLOCKING_COMMIT"), (*QUEUE, 2, "IN_DLQ"), (*QUEUE, 2, "IN_DLQ")],
                       columns=metrics.QUEUE + ["reason"])
    queues = metrics.queue_figures(status, duplicated, unconsumed, dlq)
    got = metrics.samples(queues, {"gold/consumer_status": {"success": True}, "gold/dlq_candidates": {"success": False}},
                          run_id="r1", as_of_s=1767571800.0)
    q = dict(broker="b", clientid="", cluster="C", group="G", queueid="2", topic="T")
    g = dict(cluster="C", group="G")
    expected = []
    for prefix, lab in (("rocketmq_recon_", q), ("rocketmq_recon_group_", g)):
        expected += [
            (prefix + "consumable_lag", _labels(**lab), 110.0),
            *[(prefix + "dlq_candidates", _labels(**lab, reason=r), v)
              for r, v in (("BLOCKING_COMMIT", 1.0), ("BROADCAST_DROPPED", 0.0), ("IN_DLQ", 2.0),
                           ("ORDERLY_BLOCKED", 0.0), ("RETRYING", 0.0))],
            (prefix + "duplicated_messages", _labels(**lab), 12.0),
            (prefix + "expired_messages", _labels(**lab), 7.0),
            (prefix + "lag", _labels(**lab), 115.0),
            *[(prefix + "status", _labels(**lab, status=s), float(s == "STALL")) for s in ("OK", "REWIND", "STALL",
                                                                                          "UNKNOWN", "WARN")],
            (prefix + "time_lag_seconds", _labels(**lab), 460.0),
            *[(prefix + "unconsumed_messages", _labels(**lab, kind=k), v)
              for k, v in (("BACKLOG", 115.0), ("BROADCAST_DROPPED", 0.0), ("EXPIRED", 7.0), ("POP_LOST", 0.0),
                           ("SKIPPED", 0.0))],
        ]
    expected += [("rocketmq_recon_consume_mode", _labels(**q, mode="ORDERLY"), 1.0),
                 ("rocketmq_recon_quality_pass", (("table", "gold/consumer_status"),), 1.0),
                 ("rocketmq_recon_quality_pass", (("table", "gold/dlq_candidates"),), 0.0),
                 ("rocketmq_recon_run_as_of_timestamp_seconds", (), 1767571800.0),
                 ("rocketmq_recon_run_info", (("run_id", "r1"),), 1.0)]
    assert got == sorted(expected)


def test_a_group_sums_its_queues_and_takes_the_worst_status_and_largest_time_lag() -> None:
    status = pd.DataFrame([(*QUEUE, 0, 1, 1, 3, "WARN"), (*QUEUE, 1, 0, 0, 0, "OK"), (*QUEUE, 2, 115, 110, 460, "STALL")],
                          columns=metrics.QUEUE + ["lag", "consumable_lag", "time_lag_s", "status"])
    empty = {c: [] for c in metrics.QUEUE}
    queues = metrics.queue_figures(status, pd.DataFrame({**empty, "start_offset": [], "end_offset": []}),
                                   pd.DataFrame({**empty, "kind": [], "messages": []}),
                                   pd.DataFrame({**empty, "reason": []}))
    groups = metrics.group_figures(queues)
    assert groups[["cluster", "consumer_group", "lag", "consumable_lag", "time_lag_s", "status"]].values.tolist() == [
        ["C", "G", 116, 111, 460, "STALL"]]


def test_an_unknown_queue_has_its_state_set_and_no_lag_and_a_group_is_unknown_only_when_every_queue_is() -> None:
    """Spec §4.2: a queue without bounds at the newest snapshot is UNKNOWN with null lags: its state set says so, no
    lag series is sent for it, and it changes its group's status only when every queue of the group is UNKNOWN."""
    cols = metrics.QUEUE + ["lag", "consumable_lag", "time_lag_s", "status"]
    empty = {c: [] for c in metrics.QUEUE}
    rest = (pd.DataFrame({**empty, "start_offset": [], "end_offset": []}),
            pd.DataFrame({**empty, "kind": [], "messages": []}), pd.DataFrame({**empty, "reason": []}))
    mixed = metrics.queue_figures(pd.DataFrame([(*QUEUE, 0, None, None, None, "UNKNOWN"), (*QUEUE, 1, 4, 4, 9, "OK")],
                                               columns=cols), *rest)
    assert metrics.group_figures(mixed)[["lag", "time_lag_s", "status"]].values.tolist() == [[4, 9, "OK"]]
    alone = metrics.queue_figures(pd.DataFrame([(*QUEUE, 0, None, None, None, "UNKNOWN")], columns=cols), *rest)
    assert metrics.group_figures(alone)["status"].tolist() == ["UNKNOWN"]
    names = {c: c for c in metrics.QUEUE}
    samples = {(n, dict(lb).get("status")): v for n, lb, v in metrics._figure_samples(  # noqa: SLF001
        alone.to_dict("records"), names, "p_") if n in ("p_status", "p_lag", "p_time_lag_seconds")}
    assert samples == {("p_status", s): float(s == "UNKNOWN") for s in ("UNKNOWN", "OK", "WARN", "STALL", "REWIND")}


def test_metrics_are_off_without_a_url(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv(metrics.URL_ENV, raising=False)
    assert metrics.run(str(tmp_path / "no-lake"), "any") == {"pushed": {}}


# ---------------------------------------------------------------------------------- a real Pushgateway


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> str:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    root = tmp_path_factory.mktemp("metrics")
    simulate.run("queue2-offset32", str(root / "landing"), seed=7)
    ingest.run(str(root / "landing"), str(root / "lake"))
    for minute in ("10", "20"):
        reconcile.run(str(root / "lake"), str(root / "reports"), as_of=f"2026-01-05T00:{minute}:00Z")
    return str(root / "lake")


def read_back(url: str) -> dict[tuple[str, tuple], float]:
    """Every ``rocketmq_recon_*`` sample the Pushgateway serves, keyed by name and labels (without job/instance)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("rocketmq_recon_"):
                assert (s.labels["job"], s.labels["instance"]) == ("rmq_recon", "")
                labels = {k: v for k, v in s.labels.items() if k not in ("job", "instance")}
                out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def _q(queue: int, topic: str = "TopicTest", **extra: str) -> tuple:
    return tuple(sorted(dict(broker="broker-a", clientid="", cluster="DefaultCluster", group="GID_recon",
                             queueid=str(queue), topic=topic, **extra).items()))


G = tuple(sorted(dict(cluster="DefaultCluster", group="GID_recon").items()))


@pytest.mark.integration
def test_push_reads_back_from_a_real_pushgateway_and_a_later_run_replaces_it(runs: str, pushgateway: str) -> None:
    quality = {"gold/consumer_status": {"success": True, "failed": []},
               "gold/dlq_candidates": {"success": False, "failed": ["expect_column_values_to_not_be_null(reason)"]}}
    assert metrics.run(runs, "asof-20260105T001000Z", url=pushgateway, quality=quality) == {
        "pushed": {"DefaultCluster": 129}}  # 5 queues x 21 (a mode each) + the group 20 + 2 quality + 2 run
    got = read_back(pushgateway)
    assert len(got) == 129
    assert {q: got[("rocketmq_recon_lag", _q(q))] for q in range(4)} == {0: 1.0, 1: 1.0, 2: 115.0, 3: 1.0}
    assert got[("rocketmq_recon_lag", _q(0, "%RETRY%GID_recon"))] == 0.0
    assert {q: got[("rocketmq_recon_time_lag_seconds", _q(q))] for q in range(4)} == {0: 2.0, 1: 1.0, 2: 460.0, 3: 3.0}
    assert {q: got[("rocketmq_recon_consumable_lag", _q(q))] for q in range(4)} == {0: 1.0, 1: 1.0, 2: 115.0, 3: 1.0}
    assert {s: got[("rocketmq_recon_status", _q(2, status=s))] for s in metrics.STATUSES} == {
        "UNKNOWN": 0.0, "OK": 0.0, "WARN": 0.0, "STALL": 1.0, "REWIND": 0.0}
    assert [got[("rocketmq_recon_status", _q(q, status="WARN"))] for q in range(4)] == [1.0, 1.0, 0.0, 1.0]
    assert {q: got[("rocketmq_recon_unconsumed_messages", _q(q, kind="BACKLOG"))] for q in range(4)} == {
        0: 1.0, 1: 1.0, 2: 115.0, 3: 1.0}
    assert got[("rocketmq_recon_dlq_candidates", _q(2, reason="BLOCKING_COMMIT"))] == 0.0
    assert (got[("rocketmq_recon_group_lag", G)], got[("rocketmq_recon_group_time_lag_seconds", G)],
            got[("rocketmq_recon_group_status", G + (("status", "STALL"),))]) == (118.0, 460.0, 1.0)
    assert [got[("rocketmq_recon_quality_pass", (("cluster", "DefaultCluster"), ("table", t)))]
            for t in ("gold/consumer_status", "gold/dlq_candidates")] == [1.0, 0.0]
    assert got[("rocketmq_recon_run_as_of_timestamp_seconds", (("cluster", "DefaultCluster"),))] == 1767571800.0
    assert got[("rocketmq_recon_run_info", (("cluster", "DefaultCluster"), ("run_id", "asof-20260105T001000Z")))] == 1

    # The next run replaces the cluster's group: its own figures, no series of the run before (run_info of 00:10).
    metrics.run(runs, "asof-20260105T002000Z", url=pushgateway, quality=quality)
    later = read_back(pushgateway)
    assert [k for k in later if k[0] == "rocketmq_recon_run_info"] == [
        ("rocketmq_recon_run_info", (("cluster", "DefaultCluster"), ("run_id", "asof-20260105T002000Z")))]
    assert (later[("rocketmq_recon_lag", _q(2))], later[("rocketmq_recon_time_lag_seconds", _q(2))],
            later[("rocketmq_recon_dlq_candidates", _q(2, reason="BLOCKING_COMMIT"))],
            later[("rocketmq_recon_group_dlq_candidates", G + (("reason", "BLOCKING_COMMIT"),))]) == (
        265.0, 1060.0, 1.0, 1.0)
    # A re-run of the same run pushes the same samples.
    metrics.run(runs, "asof-20260105T002000Z", url=pushgateway, quality=quality)
    assert read_back(pushgateway) == later


@pytest.mark.integration
def test_an_unreachable_pushgateway_fails_in_one_line(runs: str) -> None:
    from alert_servers import free_port

    port = free_port()  # nothing listens there
    with pytest.raises(OSError) as failed:
        metrics.run(runs, "asof-20260105T001000Z", url=f"http://127.0.0.1:{port}")
    assert str(failed.value) == (
        f"metrics: Pushgateway http://127.0.0.1:{port} did not take cluster DefaultCluster's 127 samples "
        "(<urlopen error [Errno 111] Connection refused>); check RMQ_RECON_PUSHGATEWAY_URL")
