"""Issue 5 exactness: every §7 scenario (and `mixed` at several seeds) through simulate -> ingest -> reconcile,
compared with the simulator's independently computed ``_truth`` offset by offset and row by row."""
from __future__ import annotations

import pathlib

import pytest

from exactness import compare

SCENARIOS = ["blocked-head", "queue2-offset32", "out-of-order-acks", "retry-to-dlq", "expired-offset",
             "skip-accumulated", "rewind", "broadcast", "rebalance", "orderly-blocked", "store-types", "pop"]
# Scenarios whose cause column the spec states outright (§7), compared strictly.
STRICT_CAUSE = {"blocked-head"}


def _pipeline(tmp_path: pathlib.Path, scenario: str, seed: int) -> tuple[pathlib.Path, pathlib.Path, dict]:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    landing, lake, out = tmp_path / "landing", tmp_path / "lake", tmp_path / "reports"
    simulate.run(scenario, str(landing), seed=seed, scale=1)
    ingest.run(str(landing), str(lake))
    summary = reconcile.run(str(lake), str(out), run_id="e2e")
    return pathlib.Path(summary["report_dir"]), landing / "_truth", summary


@pytest.mark.integration
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_reports_equal_truth(tmp_path: pathlib.Path, scenario: str) -> None:
    report_dir, truth, _ = _pipeline(tmp_path, scenario, seed=7)
    assert compare(report_dir, truth, strict_cause=scenario in STRICT_CAUSE) == []


@pytest.mark.integration
@pytest.mark.parametrize("seed", [7])
def test_mixed_reports_equal_truth(tmp_path: pathlib.Path, seed: int) -> None:
    """Causes included: seed 7 (the demo's) has a message hung for 15 min that cleanExpireMsg sent back, whose
    offset then no longer pins the commit (rule 12a; before, a later duplicate was HEAD_BLOCKED, not UNPERSISTED).
    Seed 1's full run is compared with its truth, causes included, in test_horizon (the session's mixed_world), seed
    4's in tests/infra/test_s3_pipeline.py and, with bulk traffic, below; more seeds at benchmark size in
    tests/benchmarks/bench_exactness.py (seed 2 ran here too until make test passed 30 minutes)."""
    report_dir, truth, _ = _pipeline(tmp_path, "mixed", seed=seed)
    assert compare(report_dir, truth, strict_cause=True) == []


@pytest.mark.integration
@pytest.mark.parametrize("table_format", ["delta", "parquet"])
def test_reingest_changes_nothing_and_reports_equal_truth_in_either_table_format(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, table_format: str) -> None:
    """The simulator preallocates segments like a broker, so the newest one is re-read on every run: a re-read
    that finds no new record must change nothing. Parquet is the format for engines without Delta."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.lake import _delta
    from jobs.reconcile import reconcile
    from schemas import ALL_TABLES

    monkeypatch.setenv("RMQ_RECON_FORMAT", table_format)
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    simulate.run("blocked-head", str(landing), seed=7)
    first = ingest.run(str(landing), str(lake))
    rows = {t.qualified: len(_delta.read_pandas(str(lake), t)) for t in ALL_TABLES if _delta.exists(str(lake), t)}
    assert ingest.run(str(landing), str(lake))["changed_rows"] == {}  # nothing new: the snapshot ledger
    second = ingest.run(str(landing), str(lake), retake=True)  # every folder again: the loads are idempotent
    assert (first["changed_rows"]["silver/messages"], set(second["changed_rows"].values())) == (2641, {0})
    assert {t.qualified: len(_delta.read_pandas(str(lake), t)) for t in ALL_TABLES
            if _delta.exists(str(lake), t)} == rows
    summary = reconcile.run(str(lake), str(tmp_path / "reports"), run_id="e2e")
    assert compare(summary["report_dir"], landing / "_truth", strict_cause=True) == []


@pytest.mark.integration
def test_records_sent_in_small_batches_land_the_same_rows(tmp_path: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest sends trace records and decoded messages to the engine in batches (one Connect message must stay
    under 128 MiB; one MERGE per read window was most of ingest): blocked-head's 6802 trace records in batches
    of 500 and its messages in batches of 300 give the same tables and the same reports."""
    from jobs import simulate
    from jobs.ingest import decode, ingest
    from jobs.lake import _delta
    from jobs.reconcile import reconcile
    from schemas import deliveries, messages, trace_records

    monkeypatch.setattr(decode, "TRACE_BATCH_ROWS", 500)
    monkeypatch.setattr(decode, "MESSAGE_BATCH_ROWS", 300)
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    sim = simulate.run("blocked-head", str(landing), seed=7)
    summary = ingest.run(str(landing), str(lake))
    assert summary["changed_rows"]["bronze/trace_records"] == 6802
    assert [len(_delta.read_pandas(str(lake), t.TABLE)) for t in (trace_records, deliveries)] == [6802, 2301]
    stored = _delta.read_pandas(str(lake), messages.TABLE)
    assert len(stored) == stored[["broker", "physical_offset"]].drop_duplicates().shape[0] == sim["messages_stored"] == 2641
    assert ingest.run(str(landing), str(lake), retake=True)["changed_rows"]["silver/messages"] == 0
    out = reconcile.run(str(lake), str(tmp_path / "reports"), run_id="e2e")
    assert compare(out["report_dir"], landing / "_truth", strict_cause=True) == []


@pytest.mark.integration
def test_mixed_with_bulk_traffic_equals_truth(tmp_path: pathlib.Path,
                                             mixed_bulk_landing: tuple[pathlib.Path, dict]) -> None:
    """``mixed`` past scale 3 adds vectorised traffic on brokers of its own (jobs.simulate.bulk): its records,
    consume queues and group offsets go through the same decoders and reports, exactly as the truth. Of its two
    groups, GID_bulk_0001 stops after 30-80 min: STALL, EXPIRED + BACKLOG and BELOW_MIN on all four queues."""
    import json

    from jobs.ingest import ingest
    from jobs.lake import _delta
    from jobs.reconcile import reconcile
    from schemas import consumer_offsets, messages

    landing, sim = mixed_bulk_landing  # read only
    lake = tmp_path / "lake"
    meta = json.loads((landing / "_truth" / "scenario.json").read_text())
    # Poisson counts around the 40,000 asked for, fixed by the seed; 156,348 -> 167,317 stored with the POP groups'
    # 10,969 records on broker-c (issue 36 item 1: originals, CK/ack timer and revive copies, retry and DLQ copies),
    # and 7 more with the re-put checkpoints of its rePutCK windows (issue 36: 167,324); 7,366 more on broker-d
    # (issue 35: 3,246 messages in TopicInner's batches, 4,120 trace messages)
    assert (meta["brokers"][-1], meta["bulk_messages"], meta["messages_stored"]) == ("broker-bulk-00", 40_114, 174_690)
    ingest.run(str(landing), str(lake))
    stored = _delta.read_pandas_columns(str(lake), messages.TABLE, ["broker", "topic"])
    bulk = stored[stored["broker"] == "broker-bulk-00"]
    # every bulk record reached silver (retention deletes segments only in hour 04, after snapshots captured them)
    assert (bulk["topic"].str.startswith("Bulk")).sum() == 40_114
    offs = _delta.read_pandas(str(lake), consumer_offsets.TABLE)
    assert set(offs[offs["broker"] == "broker-bulk-00"]["consumer_group"]) == {f"GID_bulk_{i:04d}" for i in range(2)}
    summary = reconcile.run(str(lake), str(tmp_path / "reports"), run_id="e2e")
    assert compare(summary["report_dir"], landing / "_truth") == []
    assert sim["messages_stored"] == 174_690
    import pandas as pd

    report = pathlib.Path(summary["report_dir"])
    status = pd.read_csv(report / "consumer_status.csv")
    status = status[status["consumer_group"].str.startswith("GID_bulk_")]
    assert status.groupby("consumer_group")["status"].apply(lambda s: sorted(set(s))).to_dict() == {
        "GID_bulk_0000": ["OK"], "GID_bulk_0001": ["STALL"]}
    unconsumed = pd.read_csv(report / "unconsumed_ranges.csv")
    kinds = unconsumed[unconsumed["consumer_group"] == "GID_bulk_0001"].groupby("kind")["queue_id"].nunique()
    assert kinds.to_dict() == {"BACKLOG": 4, "EXPIRED": 4}


def _world_report(tmp_path: pathlib.Path, w: "object") -> pathlib.Path:
    """Run a hand-built simulator World, write its truth, ingest and reconcile it; the report equals the truth."""
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile
    from jobs.simulate.truth import Truth

    landing, lake = tmp_path / "landing", tmp_path / "lake"
    w.run()  # type: ignore[attr-defined]
    Truth(w).write(str(landing / "_truth"))
    ingest.run(str(landing), str(lake))
    report = pathlib.Path(reconcile.run(str(lake), str(tmp_path / "reports"), run_id="e2e")["report_dir"])
    assert compare(report, landing / "_truth") == []
    return report


@pytest.mark.integration
def test_a_retry_copy_that_hangs_pins_the_retry_queue_and_is_blocking_at_its_original(tmp_path: pathlib.Path) -> None:
    """msg-5 fails its first delivery and two retries; from its third retry copy on, every copy hangs in
    %RETRY%GID_recon (the consumer's thread never returns). cleanExpiredMsg (every 15 min) sends the third copy back
    at 00:30:05, when it has hung for more than 15 min; the fourth copy hangs from 00:30:15 and pins the retry queue's
    committed offset at 01:00. Not a §7 scenario: the report must have BLOCKING_COMMIT at the original (queue 0,
    offset 5) with the fourth copy's delivery, beside RETRYING, and equal the simulator's truth."""
    import csv

    from jobs.simulate.clock import MINUTE, SECOND, T0_MS, iso_ms
    from jobs.simulate.engine import World
    from jobs.simulate.scenarios import GROUP, TOPIC, _ok

    w = World(str(tmp_path / "landing"), 7)
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 1)
    p = w.producer(trace=True)
    w.fill(p, b, TOPIC, 0, 10, at=T0_MS + 30 * SECOND, spacing_ms=100)

    def hang_from_third_retry(c, m):  # noqa: ANN001, ANN202
        if m.keys != "msg-5":
            return _ok(c), "ok"
        return (0, "hang") if m.reconsume >= 3 else (50, "fail")

    w.consumer(GROUP, TOPIC, behaviour=hang_from_third_retry, start_at=T0_MS + 5 * SECOND, from_first=True)
    w.snapshots([T0_MS + m * 10 * MINUTE for m in range(1, 7)])
    report = _world_report(tmp_path, w)
    hung = sorted((d for d in w.deliveries if d.end is None), key=lambda d: d.start)
    retry = f"%RETRY%{GROUP}"
    assert [(d.mq.topic, d.msg.reconsume, d.msg.queue_offset) for d in hung] == [(retry, 3, 2), (retry, 4, 3)]

    def rows(name: str, cols: list[str]) -> list[tuple]:
        with open(report / name, newline="", encoding="utf-8") as f:
            return [tuple(r[c] for c in cols) for r in csv.DictReader(f)]

    assert ("3", "WARN") in [r[1:] for r in rows("consumer_status.csv", ["topic", "committed_offset", "status"])
                             if r[0] == retry]
    start = iso_ms(hung[1].start)
    assert start == "2026-01-05T00:30:15.002Z"
    assert rows("dlq_candidates.csv", ["topic", "queue_id", "queue_offset", "keys", "reconsume_times",
                                       "max_reconsume_times", "reason", "last_attempt_ts"]) == [
        (TOPIC, "0", "5", "msg-5", "4", "16", "BLOCKING_COMMIT", start),
        (TOPIC, "0", "5", "msg-5", "4", "16", "RETRYING", start)]


@pytest.mark.integration
def test_a_broadcast_clients_hung_delivery_is_blocking_for_that_client_only(tmp_path: pathlib.Path) -> None:
    """A broadcast group on 2 clients; the second hangs on queue 1 offset 20 (its thread never returns) and its
    offsets.json stays there. At 00:20 it has hung for more than 15 min (cleanExpiredMsg would take it out only at its
    next run, 00:30:05): BLOCKING_COMMIT for that client, 0 retries of at most 0; the first client is not blocked.
    Not a §7 scenario; the report equals the simulator's truth."""
    import csv

    from jobs.simulate.clock import MINUTE, SECOND, T0_MS, iso_ms
    from jobs.simulate.engine import World
    from jobs.simulate.scenarios import TOPIC, _ok

    w = World(str(tmp_path / "landing"), 7)
    w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=1 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 8 * MINUTE)
    clients: list = []

    def hang_one(c, m):  # noqa: ANN001, ANN202
        return (0, "hang") if c is clients[1] and (m.queue_id, m.queue_offset) == (1, 20) else (_ok(c), "ok")

    for _ in range(2):
        clients.append(w.consumer("GID_bcast", TOPIC, broadcast=True, behaviour=hang_one,
                                  start_at=T0_MS + 5 * SECOND, from_first=True))
    w.snapshots([T0_MS + m * 5 * MINUTE for m in range(1, 5)])
    report = _world_report(tmp_path, w)
    hung = [d for d in w.deliveries if d.end is None]
    assert [(d.client_id, d.msg.queue_id, d.msg.queue_offset) for d in hung] == [(clients[1].client_id, 1, 20)]
    with open(report / "dlq_candidates.csv", newline="", encoding="utf-8") as f:
        got = [(r["client_id"], r["topic"], r["queue_id"], r["queue_offset"], r["reconsume_times"],
                r["max_reconsume_times"], r["reason"], r["last_attempt_ts"]) for r in csv.DictReader(f)]
    assert got == [(clients[1].client_id, TOPIC, "1", "20", "0", "0", "BLOCKING_COMMIT", iso_ms(hung[0].start))]


@pytest.mark.integration
def test_a_transaction_the_producer_never_resolved_is_discarded_with_its_producer_group(tmp_path: pathlib.Path) -> None:
    """Spec §4.3: a transactional half message checked transactionCheckMax (15) times without an answer is moved to
    TRANS_CHECK_MAX_TIME_TOPIC (every 30 s from 00:01: at 00:08:30). One TRANSACTION_DISCARDED row at its real topic
    and queue, no group and no offset, the producer group from PGROUP; the discarded copy is no original message (no
    other report names it), and the report equals the truth."""
    import csv

    from jobs.simulate.clock import MINUTE, SECOND, T0_MS
    from jobs.simulate.consumer import send_unresolved_transaction
    from jobs.simulate.engine import World
    from jobs.simulate.scenarios import GROUP, TOPIC

    w = World(str(tmp_path / "landing"), 7)
    b = w.add_broker("broker-a")
    w.topic(TOPIC, 2)
    p = w.producer(trace=True)
    w.traffic(p, TOPIC, every_ms=2 * SECOND, start=T0_MS + 10 * SECOND, end=T0_MS + 9 * MINUTE)
    w.consumer(GROUP, TOPIC, start_at=T0_MS + 5 * SECOND, from_first=True)
    sent: list[str] = []
    w.at(T0_MS + MINUTE, lambda: sent.append(send_unresolved_transaction(p, b, TOPIC, 1, keys="tx-1", tags="TagA",
                                                                         body=b"order-tx-1")))
    w.snapshots([T0_MS + m * MINUTE for m in (5, 10, 12)])
    report = _world_report(tmp_path, w)
    with open(report / "dlq_candidates.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"cluster": "DefaultCluster", "consumer_group": "", "client_id": "", "topic": TOPIC,
                     "broker": "broker-a", "queue_id": "1", "queue_offset": "", "uniq_key": sent[0], "keys": "tx-1",
                     "reconsume_times": "", "max_reconsume_times": "", "reason": "TRANSACTION_DISCARDED",
                     "last_attempt_ts": "2026-01-05T00:08:30.000Z", "dlq_eta_ts": "", "producer_group": "PID_sim"}]
    half = [m for m in w.stored if m.uniq == sent[0]]
    assert [m.topic for m in half] == ["RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]
