"""Issue 12 item 2: the suites run on the engine over the rows one run added, and their results are kept per run.

A lake ingested from ``blocked-head``; a test then writes rows straight into a silver table and records them as a
completed ingest run (a negative offset, and a key that is already in the table), and checks the exact rows of
gold/validation_results, the command line's exit code and line, and that validating again changes nothing.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from jobs.ingest import ingest
from jobs.lake import _delta, ledger, lookups
from jobs.ops import quality
from jobs.problems import UsageError
from schemas import consumer_offsets, validation_results

ROOT = pathlib.Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc
TS = dt.datetime(2026, 1, 5, 0, 4, tzinfo=UTC)
NOW = dt.datetime(2026, 1, 6, 12, 0, tzinfo=UTC)
PLANTED = "ingest-20260106T120000Z-planted0"
KEY = "cluster,broker,snapshot_ts,consumer_group,topic,queue_id,client_id"
ROWS = {"silver/consumer_offsets": 8, "silver/deliveries": 2301, "silver/messages": 2641, "silver/queue_bounds": 8,
        "silver/subscription_groups": 4, "silver/topic_configs": 28}
# silver/messages: its suite's 11 and the indexed rule (every copy once in silver/key_index)
EVALUATED = {"silver/consumer_offsets": 11, "silver/deliveries": 8, "silver/messages": 12, "silver/queue_bounds": 11,
             "silver/subscription_groups": 7, "silver/topic_configs": 11}


OK = [("silver/consumer_offsets", "expect_column_values_to_not_be_null", c, True, "[]", 2, 0)
      for c in ("broker", "client_id", "cluster", "consumer_group", "queue_id", "snapshot_ts", "topic")]
PLANTED_ROWS = [
    ("silver/consumer_offsets", "expect_column_values_to_be_between", "committed_offset", False, '["-5"]', 2, 1),
    ("silver/consumer_offsets", "expect_column_values_to_be_between", "queue_id", True, "[]", 2, 0),
    *OK,
    ("silver/consumer_offsets", "expect_compound_columns_to_be_unique", KEY, False,
     '[{"broker": "broker-a", "client_id": "", "cluster": "DefaultCluster", "consumer_group": "GID_recon", '
     '"queue_id": "0", "rows": 2, "snapshot_ts": "2026-01-05 00:04:00", "topic": "TopicTest"}]', 2, 1),
    ("silver/consumer_offsets", "expect_table_columns_to_match_set", "", True,
     '["broker", "client_id", "cluster", "committed_offset", "consumer_group", "is_retry_topic", "queue_id", '
     '"snapshot_ts", "source_file", "topic", "used_backup"]', None, None)]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """blocked-head (snapshots 00:04-00:13 of 2026-01-05, one broker, group GID_recon) simulated and ingested."""
    from jobs import simulate

    root = tmp_path_factory.mktemp("quality")
    simulate.run("blocked-head", str(root / "landing"), seed=7)
    ingest.run(str(root / "landing"), str(root / "lake"))
    return root / "lake"


@pytest.fixture()
def lake(ingested: pathlib.Path, tmp_path: pathlib.Path) -> str:
    shutil.copytree(ingested, tmp_path / "lake")
    return str(tmp_path / "lake")


def plant(spark, lake: str) -> None:  # noqa: ANN001
    """Append two offsets rows as if an ingest run loaded them: one negative, one over a key the table has."""
    rows = [("DefaultCluster", "broker-a", TS, "GID_recon", "TopicTest", 0, "", 2102, False, "planted", False),
            ("DefaultCluster", "broker-a", TS + dt.timedelta(hours=1), "GID_recon", "TopicTest", 0, "", -5, False,
             "planted", False)]
    t = consumer_offsets.TABLE
    spark.createDataFrame(rows, t.schema).write.format("delta").mode("append").save(t.path(lake))
    later = dt.datetime.now(UTC).replace(microsecond=0) + dt.timedelta(hours=1)  # after the real ingest's row
    ledger.record_ingest(spark, lake, {"run_id": PLANTED, "started_at": later, "completed_at": later, "landing": "test",
                                       "snapshots": 0, "files": 0, "quarantined": 0, "changed_rows": {},
                                       "table_versions": ledger.versions(lake, ingest.LEDGER_TABLES)})


def results(lake: str, validation_id: str) -> list[tuple]:
    t = validation_results.TABLE
    df = _delta.read_pandas(lake, t, filters=[("validation_id", "=", validation_id)])
    df = df.astype(object).where(df.notna(), None).sort_values(["table_name", "expectation", "column"])
    return [tuple(r) for r in df.drop(columns=["validation_id", "layer", "validated_at"]).itertuples(index=False)]


def cli(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_LOG": "warn,sail_common::actor=error"}
    p = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_the_first_ingest_is_validated_whole_and_its_results_kept(lake: str) -> None:
    run_id = ledger.last_ingest(lake)["run_id"]
    out = quality.validate_layer(lake, "silver", now=NOW, docs_dir=None)
    assert out == {"validation_id": run_id, "layer": "silver", "success": True, "failures": [], "tables": {
        **{t: {"success": True, "rows": n, "failed": [], "evaluated": EVALUATED[t]} for t, n in ROWS.items()},
        # a 4.x store without POP consumers: the ingest has written no store feature, checkpoint, ack or order info,
        # so those tables do not exist yet
        **{t: {"success": True, "rows": 0, "failed": [], "evaluated": 0, "skipped": "table not created yet"}
           for t in ("silver/store_features", "silver/pop_checkpoints", "silver/pop_acks", "silver/order_info")}}}
    kept = results(lake, run_id)
    assert len(kept) == sum(EVALUATED.values()) == 60
    assert [r for r in kept if r[0] == "silver/messages"] == [
        ("silver/messages", "expect_column_values_to_be_between", c, True, "[]", 2641, 0)
        for c in ("physical_offset", "queue_offset", "reconsume_times", "size")] + [
        ("silver/messages", "expect_column_values_to_not_be_null", c, True, "[]", 2641, 0)
        for c in ("broker", "cluster", "physical_offset", "queue_offset", "topic")] + [
        # the key: an INNER_BATCH record's messages share its physical offset (issue 35)
        ("silver/messages", "expect_compound_columns_to_be_unique", "cluster,broker,physical_offset,queue_offset",
         True, "[]", 2641, 0),
        # every copy with a UNIQ_KEY once in silver/key_index, with its hash (issue 39; every message of blocked-head
        # has one, the trace messages too)
        ("silver/messages", "expect_stored_copies_to_be_indexed", "cluster,broker,physical_offset,queue_offset,key_hash",
         True, "[]", 2641, 0),
        ("silver/messages", "expect_table_columns_to_match_set", "", True,
         '["born_host", "born_ts", "broker", "cluster", "first_snapshot_ts", "keys", "offset_msg_id", '
         '"physical_offset", "properties", "queue_id", "queue_offset", "reconsume_times", "segment", "size", '
         '"store_host", "store_ts", "sys_flag", "tags", "topic", "uniq_key"]', None, None)]


def test_planted_violations_fail_with_exact_rows_and_a_rerun_changes_nothing(spark, lake: str) -> None:  # noqa: ANN001
    plant(spark, lake)
    with pytest.raises(quality.QualityError) as err:
        quality.validate_layer(lake, "silver", run_id=PLANTED, now=NOW, docs_dir=None)
    assert str(err.value) == (
        f"silver validation of {PLANTED} failed: silver/consumer_offsets expect_column_values_to_be_between"
        f"(committed_offset) (1 of 2 rows); silver/consumer_offsets expect_compound_columns_to_be_unique({KEY}) "
        "(1 of 2 rows)")
    # Only consumer_offsets moved in the planted run: the other tables have nothing of it to validate.
    assert results(lake, PLANTED) == PLANTED_ROWS
    commits = len(_delta.history(lake, validation_results.TABLE))
    out = quality.validate_layer(lake, "silver", run_id=PLANTED, fail=False, docs_dir=None)
    assert out["tables"]["silver/messages"] == {"success": True, "rows": 0, "failed": [], "evaluated": 0,
                                                "skipped": "nothing added by this run"}
    assert (results(lake, PLANTED), len(_delta.history(lake, validation_results.TABLE))) == (PLANTED_ROWS, commits)

    code, stdout, stderr = cli("validate", "--lake", lake, "--layer", "silver")
    assert code == 1
    assert stderr.strip().splitlines()[-1] == (
        f"rmq-recon validate: silver validation of {PLANTED} failed: silver/consumer_offsets "
        f"expect_column_values_to_be_between(committed_offset) (1 of 2 rows); silver/consumer_offsets "
        f"expect_compound_columns_to_be_unique({KEY}) (1 of 2 rows)")
    assert (results(lake, PLANTED), len(_delta.history(lake, validation_results.TABLE))) == (PLANTED_ROWS, commits)


def test_the_key_rule_split_into_buckets_finds_the_same(spark, lake: str,  # noqa: ANN001
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets of one increment row (two buckets for the two planted rows): the same results as one bucket."""
    plant(spark, lake)
    monkeypatch.setattr(quality, "BUCKET_ROWS", 1)
    out = quality.validate_layer(lake, "silver", run_id=PLANTED, fail=False, docs_dir=None)
    assert (out["success"], results(lake, PLANTED)) == (False, PLANTED_ROWS)


def test_a_copy_missing_from_the_index_or_indexed_twice_fails_the_indexed_rule(spark, lake: str) -> None:  # noqa: ANN001
    """quality.indexed_rule: the index as the ingest left it passes; one index row deleted (a lost write) and one
    appended again (a doubled write) are the two unexpected copies, named with the rows their key and hash have."""
    from schemas import key_index, messages

    def rule() -> Any:
        inc = quality.Increment("x", "silver", {}, ledger.versions(lake, [key_index.TABLE]))
        increment = _delta.read(spark, lake, messages.TABLE)
        return quality.indexed_rule(spark, lake, inc, increment, lookups.spans(increment))

    ok = rule()
    assert (ok.success, ok.element_count, ok.unexpected_count, ok.observed_value) == (True, 2641, 0, "[]")
    index = _delta.read_pandas(lake, key_index.TABLE).sort_values(["broker", "physical_offset"])
    first, last = index.iloc[0], index.iloc[-1]
    _delta.delta_table(lake, key_index.TABLE).delete(
        f"broker = '{first.broker}' AND physical_offset = {first.physical_offset}")
    _delta.read(spark, lake, key_index.TABLE).where(f"physical_offset = {last.physical_offset}") \
        .write.format("delta").mode("append").save(key_index.TABLE.path(lake))
    bad = rule()
    assert (bad.success, bad.element_count, bad.unexpected_count) == (False, 2641, 2)
    assert json.loads(bad.observed_value) == [
        {"cluster": "DefaultCluster", "broker": "broker-a", "physical_offset": str(p), "queue_offset": str(q),
         "rows": n, "same": n} for p, q, n in ((first.physical_offset, first.queue_offset, 0),
                                                (last.physical_offset, last.queue_offset, 2))]


def test_the_command_line_passes_a_clean_run_and_keeps_the_same_rows_when_run_again(lake: str) -> None:
    run_id = ledger.last_ingest(lake)["run_id"]
    code, stdout, stderr = cli("validate", "--lake", lake, "--layer", "silver", "--run-id", run_id)
    assert (code, stderr.strip().splitlines()[-1]) == (
        0, f"validate: silver/deliveries: 2301 row(s) of {run_id}, 8 expectation(s), passed")
    first, commits = results(lake, run_id), len(_delta.history(lake, validation_results.TABLE))
    assert (len(first), commits) == (60, 1)
    assert cli("validate", "--lake", lake, "--layer", "silver")[0] == 0
    assert (results(lake, run_id), len(_delta.history(lake, validation_results.TABLE))) == (first, 1)


def test_reuse_answers_from_the_kept_rows_without_an_engine(lake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first = quality.validate_layer(lake, "silver", docs_dir=None)

    def no_engine(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("an engine was started")

    monkeypatch.setattr("jobs.lake._spark.session", no_engine)
    assert quality.validate_layer(lake, "silver", reuse=True, docs_dir=None) == first


@pytest.mark.parametrize("args, says", [
    (["--layer", "silver", "--run-id", "ingest-nope"],
     "--run-id ingest-nope: no completed ingest run of that id in {lake}; see bronze/ingest_runs"),
    (["--layer", "gold"], "--lake {lake}: no completed reconcile to validate; run `rmq-recon reconcile` first"),
    (["--layer", "bronze"], None),
], ids=["unknown_ingest_run", "no_reconcile_yet", "unknown_layer"])
def test_usage_errors_exit_2_with_one_line(ingested: pathlib.Path, args: list[str], says: str | None) -> None:
    code, stdout, stderr = cli("validate", "--lake", str(ingested), *args)
    lines = stderr.strip().splitlines()
    if says is None:
        assert (code, len(lines)) == (2, 1) and "argument --layer: invalid choice: 'bronze'" in lines[0]
    else:
        assert (code, lines) == (2, [f"rmq-recon validate: error: {says.format(lake=ingested)}"])


def test_a_lake_without_a_completed_ingest(tmp_path: pathlib.Path) -> None:
    with pytest.raises(UsageError) as err:
        quality.validate_layer(str(tmp_path), "silver")
    assert str(err.value) == f"--lake {tmp_path}: no completed ingest to validate; run `rmq-recon ingest` first"


def test_gold_validates_one_reconcile_runs_rows_at_the_versions_it_recorded(spark, lake: str,  # noqa: ANN001
                                                                          tmp_path: pathlib.Path) -> None:
    from jobs.reconcile import reconcile
    from schemas import unconsumed_ranges

    summary = reconcile.run(lake, str(tmp_path / "reports"), run_id="r1")
    out = quality.validate_layer(lake, "gold", docs_dir=str(tmp_path / "docs"))
    rows = {"gold/consumer_status": 2, "gold/dlq_candidates": 0, "gold/duplicated_ranges": 1,
            "gold/offset_corrections": 0, "gold/unconsumed_ranges": 0, "gold/coverage": 0}
    assert {f"gold/{t}": v["rows"] for t, v in summary["tables"].items()} == rows
    assert out == {"validation_id": "r1", "layer": "gold", "success": True, "failures": [], "tables": {
        t: {"success": True, "rows": n, "failed": [], "evaluated": e} for (t, n), e in zip(rows.items(),
                                                                                          (12, 14, 16, 12, 15, 11))}}
    assert (tmp_path / "docs" / "index.html").is_file()
    # A row of r1 written after the run completed is not part of what the run recorded: still valid.
    t = unconsumed_ranges.TABLE
    spark.createDataFrame([("c", "G", "", "T", "b", 0, 9, 5, 0, "LOST", "r1")], t.schema).write.format("delta") \
        .mode("append").save(t.path(lake))
    assert quality.validate_layer(lake, "gold", run_id="r1", docs_dir=None)["success"] is True


def test_a_lake_whose_ingests_landed_no_silver_table_fails_validation(tmp_path: pathlib.Path) -> None:
    """The fifth audit: an ingest that only quarantined an empty consumerOffset.json completed, and validate said
    success with every table 'not created yet' (spec §6: success is never reported on nothing)."""
    config = tmp_path / "landing" / "cluster=c" / "broker=b" / "snapshot_ts=20260105T000000Z" / "store" / "config"
    config.mkdir(parents=True)
    (config / "consumerOffset.json").write_bytes(b"")
    lake = str(tmp_path / "lake")
    summary = ingest.run(str(tmp_path / "landing"), lake, now=NOW)
    assert summary["quarantined"] == 1
    with pytest.raises(UsageError) as err:
        quality.validate_layer(lake, "silver", docs_dir=None)
    assert str(err.value) == (f"--lake {lake}: no silver table exists yet (run {summary['run_id']} wrote none): "
                              "nothing to validate; ingest a landing zone that holds RocketMQ files first")


def test_the_key_rule_reads_a_position_keyed_table_in_the_increments_ranges_only(spark) -> None:  # noqa: ANN001
    """quality.in_spans: silver/key_index rows of the increment's brokers and commitlog ranges (a duplicate of an
    increment key can lie nowhere else); a table not keyed by position is left whole."""
    from schemas import key_index

    schema = "cluster string, key_hash long, broker string, physical_offset long, queue_offset long"
    table = spark.createDataFrame([("c", 1, "a", 100, 1), ("c", 2, "a", 900, 2), ("c", 3, "b", 150, 3),
                                   ("c", 4, "a", 200, 4), ("d", 5, "a", 150, 5)], schema)
    increment = spark.createDataFrame([("c", 1, "a", 100, 1), ("c", 4, "a", 200, 4)], schema)
    spans = lookups.spans(increment)
    assert spans == {("c", "a"): (100, 201)}
    got = quality.in_spans(table, spans, key_index.TABLE)
    assert sorted(tuple(r) for r in got.collect()) == [("c", 1, "a", 100, 1), ("c", 4, "a", 200, 4)]
    assert quality.in_spans(table, spans, consumer_offsets.TABLE) is table
    assert quality.in_spans(None, spans, key_index.TABLE) is None
    assert quality.in_spans(table, {}, key_index.TABLE).count() == 0


def test_the_indexed_rule_reads_only_the_index_rows_the_run_added(spark, tmp_path: pathlib.Path,  # noqa: ANN001
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A second ingest's copies are checked against the index files that run added (the first run's index is not
    read); a copy of the run doubled or lost in those files still fails; once silver/messages was rewritten in the
    run (a compaction here), the whole index is read again."""
    from deltalake import DeltaTable

    from jobs import simulate
    from schemas import key_index, messages

    landing, early, lake = tmp_path / "landing", tmp_path / "early", str(tmp_path / "lake")
    simulate.run("blocked-head", str(landing), seed=7)
    shutil.copytree(landing, early)
    for late in early.glob("cluster=*/broker=*/snapshot_ts=20260105T001[03]00Z"):
        shutil.rmtree(late)
    ingest.run(str(early), lake)
    ingest.run(str(landing), lake)
    inc = quality.resolve(lake, "silver")
    increment = quality.extract_increment(spark, lake, messages.TABLE, inc)
    copies = int(increment.toPandas()["uniq_key"].notna().sum())
    assert copies == 10
    read = []
    real_read = _delta.read
    monkeypatch.setattr(_delta, "read", lambda s, l, t, **k: read.append(t.qualified) or real_read(s, l, t, **k))

    def rule() -> Any:
        now = quality.Increment(inc.validation_id, "silver", inc.before,
                                ledger.versions(lake, [messages.TABLE, key_index.TABLE]))
        return quality.indexed_rule(spark, lake, now, increment, lookups.spans(increment))

    ok = rule()
    assert ((ok.success, ok.element_count, ok.unexpected_count), read) == ((True, copies, 0), [])
    gained = _delta.added_since(spark, lake, key_index.TABLE, inc.before[key_index.TABLE.qualified]).toPandas()
    assert len(gained) == copies
    ordered = gained.sort_values(["physical_offset", "queue_offset"])
    doubled, lost = ordered.iloc[0], ordered.iloc[-1]
    _delta.read(spark, lake, key_index.TABLE).where(f"physical_offset = {doubled.physical_offset}") \
        .write.format("delta").mode("append").save(key_index.TABLE.path(lake))
    DeltaTable(key_index.TABLE.path(lake)).delete(f"physical_offset = {lost.physical_offset}")
    bad = rule()
    assert (bad.success, bad.unexpected_count) == (False, 2)
    assert [(int(r["physical_offset"]), r["rows"]) for r in json.loads(bad.observed_value)] == [
        (int(doubled.physical_offset), 2), (int(lost.physical_offset), 0)]
    read.clear()
    DeltaTable(messages.TABLE.path(lake)).optimize.compact()  # silver/messages rewritten: the whole index
    again = rule()
    assert ((again.success, again.unexpected_count), read) == ((False, 2), ["silver/key_index"])
