"""Each spec §7 scenario: the truth the simulator computes contains exactly what the spec says it must.

Rows are compared exactly (every column but the UNIQ key, which is checked against the stored message).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import pathlib

import pytest

from jobs import simulate
from jobs.simulate.broker import DELAY_LEVELS_MS
from schemas import consumer_status, coverage, dlq_candidates, duplicated_ranges, offset_corrections, unconsumed_ranges

REPORTS = {m.NAME: m for m in (duplicated_ranges, unconsumed_ranges, offset_corrections, dlq_candidates,
                               consumer_status, coverage)}
C, G, T, B = "DefaultCluster", "GID_recon", "TopicTest", "broker-a"
RETRY = "%RETRY%GID_recon"


def _read(folder: pathlib.Path, name: str) -> list[dict[str, str]]:
    with open(folder / "_truth" / f"{name}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _rows(rows: list[dict[str, str]], *cols: str) -> list[tuple[str, ...]]:
    return [tuple(r[c] for c in cols) for r in rows]


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - cache of scenario runs
    cache: dict[str, pathlib.Path] = {}

    def get(name: str) -> pathlib.Path:
        if name not in cache:
            out = tmp_path_factory.mktemp(name.replace("-", "_"))
            simulate.run(name, str(out), seed=7)
            cache[name] = out
        return cache[name]

    return get


RANGE = ("consumer_group", "client_id", "topic", "queue_id", "start_offset", "end_offset", "messages")
STATUS = ("consumer_group", "client_id", "topic", "queue_id", "committed_offset", "min_offset", "max_offset", "lag",
          "status")


@pytest.mark.parametrize("name", simulate.SCENARIO_NAMES[:-1])
def test_truth_files_have_the_report_columns_and_are_sorted(landing, name: str) -> None:
    out = landing(name)
    for report, mod in REPORTS.items():
        path = out / "_truth" / f"{report}.csv"
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert rows[0] == mod.REPORT_COLUMNS
        idx = [mod.REPORT_COLUMNS.index(k) for k in mod.SORT_KEY]
        ints = {"queue_id", "start_offset", "queue_offset"}
        # an empty field (a discarded transaction's queue offset, a topic row's queue id) sorts first
        key = [tuple((int(r[i]) if r[i] != "" else -1) if mod.REPORT_COLUMNS[i] in ints else r[i] for i in idx)
               for r in rows[1:]]
        assert key == sorted(key)
    meta = json.loads((out / "_truth" / "scenario.json").read_text())
    assert meta["scenario"] == name and meta["seed"] == 7 and meta["snapshot_times"]


def test_blocked_head_duplicates_2101_to_2200_head_blocked(landing) -> None:
    out = landing("blocked-head")
    assert _rows(_read(out, "duplicated_ranges"), *RANGE, "evidence", "cause") == [
        (G, "", T, "0", "2101", "2200", "100", "TRACE", "HEAD_BLOCKED")]
    assert _read(out, "unconsumed_ranges") == [] and _read(out, "dlq_candidates") == []
    assert _rows(_read(out, "consumer_status"), *STATUS) == [
        (G, "", RETRY, "0", "0", "0", "0", "0", "OK"), (G, "", T, "0", "2201", "0", "2201", "0", "OK")]


def test_blocked_head_commit_stays_2101_until_the_new_owner_consumes() -> None:
    from jobs.simulate.scenarios import blocked_head

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        w = blocked_head(d, 7)
    committed = [s.offsets[(T, G, 0)] for s in w.writer.broker_snaps]
    assert committed == [2101, 2101, 2201, 2201]  # 4 min: all of 0..2100 done; 7 min: pinned; 10 min: re-consumed


def test_queue2_offset32_blocks_queue_2_only(landing) -> None:
    out = landing("queue2-offset32")
    dlq = _read(out, "dlq_candidates")
    assert _rows(dlq, "consumer_group", "topic", "queue_id", "queue_offset", "keys", "reconsume_times",
                 "max_reconsume_times", "reason", "dlq_eta_ts") == [
        (G, T, "2", "32", "order-130", "0", "16", "BLOCKING_COMMIT", "")]
    status = {(r["topic"], r["queue_id"]): (r["committed_offset"], r["status"]) for r in _read(out, "consumer_status")}
    assert status == {(RETRY, "0"): ("0", "OK"), (T, "0"): ("328", "OK"), (T, "1"): ("328", "OK"),
                      (T, "2"): ("32", "STALL"), (T, "3"): ("327", "OK")}
    assert _rows(_read(out, "unconsumed_ranges"), *RANGE, "kind") == [(G, "", T, "2", "32", "327", "296", "BACKLOG")]
    assert _read(out, "duplicated_ranges") == []


def test_queue2_offset32_committed_32_in_every_snapshot() -> None:
    import tempfile

    from jobs.simulate.scenarios import queue2_offset32

    with tempfile.TemporaryDirectory() as d:
        w = queue2_offset32(d, 7)
    assert [s.offsets[(T, G, 2)] for s in w.writer.broker_snaps] == [32] * 5


def test_out_of_order_acks_commits_1_then_redelivers_1_to_7(landing) -> None:
    import tempfile

    from jobs.simulate.scenarios import out_of_order_acks

    with tempfile.TemporaryDirectory() as d:
        w = out_of_order_acks(d, 7)
    assert [s.offsets.get((T, G, 0)) for s in w.writer.broker_snaps] == [0, 1, 8, 8]
    out = landing("out-of-order-acks")
    assert _rows(_read(out, "duplicated_ranges"), *RANGE, "evidence", "cause") == [
        (G, "", T, "0", "1", "7", "7", "TRACE", "HEAD_BLOCKED")]


def test_retry_to_dlq_16_retries_at_the_delay_levels_then_in_dlq(landing) -> None:
    import tempfile

    from jobs.simulate.scenarios import retry_to_dlq
    from jobs.simulate.truth import Truth

    with tempfile.TemporaryDirectory() as d:
        w = retry_to_dlq(d, 7)
        truth = Truth(w)
    failing = [m for m in w.stored if m.topic == T and m.keys == "msg-5"][0]
    attempts = [d for d in truth.deliveries[G] if d.uniq == failing.uniq]
    assert [d.retry_times for d in attempts] == list(range(17))
    assert all(d.success is False for d in attempts)
    gaps = [b.start - a.end for a, b in zip(attempts, attempts[1:])]
    # each retry waits its delay level (3 + reconsumeTimes); a few ms of store/pull latency on top
    for gap, level_ms in zip(gaps, DELAY_LEVELS_MS[2:]):
        assert level_ms <= gap <= level_ms + 100
    total = attempts[-1].start - attempts[0].start
    assert 4 * 3600_000 + 45 * 60_000 <= total <= 4 * 3600_000 + 47 * 60_000  # about 4 h 46 m
    out = landing("retry-to-dlq")
    dlq = _read(out, "dlq_candidates")
    assert _rows(dlq, "consumer_group", "topic", "queue_id", "queue_offset", "uniq_key", "keys", "reconsume_times",
                 "max_reconsume_times", "reason") == [(G, T, "0", "5", failing.uniq, "msg-5", "16", "16", "IN_DLQ")]
    dlq_copy = [m for m in w.stored if m.topic == "%DLQ%" + G][0]
    assert dlq_copy.reconsume == 17 and dlq_copy.uniq == failing.uniq
    assert dlq[0]["dlq_eta_ts"].startswith("2026-01-05T04:46:")


def test_expired_offset_expired_ranges_below_min_and_jump_to_min(landing) -> None:
    out = landing("expired-offset")
    assert _rows(_read(out, "unconsumed_ranges"), *RANGE, "kind") == [
        ("GID_back", "", T, "0", "90", "339", "250", "EXPIRED"),
        ("GID_back", "", T, "1", "90", "338", "249", "EXPIRED"),
        ("GID_gone", "", T, "0", "90", "2530", "2441", "EXPIRED"),
        ("GID_gone", "", T, "0", "2531", "10799", "8269", "BACKLOG"),
        ("GID_gone", "", T, "1", "90", "2530", "2441", "EXPIRED"),
        ("GID_gone", "", T, "1", "2531", "10799", "8269", "BACKLOG"),
    ]
    assert _rows(_read(out, "offset_corrections"), "consumer_group", "queue_id", "snapshot_ts", "committed_offset",
                 "min_offset", "max_offset", "corrected_offset", "lost_messages", "reason") == [
        ("GID_gone", "0", "2026-01-10T00:00:00.000Z", "90", "2531", "10800", "2531", "2441", "BELOW_MIN"),
        ("GID_gone", "1", "2026-01-10T00:00:00.000Z", "90", "2531", "10800", "2531", "2441", "BELOW_MIN"),
    ]


def test_expired_offset_returning_group_jumps_to_min() -> None:
    import tempfile

    from jobs.simulate.scenarios import expired_offset

    with tempfile.TemporaryDirectory() as d:
        w = expired_offset(d, 7)
    b = w.brokers[0]
    commits = [(t, off) for t, topic, g, q, off in b.offsets.history if g == "GID_back" and topic == T and q == 0]
    returned = [c for c in commits if c[0] >= w.loop.start + 4 * 86400_000 + 12 * 3600_000]
    min_then = [s.bounds[(T, 0)][0] for s in w.writer.broker_snaps if s.ts == w.loop.start + 4 * 86400_000 + 12 * 3600_000]
    # the pull piggybacks the stale 90, gets OFFSET_TOO_SMALL and the client commits nextBeginOffset = MinOffset
    assert returned[0][1] == 90
    assert [off for _, off in returned if off != 90][0] == min_then[0] == 2531


def test_skip_accumulated_reports_the_skipped_backlog(landing) -> None:
    out = landing("skip-accumulated")
    assert _rows(_read(out, "unconsumed_ranges"), *RANGE, "kind") == [
        (G, "", T, "0", "148", "297", "150", "SKIPPED"), (G, "", T, "1", "147", "296", "150", "SKIPPED")]
    assert _read(out, "duplicated_ranges") == []


def test_rewind_reports_the_decrease_then_the_trace_duplicates(landing) -> None:
    out = landing("rewind")
    assert _rows(_read(out, "duplicated_ranges"), *RANGE, "evidence", "cause") == [
        (G, "", T, "0", "73", "222", "150", "REWIND", "REWIND"),
        (G, "", T, "0", "73", "222", "150", "TRACE", "REWIND"),
        (G, "", T, "1", "72", "221", "150", "REWIND", "REWIND"),
        (G, "", T, "1", "72", "221", "150", "TRACE", "REWIND"),
    ]


def test_broadcast_per_client_offsets_and_the_dropped_message(landing) -> None:
    out = landing("broadcast")
    status = _rows(_read(out, "consumer_status"), "client_id", "queue_id", "committed_offset", "status")
    clients = sorted({s[0] for s in status})
    assert len(clients) == 3 and all(c.endswith("@DEFAULT") for c in clients)
    assert status == [(c, q, off, "OK") for c in clients for q, off in (("0", "236"), ("1", "235"))]
    failed = clients[1]
    assert _rows(_read(out, "unconsumed_ranges"), *RANGE, "kind") == [
        ("GID_bcast", failed, T, "1", "20", "20", "1", "BROADCAST_DROPPED")]  # one kind per offset: not SKIPPED too
    assert _rows(_read(out, "dlq_candidates"), "client_id", "queue_id", "queue_offset", "reconsume_times",
                 "max_reconsume_times", "reason", "dlq_eta_ts") == [(failed, "1", "20", "0", "0", "BROADCAST_DROPPED", "")]
    offsets = sorted(p.relative_to(out).as_posix() for p in out.glob("cluster=*/clients/*/*/*/offsets.json*"))
    assert len(offsets) == 5 * 3 * 2  # 5 snapshots x 3 clients x (file + .bak: persisted every 5 s)


def test_rebalance_duplicates_only_unpersisted_progress(landing) -> None:
    import tempfile

    from jobs.simulate.scenarios import rebalance
    from jobs.simulate.truth import Truth

    with tempfile.TemporaryDirectory() as d:
        w = rebalance(d, 7)
        truth = Truth(w)
    rows = truth.duplicated_ranges()
    assert [(r["queue_id"], r["start_offset"], r["end_offset"], r["evidence"]) for r in rows] == [
        (2, 1999, 2028, "TRACE"), (3, 1999, 2027, "TRACE")]
    # every duplicated offset was delivered by the first owner at or after the offset the new owner read from the
    # broker (the progress the first owner had not persisted yet), and by the new owner again
    first, second = sorted({c.ip for c in w.consumers})
    for r in rows:
        for o in range(r["start_offset"], r["end_offset"] + 1):
            who = sorted(d.ip for d in w.deliveries if d.mq.queue_id == r["queue_id"] and d.msg.queue_offset == o
                         and d.mq.topic == T)
            assert who == [first, second]
        moved = [pq for c in w.consumers if c.ip == second for pq in c.all_pqs if pq.mq.queue_id == r["queue_id"]]
        assert min(min(pq.timeline) for pq in moved) == r["start_offset"]
    out = landing("rebalance")
    assert len(_read(out, "duplicated_ranges")) == 2


def _digest(folder: str) -> str:
    h = hashlib.sha256()
    for d, _, names in sorted(os.walk(folder)):
        for n in sorted(names):
            p = os.path.join(d, n)
            h.update(os.path.relpath(p, folder).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def test_same_seed_gives_byte_identical_output(tmp_path: pathlib.Path) -> None:
    simulate.run("out-of-order-acks", str(tmp_path / "a"), seed=3)
    simulate.run("out-of-order-acks", str(tmp_path / "b"), seed=3)
    simulate.run("out-of-order-acks", str(tmp_path / "c"), seed=4)
    assert _digest(str(tmp_path / "a")) == _digest(str(tmp_path / "b"))
    assert _digest(str(tmp_path / "a")) != _digest(str(tmp_path / "c"))


def test_orderly_blocked_is_orderly_blocked_at_40_never_retrying_and_stalls(landing) -> None:
    import tempfile

    from jobs.simulate.scenarios import orderly_blocked
    from jobs.simulate.truth import Truth

    with tempfile.TemporaryDirectory() as d:
        w = orderly_blocked(d, 7)
        truth = Truth(w)
    head = [m for m in w.stored if (m.topic, m.queue_id, m.queue_offset) == (T, 1, 40)][0]
    attempts = [d for d in truth.deliveries["GID_orderly"] if d.uniq == head.uniq]
    # re-consumed locally about every second (suspendCurrentQueueTimeMillis), retryTimes counting up, never sent back
    assert [d.retry_times for d in attempts] == list(range(len(attempts))) and len(attempts) > 1700
    assert all(d.success is False for d in attempts)
    assert all(1000 <= b.start - a.start <= 1100 for a, b in zip(attempts, attempts[1:]))
    assert not [m for m in w.stored if m.topic in ("%RETRY%GID_orderly", "%DLQ%GID_orderly")
                or m.props.get("REAL_TOPIC") == "%RETRY%GID_orderly"]
    out = landing("orderly-blocked")
    dlq = _read(out, "dlq_candidates")
    assert _rows(dlq, "consumer_group", "topic", "queue_id", "queue_offset", "uniq_key", "reconsume_times",
                 "max_reconsume_times", "reason", "dlq_eta_ts", "producer_group") == [
        ("GID_concurrent", T, "0", "25", dlq[0]["uniq_key"], "9", "16", "RETRYING", dlq[0]["dlq_eta_ts"], ""),
        ("GID_orderly", T, "1", "40", head.uniq, str(len(attempts) - 1), "2147483647", "ORDERLY_BLOCKED", "", "")]
    assert dlq[1]["last_attempt_ts"] == "2026-01-05T00:32:59.462Z" and dlq[0]["dlq_eta_ts"] != ""
    status = _read(out, "consumer_status")
    modes = {(r["consumer_group"], r["topic"]): r["consume_mode"] for r in status}
    # 4.x orderly: known by its local redeliveries, its %RETRY% stays concurrent; 5.x FIFO: by the flag, everywhere
    assert modes == {("GID_concurrent", T): "CONCURRENT", ("GID_concurrent", "%RETRY%GID_concurrent"): "CONCURRENT",
                     ("GID_fifo", T): "ORDERLY", ("GID_fifo", "%RETRY%GID_fifo"): "ORDERLY",
                     ("GID_orderly", T): "ORDERLY", ("GID_orderly", "%RETRY%GID_orderly"): "CONCURRENT"}
    stuck = [r for r in status if r["status"] != "OK"]
    assert _rows(stuck, *STATUS, "inflight") == [("GID_orderly", "", T, "1", "40", "0", "463", "423", "STALL", "0")]
    assert _rows(_read(out, "unconsumed_ranges"), *RANGE, "kind") == [
        ("GID_orderly", "", T, "1", "40", "462", "423", "BACKLOG")]
    assert _read(out, "duplicated_ranges") == [] and _read(out, "offset_corrections") == []


def test_store_types_truth_judges_each_store_by_what_its_files_support(landing) -> None:
    """Spec §7 store-types: only broker-a's plain topic expires (its compaction topic and tiered broker-b serve the
    old offsets), the discarded transaction is the producer's, and each store type has its coverage row."""
    out = landing("store-types")
    assert _rows(_read(out, "unconsumed_ranges"), "consumer_group", "topic", "broker", "queue_id", "start_offset",
                 "end_offset", "kind") == [
        ("GID_compact", "TopicCompact", "broker-a", "0", "424", "1799", "BACKLOG"),
        ("GID_compact", "TopicCompact", "broker-a", "1", "424", "1799", "BACKLOG"),
        ("GID_compact", "TopicCompact", "broker-b", "0", "15", "1799", "BACKLOG"),
        ("GID_compact", "TopicCompact", "broker-b", "1", "15", "1799", "BACKLOG"),
        ("GID_plain", T, "broker-a", "0", "15", "423", "EXPIRED"),
        ("GID_plain", T, "broker-a", "0", "424", "1799", "BACKLOG"),
        ("GID_plain", T, "broker-a", "1", "15", "423", "EXPIRED"),
        ("GID_plain", T, "broker-a", "1", "424", "1799", "BACKLOG"),
        ("GID_plain", T, "broker-b", "0", "15", "1799", "BACKLOG"),
        ("GID_plain", T, "broker-b", "1", "15", "1799", "BACKLOG")]
    assert _rows(_read(out, "offset_corrections"), "consumer_group", "broker", "queue_id", "committed_offset",
                 "corrected_offset", "lost_messages", "reason") == [
        ("GID_plain", "broker-a", "0", "15", "424", "409", "BELOW_MIN"),
        ("GID_plain", "broker-a", "1", "15", "424", "409", "BELOW_MIN")]
    assert _rows(_read(out, "dlq_candidates"), "consumer_group", "topic", "broker", "queue_id", "queue_offset", "keys",
                 "reason", "producer_group") == [("", T, "broker-a", "1", "", "tx-1", "TRANSACTION_DISCARDED",
                                                  "PID_sim")]
    assert _rows(_read(out, "coverage"), "broker", "topic", "consumer_group", "queue_id", "reason") == [
        ("", "", "GID_compact", "", "NO_TRACE"), ("", "", "GID_plain", "", "NO_TRACE"),
        ("broker-a", "", "", "", "STALE_JSON_IGNORED"), ("broker-a", "TopicCompact", "", "", "COMPACTION_TOPIC"),
        ("broker-b", "", "", "", "STALE_JSON_IGNORED"), ("broker-b", "", "", "", "TIERED"),
        ("broker-b", "TopicBatch", "", "", "BATCH_CQ")]
    # the files a 5.x broker leaves: RocksDB config beside frozen JSON, the tier's metadata, a batch consume queue
    last = out / "cluster=DefaultCluster" / "broker=broker-b" / "snapshot_ts=20260110T000000Z" / "store"
    assert sorted(p.name for p in (last / "batchconsumequeue" / "TopicBatch").iterdir()) == ["0", "1"]
    assert not (last / "consumequeue" / "TopicBatch").exists()
    assert (last / "config" / "rdb" / "CURRENT").exists() and (last / "config" / "tieredStoreMetadata.json").exists()
    a = out / "cluster=DefaultCluster" / "broker=broker-a" / "snapshot_ts=20260110T000000Z" / "store"
    assert (a / "consumequeue" / "CURRENT").exists() and not (a / "consumequeue" / T).exists()
    first = out / "cluster=DefaultCluster" / "broker=broker-a" / "snapshot_ts=20260105T120000Z" / "store" / "config"
    assert not (first / "consumerOffsets").exists()
