"""The dashboard in a real headless browser (Debian chromium driven by Playwright): the numbers shown equal the gold
rows, every plot renders, nothing is loaded from the network, no console error.

One small simulated lake (``mixed`` seed 1: every anomaly), ingested and reconciled twice (trends over two runs),
the site built from it. The expected numbers are computed here from the gold rows by plain Python (offsets expanded
into sets), not by the dashboard's own transforms.
"""
from __future__ import annotations

import collections
import pathlib
import shutil
from typing import Any, Iterator

import pandas as pd
import pytest

pytestmark = pytest.mark.integration  # an engine and a browser: `make test` installs chromium
CHROMIUM = shutil.which("chromium")
SERIES_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.fail("chromium not found: run infra/install-debian-deps.sh (installs the Debian chromium package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, mixed_world: pathlib.Path) -> dict[str, Any]:
    import shutil

    from jobs.ops import dashboard
    from jobs.reconcile import reconcile

    tmp = tmp_path_factory.mktemp("dash")
    lake, reports = tmp / "lake", tmp / "reports"
    shutil.copytree(mixed_world / "lake", lake)  # the runs and the dashboard write into it
    latest = reconcile.run(str(lake), str(reports))
    # an ad-hoc run as of three hours earlier, completed after: it must not take over the overview (issue 38)
    adhoc = reconcile.run(str(lake), str(reports), as_of="2026-01-05T03:00:00Z")
    built = dashboard.run(str(lake), str(reports))
    return {"lake": str(lake), "reports": reports, "run_id": latest["run_id"], "adhoc": adhoc["run_id"],
            "summary": latest, "built": built, "folder": reports / "dashboard"}


class Page:
    """A page loaded from file://, with every request and console message it caused."""

    def __init__(self, browser: Any, path: pathlib.Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.requests: list[str] = []
        self.console: list[tuple[str, str]] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("error", str(e))))
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")

    def table(self, name: str) -> list[dict[str, str]]:
        """The rows of ``table[data-table=name]`` as {header: shown text}."""
        return self.page.evaluate("""name => {
            const t = document.querySelector(`table[data-table="${name}"]`);
            if (!t) return null;
            const rows = Array.from(t.querySelectorAll('tr'));
            const head = Array.from(rows[0].querySelectorAll('th')).map(x => x.innerText.trim());
            return rows.slice(1).map(r => Object.fromEntries(
                Array.from(r.querySelectorAll('td')).map((x, i) => [head[i], x.innerText.trim()])));
        }""", name)

    def svgs(self) -> int:
        """Plots that rendered: inline SVG elements with a drawn area."""
        return self.page.evaluate("""() => Array.from(document.querySelectorAll('div.plot > svg'))
            .filter(s => s.getBoundingClientRect().width > 100 && s.querySelectorAll('path').length > 5).length""")

    def check_offline_and_clean(self) -> None:
        assert [u for u in self.requests if not u.startswith("file://")] == []
        assert [c for c in self.console if c[0] in ("error", "warning")] == []


def _n(text: str) -> int:
    return int(text.replace(",", "")) if text else 0


def _gold(lake: str, name: str, run_id: str) -> pd.DataFrame:
    import schemas
    from jobs.lake import _delta

    table = getattr(schemas, name).TABLE
    return _delta.read_pandas(lake, table, filters=[("run_id", "=", run_id)])


def _expected_groups(lake: str, run_id: str) -> dict[str, dict[str, int | str]]:
    """Per group from the gold rows: duplicated offsets as a set (TRACE and REWIND once), sums per kind, counts."""
    out: dict[str, dict[str, Any]] = collections.defaultdict(lambda: collections.defaultdict(int))
    offsets: dict[str, set] = collections.defaultdict(set)
    for r in _gold(lake, "duplicated_ranges", run_id).to_dict("records"):
        key = tuple(r[k] for k in SERIES_KEY)
        offsets[r["consumer_group"]] |= {(key, o) for o in range(int(r["start_offset"]), int(r["end_offset"]) + 1)}
    for g, s in offsets.items():
        out[g]["duplicated"] = len(s)
    for r in _gold(lake, "unconsumed_ranges", run_id).to_dict("records"):
        out[r["consumer_group"]][r["kind"]] += int(r["messages"])
        out[r["consumer_group"]]["unconsumed"] += int(r["messages"])
    for r in _gold(lake, "unconsumed_ranges", run_id).to_dict("records"):
        if r["kind"] != "BACKLOG":
            out[r["consumer_group"]]["lost"] += int(r["messages"])
    for r in _gold(lake, "dlq_candidates", run_id).to_dict("records"):
        name = "DLQ_BROADCAST_DROPPED" if r["reason"] == "BROADCAST_DROPPED" else r["reason"]
        out[r["consumer_group"]][name] += 1
        if r["reason"] != "BROADCAST_DROPPED":  # a broadcast drop never reaches a DLQ
            out[r["consumer_group"]]["dlq"] += 1
    rank = {"OK": 0, "WARN": 1, "STALL": 2, "REWIND": 3}
    for r in _gold(lake, "consumer_status", run_id).to_dict("records"):
        g = out[r["consumer_group"]]
        g["queues"] += 1
        if rank[r["status"]] >= rank[g.get("status") or "OK"]:
            g["status"] = r["status"]
    for r in _gold(lake, "offset_corrections", run_id).to_dict("records"):
        out[r["consumer_group"]]["corrections"] += 1
    return out


NUMBERS = ["queues", "duplicated", "lost", "BACKLOG", "dlq", "corrections"]  # the overview's columns
COUNTS = ["queues", "duplicated", "unconsumed", "lost", "BACKLOG", "EXPIRED", "SKIPPED", "BROADCAST_DROPPED", "dlq",
          "IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "DLQ_BROADCAST_DROPPED", "corrections"]  # a group page's


def test_overview_shows_the_gold_numbers_ranked_by_severity(site: dict[str, Any], browser: Any) -> None:
    page = Page(browser, site["folder"] / "index.html")
    shown = page.table("overview")
    expected = _expected_groups(site["lake"], site["run_id"])
    assert {r["consumer_group"]: {k: _n(r[k]) for k in NUMBERS} | {"status": r["status"]} for r in shown} == {
        g: {k: int(v.get(k, 0)) for k in NUMBERS} | {"status": v.get("status") or "OK"} for g, v in expected.items()}
    severities = [r["severity"] for r in shown]
    assert severities == sorted(severities, key=["CRITICAL", "WARNING", "OK"].index)
    # issue 14's two examples: a group losing messages to retention, one with rewind duplicates, no longer green
    by_group = {r["consumer_group"]: r for r in shown}
    assert by_group["GID_007_expired_return"]["severity"] == "CRITICAL" and \
        _n(by_group["GID_007_expired_return"]["lost"]) > 0
    assert by_group["GID_001_rewind"]["severity"] == "WARNING" and _n(by_group["GID_001_rewind"]["duplicated"]) > 0
    assert page.svgs() == 1
    page.check_offline_and_clean()


def test_group_page_shows_each_queue_and_the_window_behind_its_status(site: dict[str, Any], browser: Any) -> None:
    from jobs.ops import dashboard

    lake, rid = site["lake"], site["run_id"]
    slug = dashboard.group_slug("DefaultCluster", "GID_008_expired")
    page = Page(browser, site["folder"] / "groups" / f"{slug}.html")
    status = _gold(lake, "consumer_status", rid)
    status = status[status["consumer_group"] == "GID_008_expired"]
    shown = page.table(f"{slug}-queues")
    assert sorted((r["topic"], r["broker"], _n(r["queue_id"]), r["status"], _n(r["committed_offset"]),
                   _n(r["min_offset"]), _n(r["max_offset"]), _n(r["lag"])) for r in shown) == sorted(
        (r["topic"], r["broker"], int(r["queue_id"]), r["status"], int(r["committed_offset"]), int(r["min_offset"]),
         int(r["max_offset"]), int(r["lag"])) for r in status.to_dict("records"))
    samples = _gold(lake, "status_samples", rid)
    stalled = status[status["status"] == "STALL"].sort_values(["topic", "broker", "queue_id"]).iloc[0]
    win = samples[(samples["consumer_group"] == "GID_008_expired") & samples["in_window"]
                  & (samples["topic"] == stalled["topic"]) & (samples["broker"] == stalled["broker"])
                  & (samples["queue_id"] == stalled["queue_id"])].sort_values("snapshot_ts")
    why = page.table(f"{slug}-why-{stalled['topic']}-{stalled['broker']}-{stalled['queue_id']}-")
    assert [(_n(r["committed_offset"]), _n(r["min_offset"]), _n(r["max_offset"]), _n(r["lag"])) for r in why] == [
        (int(r["committed_offset"]), int(r["min_offset"]), int(r["max_offset"]), int(r["lag"]))
        for r in win.to_dict("records")]
    assert len(why) == 10  # the default window
    plots = int(page.page.get_attribute("[data-plots]", "data-plots"))
    assert (plots, page.svgs()) == (8, 8)  # the 8 stalled queues of Topic002; the retry queues have nothing to show
    page.check_offline_and_clean()


def test_audit_trends_and_quality_pages(site: dict[str, Any], browser: Any) -> None:
    lake, rid = site["lake"], site["run_id"]
    page = Page(browser, site["folder"] / "audit.html")
    hours = _gold(lake, "audit_hours", rid)
    expected = hours.groupby(["consumer_group", "hour"])[["stored", "delivered"]].sum()
    shown = page.table("audit")
    assert {(r["consumer_group"], r["hour"]): (_n(r["stored"]), _n(r["delivered"])) for r in shown} == {
        (g, pd.Timestamp(h).strftime("%Y-%m-%dT%H:%M:%S.000Z")): (int(v["stored"]), int(v["delivered"]))
        for (g, h), v in expected.iterrows()}
    assert page.svgs() == 1
    page.check_offline_and_clean()

    page = Page(browser, site["folder"] / "trends.html")
    shown = page.table("trends")
    assert [r["run_id"] for r in shown] == [site["adhoc"], rid]
    dlq = {r["run_id"]: _gold(lake, "dlq_candidates", r["run_id"]) for r in shown}
    assert [_n(r["dlq"]) for r in shown] == [int((dlq[r["run_id"]]["reason"] != "BROADCAST_DROPPED").sum())
                                             for r in shown]
    assert page.svgs() == 1
    page.check_offline_and_clean()

    page = Page(browser, site["folder"] / "quality.html")
    assert page.page.inner_text("[data-empty=validation]").startswith("no validation results yet")
    page.check_offline_and_clean()


def test_quality_page_from_stored_validation_results(site: dict[str, Any], browser: Any) -> None:
    """Rows in gold/validation_results (as the quality job stores them) become the per-table pass counts."""
    import datetime as dt

    import pyarrow as pa
    from deltalake import write_deltalake

    from jobs.lake import _delta
    from jobs.ops import dashboard
    from schemas import validation_results

    at = dt.datetime(2026, 1, 5, 6, tzinfo=dt.timezone.utc)
    rows = [("v1", "gold", "gold/consumer_status", "expect_column_values_to_not_be_null", "status", True, "0", 156, 0,
             at),
            ("v1", "gold", "gold/consumer_status", "expect_compound_columns_to_be_unique", "", False, "2", 156, 2, at),
            ("v1", "gold", "gold/dlq_candidates", "expect_column_values_to_be_in_set", "reason", True, "0", 29, 0, at)]
    frame = pd.DataFrame(rows, columns=validation_results.TABLE.columns)
    write_deltalake(validation_results.TABLE.path(site["lake"]),
                    pa.Table.from_pandas(frame, schema=_delta._arrow_schema(validation_results.TABLE),
                                         preserve_index=False))
    dashboard.run(site["lake"], str(site["reports"]))
    page = Page(browser, site["folder"] / "quality.html")
    assert [(r["table_name"], _n(r["evaluated"]), _n(r["passed"]), _n(r["failed"]), r["pass_rate_pct"])
            for r in page.table("quality_runs")] == [("gold/consumer_status", 2, 1, 1, "50.00"),
                                                      ("gold/dlq_candidates", 1, 1, 0, "100.00")]
    assert [(r["expectation"], r["result"], r["observed_value"]) for r in page.table("quality_latest")][0] == (
        "expect_compound_columns_to_be_unique", "fail", "2")
    assert page.svgs() == 1
    # each run labelled by its validation time in full (issue 38: the ids were cut at 28 characters)
    assert page.page.evaluate("() => Array.from(document.querySelectorAll('div.plot svg text')).map(t => "
                              "t.textContent).includes('2026-01-05 06:00:00')")
    page.check_offline_and_clean()


# ---------------------------------------------------------------------------- issue 38: current, consistent, actionable


def _summary(site: dict[str, Any], run_id: str) -> dict[str, Any]:
    import json

    return json.loads((site["reports"] / run_id / "summary.json").read_text())


def test_an_ad_hoc_run_does_not_take_over_and_every_run_keeps_its_labelled_page(site: dict[str, Any],
                                                                                  browser: Any) -> None:
    page = Page(browser, site["folder"] / "index.html")
    shown = page.page.locator("p.run")
    assert (shown.get_attribute("data-run"), shown.get_attribute("data-kind")) == (site["run_id"], "cli")
    assert page.page.inner_text("[data-field=run_label]") == "run from the command line"
    assert page.page.locator("[data-note=not-current]").count() == 0
    page.check_offline_and_clean()
    page = Page(browser, site["folder"] / "runs.html")
    runs = page.table("runs")
    assert [(r["run_id"], r["run"], r["on this site"]) for r in runs] == [
        (site["run_id"], "run from the command line", "current"),
        (site["adhoc"], "ad-hoc run as of 2026-01-05T03:00:00.000Z", "")]
    for r in runs:  # each run's own report page, labelled with its kind
        href = page.page.locator(f"table[data-table=runs] a:text-is('{r['run_id']}')").get_attribute("href")
        target = (site["folder"] / href).resolve()
        assert target == (site["reports"] / r["run_id"] / "index.html").resolve() and target.exists()
    own = Page(browser, site["reports"] / site["adhoc"] / "index.html")
    assert own.page.inner_text("[data-field=kind]") == "ad-hoc"
    own.check_offline_and_clean()


def test_an_ad_hoc_runs_own_dashboard_says_it_is_not_the_current_state(site: dict[str, Any], browser: Any,
                                                                       tmp_path: pathlib.Path) -> None:
    from jobs.ops import dashboard

    shutil.copytree(site["reports"], tmp_path / "reports")
    dashboard.run(site["lake"], str(tmp_path / "reports"), run_id=site["adhoc"])
    page = Page(browser, tmp_path / "reports" / "dashboard" / "index.html")
    assert page.page.inner_text("[data-field=run_label]") == "ad-hoc run as of 2026-01-05T03:00:00.000Z"
    note = page.page.inner_text("[data-note=not-current]")
    assert note == (f"This site shows the ad-hoc run as of 2026-01-05T03:00:00.000Z, not the current state of the "
                    f"fleet. The current state is the run from the command line {site['run_id']} as of "
                    f"{_summary(site, site['run_id'])['as_of']}.")
    page.check_offline_and_clean()


def test_every_output_counts_an_offset_once(site: dict[str, Any], browser: Any) -> None:
    """Dashboard cards and rows, summary.json, the run's index.html and the terminal: one number each."""
    from jobs import demo

    lake, rid = site["lake"], site["run_id"]
    summary = _summary(site, rid)
    offsets: dict[str, set] = collections.defaultdict(set)
    for name in ("duplicated_ranges", "unconsumed_ranges"):
        for r in _gold(lake, name, rid).to_dict("records"):
            key = tuple(r[k] for k in SERIES_KEY)
            offsets[name] |= {(key, o) for o in range(int(r["start_offset"]), int(r["end_offset"]) + 1)}
    dup, unc = len(offsets["duplicated_ranges"]), len(offsets["unconsumed_ranges"])
    rows = _gold(lake, "duplicated_ranges", rid)
    assert dup < int(rows["messages"].sum())  # this run has offsets with two kinds of evidence
    assert (summary["tables"]["duplicated_ranges"]["offsets"], summary["tables"]["unconsumed_ranges"]["offsets"]) \
        == (dup, unc)
    page = Page(browser, site["folder"] / "index.html")
    assert _n(page.page.inner_text("[data-card=duplicated] b")) == dup
    shown = {r["consumer_group"]: _n(r["duplicated"]) for r in page.table("overview")}
    assert shown == {g: int(v.get("duplicated_offsets", 0)) for g, v in summary["groups"].items()}
    own = Page(browser, site["reports"] / rid / "index.html")
    assert _n(own.page.inner_text("td[data-offsets=duplicated_ranges]")) == dup
    assert _n(own.page.inner_text("td[data-offsets=unconsumed_ranges]")) == unc
    text = demo.summary_text(summary)
    assert f"{dup:>7} offsets (by evidence: " in text and f"{unc:>7} offsets (by kind: " in text


def test_one_severity_and_status_everywhere(site: dict[str, Any], browser: Any) -> None:
    from jobs import demo

    summary = _summary(site, site["run_id"])
    page = Page(browser, site["folder"] / "index.html")
    dash = {r["consumer_group"]: (r["severity"], r["status"], r["why"]) for r in page.table("overview")}
    assert dash == {g: (v["severity"], v["status"], v["reason"]) for g, v in summary["groups"].items()}
    own = Page(browser, site["reports"] / site["run_id"] / "index.html")
    rows = own.page.evaluate("""() => Array.from(document.querySelectorAll('tr[data-group]')).map(r =>
        [r.dataset.group, r.children[1].innerText, r.children[3].innerText, r.children[2].innerText])""")
    assert {g: (sev, st, why) for g, sev, st, why in rows} == dash
    text = demo.summary_text(summary)
    for g, (sev, st, why) in dash.items():
        assert f"  {g:34} {sev:8} {st:6}  {why or '-'}" in text.splitlines()
    # the audit's examples: not OK in the terminal any more
    assert dash["GID_007_expired_return"][0] == "CRITICAL"


def test_freshness_and_since_when(site: dict[str, Any], browser: Any) -> None:
    lake, rid = site["lake"], site["run_id"]
    page = Page(browser, site["folder"] / "index.html")
    as_of = _summary(site, rid)["as_of"]
    newest = pd.to_datetime(_gold(lake, "consumer_status", rid)["snapshot_ts"], utc=True).max()
    assert _summary(site, rid)["newest_snapshot"] == as_of == newest.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert page.page.inner_text("[data-field=as_of]") == f"newest snapshot judged {as_of}"
    assert page.page.inner_text("span.age").endswith(" old now")
    # since: the first snapshot of the trailing streak of lag (or committed below Min) of the group's troubled
    # queues, from the stored samples, computed here in plain Python
    status = _gold(lake, "consumer_status", rid)
    samples = _gold(lake, "status_samples", rid)
    group = "GID_008_expired"
    starts = []
    for q in status[(status["consumer_group"] == group) & (status["status"] != "OK")].to_dict("records"):
        s = samples[(samples[SERIES_KEY] == pd.Series({k: q[k] for k in SERIES_KEY})).all(axis=1)]
        since = None
        for r in s.sort_values("snapshot_ts").to_dict("records"):
            bad = r["lag"] > 0 or r["committed_offset"] < r["min_offset"]
            since = (since or r["snapshot_ts"]) if bad else None
        starts.append(since)
    assert starts and all(starts)
    # and the first sighting of its lost ranges: the ad-hoc run (as of 03:00) if it had one meeting it, else this run
    runs = {site["adhoc"]: pd.Timestamp("2026-01-05T03:00:00Z"), rid: pd.Timestamp(as_of)}
    earlier = _gold(lake, "unconsumed_ranges", site["adhoc"])
    lost = _gold(lake, "unconsumed_ranges", rid)
    lost = lost[(lost["consumer_group"] == group) & (lost["kind"] != "BACKLOG")]
    assert len(lost)
    for r in lost.to_dict("records"):
        same = earlier[(earlier[[*SERIES_KEY, "kind"]] == pd.Series({k: r[k] for k in [*SERIES_KEY, "kind"]})).all(axis=1)
                       & (earlier["start_offset"] <= r["end_offset"]) & (earlier["end_offset"] >= r["start_offset"])]
        starts.append(runs[site["adhoc"]] if len(same) else runs[rid])
    starts = [pd.Timestamp(t).tz_localize("UTC") if pd.Timestamp(t).tzinfo is None else pd.Timestamp(t) for t in starts]
    shown = {r["consumer_group"]: r["since"] for r in page.table("overview")}
    assert shown[group] == pd.Timestamp(min(starts)).strftime("%Y-%m-%d %H:%M")
    severity = {r["consumer_group"]: r["severity"] for r in page.table("overview")}
    assert all(shown[g] == "" for g, sev in severity.items() if sev == "OK")


def test_group_page_lists_its_corrections_commands_and_dlq_look_ups(site: dict[str, Any], browser: Any) -> None:
    from jobs.ops import dashboard

    lake, rid = site["lake"], site["run_id"]
    corr = _gold(lake, "offset_corrections", rid)
    corr = corr[corr["client_id"] == ""]
    group = sorted(corr["consumer_group"])[0]
    slug = dashboard.group_slug("DefaultCluster", group)
    page = Page(browser, site["folder"] / "groups" / f"{slug}.html")
    mine = corr[corr["consumer_group"] == group]
    assert len(page.table(f"{slug}-corrections")) == len(mine)
    script = (site["reports"] / rid / "offset_corrections.sh").read_text().splitlines()
    block = page.page.inner_text("pre[data-section=commands]").splitlines()
    resets = [line for line in block if line.startswith("mqadmin resetOffsetByTime")]
    assert len(resets) == len(mine) and all(line in script for line in block)
    assert all(f" -g {group} " in line for line in resets)
    for link in page.page.locator("a[data-corrected]").all():
        assert (site["folder"] / "groups" / link.get_attribute("href")).resolve().exists()
    # a broker keeping its offsets in RocksDB gets no corrected consumerOffset.json (it would never read one)
    not_written = {m["broker"] for m in site["summary"]["corrected_files_not_written"]}
    linked = {link.get_attribute("data-corrected") for link in page.page.locator("a[data-corrected]").all()}
    assert linked == set(mine["broker"]) - not_written
    assert (sorted(linked), sorted(not_written)) == ([], ["broker-b"])  # mixed seed 1: broker-b is RocksDB v1
    if set(mine["broker"]) & not_written:
        text = page.page.inner_text("[data-field=no-corrected-file]")
        assert all(b in text for b in set(mine["broker"]) & not_written)
    else:
        assert page.page.locator("[data-field=no-corrected-file]").count() == 0
    todo = [li.get_attribute("data-finding") for li in page.page.locator("[data-section=todo] li").all()]
    assert "corrections" in todo
    page.check_offline_and_clean()

    dlq = _gold(lake, "dlq_candidates", rid)
    in_dlq = dlq[dlq["reason"] == "IN_DLQ"]
    group = sorted(in_dlq["consumer_group"])[0]
    slug = dashboard.group_slug("DefaultCluster", group)
    page = Page(browser, site["folder"] / "groups" / f"{slug}.html")
    shown = page.table(f"{slug}-DLQ_candidates")
    assert sorted((r["uniq_key"], r["look_up"]) for r in shown if r["reason"] == "IN_DLQ") == sorted(
        (k, f"mqadmin queryMsgByUniqueKey -n \"$NAMESRV\" -t %DLQ%{group} -i {k}")
        for k in in_dlq[in_dlq["consumer_group"] == group]["uniq_key"])
    assert "IN_DLQ" in [li.get_attribute("data-finding") for li in page.page.locator("[data-section=todo] li").all()]


def test_layout_at_1400_px(site: dict[str, Any], browser: Any) -> None:
    """Issue 38: the overview was ~1,950 px wide and its 'why' column cut off; the DLQ tile counted broadcast drops;
    the unconsumed ranges were unsorted."""
    from jobs.ops import dashboard

    page = Page(browser, site["folder"] / "index.html")
    width = page.page.evaluate("() => document.documentElement.scrollWidth")
    right = page.page.evaluate("""() => Math.max(...Array.from(document.querySelectorAll(
        'table[data-table=overview] td[data-col=why]')).map(e => e.getBoundingClientRect().right))""")
    assert width <= 1400 and right <= 1400
    dlq = _gold(site["lake"], "dlq_candidates", site["run_id"])
    assert _n(page.page.inner_text("[data-card=dlq] b")) == int(dlq["reason"].isin(
        ["IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "ORDERLY_BLOCKED", "TRANSACTION_DISCARDED"]).sum()) < len(dlq)
    unc = _gold(site["lake"], "unconsumed_ranges", site["run_id"])
    group = unc.groupby("consumer_group").size().idxmax()
    slug = dashboard.group_slug("DefaultCluster", group)
    page = Page(browser, site["folder"] / "groups" / f"{slug}.html")
    rows = [(r["client_id"], r["topic"], r["broker"], _n(r["queue_id"]), _n(r["start_offset"]), r["kind"])
            for r in page.table(f"{slug}-unconsumed_ranges")]
    assert len(rows) > 1 and rows == sorted(rows)
    page.check_offline_and_clean()
