"""Report files (spec §5): exact CSV text, timestamps, the operator script and corrected offset files."""
from __future__ import annotations

import datetime as dt
import pathlib
import subprocess

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


def test_csv_puts_an_apostrophe_before_a_text_cell_a_spreadsheet_would_run_as_a_formula() -> None:
    """OWASP's CSV injection rule, for text cells only (a negative lag stays a number); a carriage return inside a
    cell is quoted, else a reader would start a new row there."""
    ts = pd.Timestamp("2026-01-05T01:00:00Z")
    df = pd.DataFrame([
        ['=HYPERLINK("http://x","y")', "+T", "-10.0.0.5@DEFAULT", "@k", -4, ts],
        ["g", "\tT", "\rcli", "k=1", 0, ts],
        ["-1", "T", "c\r=1+1", None, -12, None],
    ], columns=["consumer_group", "topic", "client_id", "keys", "lag", "snapshot_ts"])
    assert reports.to_csv(df, list(df.columns), ["consumer_group"]) == (
        "consumer_group,topic,client_id,keys,lag,snapshot_ts\n"
        "'-1,T,\"c\r=1+1\",,-12,\n"
        "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",'+T,'-10.0.0.5@DEFAULT,'@k,-4,2026-01-05T01:00:00.000Z\n"
        "g,'\tT,\"'\rcli\",k=1,0,2026-01-05T01:00:00.000Z\n"
    )


def test_corrections_script_resets_each_clustering_queue_and_explains_broadcast_rows() -> None:
    text = reports.corrections_script(_corrections(), "run-1")
    lines = text.splitlines()
    assert lines[lines.index("set -euo pipefail"):] == [
        "set -euo pipefail",
        "# cluster c: name server in NAMESRV_C",
        ': "${NAMESRV_C:?set NAMESRV_C=host:9876}"',
        "# cluster c, broker broker-a: address in BROKER_ADDR_C_BROKER_A",
        ': "${BROKER_ADDR_C_BROKER_A:?set BROKER_ADDR_C_BROKER_A=host:port}"',
        "# c g1 T broker-a queue 0: BELOW_MIN: committed 10 outside [40, 90], lost 30",
        'mqadmin resetOffsetByTime -n "$NAMESRV_C" -g g1 -t T -b "$BROKER_ADDR_C_BROKER_A" -q 0 -o 40 -s now',
        "# c g1 T broker-a queue 1: ABOVE_MAX: committed 120 outside [0, 100], lost 0",
        'mqadmin resetOffsetByTime -n "$NAMESRV_C" -g g1 -t T -b "$BROKER_ADDR_C_BROKER_A" -q 1 -o 100 -s now',
        "# broadcast client 10.0.0.5@DEFAULT: c g2 T broker-a queue 2: set 7 in its offsets.json "
        "(BELOW_MIN: committed 0 outside [7, 9], lost 7)",
    ]


def _run_script(tmp_path: pathlib.Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script under bash, in an empty folder, with a stand-in mqadmin first in PATH that prints each argument
    in brackets (so one argument holding a space or a newline shows as one)."""
    import os

    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "cwd").mkdir(exist_ok=True)
    (tmp_path / "bin" / "mqadmin").write_text("#!/bin/sh\nprintf '[%s]' \"$@\"\necho\n")
    (tmp_path / "bin" / "mqadmin").chmod(0o755)
    script = tmp_path / "fix.sh"
    script.write_text(text)
    return subprocess.run(["bash", str(script)], env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", **env},
                          cwd=tmp_path / "cwd", capture_output=True, text=True)


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


def test_corrections_script_runs_no_name_as_code(tmp_path: pathlib.Path) -> None:
    """Names from input files (a group holding a newline and a command, $(...), backticks, ';', quotes, a formula,
    mathtext) stay one quoted argument of mqadmin or an escaped comment: the script runs nothing else."""
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    hostile_cluster, hostile_broker = "c\n$(touch pwned1)", "b;touch pwned2"
    rows = [
        [hostile_cluster, "g\ntouch pwned3\n#", "", "`touch pwned4`;'\"", hostile_broker, 0, ts, 10, 40, 90, 40, 30,
         "BELOW_MIN"],
        ["c", "app$\\foo{$", "", '=HYPERLINK("http://x")', "broker-a", 1, ts, 10, 40, 90, 41, 30, "BELOW_MIN"],
        ["c", "g2", "cli\r\ntouch pwned5\n#", "T\";touch pwned6", "broker-a", 2, ts, 0, 7, 9, 7, 7, "BELOW_MIN"],
        ["c", "g\x00touch pwned7", "", "T", "broker-a", 3, ts, 0, 7, 9, 7, 7, "BELOW_MIN"],
    ]
    text = reports.corrections_script(pd.DataFrame(rows, columns=offset_corrections.REPORT_COLUMNS), "run\n1")
    lines = text.splitlines()
    assert lines[1] == ("# Offset corrections of reconcile run run\\n1: committed offsets outside "
                        "[MinOffset, MaxOffset].")
    assert lines[lines.index("set -euo pipefail") + 1:] == [
        "# cluster c: name server in NAMESRV_C",
        ': "${NAMESRV_C:?set NAMESRV_C=host:9876}"',
        "# cluster c\\n$(touch pwned1): name server in NAMESRV_C___TOUCH_PWNED1_",
        ': "${NAMESRV_C___TOUCH_PWNED1_:?set NAMESRV_C___TOUCH_PWNED1_=host:9876}"',
        "# cluster c, broker broker-a: address in BROKER_ADDR_C_BROKER_A",
        ': "${BROKER_ADDR_C_BROKER_A:?set BROKER_ADDR_C_BROKER_A=host:port}"',
        "# cluster c\\n$(touch pwned1), broker b;touch pwned2: address in BROKER_ADDR_C___TOUCH_PWNED1__B_TOUCH_PWNED2",
        ': "${BROKER_ADDR_C___TOUCH_PWNED1__B_TOUCH_PWNED2:?set '
        'BROKER_ADDR_C___TOUCH_PWNED1__B_TOUCH_PWNED2=host:port}"',
        "# c app$\\\\foo{$ =HYPERLINK(\"http://x\") broker-a queue 1: BELOW_MIN: committed 10 outside [40, 90], "
        "lost 30",
        "mqadmin resetOffsetByTime -n \"$NAMESRV_C\" -g 'app$\\foo{$' -t '=HYPERLINK(\"http://x\")' "
        "-b \"$BROKER_ADDR_C_BROKER_A\" -q 1 -o 41 -s now",
        "# c g\\x00touch pwned7 T broker-a queue 3: BELOW_MIN: committed 0 outside [7, 9], lost 7",
        "# not run: a name holds a NUL character, which no shell argument can: mqadmin resetOffsetByTime "
        "-n \"$NAMESRV_C\" -g $'g\\x00touch pwned7' -t T -b \"$BROKER_ADDR_C_BROKER_A\" -q 3 -o 7 -s now",
        "# broadcast client cli\\r\\ntouch pwned5\\n#: c g2 T\";touch pwned6 broker-a queue 2: set 7 in its "
        "offsets.json (BELOW_MIN: committed 0 outside [7, 9], lost 7)",
        "# c\\n$(touch pwned1) g\\ntouch pwned3\\n# `touch pwned4`;'\" b;touch pwned2 queue 0: BELOW_MIN: committed 10 "
        "outside [40, 90], lost 30",
        "mqadmin resetOffsetByTime -n \"$NAMESRV_C___TOUCH_PWNED1_\" -g $'g\\x0atouch pwned3\\x0a#' "
        "-t '`touch pwned4`;'\"'\"'\"' -b \"$BROKER_ADDR_C___TOUCH_PWNED1__B_TOUCH_PWNED2\" -q 0 -o 40 -s now",
    ]
    r = _run_script(tmp_path, text, {
        "NAMESRV_C": "ns1:9876", "NAMESRV_C___TOUCH_PWNED1_": "ns2:9876", "BROKER_ADDR_C_BROKER_A": "10.0.0.1:10911",
        "BROKER_ADDR_C___TOUCH_PWNED1__B_TOUCH_PWNED2": "10.0.0.2:10911"})
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (
        "[resetOffsetByTime][-n][ns1:9876][-g][app$\\foo{$][-t][=HYPERLINK(\"http://x\")][-b][10.0.0.1:10911][-q][1]"
        "[-o][41][-s][now]\n"
        "[resetOffsetByTime][-n][ns2:9876][-g][g\ntouch pwned3\n#][-t][`touch pwned4`;'\"][-b][10.0.0.2:10911][-q][0]"
        "[-o][40][-s][now]\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "cwd", "fix.sh"]
    assert list((tmp_path / "cwd").iterdir()) == []


def test_corrections_script_gives_names_that_read_alike_their_own_variables(tmp_path: pathlib.Path) -> None:
    """broker-a and broker_a (and Broker-A) all read BROKER_A, clusters c and C both read C: each of those names
    gets a hash suffix (sha1 of the names as a JSON list, 8 hex digits), so every reset reaches its own broker."""
    rows = [["c", "broker-a", 0, 40], ["c", "broker_a", 1, 41], ["C", "broker-a", 2, 42], ["d", "broker-a", 3, 43]]
    base = _corrections().iloc[:1]
    corr = pd.concat([base.assign(cluster=c, broker=b, queue_id=q, corrected_offset=o) for c, b, q, o in rows])
    text = reports.corrections_script(corr, "run-1")
    lines = text.splitlines()
    assert [line for line in lines if line.startswith(":")] == [
        ': "${NAMESRV_C_0155C37E:?set NAMESRV_C_0155C37E=host:9876}"',
        ': "${NAMESRV_C_39FA1C1C:?set NAMESRV_C_39FA1C1C=host:9876}"',
        ': "${NAMESRV_D:?set NAMESRV_D=host:9876}"',
        ': "${BROKER_ADDR_C_BROKER_A_57F17C0A:?set BROKER_ADDR_C_BROKER_A_57F17C0A=host:port}"',
        ': "${BROKER_ADDR_C_BROKER_A_DE3C167B:?set BROKER_ADDR_C_BROKER_A_DE3C167B=host:port}"',
        ': "${BROKER_ADDR_C_BROKER_A_C78EB2FD:?set BROKER_ADDR_C_BROKER_A_C78EB2FD=host:port}"',
        ': "${BROKER_ADDR_D_BROKER_A:?set BROKER_ADDR_D_BROKER_A=host:port}"',
    ]
    assert "# cluster c, broker broker_a: address in BROKER_ADDR_C_BROKER_A_C78EB2FD" in lines
    r = _run_script(tmp_path, text, {
        "NAMESRV_C_0155C37E": "ns-upper:9876", "NAMESRV_C_39FA1C1C": "ns-lower:9876", "NAMESRV_D": "ns-d:9876",
        "BROKER_ADDR_C_BROKER_A_57F17C0A": "10.0.0.3:10911", "BROKER_ADDR_C_BROKER_A_DE3C167B": "10.0.0.1:10911",
        "BROKER_ADDR_C_BROKER_A_C78EB2FD": "10.0.0.2:10911", "BROKER_ADDR_D_BROKER_A": "10.0.0.4:10911"})
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [
        "[resetOffsetByTime][-n][ns-upper:9876][-g][g1][-t][T][-b][10.0.0.3:10911][-q][2][-o][42][-s][now]",
        "[resetOffsetByTime][-n][ns-lower:9876][-g][g1][-t][T][-b][10.0.0.1:10911][-q][0][-o][40][-s][now]",
        "[resetOffsetByTime][-n][ns-lower:9876][-g][g1][-t][T][-b][10.0.0.2:10911][-q][1][-o][41][-s][now]",
        "[resetOffsetByTime][-n][ns-d:9876][-g][g1][-t][T][-b][10.0.0.4:10911][-q][3][-o][43][-s][now]",
    ]


def test_variable_names_stay_one_per_key_when_a_hash_suffix_meets_a_real_name() -> None:
    """A cluster literally named like another's suffixed name, and a split of the same characters between cluster and
    broker: still one variable per key."""
    keys = [("c",), ("C",), ("c_39fa1c1c",), ("a_b", "c"), ("a", "b_c")]
    out = reports._var_names(keys)
    assert len(set(out.values())) == len(keys)
    assert out[("c_39fa1c1c",)].startswith("C_39FA1C1C_") and out[("a_b", "c")].startswith("A_B_C_")


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
        [[c, g, "", "T", "broker-a", 0, ts, 10, 40, 90, 80, 50, 0, "STALL" if c == "c2" else "OK", "CONCURRENT", 0]
         for c, g in pairs],
        columns=reconcile.REPORT_MODULES["consumer_status"].REPORT_COLUMNS)
    return pdfs


def test_summary_counts_a_group_per_cluster_when_the_run_covers_several() -> None:
    """Two clusters both have group G: their counts and statuses are two groups', not one."""
    from jobs.reconcile import reconcile

    agreement = pd.DataFrame(columns=["cluster", "consumer_group", "compared", "agreeing"])
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    def group(status: str, reason: str) -> dict:
        return {"severity": "CRITICAL", "reason": reason, "status": status, "duplicated_offsets": 0,
                "unconsumed_offsets": 0, "lost_offsets": 0, "dlq_candidates": 0, "corrections": 1,
                "consume_modes": {"T": "CONCURRENT"}}

    one = reconcile.summarize("r", ts, "lake", _report_frames({"c": ["G", "H"]}), agreement, [])
    assert one["groups"] == {"G": group("OK", "1 offsets to correct"), "H": group("OK", "1 offsets to correct")}
    assert one["severities"] == {"OK": 0, "WARNING": 0, "CRITICAL": 2}
    two = reconcile.summarize("r", ts, "lake", _report_frames({"c": ["G"], "c2": ["G"]}), agreement, [])
    assert two["groups"] == {"c/G": group("OK", "1 offsets to correct"),
                             "c2/G": group("STALL", "1 offsets to correct; status STALL")}


def test_summary_counts_an_offset_once_with_the_breakdown_by_evidence_beside_it() -> None:
    """Issue 38: an offset with TRACE and REWIND evidence was 2 in summary.json and 1 on the dashboard."""
    from jobs.reconcile import reconcile

    agreement = pd.DataFrame(columns=["cluster", "consumer_group", "compared", "agreeing"])
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    pdfs = _report_frames({"c": ["G"]})
    pdfs["duplicated_ranges"] = pd.DataFrame(
        [["c", "G", "", "T", "broker-a", 0, 10, 19, 10, "REWIND", "REWIND"],
         ["c", "G", "", "T", "broker-a", 0, 15, 24, 10, "TRACE", "REWIND"],
         ["c", "G", "", "T", "broker-a", 1, 15, 24, 10, "TRACE", "HEAD_BLOCKED"]],
        columns=reconcile.REPORT_MODULES["duplicated_ranges"].REPORT_COLUMNS)
    pdfs["unconsumed_ranges"] = pd.DataFrame(
        [["c", "G", "", "T", "broker-a", 0, 30, 39, 10, "EXPIRED"], ["c", "G", "", "T", "broker-a", 0, 40, 44, 5,
                                                                      "BACKLOG"]],
        columns=reconcile.REPORT_MODULES["unconsumed_ranges"].REPORT_COLUMNS)
    out = reconcile.summarize("r", ts, "lake", pdfs, agreement, [], kind="scheduled")
    assert out["kind"] == "scheduled"
    assert out["tables"]["duplicated_ranges"] == {"rows": 3, "by_kind": {"REWIND": 1, "TRACE": 2}, "offsets": 25,
                                                  "offsets_by_evidence": {"REWIND": 10, "TRACE": 20}}
    assert out["tables"]["unconsumed_ranges"] == {"rows": 2, "by_kind": {"BACKLOG": 1, "EXPIRED": 1}, "offsets": 15,
                                                  "offsets_by_kind": {"BACKLOG": 5, "EXPIRED": 10}}
    assert out["groups"]["G"] == {"severity": "CRITICAL", "reason": "10 EXPIRED; 1 offsets to correct; 25 duplicated",
                                  "status": "OK", "duplicated_offsets": 25, "unconsumed_offsets": 15, "lost_offsets": 10,
                                  "dlq_candidates": 0, "corrections": 1, "consume_modes": {"T": "CONCURRENT"}}


def test_index_links_each_file_url_quoted() -> None:
    """A corrected file's path holds the cluster and broker names: '?', '#', a quote must not cut or leave the link."""
    summary = {"run_id": "r", "as_of": "t", "lake": "l", "files": ["corrected/c?#'x/b/consumerOffset.json"],
               "tables": {}, "groups": {}}
    assert ("<li><a href='corrected/c%3F%23%27x/b/consumerOffset.json'>corrected/c?#&#x27;x/b/consumerOffset.json</a>"
            "</li>") in reports.index_html(summary, {}, {})


def test_corrections_script_runs_no_reset_for_a_name_mqadmin_would_read_as_an_option() -> None:
    """RocketMQ allows a group or topic starting with '-'; mqadmin's option parser would take it for an option."""
    ts = dt.datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    rows = [["c", "-n", "", "T", "broker-a", 0, ts, 10, 40, 90, 40, 30, "BELOW_MIN"],
            ["c", "g", "", "-T", "broker-a", 1, ts, 10, 40, 90, 40, 30, "BELOW_MIN"]]
    lines = reports.corrections_script(pd.DataFrame(rows, columns=offset_corrections.REPORT_COLUMNS), "r").splitlines()
    assert [line for line in lines if "mqadmin resetOffsetByTime -n" in line] == [
        "# not run: a name starting with '-' is read by mqadmin as an option; reset it by hand: mqadmin "
        "resetOffsetByTime -n \"$NAMESRV_C\" -g -n -t T -b \"$BROKER_ADDR_C_BROKER_A\" -q 0 -o 40 -s now",
        "# not run: a name starting with '-' is read by mqadmin as an option; reset it by hand: mqadmin "
        "resetOffsetByTime -n \"$NAMESRV_C\" -g g -t -T -b \"$BROKER_ADDR_C_BROKER_A\" -q 1 -o 40 -s now",
    ]


def test_publish_folder_refuses_a_relative_name_and_leaves_the_parent(tmp_path: pathlib.Path) -> None:
    import pytest

    (tmp_path / "reports" / "older").mkdir(parents=True)
    (tmp_path / "keep").mkdir()
    for name in ("..", "."):
        with pytest.raises(ValueError, match="not '.' or '..'"):
            reports.publish_folder(f"{tmp_path}/reports/{name}", {"a.csv": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "reports"]
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["older"]


def test_a_corrected_file_is_the_same_whatever_order_the_rows_come_in() -> None:
    """Entries the original holds keep their place; new ones go in key order (the engine's row order is not
    stable: an S3 run wrote ``{2:590,1:590,3:589,0:590}`` where the local run wrote another order)."""
    original = '{\n\t"offsetTable":{\n\t\t"T@G":{1:5,0:5\n\t\t}\n\t}\n}'
    rows = [{"topic": t, "consumer_group": g, "queue_id": q, "corrected_offset": o}
            for t, g, q, o in [("T", "G", 0, 9), ("U", "G", 3, 7), ("U", "G", 1, 6), ("T", "G", 2, 8)]]
    texts = {reports.corrected_offset_file(original, order) for order in (rows, rows[::-1], rows[1:] + rows[:1])}
    assert texts == {'{\n\t"offsetTable":{\n\t\t"T@G":{1:5,0:9,2:8\n\t\t},\n\t\t"U@G":{1:6,3:7\n\t\t}\n\t}\n}'}


def test_original_offset_files_are_read_from_the_latest_snapshots_files_only(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Each broker's consumerOffset.json as its latest snapshot held it (its .bak when that was read), read with the
    oldest of those snapshots' time as a filter, so that delta-rs skips the older snapshots' data files."""
    import datetime as dt

    import pandas as pd
    import pyarrow as pa
    from deltalake import write_deltalake

    from jobs.lake import _delta
    from jobs.reconcile import reconcile
    from schemas import files

    lake = str(tmp_path / "lake")
    schema = pa.schema([pa.field(f.name, {"StringType": pa.string(), "TimestampType": pa.timestamp("us", "UTC"),
                                          "LongType": pa.int64(), "BinaryType": pa.binary(),
                                          "BooleanType": pa.bool_()}[type(f.dataType).__name__])
                        for f in files.TABLE.schema.fields])
    t = lambda h: dt.datetime(2026, 1, 5, h, tzinfo=dt.timezone.utc)  # noqa: E731

    def snapshot(h: int, rows: list[tuple[str, str, str, bytes]]) -> None:  # one data file per snapshot, as an ingest
        cols = {f.name: [None] * len(rows) for f in files.TABLE.schema.fields}
        cols.update(cluster=["c"] * len(rows), broker=[b for b, _, _, _ in rows], snapshot_ts=[t(h)] * len(rows),
                    source_path=[p for _, p, _, _ in rows], file_kind=[k for _, _, k, _ in rows],
                    content=[c for _, _, _, c in rows])
        write_deltalake(files.TABLE.path(lake), pa.table(cols, schema=schema), mode="append")

    path = lambda b, h, name="consumerOffset.json": f"c/{b}/snapshot_ts={h}/config/{name}"  # noqa: E731
    snapshot(1, [("a", path("a", 1), "consumer_offsets", b"a1"), ("b", path("b", 1), "consumer_offsets", b"b1")])
    snapshot(2, [("a", path("a", 2), "consumer_offsets", b"a2"), ("b", path("b", 2), "consumer_offsets", b"b2")])
    snapshot(3, [("a", path("a", 3), "consumer_offsets", b"a3"),
                 ("a", path("a", 3, "consumerOffset.json.bak"), "backup", b"a3-bak")])
    latest = pd.DataFrame({"cluster": ["c", "c"], "broker": ["a", "b"],  # (naive UTC, as offset_state gives them)
                           "snapshot_ts": [pd.Timestamp(t(3)).tz_localize(None), pd.Timestamp(t(2)).tz_localize(None)],
                           "source_file": [path("a", 3, "consumerOffset.json.bak"), path("b", 2)]})
    seen: list[object] = []
    read = _delta.read_pandas_columns
    monkeypatch.setattr(_delta, "read_pandas_columns", lambda *a, **k: seen.append(k["filters"]) or read(*a, **k))
    assert reconcile._original_offset_files(lake, latest) == {("c", "a"): "a3-bak", ("c", "b"): "b2"}
    assert [f for f in seen[0] if f[0] == "snapshot_ts"] == [("snapshot_ts", ">=", t(2))]
