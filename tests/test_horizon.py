"""Issue 12.3: scheduled runs reconcile over a horizon (docs/semantics.md rule 24) and report exactly what one full run
reports, every row and column, and what the simulator's truth says.

`mixed` (seed 1) spans 00:30-06:00 with a snapshot every 30 minutes per broker; a horizon of 2 h cuts it. The runs as
of 03:00 (full: nothing to carry), 04:00, 05:00 and 06:00 (each carrying the one before) are compared with one full
run as of 06:00. Groups whose data crosses the cut (a retry chain of 4 h 46 m, a rewind, a broadcast client's resend)
are computed in full inside the horizon run; the others from the recent part plus the previous run's final rows.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

import pandas as pd
import pytest

from exactness import compare

REPORTS = ["duplicated_ranges", "unconsumed_ranges", "offset_corrections", "dlq_candidates", "consumer_status",
           "coverage"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, mixed_world: pathlib.Path) -> dict:
    import shutil

    from jobs.reconcile import reconcile

    root = tmp_path_factory.mktemp("horizon")
    (root / "landing").symlink_to(mixed_world / "landing")  # read only
    shutil.copytree(mixed_world / "lake", root / "lake")  # the runs write their gold rows into it
    lake, reports = str(root / "lake"), str(root / "reports")
    out = {}
    for hour in ("03", "04", "05", "06"):
        out[hour] = reconcile.run(lake, reports, as_of=f"2026-01-05T{hour}:00:00Z", run_id=f"sched-{hour}",
                                  retention_h=2)
    out["full"] = reconcile.run(lake, reports, as_of="2026-01-05T06:00:00Z", run_id="full-06", full=True)
    return {"root": root, "lake": lake, "summaries": out}


def _gold(lake: str, run_id: str, name: str) -> list[tuple]:
    from jobs.reconcile import gold_runs, reconcile

    table = reconcile.REPORT_MODULES[name].TABLE if name in reconcile.REPORT_MODULES else \
        {**reconcile.DASHBOARD_TABLES, **reconcile.CARRIED_TABLES}[name]
    columns = [c for c in table.schema.fieldNames() if c != "run_id"]  # every column of the gold table
    df = gold_runs.run_rows(lake, gold_runs.run(lake, run_id), table, columns).astype(str)
    return sorted(df.itertuples(index=False, name=None))


@pytest.mark.integration
def test_the_last_scheduled_run_equals_one_full_run_and_the_truth(runs: dict) -> None:
    root, lake = runs["root"], runs["lake"]
    sched, full = root / "reports" / "sched-06", root / "reports" / "full-06"
    for name in REPORTS:
        assert (sched / f"{name}.csv").read_text() == (full / f"{name}.csv").read_text(), name
        assert _gold(lake, "sched-06", name) == _gold(lake, "full-06", name), name
    assert (sched / "offset_corrections.sh").read_text().replace("sched-06", "X") == \
        (full / "offset_corrections.sh").read_text().replace("full-06", "X")
    corrected = sorted(p.relative_to(full) for p in (full / "corrected").rglob("*.json"))
    assert [(sched / p).read_text() for p in corrected] == [(full / p).read_text() for p in corrected]
    # the dashboard's tables too, and what the next run carries (jobs.reconcile.offset_state)
    for name in ("status_samples", "audit_hours", "series_tail", "offset_decreases", "subscription_latest"):
        assert _gold(lake, "sched-06", name) == _gold(lake, "full-06", name), name
    assert compare(sched, root / "landing" / "_truth", strict_cause=True) == []  # causes included
    assert [r[:6] for r in _gold(lake, "sched-06", "duplicated_ranges")] != []  # the comparison saw rows


@pytest.mark.integration
def test_each_scheduled_run_says_what_it_carried_and_computed_in_full(runs: dict) -> None:
    s = runs["summaries"]
    h = {k: v["horizon"] for k, v in s.items()}
    assert [h[k]["mode"] for k in ("03", "04", "05", "06", "full")] == ["full", "horizon", "horizon", "horizon", "full"]
    assert (h["03"]["why_full"], h["full"]["why_full"]) == ("no completed run to carry", "--full")
    assert [h[k].get("previous_run") for k in ("04", "05", "06")] == ["sched-03", "sched-04", "sched-05"]
    assert h["06"]["cut"] == "2026-01-05T04:00:00.000Z"
    print(json.dumps({k: (h[k].get("full_groups"), h[k]["read"]) for k in h}, indent=1))
    # 04:00: a rewind and two resets redeliver messages stored before 02:00: those groups are computed in full (every
    # reason is named, in a stable order)
    assert h["04"]["full_groups"] == {
        "DefaultCluster/GID_001_rewind": "a key delivered after the horizon has a copy stored before it; a key "
                                         "delivered both before and after the horizon",
        "DefaultCluster/GID_009_reset_later": "a key delivered after the horizon has a copy stored before it",
        "DefaultCluster/GID_013_skip": "a key delivered after the horizon has a copy stored before it",
    }
    assert h["05"]["full_groups"] == {}
    # 06:00: the orderly group's head began failing after 05:00 (its first local redelivery: CONCURRENT -> ORDERLY,
    # so sched-05's rows of it were judged by another mode); GID_005_retry_to_dlq's two failing keys were first
    # delivered before 04:00 and retried after it
    assert (h["06"]["full_groups"], h["06"]["read"]["retry_chains"]) == ({
        "DefaultCluster/GID_000_orderly_blocked": "its consume mode changed since the previous run",
        "DefaultCluster/GID_007_expired_return": "a key delivered after the horizon has a copy stored before it; "
                                                 "offsets before the horizon were committed past after the previous "
                                                 "run"}, 2)
    modes = {k: s[k]["groups"]["GID_000_orderly_blocked"]["consume_modes"] for k in ("05", "06")}
    assert modes == {"05": {"%RETRY%GID_000_orderly_blocked": "CONCURRENT", "Topic000": "CONCURRENT"},
                     "06": {"%RETRY%GID_000_orderly_blocked": "CONCURRENT", "Topic000": "ORDERLY"}}


@pytest.mark.integration
def test_a_horizon_run_reads_less_than_a_full_run(runs: dict) -> None:
    read = {k: v["horizon"]["read"] for k, v in runs["summaries"].items()}
    # (issue 36 item 1: mixed's POP groups on broker-c add 10,979 records, 89148 -> 100127, and their offsets: the
    # 06:00 run's series 1680 -> 1772, messages_recent 28592 -> 32297, messages_old_for_order 15601 -> 17405,
    # messages_old_looked_up 72 -> 74; POP groups have no deliveries; issue 36's re-put checkpoints, 6 more: 100133, 2 of them recent: 32299)
    # (issue 35: broker-d's inner batches, 3,245 messages and 4,126 trace messages: 107504, and 6,492 deliveries of
    # GID_inner_*: 68812; the 06:00 run's 6 more keys x 12 snapshots: series 1844; recent 34781, old 18654)
    assert (read["full"]["messages"], read["full"]["deliveries"]) == (107504, 68812)
    carried = "after 2026-01-05T05:00:00.000Z and the previous run's tail"
    assert read["06"] == {"consumer_offsets": carried, "queue_bounds": carried, "series_rows": 1844,
                          "subscription_groups": "after 2026-01-05T05:00:00.000Z and the previous run's latest",
                          "messages_recent": 34781, "messages_old_for_order": 18654, "messages_old_looked_up": 74,
                          "deliveries_recent_and_open": 17850, "deliveries_of_full_groups": 10637,
                          "messages_of_full_groups": "all (relevant_messages)", "retry_chains": 2,
                          # committed offsets below the recent records: 36 that sched-05 looked up (its hits and the
                          # records first held since its cut), 4 new ones searched in every old record
                          "positions_carried": 36, "positions_searched_in_all": 4}
    # the offset series: sched-05's tail (each key's last 48 known snapshots and its newest) plus the snapshots after
    # 05:00, not every snapshot since 00:30
    from jobs.lake import _delta
    from jobs.reconcile import gold_runs
    from schemas import consumer_offsets, series_tail, status_samples

    p = gold_runs.run(runs["lake"], "sched-05")
    tail = pd.concat([gold_runs.run_rows(runs["lake"], p, t.TABLE, ["snapshot_ts"]) for t in (status_samples,
                                                                                             series_tail)])
    co = _delta.read_pandas_columns(runs["lake"], consumer_offsets.TABLE, ["snapshot_ts", "consumer_group", "topic"])
    co = co[~co["consumer_group"].str.contains("@") & ~co["topic"].str.contains("@")]
    # the series holds no system group's offsets (broker-c's POP revive scan commits CID_RMQ_SYS_REVIVE_GROUP's)
    from jobs.formats.topics import is_system_group

    co = co[~co["consumer_group"].map(is_system_group)]
    ts = pd.to_datetime(co["snapshot_ts"], utc=True)
    after = int(((ts > pd.Timestamp("2026-01-05T05:00:00Z")) & (ts <= pd.Timestamp("2026-01-05T06:00:00Z"))).sum())
    # (here each key has 12 snapshots at most: the tail holds all of its 10; test_a_short_tail_... cuts it)
    # (1400 -> 1476 and 280 -> 296 with the POP groups' offsets, issue 36 item 1; 1536 and 308 with the inner
    # batches' 6 keys, issue 35)
    assert (len(tail), after, len(tail) + after) == (1536, 308, read["06"]["series_rows"])
    # the check that old records lie below each queue's lowest recent offset: the previous run's maxima plus the
    # records first held since its cut, also after a full run (sched-03, cut 01:00: it keeps them too)
    from jobs.lake import _delta
    from schemas import messages

    m = _delta.read_pandas_columns(runs["lake"], messages.TABLE, ["topic", "queue_offset", "first_snapshot_ts",
                                                                 "store_ts"])
    m = m[~m["topic"].str.startswith("%") & m["queue_offset"].notna()]
    held = pd.to_datetime(m["first_snapshot_ts"], utc=True)
    at = lambda h: pd.Timestamp(f"2026-01-05T{h}:00:00Z")  # noqa: E731
    assert [read[k]["messages_old_for_order"] for k in ("04", "05", "06")] == [
        int(((held > at("01")) & (held <= at("02"))).sum()), int(((held > at("02")) & (held <= at("03"))).sum()),
        int(((held > at("03")) & (held <= at("04"))).sum())] == [17212, 17270, 18654]
    # so are the look-ups at committed offsets: most positions are the previous run's (its hits and the records first
    # held since its cut), the few new ones are searched in every old record
    assert {k: (read[k]["positions_carried"], read[k]["positions_searched_in_all"]) for k in ("04", "05", "06")} == \
        {"04": (46, 2), "05": (43, 5), "06": (36, 4)}  # with broker-c's POP topics (4 re-put CK records before 02:00) and broker-d's TopicInner
    # the audit: a full run keeps the window's last hour, so the next run carries its hour stats too (issue 39: it
    # used to read the whole window once after a full run, 72723 records here); each run reads the records P did not
    # see (gold/audit_hours equal the full run's: test above)
    from jobs.formats.topics import is_system_topic

    stored, audited = pd.to_datetime(m["store_ts"], utc=True), ~m["topic"].map(is_system_topic)  # (trace topics too)
    seen = lambda a, b: int((audited & ((held > at(a)) | (stored > at(a))) & (held <= at(b))  # noqa: E731
                             & (stored <= at(b))).sum())
    assert [seen("03", "04"), seen("04", "05"), seen("05", "06")] == [4506, 4497, 3324]
    audit = {k: v["horizon"].get("audit") for k, v in runs["summaries"].items()}
    assert audit == {
        "03": {"whole": "a full run", "newest_hour": "2026-01-05T02:00:00Z"},
        "full": {"whole": "a full run", "newest_hour": "2026-01-05T05:00:00Z"},
        # (60556 -> 67830, 3600 -> 3960, 2400 -> 2760: the POP topics' messages, issue 36 item 1; 67834 with the 4
        # re-put CK records before 02:00; 72723, 4497, 3324 with broker-d's inner batches and their traces, issue 35)
        "04": {"carried": "sched-03", "messages_read": 4506, "queues_whole": 0, "newest_hour": "2026-01-05T03:00:00Z"},
        "05": {"carried": "sched-04", "messages_read": 4497, "queues_whole": 0, "newest_hour": "2026-01-05T04:00:00Z"},
        "06": {"carried": "sched-05", "messages_read": 3324, "queues_whole": 0, "newest_hour": "2026-01-05T05:00:00Z"},
    }
    assert read["06"]["messages_recent"] + read["06"]["messages_old_looked_up"] < read["full"]["messages"] / 3
    assert read["06"]["deliveries_recent_and_open"] < read["full"]["deliveries"] / 2


@pytest.mark.integration
@pytest.mark.parametrize("as_of, hours, params, version, expected", [
    ("2026-01-05T06:30:00Z", 1, {}, 0, ("full-06", "")),
    ("2026-01-05T06:30:00Z", 0.25, {}, 0, (None, "the previous run full-06 is older than the horizon")),
    ("2026-01-05T05:30:00Z", 1, {}, 0, ("sched-05", "")),
    ("2026-01-05T06:30:00Z", 1, {"window": 5}, 0,
     (None, "no run since the horizon ran with the same parameters and all groups")),
    ("2026-01-05T06:30:00Z", 1, {"groups": ["GID_001_rewind"]}, 0,
     (None, "no run since the horizon ran with the same parameters and all groups")),
    ("2026-01-05T06:30:00Z", 1, {}, None,
     (None, "snapshots at or before 2026-01-05 06:00:00+00:00 changed since the previous run full-06")),
], ids=["the_latest_run_since_the_cut", "none_since_the_cut", "the_latest_at_or_before_the_as_of_time",
        "another_window_is_not_carried", "a_groups_run_is_not_carried", "a_lake_changed_below_it_is_not_carried"])
def test_which_previous_run_a_run_carries(runs: dict, spark: Any, as_of: str, hours: float, params: dict,
                                          version: int | None, expected: tuple) -> None:
    from jobs.reconcile import horizon, reconcile

    at = reconcile.parse_as_of(as_of)
    want = horizon.params_of(**{"window": 10, "dlq_warn_retries": 3, "blocking_min_age_s": 900, "groups": None,
                                **params})
    run, why = horizon.previous_run(runs["lake"], run_id="next", as_of=at, cut=at - pd.Timedelta(hours=hours),
                                    params=want, folders=horizon.SnapshotFolders(spark, runs["lake"], version))
    assert ((run or {}).get("run_id"), why) == expected


def test_old_maxima_carry_the_previous_runs_and_read_only_records_first_held_since_its_cut(spark) -> None:  # noqa: ANN001
    """horizon.old_maxima / offsets_in_order: a queue's old records lie below its lowest recent offset. With the
    previous run's maxima (as of its cut), only the records first held after that cut are read; a record first held
    since then at or above ``lo`` still sends the run in full."""
    import datetime as dt

    from jobs.reconcile import horizon

    utc = dt.timezone.utc
    t1, t2, t3 = (dt.datetime(2026, 1, 5, h, tzinfo=utc) for h in (1, 2, 3))
    cols = "cluster string, topic string, broker string, queue_id int, queue_offset long, first_snapshot_ts timestamp"
    old_m = spark.createDataFrame([
        ("C", "T", "b", 0, 3, t1), ("C", "T", "b", 0, 4, t1),      # before the previous cut: carried, not read
        ("C", "T", "b", 0, 6, t3), ("C", "T", "b", 1, 2, t3),      # first held since it: read
        ("C", "%RETRY%G", "b", 0, 99, t3), ("C", "T", "b", 0, None, t3),  # a system topic, no offset: left out
    ], cols)
    carried = spark.createDataFrame([("C", "T", "b", 0, 4), ("C", "T", "b", 2, 8)], horizon.OLD_MAX_SCHEMA)

    def rows(df):  # noqa: ANN001, ANN202
        return sorted(tuple(r) for r in df.collect())

    assert rows(horizon.old_maxima(old_m, carried, t2)) == [("C", "T", "b", 0, 6, 1), ("C", "T", "b", 1, 2, 1),
                                                            ("C", "T", "b", 2, 8, 0)]
    assert rows(horizon.old_maxima(old_m)) == [("C", "T", "b", 0, 6, 3), ("C", "T", "b", 1, 2, 1)]
    old_max = horizon.old_maxima(old_m, carried, t2)
    lo = lambda *r: spark.createDataFrame(list(r), "cluster string, topic string, broker string, queue_id int, lo long")  # noqa: E731
    assert horizon.offsets_in_order(lo(("C", "T", "b", 0, 7), ("C", "T", "b", 2, 9)), old_max)
    assert not horizon.offsets_in_order(lo(("C", "T", "b", 0, 6)), old_max)  # the record first held since: 6 >= 6
    assert not horizon.offsets_in_order(lo(("C", "T", "b", 2, 8)), old_max)  # the carried maximum: 8 >= 8


def test_position_hits_carry_the_previous_runs_and_search_every_old_record_only_at_new_positions(spark) -> None:  # noqa: ANN001
    """horizon.position_hits: at a position the previous run looked up, its hits plus the records first held after
    its cut; at a new position, every old record. A record first held before the previous cut at a looked-up position
    it did not report is not searched for (that run saw the same lake below its time: it cannot be there)."""
    import datetime as dt

    from jobs.reconcile import horizon

    utc = dt.timezone.utc
    t1, t2, t3 = (dt.datetime(2026, 1, 5, h, tzinfo=utc) for h in (1, 2, 3))
    cols = ("cluster string, topic string, broker string, queue_id int, queue_offset long, physical_offset long, "
            "first_snapshot_ts timestamp")
    old_m = spark.createDataFrame([
        ("C", "T", "b", 0, 5, 500, t1),   # at a carried position, held before the cut: found through the carry only
        ("C", "T", "b", 0, 5, 900, t3),   # the same position, first held since the cut: searched
        ("C", "T", "b", 1, 7, 700, t1),   # a looked-up position the previous run did not report: not searched
        ("C", "T", "b", 2, 9, 950, t1),   # a new position: every old record
        ("C", "T", "b", 2, 4, 400, t1),   # no position
        ("C", "T", "x", 2, 9, 990, t1),   # another broker: not read for a position on b
    ], cols)
    positions = spark.createDataFrame([("C", "T", "b", 0, 5), ("C", "T", "b", 1, 7), ("C", "T", "b", 2, 9)],
                                      horizon.POSITION_SCHEMA)
    previous = {"horizon": {"positions": horizon.kept_positions(
        spark.createDataFrame([("C", "T", "b", 0, 5), ("C", "T", "b", 1, 7), ("C", "T", "b", 3, 1)],
                              horizon.POSITION_SCHEMA),
        spark.createDataFrame([("C", "T", "b", 0, 5, 500), ("C", "T", "b", 3, 1, 100)], horizon.HIT_SCHEMA), t2)}}

    def rows(df):  # noqa: ANN001, ANN202
        return sorted(tuple(r) for r in df.select("queue_id", "queue_offset", "physical_offset").collect())

    carried = horizon.carried_positions(spark, previous, t3)
    hits, searched = horizon.position_hits(old_m, positions, carried)
    assert (rows(hits), searched) == ([(0, 5, 500), (0, 5, 900), (2, 9, 950)],
                                      {"positions_carried": 2, "positions_searched_in_all": 1})
    full, searched = horizon.position_hits(old_m, positions)
    assert (rows(full), searched) == ([(0, 5, 500), (0, 5, 900), (1, 7, 700), (2, 9, 950)],
                                      {"positions_searched_in_all": 3})
    # a search in every old record reads only the positions' brokers, within each one's range of their offsets
    assert rows(horizon._near(old_m, positions)) == [(0, 5, 500), (0, 5, 900), (1, 7, 700), (2, 9, 950)]
    nulls = spark.createDataFrame([("C", "T", "x", 2, None), ("C", "T", None, 2, 9)], horizon.POSITION_SCHEMA)
    assert rows(horizon._near(old_m, nulls)) == [] == rows(horizon._near(old_m, nulls.limit(0)))  # none can join
    assert horizon.carried_positions(spark, previous, t1) is None  # kept as of a cut after this run's
    assert horizon.carried_positions(spark, {"horizon": {}}, t3) is None  # a full run keeps none
    assert previous["horizon"]["positions"] == {
        "cut": "2026-01-05T02:00:00+00:00", "looked": [["C", "T", "b", 0, 5], ["C", "T", "b", 1, 7], ["C", "T", "b", 3, 1]],
        "hits": [["C", "T", "b", 0, 5, 500], ["C", "T", "b", 3, 1, 100]]}


def test_at_records_come_from_the_previous_runs_records_and_only_fresh_hits_are_read(spark) -> None:  # noqa: ANN001
    """horizon.at_records: a hit whose record the previous run kept is taken from what it kept (the test gives the kept
    copy other keys to tell them apart); a hit it did not keep is read from the old records; the kept rows round-trip
    through the ledger's JSON (store time in microseconds); without kept records every hit is read."""
    import datetime as dt
    import json

    from jobs.reconcile import horizon

    utc = dt.timezone.utc
    t1, t2, t3 = (dt.datetime(2026, 1, 5, h, tzinfo=utc) for h in (1, 2, 3))
    cols = ("cluster string, broker string, physical_offset long, queue_offset long, topic string, queue_id int, "
            "uniq_key string, keys string, store_ts timestamp, first_snapshot_ts timestamp")
    s1, s2 = dt.datetime(2026, 1, 4, 23, 59, 1, 250000, tzinfo=utc), dt.datetime(2026, 1, 5, 0, 30, tzinfo=utc)
    old_m = spark.createDataFrame([
        ("C", "b", 500, 5, "T", 0, "K5", "stored", s1, t1),
        ("C", "b", 950, 9, "T", 2, "K9", None, s2, t1),
        ("C", "b", 990, 10, "T", 2, "K10", "not a hit", s2, t1),
    ], cols)
    hits = spark.createDataFrame([("C", "T", "b", 0, 5, 500), ("C", "T", "b", 2, 9, 950)], horizon.HIT_SCHEMA)
    kept_from = spark.createDataFrame([("C", "b", 500, 5, "T", 0, "K5", "kept", s1, t1),
                                       ("C", "b", 100, 1, "T", 3, "K1", "no longer a hit", s1, t1)], cols)
    positions = spark.createDataFrame([("C", "T", "b", 0, 5), ("C", "T", "b", 3, 1)], horizon.POSITION_SCHEMA)
    kept = horizon.kept_positions(positions, hits.limit(1), t2, kept_from.select(*horizon.AT_COLUMNS))
    assert kept["records"] == [["C", "b", 100, 1, "T", 3, "K1", "no longer a hit", 1767571141250000],
                               ["C", "b", 500, 5, "T", 0, "K5", "kept", 1767571141250000]]
    carried = horizon.carried_positions(spark, {"horizon": {"positions": json.loads(json.dumps(kept))}}, t3)

    def rows(df):  # noqa: ANN001, ANN202
        return sorted(tuple(r) for r in df.select(*horizon.AT_COLUMNS).collect())

    naive = lambda t: t.astimezone(utc).replace(tzinfo=None)  # noqa: E731  (the session's time zone is UTC)
    assert rows(horizon.at_records(old_m, hits, carried, lambda df, _n: df)) == [
        ("C", "b", 500, 5, "T", 0, "K5", "kept", naive(s1)), ("C", "b", 950, 9, "T", 2, "K9", None, naive(s2))]
    assert rows(horizon.at_records(old_m, hits, None, lambda df, _n: df)) == [
        ("C", "b", 500, 5, "T", 0, "K5", "stored", naive(s1)), ("C", "b", 950, 9, "T", 2, "K9", None, naive(s2))]
    del kept["records"]  # a run before the records were kept: every hit is read
    carried = horizon.carried_positions(spark, {"horizon": {"positions": kept}}, t3)
    assert carried["records"] is None
    assert rows(horizon.at_records(old_m, hits, carried, lambda df, _n: df))[0][7] == "stored"


def test_open_entries_are_the_old_deliveries_still_open_and_their_timelines_from_the_one_before(spark, tmp_path) -> None:  # noqa: ANN001
    """horizon.open_entries, exact rows: open (no end, SubAfter first held after the cut, or ending at or after the
    group's first recent delivery) and, on an open delivery's host and queue, every entry from the one just before it;
    an old delivery that ended after another group's first recent delivery but before its own group's is not open
    (it passes the pre-filter on the first recent start of all, not the group's test); other hosts: nothing."""
    import datetime as dt

    from jobs.reconcile import horizon
    from schemas import deliveries

    utc = dt.timezone.utc
    t = lambda h, m=0: dt.datetime(2026, 1, 5, h, m, tzinfo=utc)  # noqa: E731
    cut = t(10)

    def row(group, rid, client, offset, start, end, after, first=t(9)):  # noqa: ANN001, ANN202
        return {"cluster": "C", "consumer_group": group, "request_id": rid, "uniq_key": f"K{rid}", "retry_times": 0,
                "start_ts": start, "end_ts": end, "success": True if end else None, "topic": "T", "broker": "b",
                "queue_id": 0, "queue_offset": offset, "client_host": "10.0.0.1", "client_id": client,
                "trace_broker": "tb", "trace_physical_offset": offset, "first_snapshot_ts": first,
                "after_snapshot_ts": after}

    old = [row("G", "r1", "c1", 1, t(1), t(1, 1), t(2)),       # before the one before the first open: not needed
           row("G", "r2", "c1", 2, t(2), t(2, 1), t(3)),       # the one just before the first open entry
           row("G", "r3", "c1", 3, t(3), None, None),           # open: never ended
           row("G", "r4", "c1", 4, t(4), t(4, 1), t(5)),       # after it on its timeline
           row("G", "r5", "c2", 5, t(5), t(5, 1), t(10, 30)),  # open: SubAfter first held after the cut (alone)
           row("G", "r6", "c3", 6, t(6), t(9, 40), t(9, 50)),  # open: ends after G's first recent start (9:30)
           row("H", "r7", "c4", 7, t(7), t(9, 0), t(9, 5)),    # ends after G's first recent, before H's (9:45)
           row("H", "r8", "c4", 8, t(8), t(8, 1), t(9))]        # ended, on a host with nothing open
    recent = [row("G", "n1", "c9", 9, t(9, 30), t(9, 31), t(11), first=t(11)),
              row("H", "n2", "c9", 10, t(9, 45), t(9, 46), t(11), first=t(11))]
    frame = lambda rows: spark.createDataFrame([tuple(r.get(f.name) for f in deliveries.TABLE.schema.fields)  # noqa: E731
                                                for r in rows], deliveries.TABLE.schema)
    from jobs.lake import _spark

    # the same rows whether the open deliveries and the timelines are computed once (as the run does) or not
    for small in (lambda df, _name: df, _spark.materializer(spark, str(tmp_path / "open"))):
        got = horizon.open_entries(frame(old), frame(recent), cut=cut, small=small)
        assert sorted(r["request_id"] for r in got.collect()) == ["r2", "r3", "r4", "r5", "r6"]
        # no recent delivery: open by their own columns only, r6 ended before the cut (its SubAfter held by then)
        assert sorted(r["request_id"] for r in horizon.open_entries(frame(old), frame(recent).limit(0), cut=cut,
                                                                     small=small).collect()) == ["r2", "r3", "r4", "r5"]


def test_the_snapshot_digest_follows_the_folders_at_or_before_its_time(spark: Any, tmp_path: pathlib.Path) -> None:
    """horizon.SnapshotFolders, computed in the engine: a folder taken after the time leaves the digest as it was; a
    late file in a folder at or before it (a new listing) or a new folder there changes it. The missing inputs are
    each broker's newest folder's."""
    import datetime as dt

    from jobs.lake import _delta
    from jobs.reconcile import horizon
    from schemas import snapshots as ledger

    lake = str(tmp_path / "lake")
    at = {h: dt.datetime(2026, 1, 5, h, tzinfo=dt.timezone.utc) for h in (1, 2, 3)}

    def take(*rows: tuple) -> int:
        df = spark.createDataFrame([("C", b, at[h].replace(tzinfo=None), f"cluster=C/broker={b}/{h}", 3, 100, digest,
                                     "marker", missing, at[h].replace(tzinfo=None)) for b, h, digest, missing in rows],
                                   ledger.TABLE.schema)
        _delta.merge(spark, df, lake, ledger.TABLE)
        return _delta.version(lake, ledger.TABLE)

    v0 = take(("b1", 1, "d1", ""), ("b1", 2, "d2", "store/commitlog/"), ("b2", 1, "d3", ""))
    v1 = take(("b1", 3, "d4", ""))                       # taken after 02:00
    v2 = take(("b2", 1, "d3-late", ""))                  # a late file in a folder of 01:00
    v3 = take(("b2", 2, "d5", "store/config/topics.json"))  # a new folder at 02:00
    f = {v: horizon.SnapshotFolders(spark, lake, v) for v in (v0, v1, v2, v3)}
    two = [f[v].digest(at[2]) for v in (v0, v1, v2, v3)]
    assert two[0] == two[1] and len({two[1], two[2], two[3]}) == 3
    assert two[0].startswith("3:") and f[v1].digest(at[3]).startswith("4:") and f[v1].digest(at[3]) != two[1]
    assert horizon.SnapshotFolders(spark, lake, None).digest(at[2]) == "none"
    newest = [(r["broker"], r["snapshot_ts"], r["missing"]) for r in f[v3].newest_missing(at[2])]
    assert newest == [("b1", at[2].replace(tzinfo=None), "store/commitlog/"),
                      ("b2", at[2].replace(tzinfo=None), "store/config/topics.json")]
    assert f[v3].newest_missing(at[3]) == [dict(f[v3].newest_missing(at[2])[1])]  # b1's newest lacks nothing


@pytest.mark.integration
def test_a_short_tail_carries_the_offsets_as_a_full_run_reads_them(runs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a window of 3 and 2 dashboard samples a key's tail is its last 3 known snapshots and its newest: the
    runs as of 04:00-06:00 read the previous run's tail and the offsets after it, not the 8-12 snapshots of each key,
    and still leave every report row, status sample, tail and decrease of a full run (jobs.reconcile.offset_state)."""
    from jobs.reconcile import reconcile
    from jobs.rules import status

    monkeypatch.setattr(status, "TIMELINE_SNAPSHOTS", 2)
    lake, reports = runs["lake"], str(runs["root"] / "reports")
    out = {h: reconcile.run(lake, reports, as_of=f"2026-01-05T{h}:00:00Z", run_id=f"w3-{h}", retention_h=2, window=3)
           for h in ("04", "05", "06")}
    reconcile.run(lake, reports, as_of="2026-01-05T06:00:00Z", run_id="w3-full", full=True, window=3)
    read = {h: (out[h]["horizon"]["mode"], out[h]["horizon"].get("previous_run"),
                out[h]["horizon"]["read"].get("series_rows")) for h in out}
    # each run: the previous run's tail (154 keys x their last 3 snapshots, all with bounds) and the 2 x 154 rows of
    # the two snapshots after its time; the same 770 rows at 05:00 (10 snapshots a key) as at 06:00 (12)
    # (140 -> 148 keys, 420 -> 444 and 700 -> 740 rows: the 8 queues of mixed's POP groups, issue 36 item 1;
    # 154 keys, 462 and 770 rows with the inner batches' two groups on 2 queues and a retry queue each, issue 35)
    # (the known snapshots are the status samples; series_tail holds a newest snapshot with unknown bounds: none here)
    tail = _gold(lake, "w3-05", "status_samples") + _gold(lake, "w3-05", "series_tail")
    assert (len(tail), len({r[:6] for r in tail}), len({r[6] for r in tail})) == (462, 154, 3)
    assert read == {"04": ("full", None, None), "05": ("horizon", "w3-04", 770), "06": ("horizon", "w3-05", 770)}
    for name in [*REPORTS, "status_samples", "series_tail", "offset_decreases", "subscription_latest"]:
        assert _gold(lake, "w3-06", name) == _gold(lake, "w3-full", name), name
    # carried, not recomputed: GID_001_rewind's 4 decreases at 02:30 lie before the tail the 06:00 run read (EXPIRED
    # carried across a tail: tests/jobs/test_snapshots.py, where a range's snapshots leave the tail)
    falls = _gold(lake, "w3-06", "offset_decreases")
    assert len(falls) == 4 and all(r[8] < min(t[6] for t in tail) for r in falls)
    # (8: broker-a is tiered in this mixed, its tier serves the old offsets: only broker-b's expire)
    assert len([r for r in _gold(lake, "w3-06", "unconsumed_ranges") if r[9] == "EXPIRED"]) == 8


@pytest.mark.integration
def test_scheduled_runs_over_pop_groups_equal_one_full_run_and_the_truth(tmp_path: pathlib.Path) -> None:
    """Issue 36: the POP rows (late acks, a lost pop, POP RETRYING, in flight) of scheduled runs as of 00:20, 00:30
    and 00:40 with a 15-minute horizon equal one full run as of 00:40, and the truth."""
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.reconcile import reconcile

    simulate.run("pop", str(tmp_path / "landing"), seed=3)
    ingest.run(str(tmp_path / "landing"), str(tmp_path / "lake"))
    lake, reports = str(tmp_path / "lake"), str(tmp_path / "reports")
    modes = [reconcile.run(lake, reports, as_of=f"2026-01-05T00:{m}:00Z", run_id=f"sched-{m}", retention_h=0.25)
             ["horizon"]["mode"] for m in ("20", "30", "40")]
    assert modes == ["full", "horizon", "horizon"]
    reconcile.run(lake, reports, as_of="2026-01-05T00:40:00Z", run_id="full-40", full=True)
    sched, full = tmp_path / "reports" / "sched-40", tmp_path / "reports" / "full-40"
    for name in REPORTS:
        assert (sched / f"{name}.csv").read_text() == (full / f"{name}.csv").read_text(), name
    assert compare(sched, tmp_path / "landing" / "_truth") == []
    kinds = {r.split(",")[-2] for r in (sched / "duplicated_ranges.csv").read_text().splitlines()[1:]}
    assert kinds == {"POP_LATE_ACK"}

