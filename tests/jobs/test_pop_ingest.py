"""POP checkpoints and acks into silver/pop_checkpoints and silver/pop_acks (issue 36, ingest part): every stored copy
(timer topic, then revive topic) of every ``ck``, ``ack`` and ``bAck`` message, decoded in the engine's decode tasks;
a body no broker writes is quarantined with its position and the rest lands; a second ingest changes nothing."""
from __future__ import annotations

import datetime as dt
import pathlib

import pandas as pd

from jobs.formats import pop
from jobs.formats.commitlog_encode import CommitLogWriter
from jobs.ingest import ingest
from jobs.lake import _delta
from schemas import messages, pop_acks, pop_checkpoints, quarantine

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 6, tzinfo=UTC)
PT = 1767571200000  # 2026-01-05T00:00:00Z
REVIVE = pop.revive_topic("DefaultCluster")
HOSTS = {"born_host": ("10.0.0.1", 1), "store_host": ("10.0.0.2", 10911)}
CK = {"topic": "T", "queue_id": 1, "start_offset": 40, "consumer_group": "G", "pop_time": PT, "invisible_time": 60000,
      "num": 3, "deltas": [0, 1, 2], "broker_name": "broker-a"}
ACK = {"topic": "T", "queue_id": 1, "start_offset": 40, "consumer_group": "G", "pop_time": PT, "ack_offset": 41,
       "broker_name": "broker-a"}
BACK = {**ACK, "ack_offsets": [40, 42]}


def _landing(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[tuple[str, int]]]:
    """One snapshot of broker-a: a user message, then each POP message as the broker stores it (timer copy, re-put),
    a CK body no broker writes in the revive topic, and a timer message tagged ``ck`` for a user topic."""
    store = tmp_path / "landing" / "cluster=DefaultCluster" / "broker=broker-a" / "snapshot_ts=20260105T001000Z" / "store"
    w = CommitLogWriter(str(store / "commitlog"), segment_size=64 * 1024)
    at: list[tuple[str, int]] = []

    def put(topic: str, qid: int, props: dict[str, str], body: bytes, ts: int) -> None:
        phys, _ = w.append(topic=topic, queue_id=qid, queue_offset=len(at), body=body, properties=props,
                           born_ts_ms=ts, store_ts_ms=ts, **HOSTS)
        at.append((topic, phys))

    put("T", 1, {"UNIQ_KEY": "K40", "TAGS": "ck"}, b"user", PT - 1000)
    for copy, ts in zip(pop.ck_message_properties(CK, revive_topic=REVIVE, revive_queue_id=3, put_ms=PT),
                        (PT, PT + 59000)):
        put(copy.topic, copy.queue_id, copy.properties, pop.encode_checkpoint(CK), ts)
    for copy, ts in zip(pop.ack_message_properties(ACK, invisible_time=60000, revive_topic=REVIVE, revive_queue_id=3,
                                                   put_ms=PT + 5000), (PT + 5000, PT + 60000)):
        put(copy.topic, copy.queue_id, copy.properties, pop.encode_ack(ACK), ts)
    back = pop.ack_message_properties(BACK, invisible_time=60000, revive_topic=REVIVE, revive_queue_id=3,
                                      put_ms=PT + 6000, batch=True)[-1]
    put(back.topic, back.queue_id, back.properties, pop.encode_batch_ack(BACK), PT + 60000)
    put(REVIVE, 3, {"TAGS": "ck", "UNIQ_KEY": "bad"}, b'{"so":1}', PT + 61000)
    put(pop.TIMER_TOPIC, 0, {"TAGS": "ck", "REAL_TOPIC": "UserTopic", "REAL_QID": "0", "UNIQ_KEY": "U1"},
        b"not a checkpoint", PT + 62000)
    w.close()
    return tmp_path / "landing", at


def test_each_stored_copy_of_a_checkpoint_and_ack_lands_and_a_bad_body_is_quarantined(tmp_path: pathlib.Path) -> None:
    landing, at = _landing(tmp_path)
    lake = str(tmp_path / "lake")
    first = ingest.run(str(landing), lake, now=NOW)
    cks = _delta.read_pandas(lake, pop_checkpoints.TABLE).sort_values("physical_offset")
    assert cks[["physical_offset", "stored_topic", "topic", "queue_id", "start_offset", "consumer_group", "pop_time",
                "broker_name", "invisible_time", "bitmap", "num", "revive_time"]].values.tolist() == [
        [at[1][1], pop.TIMER_TOPIC, "T", 1, 40, "G", PT, "broker-a", 60000, 0, 3, PT + 60000],
        [at[2][1], REVIVE, "T", 1, 40, "G", PT, "broker-a", 60000, 0, 3, PT + 60000]]
    assert [list(d) for d in cks["deltas"]] == [[0, 1, 2], [0, 1, 2]]
    stored = [int(pd.Timestamp(t).tz_localize(None).value // 1_000_000) for t in cks["store_ts"]]
    assert stored == [PT, PT + 59000]
    acks = _delta.read_pandas(lake, pop_acks.TABLE).sort_values("physical_offset")
    assert acks[["physical_offset", "stored_topic", "topic", "queue_id", "start_offset", "consumer_group", "pop_time",
                 "broker_name", "kind"]].values.tolist() == [
        [at[3][1], pop.TIMER_TOPIC, "T", 1, 40, "G", PT, "broker-a", "ack"],
        [at[4][1], REVIVE, "T", 1, 40, "G", PT, "broker-a", "ack"],
        [at[5][1], REVIVE, "T", 1, 40, "G", PT, "broker-a", "bAck"]]
    assert [list(a) for a in acks["ack_offsets"]] == [[41], [41], [40, 42]]
    q = _delta.read_pandas(lake, quarantine.TABLE)
    seg = "cluster=DefaultCluster/broker=broker-a/snapshot_ts=20260105T001000Z/store/commitlog/00000000000000000000"
    assert q[["source_path", "position"]].values.tolist() == [[seg, at[6][1]]]
    assert q["reason"].tolist() == [f"POP ck message 5 at byte {at[6][1]}: 't' missing; skipped"]
    # every record is a message too (the user topic's timer message included), as before
    assert len(_delta.read_pandas(lake, messages.TABLE)) == 8
    assert first["changed_rows"][pop_checkpoints.TABLE.qualified] == 2
    assert first["changed_rows"][pop_acks.TABLE.qualified] == 3
    again = ingest.run(str(landing), lake, now=NOW)
    assert (again["snapshots"], again["changed_rows"]) == (0, {})
    assert len(_delta.read_pandas(lake, pop_acks.TABLE)) == 3


def test_the_pop_tables_pass_their_expectation_suites(tmp_path: pathlib.Path) -> None:
    """The silver suites (expectations/pop.py) pass on the tables the ingest wrote; nothing else is skipped for them."""
    from jobs.ops import quality

    landing, _ = _landing(tmp_path)
    lake = str(tmp_path / "lake")
    ingest.run(str(landing), lake, now=NOW)
    got = quality.validate_layer(lake, "silver", docs_dir=None, fail=False, now=NOW)
    tables = {t: got["tables"][t] for t in ("silver/pop_checkpoints", "silver/pop_acks")}
    assert {t: (v["success"], v["rows"], v["evaluated"], v["failed"]) for t, v in tables.items()} == {
        "silver/pop_checkpoints": (True, 2, 12, []), "silver/pop_acks": (True, 3, 11, [])}
