"""Issue 37 item 3: the snapshot DAG's hosts, the command each runs, the run's one snapshot time (the SSH run itself:
tests/dags/test_snapshot_exports_over_ssh.py)."""
from __future__ import annotations

import datetime as dt

import pytest

from jobs.ops import remote_export
from jobs.problems import UsageError

HOST = {"conn_id": "a_host", "store": "/data/rocketmq/store", "cluster": "C1", "broker": "broker-a"}


def test_the_command_quotes_every_value_and_adds_the_optional_state() -> None:
    odd = {**HOST, "store": "/data/my store;rm -rf x", "state": "/var/lib/rmq state",
           "command": "/opt/venv/bin/rmq-recon"}
    assert remote_export.command(HOST, "s3://bucket/landing", "20261203T181500Z") == (
        "rmq-recon export --store /data/rocketmq/store --broker broker-a --cluster C1 --to s3://bucket/landing "
        "--snapshot-ts 20261203T181500Z")
    assert remote_export.command(odd, "/l", "20261203T181500Z", "ignored") == (
        "/opt/venv/bin/rmq-recon export --store '/data/my store;rm -rf x' --broker broker-a --cluster C1 --to /l "
        "--snapshot-ts 20261203T181500Z --state '/var/lib/rmq state'")


@pytest.mark.parametrize("value, message", [
    ({"conn_id": "a"}, "--export-hosts {'conn_id': 'a'}: expected a JSON list of hosts"),
    ([HOST, {**HOST, "store": ""}], "--export-hosts entry 1: missing store"),
    ([{**HOST, "user": "x"}], "--export-hosts entry 0: unknown user"),
    ([HOST, {**HOST, "conn_id": "b_host"}], "--export-hosts entry 1: cluster C1 broker broker-a is listed twice"),
    (["a_host"], "--export-hosts entry 0: expected an object with conn_id, store, cluster, broker"),
])
def test_a_wrong_host_list_is_refused_naming_the_entry(value: object, message: str) -> None:
    with pytest.raises(UsageError) as e:
        remote_export.hosts(value)
    assert str(e.value) == message


def test_the_hosts_come_from_the_environment_when_the_param_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RMQ_RECON_EXPORT_HOSTS", raising=False)
    assert remote_export.default_hosts() == []
    monkeypatch.setenv("RMQ_RECON_EXPORT_HOSTS", '[{"conn_id": "a_host", "store": "/s", "cluster": "C1", '
                                                 '"broker": "b", "state": "/st"}]')
    assert remote_export.default_hosts() == [{"conn_id": "a_host", "store": "/s", "cluster": "C1", "broker": "b",
                                              "state": "/st"}]
    monkeypatch.setenv("RMQ_RECON_EXPORT_HOSTS", "[{")
    with pytest.raises(UsageError, match=r"^RMQ_RECON_EXPORT_HOSTS: Expecting property name"):
        remote_export.default_hosts()


def test_the_snapshot_time_is_now_or_the_one_named() -> None:
    now = dt.datetime(2026, 12, 3, 19, 2, 7, 918000, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert remote_export.snapshot_stamp("", now) == "20261203T180207Z"
    assert remote_export.snapshot_stamp("20260105T000400Z") == "20260105T000400Z"
    assert remote_export.snapshot_stamp("2026-01-05T01:04:00+01:00") == "20260105T000400Z"
    assert remote_export.snapshot_stamp("2026-01-05 00:04:00") == "20260105T000400Z"  # no zone: UTC
    with pytest.raises(UsageError, match=r"^--snapshot-ts 'yesterday': expected ISO-8601 UTC or YYYYMMDDTHHMMSSZ$"):
        remote_export.snapshot_stamp("yesterday")


def test_the_params_schema_takes_a_host_list_and_refuses_a_wrong_one() -> None:
    from airflow.sdk import Param

    p = Param([], schema=remote_export.SCHEMA)
    assert p.resolve([HOST]) == [HOST]
    from airflow.sdk.definitions.param import ParamValidationError

    for wrong, message in (([{**HOST, "store": ""}], "'' should be non-empty"),
                           ([{"conn_id": "a"}], "'store' is a required property"),
                           ("a_host", "'a_host' is not of type 'array'")):
        with pytest.raises(ParamValidationError) as e:
            p.resolve(wrong)
        assert str(e.value).startswith(message), str(e.value)
