"""Alerts: what changed since the previous run (exact rows), and one message per run through a real webhook server and
a real SMTP server on 127.0.0.1, none for a re-run.

`queue2-offset32` (seed 7), reconciled as of 00:05, 00:10, 00:15 and 00:20: at 00:05 every queue of GID_recon is OK;
at 00:10 queue 2 of TopicTest has been pinned at offset 32 for two snapshots (STALL) and queues 0, 1 and 3 have
lag that never decreased (WARN); 00:15 is the same; at 00:20 the message at 32 has hung for 15 minutes:
BLOCKING_COMMIT (spec §7).
"""
from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import pandas as pd
import pytest

from alert_servers import Mailbox, Webhook, servers  # noqa: F401 - a fixture
from jobs.ops import alerts
from jobs.reconcile import gold_runs
from jobs.ops.notifiers import webhook_target

Q = ["DefaultCluster", "G", "", "T", "broker-a"]


def status_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=alerts.STATUS_COLUMNS)


def dlq_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=alerts.DLQ_KEY)


def expired_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=alerts.EXPIRED_COLUMNS)


# --------------------------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize("previous, current, expected", [
    # 1. OK -> STALL enters; OK -> OK does not
    ([(*Q, 0, "OK"), (*Q, 1, "OK")], [(*Q, 0, "STALL"), (*Q, 1, "OK")], [(*Q, 0, "STALL", "OK")]),
    # 2. STALL -> STALL is not new
    ([(*Q, 0, "STALL")], [(*Q, 0, "STALL")], []),
    # 3. WARN -> STALL and STALL -> REWIND are new statuses; STALL -> WARN too (the queue moved, but still lags)
    ([(*Q, 0, "WARN"), (*Q, 1, "STALL"), (*Q, 2, "STALL")], [(*Q, 0, "STALL"), (*Q, 1, "REWIND"), (*Q, 2, "WARN")],
     [(*Q, 0, "STALL", "WARN"), (*Q, 1, "REWIND", "STALL"), (*Q, 2, "WARN", "STALL")]),
    # 4. a queue the previous run did not report enters with no previous status
    ([], [(*Q, 5, "WARN")], [(*Q, 5, "WARN", None)]),
    # 5. recovering (STALL -> OK) is not worth a message
    ([(*Q, 0, "STALL")], [(*Q, 0, "OK")], []),
], ids=["ok_to_stall_enters", "stall_stays_is_not_new", "a_different_alert_status_is_new",
        "a_new_queue_enters_from_nothing", "recovery_is_quiet"])
def test_queues_entering(previous: list[tuple], current: list[tuple], expected: list[tuple]) -> None:
    got = alerts.queues_entering(status_frame(previous), status_frame(current))
    assert [tuple(r) for r in got.itertuples(index=False)] == expected


def test_a_group_enters_its_worst_queue_status_once() -> None:
    """Group G goes OK -> STALL (worst of STALL, WARN); H stays WARN; K goes STALL -> WARN (a change, still alerting)."""
    previous = status_frame([(*Q, 0, "OK"), (*Q, 1, "OK"), ("DefaultCluster", "H", "", "T", "broker-a", 0, "WARN"),
                             ("DefaultCluster", "K", "", "T", "broker-a", 0, "STALL")])
    current = status_frame([(*Q, 0, "STALL"), (*Q, 1, "WARN"), ("DefaultCluster", "H", "", "T", "broker-a", 0, "WARN"),
                            ("DefaultCluster", "K", "", "T", "broker-a", 0, "WARN")])
    got = alerts.groups_entering(previous, current)
    assert [tuple(r) for r in got.itertuples(index=False)] == [
        ("DefaultCluster", "G", "STALL", "OK"), ("DefaultCluster", "K", "WARN", "STALL")]


def test_an_unknown_queue_does_not_hide_its_groups_status() -> None:
    """Spec §4.2: a queue without bounds (UNKNOWN) ranks below OK. G was OK with one queue UNKNOWN and goes WARN: the
    message says "was OK"; U has only UNKNOWN queues and is UNKNOWN (no alert)."""
    u = ("DefaultCluster", "U", "", "T", "broker-a", 0)
    previous = status_frame([(*Q, 1, "OK"), (*Q, 0, "UNKNOWN"), (*u, "UNKNOWN")])
    current = status_frame([(*Q, 0, "UNKNOWN"), (*Q, 1, "WARN"), (*u, "UNKNOWN")])
    assert [tuple(r) for r in alerts.group_status(previous).itertuples(index=False)] == [
        ("DefaultCluster", "G", "OK"), ("DefaultCluster", "U", "UNKNOWN")]
    assert [tuple(r) for r in alerts.groups_entering(previous, current).itertuples(index=False)] == [
        ("DefaultCluster", "G", "WARN", "OK")]


def test_new_dlq_rows_are_in_dlq_and_blocking_commit_rows_the_previous_run_did_not_have() -> None:
    previous = dlq_frame([(*Q, 0, 32, "U32", "BLOCKING_COMMIT"), (*Q, 1, 7, "U7", "RETRYING")])
    current = dlq_frame([(*Q, 0, 32, "U32", "BLOCKING_COMMIT"), (*Q, 1, 7, "U7", "IN_DLQ"),
                         (*Q, 1, 9, "U9", "RETRYING"), (*Q, 2, 40, "U40", "BLOCKING_COMMIT")])
    got = alerts.new_dlq_rows(previous, current)
    assert [tuple(r) for r in got.itertuples(index=False)] == [
        (*Q, 1, 7, "U7", "IN_DLQ"), (*Q, 2, 40, "U40", "BLOCKING_COMMIT")]


@pytest.mark.parametrize("previous, current, expected", [
    # a range that grew from [0, 99] to [0, 149]: 50 new offsets
    ([(*Q, 0, 0, 99)], [(*Q, 0, 0, 149)], [(*Q, 0, 50)]),
    # the same range: nothing new
    ([(*Q, 0, 0, 99)], [(*Q, 0, 0, 99)], []),
    # a second range and a new queue: 11 + 5 new offsets
    ([(*Q, 0, 0, 99)], [(*Q, 0, 0, 99), (*Q, 0, 200, 210), (*Q, 1, 5, 9)], [(*Q, 0, 11), (*Q, 1, 5)]),
    # no previous run: every offset is new
    ([], [(*Q, 3, 10, 19)], [(*Q, 3, 10)]),
], ids=["a_grown_range_counts_its_new_part", "the_same_range_is_not_new", "new_ranges_and_queues",
        "first_run_counts_all"])
def test_new_expired_offsets(previous: list[tuple], current: list[tuple], expected: list[tuple]) -> None:
    got = alerts.new_expired_offsets(expired_frame(previous), expired_frame(current))
    assert [tuple(r) for r in got.itertuples(index=False)] == expected


def test_failed_expectations_lists_each_failed_expectation_of_each_table() -> None:
    quality = {"gold/consumer_status": {"success": False, "failed": ["expect_column_values_to_be_in_set(status)"]},
               "gold/dlq_candidates": {"success": True, "failed": []}}
    assert alerts.failed_expectations(quality) == [("gold/consumer_status",
                                                     "expect_column_values_to_be_in_set(status)")]


def _frames(status: list[tuple] = (), dlq: list[tuple] = (), expired: list[tuple] = ()) -> dict[str, pd.DataFrame]:
    return {"consumer_status": status_frame(list(status)), "dlq_candidates": dlq_frame(list(dlq)),
            "expired": expired_frame(list(expired))}


def test_the_message_names_groups_counts_failed_expectations_and_the_dashboard() -> None:
    previous = _frames([(*Q, 0, "OK")], expired=[(*Q, 0, 0, 9)])
    current = _frames([(*Q, 0, "STALL"), ("C2", "H", "", "T", "b", 1, "OK")],
                      dlq=[(*Q, 0, 32, "U32", "BLOCKING_COMMIT"), ("C2", "H", "", "T", "b", 1, 3, "U3", "IN_DLQ"),
                           ("C2", "H", "", "T", "b", 1, 4, "U4", "IN_DLQ")],
                      expired=[(*Q, 0, 0, 29)])
    quality = {"gold/consumer_status": {"success": False, "failed": ["expect_column_values_to_not_be_null(lag)"]}}
    found = alerts.changes(previous, current, quality)
    msg = alerts.message(found, run_id="r2", as_of="2026-01-05T00:10:00.000Z", previous_run_id="r1",
                         dashboard_url="http://dash/r2/index.html")
    assert msg["subject"] == "[rmq-recon] r2: 2 groups need attention, 1 failed expectation"
    assert msg["text"] == (
        "RocketMQ reconciliation r2 (as of 2026-01-05T00:10:00.000Z): 2 groups need attention\n"
        "- H (C2): 2 new IN_DLQ\n"
        "- G (DefaultCluster): STALL (was OK); queues entered STALL: 1; 1 new BLOCKING_COMMIT; 20 new EXPIRED offsets\n"
        "Failed expectations:\n"
        "- gold/consumer_status: expect_column_values_to_not_be_null(lag)\n"
        "Compared with run r1.\n"
        "Dashboard: http://dash/r2/index.html")
    assert msg["payload"]["groups"] == [
        {"cluster": "C2", "consumer_group": "H", "new_in_dlq": 2, "status": "OK", "previous_status": "OK"},
        {"cluster": "DefaultCluster", "consumer_group": "G", "status": "STALL", "previous_status": "OK",
         "queues_entered": {"STALL": 1}, "new_blocking_commit": 1, "new_expired_offsets": 20}]


def test_nothing_new_is_falsy() -> None:
    same = _frames([(*Q, 0, "STALL")], dlq=[(*Q, 0, 32, "U32", "BLOCKING_COMMIT")], expired=[(*Q, 0, 0, 9)])
    assert not alerts.changes(same, same, {"gold/consumer_status": {"success": True, "failed": []}})


@pytest.mark.parametrize("runs, run_id, expected", [
    ([("a", "00:05", "09:00"), ("b", "00:10", "09:01")], "b", "a"),
    # backfill order: 00:05 completed after 00:10; 00:10's previous is still 00:05, by as-of
    ([("b", "00:10", "09:00"), ("a", "00:05", "09:01")], "b", "a"),
    ([("a", "00:05", "09:00"), ("b", "00:10", "09:01")], "a", None),
    # a manual run with the same as-of as a scheduled one that completed first compares with it (nothing new)
    ([("s", "00:10", "09:00"), ("m", "00:10", "09:05"), ("a", "00:05", "08:00")], "m", "s"),
    ([("s", "00:10", "09:00"), ("m", "00:10", "09:05"), ("a", "00:05", "08:00")], "s", "a"),
], ids=["the_run_before", "by_as_of_not_completion", "the_first_run_has_none", "same_as_of_completed_earlier",
        "same_as_of_completed_later_is_not_before"])
def test_previous_run_id(runs: list[tuple], run_id: str, expected: str | None) -> None:
    frame = pd.DataFrame([(r, pd.Timestamp(f"2026-01-05T{a}Z"), pd.Timestamp(f"2026-01-06T{c}Z")) for r, a, c in runs],
                         columns=["run_id", "as_of", "completed_at"])
    assert gold_runs.previous_run_id(frame, run_id) == expected


@pytest.mark.parametrize("conn, expected", [
    (dict(host="https://hooks.example.com/services/T0/B0/XYZ"), "https://hooks.example.com/services/T0/B0/XYZ"),
    (dict(host="127.0.0.1", port=8080, extra={"endpoint": "/hook"}), "http://127.0.0.1:8080/hook"),
    (dict(host="chat.example.com", schema="https", extra={"endpoint": "api/v1/post"}),
     "https://chat.example.com/api/v1/post"),
], ids=["full_url_in_host", "host_port_endpoint", "schema_is_the_scheme"])
def test_webhook_target(conn: dict[str, Any], expected: str) -> None:
    from airflow.sdk import Connection

    extra = conn.pop("extra", None)
    url, headers = webhook_target(Connection(conn_id="c", conn_type="http", extra=json.dumps(extra) if extra else None,
                                             **conn))
    assert (url, headers) == (expected, {"Content-Type": "application/json"})


# ------------------------------------------------------------------------------- real servers, real runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """queue2-offset32 reconciled as of 00:05, 00:10, 00:15, 00:20: the lake and reports roots."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    root = tmp_path_factory.mktemp("alerts")
    simulate.run("queue2-offset32", str(root / "landing"), seed=7)
    ingest.run(str(root / "landing"), str(root / "lake"))
    for minute in ("05", "10", "15", "20"):
        reconcile.run(str(root / "lake"), str(root / "reports"), as_of=f"2026-01-05T00:{minute}:00Z")
    return {"lake": str(root / "lake"), "reports": str(root / "reports")}


STALL_TEXT = ("RocketMQ reconciliation asof-20260105T001000Z (as of 2026-01-05T00:10:00.000Z): 1 group needs attention\n"
              "- GID_recon (DefaultCluster): STALL (was OK); queues entered STALL: 1, WARN: 3\n"
              "Compared with run asof-20260105T000500Z.\n"
              "Dashboard: http://dash.example/reports/dashboard/index.html")


def _sent(lake: str) -> list[tuple[str, str, str]]:
    from jobs.lake import _delta
    from schemas import alerts_sent

    df = _delta.read_pandas(lake, alerts_sent.TABLE)
    return sorted(zip(df["run_id"], df["channel"], df["previous_run_id"]))


@pytest.mark.integration
def test_one_message_for_a_new_stall_group_and_none_for_its_rerun(runs: dict[str, str],
                                                                  servers: tuple[Webhook, Mailbox]) -> None:
    from jobs.ops import notifiers
    from jobs.reconcile import reconcile

    hook, box = servers
    base = "http://dash.example/reports"
    first = alerts.run(runs["lake"], "asof-20260105T000500Z", senders=notifiers.senders(), dashboard_base_url=base)
    assert first == {"run_id": "asof-20260105T000500Z", "previous_run_id": None, "changed": False, "sent": [],
                     "skipped": []}

    out = alerts.run(runs["lake"], "asof-20260105T001000Z", senders=notifiers.senders(), dashboard_base_url=base)
    assert out == {"run_id": "asof-20260105T001000Z", "previous_run_id": "asof-20260105T000500Z", "changed": True,
                   "sent": ["webhook", "email"], "skipped": []}
    assert hook.posts == [{"path": "/hooks/T0/secret", "content_type": "application/json", "body": {
        "text": STALL_TEXT, "run_id": "asof-20260105T001000Z", "as_of": "2026-01-05T00:10:00.000Z",
        "previous_run_id": "asof-20260105T000500Z",
        "dashboard_url": "http://dash.example/reports/dashboard/index.html",
        "groups": [{"cluster": "DefaultCluster", "consumer_group": "GID_recon", "status": "STALL",
                    "previous_status": "OK", "queues_entered": {"STALL": 1, "WARN": 3}}],
        "failed_expectations": []}}]
    assert len(box.messages) == 1
    mail = box.messages[0]
    assert (mail["from"], mail["to"]) == ("rmq-recon@example.com", ["oncall@example.com", "ops@example.com"])
    assert mail["message"]["Subject"] == "[rmq-recon] asof-20260105T001000Z: 1 group needs attention"
    html_parts = [p.get_payload(decode=True).decode() for p in mail["message"].walk()
                  if p.get_content_type() == "text/html"]
    assert html_parts == ["<pre>" + STALL_TEXT + "</pre>"]

    # The same run again (a cleared DAG run): its gold rows are replaced with the same rows, and nothing is sent.
    reconcile.run(runs["lake"], runs["reports"], as_of="2026-01-05T00:10:00Z")
    again = alerts.run(runs["lake"], "asof-20260105T001000Z", senders=notifiers.senders(), dashboard_base_url=base)
    assert again == {"run_id": "asof-20260105T001000Z", "previous_run_id": None, "changed": False, "sent": [],
                     "skipped": ["email", "webhook"]}
    assert (len(hook.posts), len(box.messages)) == (1, 1)
    assert [r for r in _sent(runs["lake"]) if r[0] == "asof-20260105T001000Z"] == [
        ("asof-20260105T001000Z", "email", "asof-20260105T000500Z"),
        ("asof-20260105T001000Z", "webhook", "asof-20260105T000500Z")]

    # 00:15: still STALL, nothing new: nothing sent.
    quiet = alerts.run(runs["lake"], "asof-20260105T001500Z", senders=notifiers.senders(), dashboard_base_url=base)
    assert (quiet["changed"], quiet["sent"], len(hook.posts), len(box.messages)) == (False, [], 1, 1)


@pytest.mark.integration
def test_a_channel_that_failed_is_retried_alone(runs: dict[str, str], servers: tuple[Webhook, Mailbox],
                                                caplog: pytest.LogCaptureFixture) -> None:
    """00:20: the new BLOCKING_COMMIT. The webhook answers 500: the email goes out and is recorded, the job fails
    naming the connection (never its URL, which holds a token); the retry sends the webhook only."""
    from jobs.ops import notifiers
    from jobs.ops.notifiers import WebhookError

    hook, box = servers
    hook.status = 500
    with pytest.raises(WebhookError) as failed:
        alerts.run(runs["lake"], "asof-20260105T002000Z", senders=notifiers.senders())
    assert str(failed.value) == "webhook rmq_recon_webhook: HTTP 500 Internal Server Error; check the connection's " \
                                "URL and token"
    assert "secret" not in caplog.text
    assert (len(hook.posts), len(box.messages)) == (1, 1)
    text = ("RocketMQ reconciliation asof-20260105T002000Z (as of 2026-01-05T00:20:00.000Z): 1 group needs attention\n"
            "- GID_recon (DefaultCluster): 1 new BLOCKING_COMMIT\n"
            "Compared with run asof-20260105T001500Z.\n"
            f"Dashboard: {runs['reports']}/dashboard/index.html")
    assert box.messages[0]["message"]["Subject"] == "[rmq-recon] asof-20260105T002000Z: 1 group needs attention"

    hook.status = 200
    retry = alerts.run(runs["lake"], "asof-20260105T002000Z", senders=notifiers.senders())
    assert (retry["sent"], retry["skipped"]) == (["webhook"], ["email"])
    assert [p["body"]["text"] for p in hook.posts] == [text, text]
    assert len(box.messages) == 1
    assert [r for r in _sent(runs["lake"]) if r[0] == "asof-20260105T002000Z"] == [
        ("asof-20260105T002000Z", "email", "asof-20260105T001500Z"),
        ("asof-20260105T002000Z", "webhook", "asof-20260105T001500Z")]


def test_missing_connections_turn_alerts_off_with_one_line_each(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture,
                                                                tmp_path: pathlib.Path) -> None:
    from jobs.ops import notifiers

    monkeypatch.delenv("AIRFLOW_CONN_RMQ_RECON_WEBHOOK", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_RMQ_RECON_SMTP", raising=False)
    with caplog.at_level(logging.INFO, logger="jobs.ops.notifiers"):
        senders = notifiers.senders()
    assert senders == {}
    assert [r.getMessage() for r in caplog.records if r.name == "jobs.ops.notifiers"] == [
        "alerts: webhook off (no Airflow connection rmq_recon_webhook)",
        "alerts: email off (no Airflow connection rmq_recon_smtp)"]
    # With no channel the job reads nothing (the lake need not even exist) and sends nothing.
    assert alerts.run(str(tmp_path / "no-lake"), "any", senders=senders) == {
        "run_id": "any", "previous_run_id": None, "changed": False, "sent": [], "skipped": []}


@pytest.mark.integration
def test_a_failed_expectation_alone_is_worth_a_message(runs: dict[str, str], servers: tuple[Webhook, Mailbox]) -> None:
    """A second run as of 00:15 changes nothing against the first (same as-of, completed earlier), but its gold
    validation failed: one message naming the expectation."""
    from jobs.ops import notifiers
    from jobs.reconcile import reconcile

    hook, box = servers
    reconcile.run(runs["lake"], runs["reports"], as_of="2026-01-05T00:15:00Z", run_id="manual-0015")
    quality = {"gold/consumer_status": {"success": False, "failed": ["expect_column_values_to_be_in_set(status)"]},
               "gold/dlq_candidates": {"success": True, "failed": []}}
    out = alerts.run(runs["lake"], "manual-0015", senders=notifiers.senders(), quality=quality)
    assert (out["previous_run_id"], out["sent"]) == ("asof-20260105T001500Z", ["webhook", "email"])
    assert hook.posts[0]["body"]["text"] == (
        "RocketMQ reconciliation manual-0015 (as of 2026-01-05T00:15:00.000Z): no group changed\n"
        "Failed expectations:\n"
        "- gold/consumer_status: expect_column_values_to_be_in_set(status)\n"
        "Compared with run asof-20260105T001500Z.\n"
        f"Dashboard: {runs['reports']}/dashboard/index.html")
    assert box.messages[0]["message"]["Subject"] == "[rmq-recon] manual-0015: no group changed, 1 failed expectation"
