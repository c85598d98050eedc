"""Issue 35, part: store types whose files change what Min means (spec §4.2). A broker with tiered storage still
serves offsets below its local Min from the tier: EXPIRED ranges there were false, and the BELOW_MIN correction
moved the group past messages it could still consume."""
from __future__ import annotations

import csv
import pathlib
import shutil

import pytest

from jobs.formats import fastjson

TIERED = "store/config/tieredStoreMetadata.json"


def _rows(folder: pathlib.Path, name: str) -> list[dict[str, str]]:
    with open(folder / name, newline="") as f:
        return list(csv.DictReader(f))


def _run(landing: pathlib.Path, root: pathlib.Path, name: str) -> pathlib.Path:
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    ingest.run(str(landing), str(root / f"lake_{name}"))
    return pathlib.Path(reconcile.run(str(root / f"lake_{name}"), str(root / f"reports_{name}"))["report_dir"])


@pytest.fixture(scope="module")
def expired(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """expired-offset: GID_gone below Min at the last snapshot (BELOW_MIN), GID_back expired then back."""
    from jobs import simulate

    root = tmp_path_factory.mktemp("tiered")
    simulate.run("expired-offset", str(root / "clean"), seed=7)
    return root


def _with_tier(root: pathlib.Path, name: str, text: str) -> pathlib.Path:
    landing = root / name
    shutil.copytree(root / "clean", landing)
    for snap in (landing / "cluster=DefaultCluster" / "broker=broker-a").iterdir():
        (snap / TIERED).write_text(text)
    return landing


def test_a_tier_holding_every_offset_leaves_nothing_expired_and_nothing_to_correct(expired: pathlib.Path) -> None:
    clean = _run(expired / "clean", expired, "clean")
    assert [r["reason"] for r in _rows(clean, "offset_corrections.csv")] == ["BELOW_MIN", "BELOW_MIN"]
    doc = {"queueMetadataTable": {"TopicTest": {q: {"queue": {"brokerName": "broker-a", "queueId": q, "topic":
                                                                "TopicTest"}, "minOffset": 0, "maxOffset": 10800,
                                                      "updateTimestamp": 1767571200000} for q in (0, 1)}}}
    tiered = _run(_with_tier(expired, "tiered", fastjson.dumps(doc)), expired, "tiered")
    assert _rows(tiered, "offset_corrections.csv") == []
    unconsumed = [(r["consumer_group"], r["queue_id"], r["start_offset"], r["end_offset"], r["kind"])
                  for r in _rows(tiered, "unconsumed_ranges.csv")]
    assert unconsumed == [("GID_gone", "0", "90", "10799", "BACKLOG"), ("GID_gone", "1", "90", "10799", "BACKLOG")]
    status = {(r["consumer_group"], r["queue_id"]): (r["min_offset"], r["consumable_lag"])
              for r in _rows(tiered, "consumer_status.csv")}
    assert status[("GID_gone", "0")] == ("0", "10710")


def test_unreadable_tier_metadata_leaves_the_bounds_unknown_not_local(expired: pathlib.Path) -> None:
    tiered = _run(_with_tier(expired, "broken", '{"queueMetadataTable": {"TopicTest": '), expired, "broken")
    assert _rows(tiered, "offset_corrections.csv") == []
    assert [r for r in _rows(tiered, "unconsumed_ranges.csv") if r["kind"] == "EXPIRED"] == []
