"""The small tables' rows a run extracts, held per target table until the load, and where they wait as files for
their MERGE."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from jobs.lake import _delta
from jobs.problems import Problem

ROWS_STAGING = "_staging/rows"  # the small tables' rows of a run, as files the engine reads (_delta.rows_frame)


@dataclass
class Extracted:
    """Rows extracted from the landing zone, per target table (small tables only)."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[tuple[str, str, dt.datetime | None, Problem]] = field(default_factory=list)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).append(row)

    def has_problem(self, path: str) -> bool:
        return any(p.source_path == path for *_, p in self.problems)

    def problem(self, cluster: str, broker: str, ts: dt.datetime | None, p: Problem) -> None:
        self.problems.append((cluster, broker, ts, p))

    def mark(self) -> tuple[int, dict[str, int]]:
        """Where the next problem and rows go: for :meth:`splice`."""
        return len(self.problems), {t: len(r) for t, r in self.rows.items()}

    def splice(self, mark: tuple[int, dict[str, int]], other: "Extracted") -> None:
        """``other``'s problems and rows put where :meth:`mark` was taken, before what was added since: the order
        of extracting them in turn, though ``other`` was extracted beside the steps after the mark."""
        self.problems[mark[0]:mark[0]] = other.problems
        for table, rows in other.rows.items():
            at = mark[1].get(table, 0)
            self.rows.setdefault(table, [])[at:at] = rows


def rows_folder(lake: str) -> str:
    """Where a run's small-table rows wait for their MERGE (:func:`jobs.lake._delta.rows_frame`)."""
    return f"{lake.rstrip('/')}/{ROWS_STAGING}"


def _spark_frame(spark: Any, lake: str, rows: list[dict[str, Any]], table: Any) -> Any:
    return _delta.rows_frame(spark, rows, table, rows_folder(lake))
