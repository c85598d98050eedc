"""The comparison tool of issue 5: report files against the simulator's ``_truth`` (spec §5 format).

Ranges are expanded to single offsets, so two range files agree exactly when they describe the same offsets
with the same key and kind, however the rows are split; other reports are compared row by row on every column.
``cause`` is informative in the spec and is compared only when asked (``strict_cause``).
"""
from __future__ import annotations

import csv
import pathlib
from collections import Counter
from typing import Iterable

RANGE_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
RANGE_FILES = {"duplicated_ranges.csv": "evidence", "unconsumed_ranges.csv": "kind"}
ROW_FILES = ["offset_corrections.csv", "dlq_candidates.csv", "consumer_status.csv"]


def report_files(folder: pathlib.Path) -> list[str]:
    """Every file under a report folder, as sorted relative paths (to compare two runs' reports file for file)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def read_csv(path: pathlib.Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def expand(rows: Iterable[dict[str, str]], kind_col: str, *, with_cause: bool = False) -> Counter:
    """Every (key..., offset, kind[, cause]) a range file names; a Counter so overlapping rows show up too."""
    out: Counter = Counter()
    for r in rows:
        start, end, n = int(r["start_offset"]), int(r["end_offset"]), int(r["messages"])
        if n != end - start + 1:
            out[("BAD_MESSAGES_COUNT", *(r[k] for k in RANGE_KEY), start, end, n)] += 1
        extra = (r.get("cause", ""),) if with_cause else ()
        for o in range(start, end + 1):
            out[(*(r[k] for k in RANGE_KEY), o, r[kind_col], *extra)] += 1
    return out


def compare(report_dir: str | pathlib.Path, truth_dir: str | pathlib.Path, *, strict_cause: bool = False,
            limit: int = 20) -> list[str]:
    """Differences between a report folder and a truth folder; empty when they agree exactly."""
    report_dir, truth_dir = pathlib.Path(report_dir), pathlib.Path(truth_dir)
    diffs: list[str] = []
    for name, kind_col in RANGE_FILES.items():
        got, want = read_csv(report_dir / name), read_csv(truth_dir / name)
        cause = strict_cause and name == "duplicated_ranges.csv"
        g, w = expand(got, kind_col, with_cause=cause), expand(want, kind_col, with_cause=cause)
        missing, extra = w - g, g - w
        for k in sorted(missing, key=str)[:limit]:
            diffs.append(f"{name}: missing {k}")
        for k in sorted(extra, key=str)[:limit]:
            diffs.append(f"{name}: unexpected {k}")
        if len(missing) > limit or len(extra) > limit:
            diffs.append(f"{name}: {len(missing)} missing and {len(extra)} unexpected offsets in all")
    for name in ROW_FILES:
        got = Counter(tuple(sorted(r.items())) for r in read_csv(report_dir / name))
        want = Counter(tuple(sorted(r.items())) for r in read_csv(truth_dir / name))
        for k in sorted(want - got, key=str)[:limit]:
            diffs.append(f"{name}: missing {dict(k)}")
        for k in sorted(got - want, key=str)[:limit]:
            diffs.append(f"{name}: unexpected {dict(k)}")
    # coverage: every row by its scope and reason; the detail is words for people
    name = "coverage.csv"
    if (truth_dir / name).exists():
        row = lambda r: tuple(sorted((k, v) for k, v in r.items() if k != "detail"))  # noqa: E731
        got = Counter(row(r) for r in read_csv(report_dir / name))
        want = Counter(row(r) for r in read_csv(truth_dir / name))
        for k in sorted(want - got, key=str)[:limit]:
            diffs.append(f"{name}: missing {dict(k)}")
        for k in sorted(got - want, key=str)[:limit]:
            diffs.append(f"{name}: unexpected {dict(k)}")
    return diffs
