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
    assert summary["truth_rows"] == {"duplicated_ranges": 12, "unconsumed_ranges": 42, "offset_corrections": 2,
                                     "dlq_candidates": 29, "consumer_status": 180, "coverage": 9}


def test_mixed_truth_rows_per_group_and_kind(mixed) -> None:
    out, _ = mixed
    assert _count(out, "duplicated_ranges", "evidence") == Counter({
        ("GID_005_out_of_order", "TRACE"): 1, ("GID_006_rebalance", "TRACE"): 1, ("GID_011_rewind", "REWIND"): 4,
        ("GID_011_rewind", "TRACE"): 4, ("GID_013_blocked_head", "TRACE"): 2})
    assert _count(out, "unconsumed_ranges", "kind") == Counter({
        ("GID_001_broadcast", "BROADCAST_DROPPED"): 26, ("GID_003_expired", "BACKLOG"): 4,
        ("GID_003_expired", "EXPIRED"): 2, ("GID_008_expired_return", "EXPIRED"): 4,
        # broker-b is tiered (its tier serves every offset): what was EXPIRED there is not, and the offsets an
        # operator moved past there are SKIPPED, not lost to retention
        ("GID_004_reset_later", "SKIPPED"): 2, ("GID_007_skip", "SKIPPED"): 4})
    assert _count(out, "dlq_candidates", "reason") == Counter({
        ("GID_001_broadcast", "BROADCAST_DROPPED"): 26, ("GID_012_retrying", "RETRYING"): 1,
        ("GID_014_retry_to_dlq", "IN_DLQ"): 2})
    assert _count(out, "offset_corrections", "reason") == Counter({("GID_003_expired", "BELOW_MIN"): 2})
    statuses = _count(out, "consumer_status", "status")
    assert {k: v for k, v in statuses.items() if k[1] != "OK"} == {("GID_003_expired", "STALL"): 4}
    # spec §4.1: this seed's orderly group is a 4.x one (no flag), known by its local retries on its topic (its
    # %RETRY% queues on the two brokers stay concurrent); the broadcast group by its clients' offsets.json
    modes = _count(out, "consumer_status", "consume_mode")
    assert {k: v for k, v in modes.items() if k[1] != "CONCURRENT"} == {
        ("GID_002_orderly_blocked", "ORDERLY"): 16, ("GID_001_broadcast", "BROADCAST"): 48}
    assert modes[("GID_002_orderly_blocked", "CONCURRENT")] == 2

    # every store type (spec §7 mixed): RocksDB v1 and v2 beside stale JSON, tiered broker-b, a BatchCQ and a
    # compaction topic on both brokers; two groups without traces
    assert _count(out, "coverage", "reason") == Counter({
        ("", "BATCH_CQ"): 2, ("", "COMPACTION_TOPIC"): 2, ("", "STALE_JSON_IGNORED"): 2, ("", "TIERED"): 1,
        ("GID_008_expired_return", "NO_TRACE"): 1, ("GID_009_healthy_offsets_only", "NO_TRACE"): 1})
