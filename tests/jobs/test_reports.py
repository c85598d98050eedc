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
        "mqadmin resetOffsetByTime -n \"$NAMESRV\" -g g1 -t T -b \"${BROKER_ADDR[broker-a]}\" -q 0 -o 40 -s now",
        "mqadmin resetOffsetByTime -n \"$NAMESRV\" -g g1 -t T -b \"${BROKER_ADDR[broker-a]}\" -q 1 -o 100 -s now",
        "# broadcast client 10.0.0.5@DEFAULT: g2 T broker-a queue 2: set 7 in its offsets.json "
        "(BELOW_MIN: committed 0 outside [7, 9], lost 7)",
    ]
    assert '  [broker-a]="${BROKER_ADDR_BROKER_A:?set BROKER_ADDR_BROKER_A=host:port}"' in text.splitlines()
