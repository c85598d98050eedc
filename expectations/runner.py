"""Validate a pandas frame against a suite with an ephemeral GE context (no project folder needed)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@dataclass
class Outcome:
    """One suite run: overall success and the expectation types that failed."""

    table: str
    success: bool
    rows: int
    failed: list[str]
    evaluated: int


def validate_table(table: str, df: Any, suite: Any) -> Outcome:
    import great_expectations as gx

    ctx = gx.get_context(mode="ephemeral")
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:  # noqa: BLE001 - progress bars are cosmetic
        pass
    source = ctx.data_sources.add_pandas("lake")
    batch_def = source.add_dataframe_asset(table.replace("/", "_")).add_batch_definition_whole_dataframe("all")
    result = batch_def.get_batch(batch_parameters={"dataframe": df}).validate(suite)
    failed = sorted(r.expectation_config.type + (f"({r.expectation_config.kwargs.get('column', '')})"
                                                 if r.expectation_config.kwargs.get("column") else "")
                    for r in result.results if not r.success)
    return Outcome(table, bool(result.success), len(df), failed, len(result.results))
