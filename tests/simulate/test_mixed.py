"""``mixed`` at scale 1: every anomaly kind is drawn, and the truth holds exactly the rows this seed produces."""
from __future__ import annotations

import csv
import json
import pathlib
from collections import Counter

import pytest

from jobs import simulate


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict]:
    out = tmp_path_factory.mktemp("mixed")
    return out, simulate.run("mixed", str(out), seed=7, scale=1)


def _count(out: pathlib.Path, name: str, col: str) -> Counter:
    with open(out / "_truth" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return Counter((r["consumer_group"], r[col]) for r in csv.DictReader(f))


def test_mixed_draws_every_kind_on_several_brokers(mixed) -> None:
    out, summary = mixed
    meta = json.loads((out / "_truth" / "scenario.json").read_text())
    kinds = {i["kind"] for i in meta["injected"]}
    from jobs.simulate.mixed import KINDS

    assert set(KINDS) <= kinds
    assert meta["brokers"] == ["broker-a", "broker-b"]
    assert {g["trace"] for g in meta["groups"]} == {True, False}
    assert summary["truth_rows"] == {"duplicated_ranges": 36, "unconsumed_ranges": 71, "offset_corrections": 16,
                                     "dlq_candidates": 35, "consumer_status": 224}


def test_mixed_truth_rows_per_group_and_kind(mixed) -> None:
    out, _ = mixed
    assert _count(out, "duplicated_ranges", "evidence") == Counter({
        ("GID_005_out_of_order", "TRACE"): 2, ("GID_010_rewind", "REWIND"): 16, ("GID_010_rewind", "TRACE"): 16,
        ("GID_012_blocked_head", "TRACE"): 2})
    assert _count(out, "unconsumed_ranges", "kind") == Counter({
        ("GID_003_expired", "BACKLOG"): 16, ("GID_003_expired", "EXPIRED"): 16,
        ("GID_006_broadcast", "BROADCAST_DROPPED"): 31,
        ("GID_007_expired_return", "EXPIRED"): 8})
    assert _count(out, "dlq_candidates", "reason") == Counter({
        ("GID_006_broadcast", "BROADCAST_DROPPED"): 31, ("GID_011_retrying", "RETRYING"): 3,
        ("GID_013_retry_to_dlq", "IN_DLQ"): 1})
    assert _count(out, "offset_corrections", "reason") == Counter({("GID_003_expired", "BELOW_MIN"): 16})
    statuses = _count(out, "consumer_status", "status")
    assert {k: v for k, v in statuses.items() if k[1] != "OK"} == {("GID_003_expired", "STALL"): 16}
