"""Run a suite on a Spark DataFrame with an ephemeral GE context: no project folder, no stores on disk.

Why Spark: the suites run where the rows are (GE's Spark datasource computes its metrics as Spark queries, and a Spark
Connect frame on Sail works as a classic one), so validating ten million rows moves a few numbers to Python, not
the rows. Why ephemeral: the suites are code (``expectations/<table>.py``), so nothing has to be read from a GX
project; the only thing written is the Data Docs site, and only when a ``docs_dir`` is given.

Table-wide rules (``expect_compound_columns_to_be_unique``: one row per key) are not run here on an increment:
rows added by one run can collide with rows already in the table, so ``jobs.ops.quality`` answers them with an engine
query over the table (:func:`row_rules` leaves them out of the GE run).

Example::

    ctx = ephemeral_context("/tmp/docs")          # or ephemeral_context() for no Data Docs
    outcome = validate_table(df, consumer_offsets.suite(), context=ctx)   # df: a Spark DataFrame
    outcome.success, outcome.failed              # (False, ['expect_column_values_to_be_between(committed_offset)'])
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

if TYPE_CHECKING:  # pragma: no cover
    from great_expectations import ExpectationSuite
    from great_expectations.data_context import AbstractDataContext
    from pyspark.sql import DataFrame

DOCS_SITE = "local_site"
# Rules about the whole table, not each row: answered by an engine query over the table (jobs.ops.quality).
TABLE_WIDE = frozenset({"expect_compound_columns_to_be_unique"})
# How many unexpected values a result keeps as its observed value (GE's partial_unexpected_list).
EXAMPLES = 20


@dataclass(frozen=True)
class Result:
    """One expectation's outcome on one frame: what ``gold/validation_results`` keeps per expectation.

    Attributes:
        expectation: the expectation type (``expect_column_values_to_be_between``).
        column: its column(s): ``column``, or ``column_A,column_B`` / the ``column_list`` joined by commas; ``""`` for
            a table-level expectation.
        success: whether it passed.
        observed_value: GE's observed value as JSON text, or for a per-row rule up to 20 unexpected values (sorted).
        element_count: the rows it looked at.
        unexpected_count: the rows that failed it (None for table-level expectations).
    """

    expectation: str
    column: str
    success: bool
    observed_value: str | None
    element_count: int | None
    unexpected_count: int | None

    @property
    def described(self) -> str:
        """``expectation(column)``, or the bare type for a table-level expectation."""
        return f"{self.expectation}({self.column})" if self.column else self.expectation


@dataclass
class Outcome:
    """One suite run on one frame.

    Attributes:
        suite: the suite's name (``layer.table``).
        success: whether every expectation passed.
        rows: the number of rows validated.
        failed: the failed expectations, sorted, each with its column when it has one
            (``expect_column_values_to_be_between(committed_offset)``).
        evaluated: how many expectations ran.
        results: one :class:`Result` per expectation, in the order of ``(expectation, column)``.
        result: the GE ``ExpectationSuiteValidationResult`` itself (``describe_dict()`` for the details).
    """

    suite: str
    success: bool
    rows: int
    failed: list[str]
    evaluated: int
    results: list[Result] = field(default_factory=list)
    result: Any = field(default=None, repr=False, compare=False)


def ephemeral_context(docs_dir: str | None = None) -> "AbstractDataContext":
    """An in-memory GE context without progress bars; with a local Data Docs site in ``docs_dir`` when given."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GE sets this logger to INFO at import: every run said "Created temporary directory ... for ephemeral docs site".
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
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


def row_rules(suite: "ExpectationSuite") -> "ExpectationSuite":
    """The suite without its table-wide rules (:data:`TABLE_WIDE`): what can be checked on an increment alone."""
    import great_expectations as gx

    return gx.ExpectationSuite(name=suite.name, expectations=[
        e for e in suite.expectations if e.expectation_type not in TABLE_WIDE])


def column_of(kwargs: dict[str, Any]) -> str:
    """The column(s) an expectation is about, as stored in ``gold/validation_results.column``."""
    if kwargs.get("column"):
        return str(kwargs["column"])
    if kwargs.get("column_A"):
        return f"{kwargs['column_A']},{kwargs['column_B']}"
    if kwargs.get("column_list"):
        return ",".join(kwargs["column_list"])
    return ""


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _to_result(r: Any) -> Result:
    """A GE ``ExpectationValidationResult`` as a :class:`Result` (counts and observed value only)."""
    res = r.result or {}
    if "observed_value" in res:
        observed = _json(res["observed_value"])
    elif "partial_unexpected_list" in res:
        observed = _json(sorted((_json(v) for v in res["partial_unexpected_list"])))
    else:
        observed = None
    element = res.get("element_count")
    unexpected = res.get("unexpected_count")
    return Result(expectation=r.expectation_config.type, column=column_of(r.expectation_config.kwargs),
                  success=bool(r.success), observed_value=observed,
                  element_count=None if element is None else int(element),
                  unexpected_count=None if unexpected is None else int(unexpected))


def _get_or_add(get: Any, add: Any, name: str, errors: tuple[type[BaseException], ...]) -> Any:
    try:
        return get(name)
    except errors:
        return add(name)


def validate_table(df: "DataFrame", suite: "ExpectationSuite", *,
                   context: "AbstractDataContext | None" = None) -> Outcome:
    """Validate the Spark frame ``df`` against ``suite``; the context's Data Docs site (if any) gets the result page.

    Every expectation of the suite runs as given (use :func:`row_rules` to leave out the table-wide ones).
    The metrics are Spark queries on ``df``: only counts and up to 20 unexpected values per expectation reach Python.

    Args:
        df: the rows (a Spark or Spark Connect DataFrame) with the table's columns (e.g. from
            ``jobs.lake._delta.read``).
        suite: a suite from ``expectations/<table>.py``; it is registered in the context under its own name
            (replacing a suite of that name validated earlier in the same context).
        context: a context from :func:`ephemeral_context`; default a fresh one without Data Docs.

    Returns:
        The :class:`Outcome`; nothing is raised when expectations fail (``jobs.ops.quality`` decides that).
    """
    import great_expectations as gx

    ctx = context if context is not None else ephemeral_context()
    name = suite.name
    for factory in (ctx.checkpoints, ctx.validation_definitions, ctx.suites):
        try:
            factory.delete(name)
        except Exception:  # noqa: BLE001 - not registered yet
            pass
    # persist=False: Sail has no persist (a no-op with a warning), and the frame is an increment read once per metric
    # bundle anyway.
    source = _get_or_add(ctx.data_sources.get, lambda n: ctx.data_sources.add_spark(n, persist=False), "lake",
                         (KeyError, ValueError))
    asset_name = name.replace(".", "_").replace("/", "_")
    asset = _get_or_add(source.get_asset, source.add_dataframe_asset, asset_name, (LookupError,))
    batch_def = _get_or_add(asset.get_batch_definition, asset.add_batch_definition_whole_dataframe, "whole",
                            (KeyError, LookupError))
    suite = ctx.suites.add(suite)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=suite))
    actions = [gx.checkpoint.UpdateDataDocsAction(name="data_docs")] if ctx.get_site_names() else []
    checkpoint = ctx.checkpoints.add(gx.Checkpoint(name=name, validation_definitions=[vd], actions=actions,
                                                   result_format={"result_format": "BASIC",
                                                                  "partial_unexpected_count": EXAMPLES}))
    run = checkpoint.run(batch_parameters={"dataframe": df})
    (result,) = run.run_results.values()
    results = sorted((_to_result(r) for r in result.results), key=lambda x: (x.expectation, x.column))
    counts = [r.element_count for r in results if r.element_count is not None]
    return Outcome(
        suite=name,
        success=bool(result.success),
        rows=max(counts) if counts else int(df.count()),
        failed=sorted(r.described for r in results if not r.success),
        evaluated=len(results),
        results=results,
        result=result,
    )
