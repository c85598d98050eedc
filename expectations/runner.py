"""Run a suite on a pandas frame with an ephemeral GE context: no project folder, no stores on disk.

Why ephemeral: the suites are code (``expectations/<table>.py``), so nothing has to be read from a GX project;
the only thing written is the Data Docs site, and only when a ``docs_dir`` is given.

Example::

    ctx = ephemeral_context("/tmp/docs")          # or ephemeral_context() for no Data Docs
    outcome = validate_table(df, consumer_offsets.suite(), context=ctx)
    outcome.success, outcome.failed              # (False, ['expect_column_values_to_be_between(committed_offset)'])
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from great_expectations import ExpectationSuite
    from great_expectations.data_context import AbstractDataContext

DOCS_SITE = "local_site"


@dataclass
class Outcome:
    """One suite run on one frame.

    Attributes:
        suite: the suite's name (``layer.table``).
        success: whether every expectation passed.
        rows: the number of rows validated.
        failed: the failed expectation types, sorted, each with its column when it has one
            (``expect_column_values_to_be_between(committed_offset)``).
        evaluated: how many expectations ran.
        result: the GE ``ExpectationSuiteValidationResult`` itself (``describe_dict()`` for the details).
    """

    suite: str
    success: bool
    rows: int
    failed: list[str]
    evaluated: int
    result: Any = field(default=None, repr=False, compare=False)


def ephemeral_context(docs_dir: str | None = None) -> "AbstractDataContext":
    """An in-memory GE context without progress bars; with a local Data Docs site in ``docs_dir`` when given."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    # get_context() hands back the same project context within a process: drop a docs site set by an earlier call.
    if DOCS_SITE in ctx.get_site_names():
        ctx.delete_data_docs_site(DOCS_SITE)
    if docs_dir:
        os.makedirs(docs_dir, exist_ok=True)
        ctx.add_data_docs_site(site_name=DOCS_SITE, site_config={
            "class_name": "SiteBuilder",
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": os.path.abspath(docs_dir)},
        })
    return ctx


def _describe(r: Any) -> str:
    column = r.expectation_config.kwargs.get("column")
    return r.expectation_config.type + (f"({column})" if column else "")


def validate_table(df: "pd.DataFrame", suite: "ExpectationSuite", *,
                   context: "AbstractDataContext | None" = None) -> Outcome:
    """Validate ``df`` against ``suite``; the context's Data Docs site (if any) gets the result page.

    Args:
        df: the rows, with the table's columns (e.g. from ``jobs._delta.read_pandas``).
        suite: a suite from ``expectations/<table>.py``; it is registered in the context under its own name
            (replacing a suite of that name validated earlier in the same context).
        context: a context from :func:`ephemeral_context`; default a fresh one without Data Docs.

    Returns:
        The :class:`Outcome`; nothing is raised when expectations fail (``jobs.quality`` decides that).
    """
    import great_expectations as gx

    ctx = context if context is not None else ephemeral_context()
    name = suite.name
    for factory in (ctx.checkpoints, ctx.validation_definitions, ctx.suites):
        try:
            factory.delete(name)
        except Exception:  # noqa: BLE001 - not registered yet
            pass
    try:
        source = ctx.data_sources.get("lake")
    except (KeyError, ValueError):
        source = ctx.data_sources.add_pandas("lake")
    asset_name = name.replace(".", "_").replace("/", "_")
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        batch_def = asset.get_batch_definition("whole")
    except (KeyError, LookupError):
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
    suite = ctx.suites.add(suite)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=suite))
    actions = [gx.checkpoint.UpdateDataDocsAction(name="data_docs")] if ctx.get_site_names() else []
    checkpoint = ctx.checkpoints.add(gx.Checkpoint(name=name, validation_definitions=[vd], actions=actions,
                                                   result_format="SUMMARY"))
    run = checkpoint.run(batch_parameters={"dataframe": df})
    (result,) = run.run_results.values()
    return Outcome(
        suite=name,
        success=bool(result.success),
        rows=len(df),
        failed=sorted(_describe(r) for r in result.results if not r.success),
        evaluated=len(result.results),
        result=result,
    )
