"""``mixed`` at scale 1: every anomaly kind is drawn, and the truth holds exactly the rows this seed produces."""
from __future__ import annotations

import csv
import json
import pathlib
from collections import Counter

import pytest

from jobs import simulate
from jobs.formats import consumequeue


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
    # broker-c: the POP groups' broker, added after every other draw (jobs.simulate.mixed._pop_part); broker-d the
    # inner batches' (_inner_batch_part), after that
    assert meta["brokers"] == ["broker-a", "broker-b", "broker-c", "broker-d"]
    assert {g["trace"] for g in meta["groups"]} == {True, False}
    # issue 36 item 1, the POP groups' rows added: duplicated 12 -> 17 (5 POP_LATE_ACK), unconsumed 42 -> 43
    # (POP_LOST), dlq 29 -> 33 (2 IN_DLQ, 2 RETRYING), status 180 -> 188 (8 POP queues); issue 35's inner batches
    # (two groups, two queues and their retry queues) +1 duplicated, +6 status, +1 BATCH_CQ row
    assert summary["truth_rows"] == {"duplicated_ranges": 18, "unconsumed_ranges": 43, "offset_corrections": 2,
                                     "dlq_candidates": 33, "consumer_status": 194, "coverage": 10}


def test_mixed_truth_rows_per_group_and_kind(mixed) -> None:
    out, _ = mixed
    assert _count(out, "duplicated_ranges", "evidence") == Counter({
        ("GID_005_out_of_order", "TRACE"): 1, ("GID_006_rebalance", "TRACE"): 1, ("GID_011_rewind", "REWIND"): 4,
        ("GID_011_rewind", "TRACE"): 4, ("GID_013_blocked_head", "TRACE"): 2,
        ("GID_pop_00", "POP_LATE_ACK"): 2, ("GID_pop_01", "POP_LATE_ACK"): 3, ("GID_inner_killed", "TRACE"): 1})
    assert _count(out, "unconsumed_ranges", "kind") == Counter({
        ("GID_001_broadcast", "BROADCAST_DROPPED"): 26, ("GID_003_expired", "BACKLOG"): 4,
        ("GID_003_expired", "EXPIRED"): 2, ("GID_008_expired_return", "EXPIRED"): 4,
        # broker-b is tiered (its tier serves every offset): what was EXPIRED there is not, and the offsets an
        # operator moved past there are SKIPPED, not lost to retention
        ("GID_004_reset_later", "SKIPPED"): 2, ("GID_007_skip", "SKIPPED"): 4, ("GID_pop_00", "POP_LOST"): 1})
    assert _count(out, "dlq_candidates", "reason") == Counter({
        ("GID_001_broadcast", "BROADCAST_DROPPED"): 26, ("GID_012_retrying", "RETRYING"): 1,
        ("GID_014_retry_to_dlq", "IN_DLQ"): 2, ("GID_pop_00", "IN_DLQ"): 1, ("GID_pop_00", "RETRYING"): 1,
        ("GID_pop_01", "IN_DLQ"): 1, ("GID_pop_01", "RETRYING"): 1})
    assert _count(out, "offset_corrections", "reason") == Counter({("GID_003_expired", "BELOW_MIN"): 2})
    statuses = _count(out, "consumer_status", "status")
    assert {k: v for k, v in statuses.items() if k[1] != "OK"} == {("GID_003_expired", "STALL"): 4}
    # spec §4.1: this seed's orderly group is a 4.x one (no flag), known by its local retries on its topic (its
    # %RETRY% queues on the two brokers stay concurrent); the broadcast group by its clients' offsets.json
    modes = _count(out, "consumer_status", "consume_mode")
    assert {k: v for k, v in modes.items() if k[1] != "CONCURRENT"} == {
        ("GID_002_orderly_blocked", "ORDERLY"): 16, ("GID_001_broadcast", "BROADCAST"): 48,
        ("GID_pop_00", "POP"): 3, ("GID_pop_01", "POP"): 5}
    assert modes[("GID_002_orderly_blocked", "CONCURRENT")] == 2

    # every store type (spec §7 mixed): RocksDB v1 and v2 beside stale JSON, tiered broker-b, a BatchCQ and a
    # compaction topic on both brokers (and broker-d's TopicInner); two groups without traces
    assert _count(out, "coverage", "reason") == Counter({
        ("", "BATCH_CQ"): 3, ("", "COMPACTION_TOPIC"): 2, ("", "STALE_JSON_IGNORED"): 2, ("", "TIERED"): 1,
        ("GID_008_expired_return", "NO_TRACE"): 1, ("GID_009_healthy_offsets_only", "NO_TRACE"): 1})


def _rows(out: pathlib.Path, name: str, cols: list[str]) -> list[tuple]:
    with open(out / "_truth" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return sorted(tuple(r[c] for c in cols) for r in csv.DictReader(f) if r["consumer_group"].startswith("GID_pop"))


def test_mixed_draws_pop_groups_with_their_findings(mixed) -> None:
    """Issue 36 item 1 (spec §7 mixed: every consume mode): POP groups on their own topics and broker, each with late
    acks, messages failing once, one always failing (IN_DLQ) and one still RETRYING at the end, messages in flight
    at the last snapshot; the first group's dead client loses its pop to retention (POP_LOST)."""
    out, _ = mixed
    meta = json.loads((out / "_truth" / "scenario.json").read_text())
    assert [(g["group"], g["topic"], g.get("pop"), g["trace"]) for g in meta["groups"] if g.get("pop")] == [
        ("GID_pop_00", "TopicPop00", True, False), ("GID_pop_01", "TopicPop01", True, False)]
    # rePutCK windows: 15 s from 30 s after GID_pop_00's first fail-once key was sent, and the last 40 s
    assert [(i["broker"], i["start"][11:19], i["end"][11:19]) for i in meta["injected"]
            if i["kind"] == "pop_revive_puts_fail"] == [("broker-c", "01:54:40", "01:54:55"),
                                                        ("broker-c", "05:59:20", "06:00:00")]
    modes = _count(out, "consumer_status", "consume_mode")
    assert {k for k in modes if k[0].startswith("GID_pop")} == {("GID_pop_00", "POP"), ("GID_pop_01", "POP")}
    status = _rows(out, "consumer_status", ["consumer_group", "topic", "broker", "queue_id", "committed_offset",
                                            "max_offset", "status", "consume_mode", "inflight"])
    # the RETRYING keys' last revives fall in the last 40 s, when the revive copies cannot be put: re-put with their
    # checkpoints' own start offsets (the same checkpoints, whose revive time passed), so their retry queues hold
    # no copy in flight at the end and one retry fewer than without the re-puts
    assert status == [
        ("GID_pop_00", "%RETRY%GID_pop_00_TopicPop00", "broker-c", "0", "29", "29", "OK", "POP", "0"),
        ("GID_pop_00", "TopicPop00", "broker-c", "0", "360", "360", "OK", "POP", "0"),
        ("GID_pop_00", "TopicPop00", "broker-c", "1", "360", "360", "OK", "POP", "1"),
        ("GID_pop_01", "%RETRY%GID_pop_01_TopicPop01", "broker-c", "0", "30", "30", "OK", "POP", "0"),
        ("GID_pop_01", "TopicPop01", "broker-c", "0", "270", "270", "OK", "POP", "0"),
        ("GID_pop_01", "TopicPop01", "broker-c", "1", "270", "270", "OK", "POP", "0"),
        ("GID_pop_01", "TopicPop01", "broker-c", "2", "270", "270", "OK", "POP", "0"),
        ("GID_pop_01", "TopicPop01", "broker-c", "3", "270", "270", "OK", "POP", "1")]
    assert _rows(out, "dlq_candidates", ["consumer_group", "topic", "queue_id", "queue_offset", "keys",
                                         "reconsume_times", "reason"]) == [
        ("GID_pop_00", "TopicPop00", "0", "176", "p0-352", "17", "IN_DLQ"),
        ("GID_pop_00", "TopicPop00", "1", "355", "p0-711", "6", "RETRYING"),
        ("GID_pop_01", "TopicPop01", "0", "266", "p1-1064", "7", "RETRYING"),
        ("GID_pop_01", "TopicPop01", "1", "14", "p1-57", "17", "IN_DLQ")]
    assert _rows(out, "duplicated_ranges", ["consumer_group", "topic", "queue_id", "start_offset", "end_offset",
                                            "evidence", "cause"]) == [
        ("GID_pop_00", "TopicPop00", "0", "40", "40", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED"),
        ("GID_pop_00", "TopicPop00", "1", "172", "172", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED"),
        ("GID_pop_01", "TopicPop01", "0", "124", "124", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED"),
        ("GID_pop_01", "TopicPop01", "1", "192", "192", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED"),
        ("GID_pop_01", "TopicPop01", "3", "72", "72", "POP_LATE_ACK", "INVISIBLE_TIME_EXCEEDED")]
    assert _rows(out, "unconsumed_ranges", ["consumer_group", "topic", "queue_id", "start_offset", "end_offset",
                                            "kind"]) == [("GID_pop_00", "TopicPop00", "0", "0", "0", "POP_LOST")]
    # no NO_TRACE row for them (spec §4.1: a POP group needs no traces)
    assert not [k for k in _count(out, "coverage", "reason") if k[0].startswith("GID_pop")]


def test_mixed_sends_batches_to_a_batch_cq_topic(mixed) -> None:
    """Issue 35 (rocketmq5.md §5): broker-d's TopicInner gets a batch of 1-8 messages every 30 s, each ONE
    INNER_BATCH record; GID_inner_killed's client is killed when the broker's committed offset of queue 1 (937) is
    inside the batch 936-939 in flight, so the new client's pull gets the whole record and consumes 936-939 again,
    936 though it was below the committed offset."""
    out, _ = mixed
    meta = json.loads((out / "_truth" / "scenario.json").read_text())
    killed = [i for i in meta["injected"] if i["kind"] == "killed_inside_batches"]
    assert [(i["group"], i["kill_at"], i["committed_at_kill"]["1"]) for i in killed] == [
        ("GID_inner_killed", "2026-01-05T03:34:49.513Z", 937)]
    with open(out / "_truth" / "duplicated_ranges.csv", newline="", encoding="utf-8") as f:
        dup = [(r["topic"], r["broker"], r["queue_id"], r["start_offset"], r["end_offset"], r["messages"],
                r["evidence"], r["cause"]) for r in csv.DictReader(f) if r["consumer_group"] == "GID_inner_killed"]
    assert dup == [("TopicInner", "broker-d", "1", "936", "939", "4", "TRACE", "HEAD_BLOCKED")]


def test_bulk_brokers_puts_the_bulk_topics_on_that_many_brokers(tmp_path: pathlib.Path) -> None:
    """``--bulk-brokers`` (bench_export's one broker storing the whole rate, issue 37): 12,000 messages an hour size
    a fleet of one bulk broker with round(5 * 72,000 / 98,000) = 4 topics; three brokers take them round robin."""
    out = tmp_path / "three"
    summary = simulate.run("mixed", str(out), seed=7, hours=1, rate=12_000, every=30, bulk_brokers=3)
    meta = json.loads((out / "_truth" / "scenario.json").read_text())
    bulk = sorted(b for b in meta["brokers"] if b.startswith("broker-bulk-"))
    assert bulk == ["broker-bulk-00", "broker-bulk-01", "broker-bulk-02"]
    last = sorted((out / "cluster=DefaultCluster" / "broker=broker-bulk-00").iterdir())[-1]
    topics = {b: sorted(p.name for p in (last.parent.parent / f"broker={b}" / last.name / "store" / "consumequeue")
                        .iterdir() if not p.name.startswith("%")) for b in bulk}
    assert {b: len(t) for b, t in topics.items()} == {"broker-bulk-00": 2, "broker-bulk-01": 1, "broker-bulk-02": 1}
    # every bulk message is on one of the three: their queue files' entries add up to the bulk count (11,896)
    decoded = {b: [consumequeue.decode_cq(f.read_bytes(), file_start_byte=int(f.name)) for t in topics[b]
                   for f in (last.parent.parent / f"broker={b}" / last.name / "store" / "consumequeue" / t).glob("*/*")]
               for b in bulk}
    entries = {b: sum(d.end_index - d.first_index for d in ds) for b, ds in decoded.items()}
    assert sum(entries.values()) == meta["bulk_messages"] == summary["bulk_messages"] == 11_896
    assert min(entries.values()) > 0, entries
    with pytest.raises(ValueError, match="--bulk-brokers 0"):
        simulate.run("mixed", str(tmp_path / "none"), seed=7, hours=1, rate=12_000, bulk_brokers=0)
    with pytest.raises(ValueError, match="--bulk-brokers 1"):
        simulate.run("blocked-head", str(tmp_path / "other"), seed=7, bulk_brokers=1)
