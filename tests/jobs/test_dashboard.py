"""The dashboard's pure transforms on tiny frames, exact rows; the table paging and the plots' determinism."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from jobs.ops import dashboard as d

UTC = dt.timezone.utc
T0 = pd.Timestamp("2026-01-05T00:00:00Z")
T1 = pd.Timestamp("2026-01-05T01:00:00Z")
KEY = ("c", "G", "", "T", "b", 0)


def _frame(columns: list[str], rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(columns, r)) for r in rows], columns=columns)


def status(rows: list[tuple]) -> pd.DataFrame:
    """(group, queue_id, committed, min, max, status) rows of gold/consumer_status."""
    out = _frame(["consumer_group", "queue_id", "committed_offset", "min_offset", "max_offset", "status"], rows)
    out.insert(0, "cluster", "c")
    out.insert(2, "client_id", "")
    out.insert(3, "topic", "T")
    out.insert(4, "broker", "b")
    out["lag"] = out["max_offset"] - out["committed_offset"]
    return out


def ranges(rows: list[tuple], kind_col: str) -> pd.DataFrame:
    """(group, queue_id, start, end, kind) rows of gold/duplicated_ranges or gold/unconsumed_ranges."""
    out = _frame(["consumer_group", "queue_id", "start_offset", "end_offset", kind_col], rows)
    out.insert(0, "cluster", "c")
    out.insert(2, "client_id", "")
    out.insert(3, "topic", "T")
    out.insert(4, "broker", "b")
    out["messages"] = out["end_offset"] - out["start_offset"] + 1
    return out


def dlq(rows: list[tuple]) -> pd.DataFrame:
    return _frame(["cluster", "consumer_group", "reason"], [("c", *r) for r in rows])


def corrections(rows: list[tuple]) -> pd.DataFrame:
    return _frame(["cluster", "consumer_group", "queue_id"], [("c", *r) for r in rows])


# ----------------------------------------------------------------------------------------------- union


@pytest.mark.parametrize("rows, expected", [
    pytest.param([("G", 0, 10, 19, "TRACE"), ("G", 0, 15, 24, "REWIND")], [("G", 0, 10, 24, 15)],
                 id="trace_and_rewind_over_the_same_offsets_count_once"),
    pytest.param([("G", 0, 10, 19, "TRACE"), ("G", 0, 20, 20, "TRACE"), ("G", 0, 30, 30, "REWIND")],
                 [("G", 0, 10, 20, 11), ("G", 0, 30, 30, 1)], id="adjacent_ranges_merge_gaps_do_not"),
    pytest.param([("G", 0, 5, 50, "REWIND"), ("G", 0, 10, 12, "TRACE"), ("G", 1, 10, 12, "TRACE")],
                 [("G", 0, 5, 50, 46), ("G", 1, 10, 12, 3)], id="a_range_inside_another_and_other_queues_apart"),
])
def test_union_ranges(rows: list[tuple], expected: list[tuple]) -> None:
    out = d.union_ranges(ranges(rows, "evidence"), d.SERIES_KEY)
    assert [tuple(r) for r in out[["consumer_group", "queue_id", "start_offset", "end_offset", "messages"]]
            .itertuples(index=False, name=None)] == expected


# -------------------------------------------------------------------------------------------- severity


def _row(**kw: object) -> dict:
    base = {k: 0 for k in (*d.LOST_KINDS, "BACKLOG", *d.DLQ_COLUMNS, "corrections", "duplicated")}
    base["status"] = "OK"
    base.update(kw)
    return base


# Burrow-style table: each case gives every rule's answer and the severity, with why.
SEVERITY_CASES = [
    # 1. nothing at all: OK
    (_row(), False, False, False, "OK"),
    # 2. a backlog alone is lag, judged by the status (OK here), not a loss: OK
    (_row(BACKLOG=500), False, False, False, "OK"),
    # 3. issue 14: 2,390 EXPIRED messages with every queue OK was shown green; they are lost: CRITICAL
    (_row(EXPIRED=2390), True, False, False, "CRITICAL"),
    # 4. issue 14: 1,200 duplicated offsets with every queue OK: WARNING
    (_row(duplicated=1200), False, False, True, "WARNING"),
    # 5. a message in the DLQ needs a human: CRITICAL
    (_row(IN_DLQ=1), False, True, False, "CRITICAL"),
    # 6. a stalled queue needs a human even without a loss yet
    (_row(status="STALL"), False, True, False, "CRITICAL"),
    # 7. WARN (lag never shrinking) and RETRYING are warnings
    (_row(status="WARN", RETRYING=2), False, False, True, "WARNING"),
    # 8. an offset to correct (committed outside [Min, Max])
    (_row(corrections=1), False, True, False, "CRITICAL"),
    # 9. issue 36: a pop the broker could not revive is lost: CRITICAL
    (_row(POP_LOST=1), True, False, False, "CRITICAL"),
]


@pytest.mark.parametrize("row, lost, human, warn, severity", SEVERITY_CASES,
                         ids=[f"case{i + 1}" for i in range(len(SEVERITY_CASES))])
def test_severity_rules(row: dict, lost: bool, human: bool, warn: bool, severity: str) -> None:
    assert (d.has_lost_messages(row), d.needs_a_human(row), d.has_duplicates_or_warnings(row), d.severity(row)) \
        == (lost, human, warn, severity)


def test_group_overview_ranks_losses_and_duplicates_above_healthy_groups() -> None:
    st = status([("A_expired", 0, 2500, 2500, 2600, "OK"), ("B_dup", 0, 100, 0, 100, "OK"),
                 ("C_ok", 0, 7, 0, 7, "OK"), ("D_stall", 0, 5, 0, 9, "STALL"), ("D_stall", 1, 9, 0, 9, "OK")])
    dup = ranges([("B_dup", 0, 0, 1199, "TRACE"), ("B_dup", 0, 0, 1199, "REWIND")], "evidence")
    unc = ranges([("A_expired", 0, 110, 2499, "EXPIRED"), ("A_expired", 0, 2500, 2599, "BACKLOG"),
                  ("D_stall", 0, 5, 8, "BACKLOG")], "kind")
    out = d.group_overview(st, dup, unc, dlq([("B_dup", "RETRYING"), ("D_stall", "BROADCAST_DROPPED")]),
                           corrections([]))
    cols = ["consumer_group", "severity", "status", "queues", "duplicated", "unconsumed", "lost", "BACKLOG", "EXPIRED",
            "dlq", "RETRYING", "DLQ_BROADCAST_DROPPED", "why"]
    # a broadcast drop never reaches a DLQ: not in "dlq" (issue 38: the tile counted it)
    assert [tuple(r) for r in out[cols].itertuples(index=False, name=None)] == [
        ("A_expired", "CRITICAL", "OK", 1, 0, 2490, 2390, 100, 2390, 0, 0, 0, "2390 EXPIRED"),
        ("D_stall", "CRITICAL", "STALL", 2, 0, 4, 0, 4, 0, 0, 0, 1, "status STALL"),
        ("B_dup", "WARNING", "OK", 1, 1200, 0, 0, 0, 0, 1, 1, 0, "1200 duplicated; 1 RETRYING"),
        ("C_ok", "OK", "OK", 1, 0, 0, 0, 0, 0, 0, 0, 0, ""),
    ]


# ---------------------------------------------------------------------------------------------- audit


def audit_hours(rows: list[tuple]) -> pd.DataFrame:
    """(hour, first, last, stored, delivered) rows of gold/audit_hours for KEY."""
    return _frame([*d.SERIES_KEY, "hour", "first_offset", "last_offset", "stored", "delivered"],
                  [(*KEY, *r) for r in rows])


def test_audit_intersects_each_hour_with_the_committed_offset_and_the_ranges() -> None:
    hours = audit_hours([(T0, 0, 99, 100, 90), (T1, 100, 199, 100, 50)])
    st = status([("G", 0, 150, 0, 200, "OK")])
    dup = ranges([("G", 0, 40, 59, "TRACE"), ("G", 0, 50, 69, "REWIND")], "evidence")
    unc = ranges([("G", 0, 120, 129, "SKIPPED"), ("G", 0, 150, 199, "BACKLOG")], "kind")
    rows = d.audit_rows(hours, st, dup, unc)
    assert [tuple(r) for r in rows[["hour", "stored", "delivered", "committed_past", "consumed", "duplicated",
                                    "never_consumed", "backlog"]].itertuples(index=False, name=None)] == [
        (T0, 100, 90, 100, 100, 30, 0, 0),
        (T1, 100, 50, 50, 40, 0, 10, 50),
    ]
    out = d.audit(rows)
    assert [tuple(r) for r in out[d.AUDIT_COLUMNS].itertuples(index=False, name=None)] == [
        ("c", "G", T0, 100, 90, 100, 100, 30, 0, 0, 100.0, 30.0),
        ("c", "G", T1, 100, 50, 50, 40, 0, 10, 50, 40.0, 0.0),
    ]
    total = d.audit(rows, by=["cluster"])
    assert [tuple(r) for r in total[["stored", "consumed", "duplicated", "completeness_pct", "duplicate_pct"]]
            .itertuples(index=False, name=None)] == [(200, 140, 30, 70.0, 15.0)]


def test_expired_offsets_below_a_later_committed_offset_are_committed_past_but_never_consumed() -> None:
    """Retention deleted 0-59 before the group read them; the broker moved it on to 60 (C_S = 80)."""
    rows = d.audit_rows(audit_hours([(T0, 0, 99, 100, 20)]), status([("G", 0, 80, 60, 100, "OK")]),
                        ranges([], "evidence"), ranges([("G", 0, 0, 59, "EXPIRED"), ("G", 0, 80, 99, "BACKLOG")],
                                                       "kind"))
    assert [tuple(r) for r in d.audit(rows)[["committed_past", "consumed", "never_consumed", "backlog",
                                             "completeness_pct"]].itertuples(index=False, name=None)] == [
        (80, 20, 60, 20, 20.0)]


# --------------------------------------------------------------------------------------------- trends


def test_run_trends_counts_per_run_oldest_first() -> None:
    runs = _frame(["run_id", "as_of"], [("r2", T1), ("r1", T0)])
    dup = ranges([("G", 0, 0, 9, "TRACE"), ("G", 0, 5, 14, "REWIND")], "evidence").assign(run_id="r2")
    unc = pd.concat([ranges([("G", 0, 0, 4, "EXPIRED")], "kind").assign(run_id="r1"),
                     ranges([("G", 0, 0, 4, "EXPIRED"), ("G", 0, 20, 29, "BACKLOG")], "kind").assign(run_id="r2")])
    q = _frame(["run_id", "consumer_group", "reason"], [("r1", "G", "IN_DLQ"), ("r2", "G", "IN_DLQ"),
                                                        ("r2", "G", "RETRYING")])
    st = _frame(["run_id", "status"], [("r1", "OK"), ("r1", "STALL"), ("r2", "OK"), ("r2", "OK")])
    out = d.run_trends(runs, dup, unc, q, st)
    assert [tuple(r) for r in out.itertuples(index=False, name=None)] == [
        ("r1", T0, 0, 5, 0, 5, 0, 0, 0, 1, 0, 1, 0, 1, 0),
        ("r2", T1, 15, 15, 10, 5, 0, 0, 0, 2, 0, 2, 0, 0, 0),
    ]


def test_quality_per_run_and_table_and_the_pass_rate_trend() -> None:
    cols = ["validation_id", "table_name", "expectation", "column", "success", "validated_at"]
    res = _frame(cols, [("v1", "gold/a", "not_null", "x", True, T0), ("v1", "gold/a", "unique", "", False, T0),
                        ("v1", "gold/b", "not_null", "y", True, T0), ("v2", "gold/a", "not_null", "x", True, T1),
                        ("v2", "gold/a", "unique", "", True, T1)])
    per_table = d.quality_runs(res)
    assert [tuple(r) for r in per_table.itertuples(index=False, name=None)] == [
        ("v1", T0, "gold/a", 2, 1, 1, 50.0), ("v1", T0, "gold/b", 1, 1, 0, 100.0), ("v2", T1, "gold/a", 2, 2, 0, 100.0)]
    assert [tuple(r) for r in d.quality_trend(per_table).itertuples(index=False, name=None)] == [
        ("v1", T0, 3, 2, 66.67), ("v2", T1, 2, 2, 100.0)]


# ----------------------------------------------------------------------------------------------- render


def test_a_long_table_says_how_many_rows_are_left_out_and_links_every_row_as_csv() -> None:
    site = d.Site()
    df = _frame(["consumer_group", "messages"], [("G1", 1), ("G2", 2000), ("G3", 3)])
    text = site.table(df, ["consumer_group", "messages"], name="t", max_rows=2)
    assert text.count("<tr>") == 3 and "<td data-col='messages' class='n'>2,000</td>" in text
    assert "showing the first 2 of 3 rows; 1 left out: every row in <a href='csv/t.csv'>csv/t.csv</a>" in text
    assert site.files == {"csv/t.csv": "consumer_group,messages\nG1,1\nG2,2000\nG3,3\n"}


def test_plots_are_svg_and_the_same_input_gives_the_same_bytes() -> None:
    samples = _frame(["snapshot_ts", "committed_offset", "min_offset", "max_offset"],
                     [(T0, 50, 0, 100), (T0 + pd.Timedelta("30min"), 20, 0, 120), (T1, 10, 30, 150)])
    dup = ranges([("G", 0, 20, 49, "REWIND")], "evidence")
    unc = ranges([("G", 0, 10, 29, "EXPIRED")], "kind")
    first = d.plot_timeline(samples, dup, unc, "T b q0")
    assert first == d.plot_timeline(samples, dup, unc, "T b q0")
    assert first.startswith("<div class='plot'><svg") and ">REWIND<" in first and ">EXPIRED<" in first


def test_the_site_is_written_to_s3_when_the_reports_root_is_s3(moto_s3: object, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: object) -> None:
    """Issue 14: the same files as a local build, published all at once (``_SUCCESS`` last) under the s3:// root."""
    import pathlib
    import uuid

    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.lake import storage
    from jobs.reconcile import reconcile

    moto_s3.apply(monkeypatch)  # type: ignore[attr-defined]
    root = pathlib.Path(str(tmp_path))
    simulate.run("blocked-head", str(root / "landing"), seed=7)
    lake = str(root / "lake")
    ingest.run(str(root / "landing"), lake)
    reconcile.run(lake, str(root / "reports"), as_of="2026-01-05T00:13:00Z", run_id="R")
    local = d.run(lake, str(root / "reports"), run_id="R")
    s3_root = storage.join(moto_s3.bucket_uri, f"reports-{uuid.uuid4().hex[:8]}")  # type: ignore[attr-defined]
    remote = d.run(lake, s3_root, run_id="R")
    local_files = sorted(p.relative_to(root / "reports" / "dashboard").as_posix()
                         for p in (root / "reports" / "dashboard").rglob("*") if p.is_file())
    remote_files = sorted(storage.relative(u, storage.join(s3_root, "dashboard"))
                          for u in storage.list_keys(storage.join(s3_root, "dashboard")))
    assert (remote_files, remote["files"]) == (local_files, local["files"])
    assert "_SUCCESS" in remote_files and "index.html" in remote_files
    index = storage.read_bytes(storage.join(s3_root, "dashboard", "index.html"))
    assert index == (root / "reports" / "dashboard" / "index.html").read_bytes()


# ------------------------------------------------------------------------------------------- hostile names


MATHTEXT = "app$\\foo{$"  # matplotlib reads $...$ as mathtext: \foo is an unknown symbol
HOSTILE_GROUPS = ["..", "../../escape", "g\n<script>alert(1)</script>'\"&", MATHTEXT, "a_", "a_/_"]
HOSTILE_RUN = "r 1'#?%<$"


def _hostile_site(tmp_path: object) -> tuple[dict[str, str], str]:
    """The files :func:`render` makes from one run whose every name is hostile, and the run's report folder.

    Each group has one lagging queue (plotted); ``MATHTEXT``'s queue has 201 samples in the status window (its "why"
    table is cut and linked as CSV under a name built from its topic and broker); clusters ``a_`` and ``a_/_`` with
    groups ``_/b`` and ``b`` would read alike once unsafe characters are replaced.
    """
    import pathlib

    topic, broker, client = MATHTEXT, "b/../..\n</text><script>x</script>", "=HYPERLINK(\"http://x\")/.."
    keys = [("c/..", g, "", topic, broker, 0) for g in HOSTILE_GROUPS[:4]]
    keys += [("a_", "_/b", client, "T", "b", 0), ("a_/_", "b", client, "T", "b", 0)]
    st = _frame([*d.SERIES_KEY, "committed_offset", "min_offset", "max_offset", "lag", "status"],
                [(*k, 5, 0, 9, 4, "STALL") for k in keys])
    samples = _frame([*d.SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset", "lag", "in_window"],
                     [(*k, T0 + pd.Timedelta(minutes=i), 5, 0, 9, 4, True) for k in keys
                      for i in range(201 if k[1] == MATHTEXT else 2)])
    dup = _frame([*d.SERIES_KEY, "start_offset", "end_offset", "messages", "evidence", "cause"],
                 [(*k, 1, 2, 2, "TRACE", "CRASH") for k in keys])
    unc = _frame([*d.SERIES_KEY, "start_offset", "end_offset", "messages", "kind"],
                 [(*k, 5, 8, 4, "BACKLOG") for k in keys])
    dlq_rows = _frame([*d.SERIES_KEY, "queue_offset", "uniq_key", "keys", "reconsume_times", "max_reconsume_times",
                       "reason", "last_attempt_ts", "dlq_eta_ts"],
                      [(*k, 3, "U", "=1+1", 16, 16, "IN_DLQ", T0, None) for k in keys])
    hours = _frame([*d.SERIES_KEY, "hour", "first_offset", "last_offset", "stored", "delivered"],
                   [(*k, T0, 0, 9, 10, 10) for k in keys])
    current = {
        "consumer_status": st, "duplicated_ranges": dup, "unconsumed_ranges": unc, "dlq_candidates": dlq_rows,
        "offset_corrections": _frame([*d.SERIES_KEY], []), "status_samples": samples, "audit_hours": hours,
    }
    report_dir = pathlib.Path(str(tmp_path)) / "reports" / HOSTILE_RUN
    (report_dir / "corrected" / "c?#'%41" / "b").mkdir(parents=True)
    (report_dir / "corrected" / "c?#'%41" / "b" / "consumerOffset.json").write_text("{}")
    (report_dir / "offset_corrections.csv").write_text("")
    runs = _frame(["run_id", "as_of", "completed_at", "report_dir"], [(HOSTILE_RUN, T1, T1, str(report_dir))])
    trend = {
        "duplicated_ranges": dup.assign(run_id=HOSTILE_RUN), "unconsumed_ranges": unc.assign(run_id=HOSTILE_RUN),
        "dlq_candidates": dlq_rows.assign(run_id=HOSTILE_RUN), "consumer_status": st.assign(run_id=HOSTILE_RUN),
    }
    validation = _frame(["validation_id", "layer", "table_name", "expectation", "column", "success", "observed_value",
                         "element_count", "unexpected_count", "validated_at"],
                        [(MATHTEXT, "gold", "gold/x<y>", "not_null", "-col", True, "=1", 1, 0, T1)])
    data = {"run": runs.iloc[0].to_dict(), "runs": runs, "current": current, "trend": trend, "validation": validation}
    return d.render(data), str(report_dir)


def test_hostile_names_are_drawn_literally_escaped_in_the_pages_and_never_a_path(tmp_path: object) -> None:
    import html
    import pathlib
    import posixpath
    import re
    import urllib.parse

    from jobs.reconcile import reports

    files, _ = _hostile_site(tmp_path)
    segment = r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,120}"
    assert [p for p in files if not re.fullmatch(rf"(?:{segment}/)*{segment}", p)] == []
    pages = {p: t for p, t in files.items() if p.endswith(".html")}
    slugs = {d.group_slug(c, g) for c, g in [("c/..", g) for g in HOSTILE_GROUPS[:4]] + [("a_", "_/b"), ("a_/_", "b")]}
    assert len(slugs) == 6 and {f"groups/{s}.html" for s in slugs} == {p for p in pages if p.startswith("groups/")}
    # the run's files, the groups and the long table's CSV are linked, every href quoted and inside the site
    csvs = [p for p in files if p.startswith("csv/")]
    assert len(csvs) == 1 and files[csvs[0]].count("\n") == 202
    hrefs = {(page, html.unescape(h)) for page, text in pages.items() for h in re.findall(r"href='([^']*)'", text)}
    assert [h for _, h in hrefs if not re.fullmatch(r"[A-Za-z0-9._~%/-]+", h)] == []
    run_href = "../" + urllib.parse.quote(HOSTILE_RUN, safe="")
    assert {h for page, h in hrefs if page == "index.html" and h.startswith("../")} == {
        f"{run_href}/corrected/c%3F%23%27%2541/b/consumerOffset.json", f"{run_href}/offset_corrections.csv"}
    for page, h in hrefs:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page), h))
        assert target.startswith(run_href + "/") or urllib.parse.unquote(target) in files, (page, h)
    # names HTML-escaped, never markup; the mathtext name drawn as it is in the timeline and the quality plot
    group_page = pages[f"groups/{d.group_slug('c/..', HOSTILE_GROUPS[2])}.html"]
    assert "g\n&lt;script&gt;alert(1)&lt;/script&gt;&#x27;&quot;&amp; (c/..)</h1>" in group_page
    # the one script of every page is the site's own (the snapshot's age, computed in the browser)
    assert [p for p, t in pages.items() if t.count("<script") != 1 or d._AGE_SCRIPT not in t] == []
    math_page = pages[f"groups/{d.group_slug('c/..', MATHTEXT)}.html"]
    assert math_page.count("<svg") == 1 and f">{MATHTEXT} b/../..\\n&lt;/text&gt;&lt;script&gt;x&lt;/script&gt; q0<" \
        in math_page
    assert pages["quality.html"].count("<svg") == 1 and f">{MATHTEXT}<" in pages["quality.html"]
    assert all(pages[f"groups/{s}.html"].count("<svg") == 1 for s in slugs)
    # published, every file lands inside the site folder
    root = pathlib.Path(str(tmp_path)) / "out"
    reports.publish_folder(str(root / "dashboard"), files)
    assert [p.name for p in root.iterdir()] == ["dashboard"]
    written = sorted(p.relative_to(root / "dashboard").as_posix() for p in (root / "dashboard").rglob("*")
                     if p.is_file())
    assert written == sorted([*files, "_SUCCESS"])


def test_a_table_cut_short_links_its_csv_under_a_safe_name_whatever_the_table_is_called() -> None:
    site = d.Site()
    df = _frame(["consumer_group", "messages"], [("=G1", -1), ("G2", 2)])
    names = ["../../etc/passwd", "a/b\n<'\">", "..", "x" * 300, "../../etc/passwd", "t"]
    texts = [site.table(df, ["consumer_group", "messages"], name=n, max_rows=1, depth=1) for n in names]
    assert list(site.files) == [
        "csv/_.._etc_passwd-63e8da65b0c6218d.csv", "csv/a_b_-a46ac68c74ae41ea.csv", "csv/-5f542bf076654010.csv",
        f"csv/{'x' * 80}-aaddad3fd0a57ded.csv", "csv/_.._etc_passwd-63e8da65b0c6218d-2.csv", "csv/t.csv"]
    assert set(site.files.values()) == {"consumer_group,messages\n'=G1,-1\nG2,2\n"}
    assert "every row in <a href='../csv/a_b_-a46ac68c74ae41ea.csv'>csv/a_b_-a46ac68c74ae41ea.csv</a>" in texts[1]
    assert "data-table='a/b\n&lt;&#x27;&quot;&gt;'" in texts[1]


# ------------------------------------------------------------------------------------ issue 38: runs, since, plots


def _runs(rows: list[tuple]) -> pd.DataFrame:
    """(run_id, kind, as_of minute, completed minute) rows of gold/reconcile_runs."""
    return _frame(["run_id", "kind", "as_of", "completed_at"],
                  [(r, k, T0 + pd.Timedelta(minutes=a), T0 + pd.Timedelta(minutes=c)) for r, k, a, c in rows])


@pytest.mark.parametrize("rows, current", [
    pytest.param([("s1", "scheduled", 60, 61), ("adhoc", "ad-hoc", 10, 90), ("bf", "backfill", 5, 95)], "s1",
                 id="an_ad_hoc_or_backfill_run_completed_later_never_takes_over"),
    pytest.param([("s1", "scheduled", 60, 61), ("s2", "scheduled", 120, 121), ("cli", "cli", 180, 181)], "s2",
                 id="the_newest_scheduled_run_by_as_of_even_beside_a_newer_cli_run"),
    pytest.param([("m1", "manual", 60, 61), ("cli", "cli", 120, 121), ("adhoc", "ad-hoc", 30, 200)], "cli",
                 id="without_a_scheduled_run_the_newest_run_over_everything_at_its_newest_snapshot"),
    pytest.param([("adhoc", "ad-hoc", 30, 200), ("adhoc2", "ad-hoc", 20, 300)], "adhoc2",
                 id="only_ad_hoc_runs_the_newest_completed"),
    pytest.param([("scheduled__2026-01-05T01:00:00+00:00", None, 60, 61), ("asof-x", None, 120, 121),
                  ("backfill__2026-01-05T03:00:00+00:00", None, 180, 181)], "scheduled__2026-01-05T01:00:00+00:00",
                 id="rows_written_before_kinds_read_the_kind_from_airflows_run_id"),
])
def test_current_run(rows: list[tuple], current: str) -> None:
    assert d.current_run_id(_runs(rows)) == current


def test_run_labels() -> None:
    assert [d.run_label(r) for r in _runs([("a", "scheduled", 0, 1), ("b", "ad-hoc", 60, 61), ("c", "backfill", 0, 1),
                                            ("manual__x", None, 0, 1), ("d", "cli", 0, 1)]).to_dict("records")] == [
        "scheduled run", "ad-hoc run as of 2026-01-05T01:00:00.000Z", "backfill run as of 2026-01-05T00:00:00.000Z",
        "run triggered by hand", "run from the command line"]


def _samples(rows: list[tuple], key: tuple = KEY) -> pd.DataFrame:
    """(minute, committed, min, max) samples of one queue."""
    return _frame([*d.SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset", "lag"],
                  [(*key, T0 + pd.Timedelta(minutes=m), c, lo, hi, hi - c) for m, c, lo, hi in rows])


def test_since_is_the_first_snapshot_of_the_trouble_that_holds_at_the_newest() -> None:
    stalled = _samples([(0, 5, 0, 5), (10, 5, 0, 9), (20, 5, 0, 12), (30, 5, 0, 15)])
    recovered = _samples([(0, 0, 0, 9), (10, 9, 0, 9)], ("c", "G", "", "T", "b", 1))
    # lag gone at 20, then committed below Min (retention) from 30
    expired = _samples([(0, 2, 0, 9), (10, 9, 0, 9), (20, 9, 0, 9), (30, 9, 12, 12), (40, 9, 14, 14)],
                       ("c", "G", "", "T", "b", 2))
    out = d.since_per_queue(pd.concat([stalled, recovered, expired], ignore_index=True))
    got = {int(r["queue_id"]): r["since"] for r in out.to_dict("records")}
    assert got[0] == T0 + pd.Timedelta(minutes=10)
    assert pd.isna(got[1])
    assert got[2] == T0 + pd.Timedelta(minutes=30)


def test_first_seen_is_the_as_of_of_the_first_recent_run_with_a_meeting_range() -> None:
    runs = _frame(["run_id", "as_of"], [("r1", T0), ("r2", T1)])
    cur = ranges([("G", 0, 10, 19, "TRACE"), ("G", 0, 50, 59, "TRACE"), ("G", 0, 10, 19, "REWIND")], "evidence")
    history = pd.concat([ranges([("G", 0, 15, 30, "TRACE")], "evidence").assign(run_id="r1"),
                         cur.assign(run_id="r2")], ignore_index=True)
    out = d.first_seen(cur, history, runs, "evidence")
    assert list(out["first_seen"]) == [T0, T1, T1]


def test_group_since_and_time_lag_text() -> None:
    st = status([("G", 0, 5, 0, 9, "STALL"), ("H", 0, 9, 0, 9, "OK")])
    qs = _frame([*d.SERIES_KEY, "since"], [(*KEY, T1)])
    overview = _frame(["cluster", "consumer_group"], [("c", "G"), ("c", "H")])
    dlq_rows = _frame(["cluster", "consumer_group", "reason", "last_attempt_ts"], [("c", "G", "IN_DLQ", T0)])
    empty = ranges([], "kind").assign(first_seen=None)
    out = d.group_since(overview, qs, st, empty, empty, dlq_rows)
    assert out[0] == T0 and pd.isna(out[1])
    assert [d.time_lag_text(v) for v in (0, 45, 125, 7500, 200000, None)] == [
        "0", "45 s", "2 min 05 s", "2 h 05 min", "2 d 7 h", ""]


def test_legends_sit_beside_or_below_the_axes_never_over_the_data() -> None:
    """Issue 38: a legend covered the bars; the shaded bands had no legend entry."""
    by_hour = _frame(["hour", "stored", "completeness_pct", "duplicate_pct"],
                     [(T0 + pd.Timedelta(hours=h), 100, 90.0, 5.0) for h in range(6)])
    trends = _frame(["as_of", "duplicated", "unconsumed", "dlq", "OK", "WARN", "STALL", "REWIND"],
                    [(T0, 1, 2, 3, 4, 0, 1, 0), (T1, 2, 3, 4, 3, 1, 1, 0)])
    samples = _samples([(0, 5, 0, 9), (10, 5, 0, 12)])
    figs = [d.audit_figure(by_hour, "t"), d.trends_figure(trends),
            d.timeline_figure(samples, ranges([("G", 0, 1, 2, "TRACE")], "evidence"),
                              ranges([("G", 0, 5, 11, "BACKLOG"), ("G", 0, 0, 1, "EXPIRED")], "kind"), "t")]
    for fig in figs:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            assert not legend.get_window_extent(r).overlaps(ax.get_window_extent(r))
    labels = [t.get_text() for t in figs[2].axes[0].get_legend().get_texts()]
    assert labels == ["Max", "Min", "committed", "lag", "duplicated range", "BACKLOG range", "lost range"]
    import matplotlib.pyplot as plt

    for fig in figs:
        plt.close(fig)


def test_the_coverage_page_says_what_the_run_could_not_check(tmp_path) -> None:  # noqa: ANN001
    """Issue 35: a page "what this run could not check", each reason with its meaning and its rows; the overview
    links to it; a run with none says every queue was checked."""
    rows = _frame(["cluster", "broker", "topic", "consumer_group", "client_id", "queue_id", "reason", "detail"], [
        ("C", "", "", "G", "", None, "NO_TRACE", "no delivery"),
        ("C", "broker-a", "T", "", "", None, "COMPACTION_TOPIC", "cleanup.policy=COMPACTION"),
        ("C", "broker-a", "T", "", "", 3, "NO_CONSUME_QUEUE", "snapshot x")])
    site = d.Site()
    page = "".join(d._coverage_body(site, rows))
    assert page.count("<tr>") == 4 + 4  # the reasons' table (header + 3) and the rows' (header + 3)
    assert "no EXPIRED, SKIPPED or BELOW_MIN is reported for it" in page and ">3<" in page
    assert "<a href" not in page.split("data-table='coverage'")[0]
    none = "".join(d._coverage_body(site, rows.iloc[0:0]))
    assert "data-field='coverage-none'" in none


def test_a_pop_groups_page_shows_its_in_flight_messages_and_its_retry_topic_beside_the_queues(tmp_path) -> None:  # noqa: ANN001
    """Issue 36: the pop scenario's site: GID_pop's page says POP, its queue table has the in-flight count of each
    queue (the truth's 4, 4 and 2) and the POP retry topic as a queue with its lag; POP_LOST makes it CRITICAL and
    the page says what to do about it and about POP_LATE_ACK."""
    import re

    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.ops import dashboard
    from jobs.reconcile import reconcile

    simulate.run("pop", str(tmp_path / "landing"), seed=7)
    ingest.run(str(tmp_path / "landing"), str(tmp_path / "lake"))
    reconcile.run(str(tmp_path / "lake"), str(tmp_path / "reports"))
    dashboard.run(str(tmp_path / "lake"), str(tmp_path / "reports"))
    page = (tmp_path / "reports" / "dashboard" / "groups" /
            f"{dashboard.group_slug('DefaultCluster', 'GID_pop')}.html").read_text()
    assert "<span data-field='consume_mode'>POP</span>" in page
    assert "data-field='pop-note'" in page and "data-finding='POP_LOST'" in page
    table = page.split("-queues'")[1].split("</table>")[0]
    head = re.findall(r"<th>([^<]*)</th>", table)
    rows = [re.findall(r"<td[^>]*>(?:<a[^>]*>)?([^<]*)", r) for r in table.split("<tr")[2:]]
    got = sorted((r[head.index("topic")], r[head.index("queue_id")], r[head.index("inflight")]) for r in rows)
    # the retry topic's last pops were re-put by the broker with their own start offsets: none in flight at S
    # (tests/simulate/test_pop_scenario.py)
    assert got == [("%RETRY%GID_pop_TopicPop", "0", "0"), ("TopicPop", "0", "4"), ("TopicPop", "1", "4")]
    overview = (tmp_path / "reports" / "dashboard" / "index.html").read_text()
    assert "GID_pop</a></td><td data-col='severity' class='CRITICAL'>CRITICAL</td><td data-col='why'>1 POP_LOST; " \
        "1 IN_DLQ; 19 duplicated; 1 RETRYING" in overview
