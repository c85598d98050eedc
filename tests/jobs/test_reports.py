"""Report files (spec §5): exact CSV text, timestamps, the operator script and corrected offset files."""
from __future__ import annotations

import datetime as dt

import pandas as pd

from jobs.reconcile import reports
from schemas import offset_corrections, unconsumed_ranges

UTC = dt.timezone.utc


def test_format_ts_is_iso_utc_with_milliseconds() -> None:
    assert reports.format_ts(dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)) == "2026-01-02T03:04:05.678Z"
    assert reports.format_ts(pd.Timestamp("2026-01-02 03:04:05")) == "2026-01-02T03:04:05.000Z"
    assert reports.format_ts(None) == ""
    assert reports.format_ts(pd.NaT) == ""


def test_csv_is_sorted_by_key_with_empty_nulls() -> None:
    df = pd.DataFrame([
        ["c", "g", "", "T", "b", 1, 10, 19, 10, "BACKLOG"],
        ["c", "g", "", "T", "b", 0, 5, 5, 1, "EXPIRED"],
        ["c", "g", None, "T", "a", 3, 0, 0, 1, "SKIPPED"],
    ], columns=unconsumed_ranges.REPORT_COLUMNS)
    text = reports.to_csv(df, unconsumed_ranges.REPORT_COLUMNS, unconsumed_ranges.SORT_KEY)
    assert text == (
        "cluster,consumer_group,client_id,topic,broker,queue_id,start_offset,end_offset,messages,kind\n"
        "c,g,,T,a,3,0,0,1,SKIPPED\n"
        "c,g,,T,b,0,5,5,1,EXPIRED\n"
        "c,g,,T,b,1,10,19,10,BACKLOG\n"
    )


def _corrections() -> pd.DataFrame:
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    return pd.DataFrame([
        ["c", "g1", "", "T", "broker-a", 0, ts, 10, 40, 90, 40, 30, "BELOW_MIN"],
        ["c", "g1", "", "T", "broker-a", 1, ts, 120, 0, 100, 100, 0, "ABOVE_MAX"],
        ["c", "g2", "10.0.0.5@DEFAULT", "T", "broker-a", 2, ts, 0, 7, 9, 7, 7, "BELOW_MIN"],
    ], columns=offset_corrections.REPORT_COLUMNS)


def test_corrections_script_resets_each_clustering_queue_and_explains_broadcast_rows() -> None:
    text = reports.corrections_script(_corrections(), "run-1")
    body = [line for line in text.splitlines() if not line.startswith("#") or "broadcast client" in line]
    assert body[-3:] == [
        "mqadmin resetOffsetByTime -n \"${NAMESRV[c]}\" -g g1 -t T -b \"${BROKER_ADDR[c/broker-a]}\" -q 0 -o 40 -s now",
        "mqadmin resetOffsetByTime -n \"${NAMESRV[c]}\" -g g1 -t T -b \"${BROKER_ADDR[c/broker-a]}\" -q 1 -o 100 "
        "-s now",
        "# broadcast client 10.0.0.5@DEFAULT: c g2 T broker-a queue 2: set 7 in its offsets.json "
        "(BELOW_MIN: committed 0 outside [7, 9], lost 7)",
    ]
    assert '  [c/broker-a]="${BROKER_ADDR_C_BROKER_A:?set BROKER_ADDR_C_BROKER_A=host:port}"' in text.splitlines()
    assert '  [c]="${NAMESRV_C:?set NAMESRV_C=host:9876}"' in text.splitlines()


def test_corrections_script_sends_each_reset_to_its_own_clusters_broker(tmp_path) -> None:  # noqa: ANN001
    """Two clusters that both have a broker-a (RocketMQ's default name): each line must reach its own cluster's
    broker and name server. Run under bash with a stand-in mqadmin that prints its arguments."""
    import os
    import subprocess

    c1 = _corrections().iloc[:1]
    c2 = c1.assign(cluster="c2", corrected_offset=55, consumer_group="g9")
    script = tmp_path / "fix.sh"
    script.write_text(reports.corrections_script(pd.concat([c2, c1]), "run-1"))
    (tmp_path / "mqadmin").write_text('#!/bin/sh\necho "$@"\n')
    (tmp_path / "mqadmin").chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "NAMESRV_C": "ns1:9876", "NAMESRV_C2": "ns2:9876",
           "BROKER_ADDR_C_BROKER_A": "10.0.0.1:10911", "BROKER_ADDR_C2_BROKER_A": "10.9.0.1:10911"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "resetOffsetByTime -n ns1:9876 -g g1 -t T -b 10.0.0.1:10911 -q 0 -o 40 -s now",
        "resetOffsetByTime -n ns2:9876 -g g9 -t T -b 10.9.0.1:10911 -q 0 -o 55 -s now",
    ]
    del env["BROKER_ADDR_C2_BROKER_A"]
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == ""
    assert "BROKER_ADDR_C2_BROKER_A: set BROKER_ADDR_C2_BROKER_A=host:port" in r.stderr


def _report_frames(rows_by_cluster: dict[str, list[str]]) -> dict[str, pd.DataFrame]:
    """The five report frames: one corrections row and one OK status row per (cluster, group) given."""
    from jobs.reconcile import reconcile

    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    pairs = [(c, g) for c, gs in rows_by_cluster.items() for g in gs]
    pdfs = {n: pd.DataFrame(columns=m.REPORT_COLUMNS) for n, m in reconcile.REPORT_MODULES.items()}
    pdfs["offset_corrections"] = pd.DataFrame(
        [[c, g, "", "T", "broker-a", 0, ts, 10, 40, 90, 40, 30, "BELOW_MIN"] for c, g in pairs],
        columns=offset_corrections.REPORT_COLUMNS)
    pdfs["consumer_status"] = pd.DataFrame(
        [[c, g, "", "T", "broker-a", 0, ts, 10, 40, 90, 80, 50, 0, "STALL" if c == "c2" else "OK"] for c, g in pairs],
        columns=reconcile.REPORT_MODULES["consumer_status"].REPORT_COLUMNS)
    return pdfs


def test_summary_counts_a_group_per_cluster_when_the_run_covers_several() -> None:
    """Two clusters both have group G: their counts and statuses are two groups', not one."""
    from jobs.reconcile import reconcile

    agreement = pd.DataFrame(columns=["cluster", "consumer_group", "compared", "agreeing"])
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    one = reconcile.summarize("r", ts, "lake", _report_frames({"c": ["G", "H"]}), agreement, [])
    assert one["groups"] == {"G": {"status": "OK", "corrections": 1}, "H": {"status": "OK", "corrections": 1}}
    two = reconcile.summarize("r", ts, "lake", _report_frames({"c": ["G"], "c2": ["G"]}), agreement, [])
    assert two["groups"] == {"c/G": {"status": "OK", "corrections": 1}, "c2/G": {"status": "STALL", "corrections": 1}}
