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
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from jobs import simulate
    from jobs.ingest import ingest
    from jobs.ops import dashboard
    from jobs.reconcile import reconcile

    tmp = tmp_path_factory.mktemp("dash")
    landing, lake, reports = tmp / "landing", tmp / "lake", tmp / "reports"
    simulate.run("mixed", str(landing), seed=1)
    ingest.run(str(landing), str(lake))
    reconcile.run(str(lake), str(reports), as_of="2026-01-05T03:00:00Z")
    latest = reconcile.run(str(lake), str(reports))
    built = dashboard.run(str(lake), str(reports))
    return {"lake": str(lake), "reports": reports, "run_id": latest["run_id"], "built": built,
            "folder": reports / "dashboard"}


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
    for r in _gold(lake, "dlq_candidates", run_id).to_dict("records"):
        name = "DLQ_BROADCAST_DROPPED" if r["reason"] == "BROADCAST_DROPPED" else r["reason"]
        out[r["consumer_group"]][name] += 1
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


NUMBERS = ["queues", "duplicated", "unconsumed", "BACKLOG", "EXPIRED", "SKIPPED", "BROADCAST_DROPPED", "dlq", "IN_DLQ",
           "BLOCKING_COMMIT", "RETRYING", "DLQ_BROADCAST_DROPPED", "corrections"]


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
        _n(by_group["GID_007_expired_return"]["EXPIRED"]) > 0
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
    assert [r["run_id"] for r in shown] == ["asof-20260105T030000Z", rid]
    assert [_n(r["dlq"]) for r in shown] == [len(_gold(lake, "dlq_candidates", r["run_id"])) for r in shown]
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
    page.check_offline_and_clean()
