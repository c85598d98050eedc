"""Issue 35 (spec §4.2): RocketMQ's own groups and topics are never reported as findings. A broker's
consumerOffset.json holds the offsets of CID_RMQ_SYS_* groups (the transaction checker, the POP revive scan),
TOOLS_CONSUMER and of groups on system topics; they got BACKLOG, EXPIRED, corrections and a status."""
from __future__ import annotations

import pathlib
import shutil

import pytest

from jobs.formats import fastjson, topics

NEWEST = "cluster=DefaultCluster/broker=broker-a/snapshot_ts=20260105T001300Z/store/config/consumerOffset.json"
SYSTEM_ENTRIES = {
    "RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {0: 5},       # below Min, above Max: would be corrected
    "rmq_sys_REVIVE_LOG_DefaultCluster@CID_RMQ_SYS_REVIVE_GROUP": {0: 7, 1: 0},
    "TopicTest@TOOLS_CONSUMER": {0: 999_999},                   # above Max: an ABOVE_MAX reset
    "TBW102@GID_recon": {0: 3},                                  # a user group on a system topic
    "TRANS_CHECK_MAX_TIME_TOPIC@GID_recon": {0: 1},
}
REPORTS = ["duplicated_ranges.csv", "unconsumed_ranges.csv", "offset_corrections.csv", "dlq_candidates.csv",
           "consumer_status.csv"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    root = tmp_path_factory.mktemp("system")
    simulate.run("blocked-head", str(root / "clean"), seed=7)
    shutil.copytree(root / "clean", root / "with_system")
    path = root / "with_system" / NEWEST
    doc = fastjson.loads(path.read_text())
    doc["offsetTable"].update(SYSTEM_ENTRIES)
    path.write_text(fastjson.dumps(doc))
    out = {}
    for name in ("clean", "with_system"):
        ingest.run(str(root / name), str(root / f"lake_{name}"))
        summary = reconcile.run(str(root / f"lake_{name}"), str(root / f"reports_{name}"), run_id="r")
        out[name] = pathlib.Path(summary["report_dir"])
    return out


def test_system_groups_and_topics_get_no_finding(reports: dict[str, pathlib.Path]) -> None:
    for name in REPORTS:
        assert (reports["with_system"] / name).read_text() == (reports["clean"] / name).read_text(), name
    text = "".join((reports["with_system"] / n).read_text() for n in REPORTS + ["offset_corrections.sh"])
    assert not any(s in text for s in ("CID_RMQ_SYS", "TOOLS_CONSUMER", "TBW102", "TRANS_CHECK_MAX_TIME_TOPIC"))


@pytest.mark.parametrize("name, system", [
    ("CID_RMQ_SYS_TRANS", True), ("CID_RMQ_SYS_REVIVE_GROUP", True), ("TOOLS_CONSUMER", True),
    ("__MONITOR_CONSUMER", True), ("CID_ONSAPI_PULL", True), ("GID_orders", False), ("CID_RMQ_SYSX", False),
])
def test_system_groups(name: str, system: bool) -> None:
    assert topics.is_system_group(name) is system


@pytest.mark.parametrize("name, reserved, system", [
    ("TBW102", True, True), ("TRANS_CHECK_MAX_TIME_TOPIC", True, True), ("rmq_sys_wheel_timer", True, True),
    ("RMQ_SYS_TRACE_TOPIC", True, True), ("SCHEDULE_TOPIC_XXXX", True, True), ("%RETRY%G", False, True),
    ("%DLQ%G", False, True), ("TopicTest", False, False),
])
def test_system_topics(name: str, reserved: bool, system: bool) -> None:
    assert (topics.is_reserved_topic(name), topics.is_system_topic(name)) == (reserved, system)
