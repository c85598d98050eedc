"""Screenshots of a dashboard for the README (docs/*.png): overview, one group page, data quality.

Usage: .venv/bin/python infra/dashboard_screenshots.py [DASHBOARD_DIR] [GROUP]
(default: var/demo/reports/dashboard, the group page of GID_003_expired). Uses the system chromium, offline.
"""
from __future__ import annotations

import pathlib
import shutil
import sys

from playwright.sync_api import sync_playwright

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> int:
    site = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "var/demo/reports/dashboard").resolve()
    group = sys.argv[2] if len(sys.argv) > 2 else "GID_003_expired"
    pages = {"overview": site / "index.html", "quality": site / "quality.html"}
    found = sorted(site.rglob(f"*{group}*.html"))
    if not found:
        print(f"dashboard_screenshots: no page for group {group} under {site}", file=sys.stderr)
        return 2
    pages["group"] = found[0]
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        for name, path in pages.items():
            page.goto(path.as_uri())
            out = ROOT / "docs" / f"dashboard-{name}.png"
            page.screenshot(path=str(out), full_page=False, clip={"x": 0, "y": 0, "width": 1300,
                                                                   "height": 1500 if name == "group" else 1000})
            print(out)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
