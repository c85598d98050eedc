"""Data-quality job: the Great Expectations suites of ``expectations/`` on the rows one run added, on the engine.

Reads (Spark, never whole tables in Python):

* ``silver``: per table, the rows of the Delta files an ingest run added (``bronze/ingest_runs``: the versions the
  completed run before it left, and the ones it left);
* ``gold``: per table, the rows of one reconcile run (``run_id``), at the versions ``gold/reconcile_runs`` recorded.

Each suite's per-row rules run through GE's Spark datasource on that increment; the table-wide rule (one row per key)
is an engine query over the table at the run's version, restricted to the keys of the increment, so its cost follows
the increment too. Writes one row per (run, table, expectation, column) to ``gold/validation_results`` (MERGEd on
its key, so validating a run again replaces its rows and a rerun that finds the same makes no commit); with
``docs_dir`` the GE Data Docs site too (local folders only). Raises :class:`QualityError` naming each failed table and
expectation.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from jobs import progress as progress_lines
from jobs.lake import _delta, storage
from jobs.problems import FinalError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from expectations.runner import Result
    from schemas._table import Table

log = logging.getLogger(__name__)
UTC = dt.timezone.utc
Layer = Literal["silver", "gold"]
UNIQUE = "expect_compound_columns_to_be_unique"
# Increment rows per bucket of the key rule (see key_rule).
BUCKET_ROWS = 2_500_000
# the key columns of a table keyed by commitlog position (silver/messages, silver/key_index): read in spans
POSITIONAL = {"cluster", "broker", "physical_offset"}


class QualityError(FinalError):
    """A table failed its expectation suite (the message names each table and expectation)."""


@dataclass(frozen=True)
class Increment:
    """What one run wrote, to be validated.

    Attributes:
        validation_id: the run (an ingest run id for silver, a reconcile run id for gold).
        layer: ``silver`` or ``gold``.
        before: table -> the version before the run (silver; a table missing here was created by the run).
        after: table -> the version the run left (a table missing here did not exist).
    """

    validation_id: str
    layer: str
    before: dict[str, int]
    after: dict[str, int]


def _tables(layer: str) -> list["Table"]:
    import schemas
    from expectations import GOLD, SILVER

    by_name = {t.qualified: t for t in schemas.ALL_TABLES}
    return [by_name[n] for n in {"silver": SILVER, "gold": GOLD}[layer]]


def resolve(lake: str, layer: str, run_id: str | None = None) -> Increment:
    """The run to validate: ``run_id``, or the newest completed ingest (silver) / reconcile (gold) run.

    Raises:
        UsageError: the lake holds no such completed run.
    """
    from jobs.lake import ledger

    if layer == "silver":
        inc = ledger.ingest_increment(lake, run_id)
        if inc is None:
            raise UsageError(f"--run-id {run_id}: no completed ingest run of that id in {lake}; see bronze/ingest_runs"
                             if run_id else f"--lake {lake}: no completed ingest to validate; run `rmq-recon ingest` "
                             "first")
        return Increment(inc["run_id"], layer, inc["before"], inc["after"])
    row = ledger.completed_reconcile(lake, run_id) if run_id else ledger.last_reconcile(lake)
    if row is None:
        raise UsageError(f"--run-id {run_id}: no completed reconcile run of that id in {lake}; see gold/reconcile_runs"
                         if run_id else f"--lake {lake}: no completed reconcile to validate; run `rmq-recon reconcile` "
                         "first")
    return Increment(row["run_id"], layer, {}, row["table_versions"])


def extract_increment(spark: "SparkSession", lake: str, table: "Table", inc: Increment) -> "DataFrame":
    """The rows ``inc``'s run wrote to ``table`` (silver: its added Delta files; gold: its ``run_id`` rows)."""
    from pyspark.sql import functions as F

    after = inc.after.get(table.qualified)
    if inc.layer == "gold":
        return _delta.read(spark, lake, table, at=after).where(F.col("run_id") == F.lit(inc.validation_id))
    added = _delta.added_since(spark, lake, table, inc.before.get(table.qualified), until=after)
    return added if added is not None else _delta.read(spark, lake, table)  # Parquet: no versions, the whole table


def extract_table(spark: "SparkSession", lake: str, table: "Table", inc: Increment) -> "DataFrame | None":
    """The rows the key rule looks at: the table as the run left it; None when that is just the increment (the run
    created the table, or the key holds the run id: a gold run's keys are its own)."""
    created = inc.layer == "silver" and table.qualified not in inc.before and _delta.table_format() == "delta"
    if created or (inc.layer == "gold" and "run_id" in table.key):
        return None
    return _delta.read(spark, lake, table, at=inc.after.get(table.qualified))


def in_bucket(key: list[str], buckets: int, bucket: int) -> Callable[["DataFrame"], "DataFrame"]:
    """The rows whose key hashes to ``bucket`` of ``buckets`` (all rows when ``buckets`` is 1): a factory for
    ``df.transform``, so one key's rows are in one bucket whatever frame they come from."""
    from pyspark.sql import functions as F

    def keep(df: "DataFrame") -> "DataFrame":
        return df if buckets == 1 else df.where(F.pmod(F.xxhash64(*key), F.lit(buckets)) == F.lit(bucket))

    return keep


def duplicate_keys(table_rows: "DataFrame | None", increment: "DataFrame", key: list[str]) -> "DataFrame":
    """The keys of ``increment`` that more than one row of the table has, with that number (``rows``).

    ``table_rows``: the table at the run's version (which includes the increment), so a key added twice and a key
    added again over an older row are both found; None when the table is the increment (the run created it). The
    semi-join keeps the work proportional to the increment.
    """
    from pyspark.sql import functions as F

    rows = increment if table_rows is None else table_rows.join(increment.select(*key).distinct(), on=key,
                                                                how="left_semi")
    return rows.groupBy(*key).agg(F.count(F.lit(1)).alias("rows")).where(F.col("rows") > 1)


def in_spans(table_rows: "DataFrame | None", spans: dict[tuple[str, str], tuple[int, int]],
             table: "Table") -> "DataFrame | None":
    """``table_rows`` restricted to ``spans`` (the increment's brokers and commitlog ranges: ``lookups.spans``), for a
    table keyed by commitlog position (silver/messages, silver/key_index): a row sharing a key with the increment lies
    there, and the files of older ranges are skipped by their statistics instead of read for the key rule's semi-join
    (issue 39)."""
    from pyspark.sql import functions as F

    from jobs.lake import lookups

    if table_rows is None or not POSITIONAL <= set(table.key):
        return table_rows
    # (a null key matches no row in the semi-join: the not-null expectations report it)
    return table_rows.alias("t").where(lookups.spans_filter(spans)) if spans else table_rows.where(F.lit(False))


def key_rule(table: "Table", table_rows: "DataFrame | None", increment: "DataFrame", increment_rows: int) -> "Result":
    """The one-row-per-key rule as a result, from :func:`duplicate_keys` run bucket by bucket.

    Why buckets: grouping ten million keys at once held ~1.8 GiB in the engine; the keys are split by hash into
    buckets of about :data:`BUCKET_ROWS` increment rows, one query each, so memory follows the bucket, not the run
    (10 M messages: 5 buckets, 0.73 GiB peak for the whole silver validation).

    unexpected_count: the increment's rows whose key more than one row of the table has; observed_value: the first
    20 such keys (in key order) with the number of rows each has.
    """
    from pyspark.sql import functions as F

    from expectations.runner import EXAMPLES, Result

    key = list(table.key)
    buckets = max(1, -(-increment_rows // BUCKET_ROWS))
    found: list[tuple[tuple, dict[str, Any]]] = []
    unexpected = 0
    for b in range(buckets):
        part = in_bucket(key, buckets, b)
        inc_b = increment.transform(part)
        dups = duplicate_keys(None if table_rows is None else table_rows.transform(part), inc_b, key)
        # Keys as the engine prints them (timestamps in the session's UTC), so the JSON does not depend on the client;
        # the typed key orders them.
        got = (dups.orderBy(*key).limit(EXAMPLES)
               .select(*key, *[F.col(k).cast("string").alias(f"_s_{k}") for k in key], "rows").collect())
        if got:
            unexpected += inc_b.join(dups.select(*key), on=key, how="left_semi").count()
            found += [(tuple((r[k] is None, r[k]) for k in key),
                       {**{k: r[f"_s_{k}"] for k in key}, "rows": r["rows"]}) for r in got]
    examples = [d for _, d in sorted(found, key=lambda x: x[0])[:EXAMPLES]]
    return Result(expectation=UNIQUE, column=",".join(key), success=not examples,
                  observed_value=json.dumps(examples, sort_keys=True, default=str),
                  element_count=increment_rows, unexpected_count=int(unexpected))


INDEXED = "expect_stored_copies_to_be_indexed"  # across tables: silver/messages' rows in silver/key_index


def indexed_rule(spark: "SparkSession", lake: str, inc: Increment, increment: "DataFrame",
                 spans: dict[tuple[str, str], tuple[int, int]]) -> "Result":
    """Every row of the run's silver/messages increment that has a UNIQ_KEY has exactly one silver/key_index row (at
    the version the run left), with the key's hash: a copy missing from the index is a copy a look-up by key would
    not find, a second row a copy found twice. One pass: the index is read in the increment's brokers and commitlog
    ranges (``spans``) only, joined on the copy's key and counted per copy (the index's own suite is this rule).

    Which index rows: those of the files the index gained in the run (:func:`_index_rows`) when silver/messages only
    gained files in it, else the whole index at the version the run left. The index's files are sorted by key hash,
    so each holds every broker and offset and ``spans`` skips none of them: reading the whole index cost 0.2 s per
    10 M rows of history (194 -> 545 MiB read from 12 M to 41 M records, bench_age).

    element_count: the copies checked; unexpected_count: those without exactly one row of their hash; observed_value:
    the first 20 (in key order) with the index rows of their key (``rows``) and of their hash (``same``)."""
    from pyspark.sql import functions as F

    from expectations.runner import EXAMPLES, Result
    from jobs.lake import lookups
    from schemas import key_index

    want = lookups.index_rows(increment)
    key = list(key_index.TABLE.key)
    checked = unexpected = 0
    examples: list[dict[str, Any]] = []
    if spans:
        index = (_index_rows(spark, lake, inc).alias("t").where(lookups.spans_filter(spans))
                 .select(*key, F.col("key_hash").alias("_h")))
        per = want.join(index, on=key, how="left").groupBy(*key, "key_hash").agg(
            F.count("_h").alias("rows"), F.sum((F.col("_h") == F.col("key_hash")).cast("int")).alias("same"))
        bad = (F.col("rows") != 1) | (F.coalesce(F.col("same"), F.lit(0)) != 1)
        totals = per.agg(F.count(F.lit(1)).alias("n"), F.sum(bad.cast("int")).alias("bad")).first()
        checked, unexpected = int(totals["n"]), int(totals["bad"] or 0)
        if unexpected:
            got = (per.where(bad).orderBy(*key).limit(EXAMPLES)
                   .select(*[F.col(k).cast("string").alias(k) for k in key], "rows",
                           F.coalesce(F.col("same"), F.lit(0)).alias("same")).collect())
            examples = [r.asDict() for r in got]
    return Result(expectation=INDEXED, column=",".join([*key, "key_hash"]), success=not unexpected,
                  observed_value=json.dumps(examples, sort_keys=True), element_count=checked,
                  unexpected_count=unexpected)


def _index_rows(spark: "SparkSession", lake: str, inc: Increment) -> "DataFrame":
    """The silver/key_index rows that can hold the run's new copies: those of the index files the run added when
    silver/messages only gained files in it (``jobs.ingest.key_index.rows_since``: a killed run's files are in the
    increment too, its ``before`` being the last completed ingest's versions), else the whole index as the run left
    it."""
    from jobs.ingest import key_index as index_update
    from schemas import key_index

    gained = index_update.rows_since(spark, lake, inc.before, inc.after)
    return gained if gained is not None else _delta.read(spark, lake, key_index.TABLE,
                                                          at=inc.after.get(key_index.TABLE.qualified))


def result_rows(inc: Increment, table: "Table", results: list["Result"], validated_at: dt.datetime) -> list[tuple]:
    """``gold/validation_results`` rows (in its column order) for one table's results."""
    return [(inc.validation_id, inc.layer, table.qualified, r.expectation, r.column, r.success, r.observed_value,
             r.element_count, r.unexpected_count, validated_at) for r in results]


def _stored(lake: str, inc: Increment) -> list[tuple] | None:
    """The rows already kept for ``inc`` (None when there are none)."""
    from schemas import validation_results

    t = validation_results.TABLE
    if not _delta.exists(lake, t):
        return None
    df = _delta.read_pandas_columns(lake, t, t.columns, filters=[("validation_id", "=", inc.validation_id),
                                                                 ("layer", "=", inc.layer)])
    if not len(df):
        return None
    df = df.astype(object).where(df.notna(), None)
    return [tuple(r) for r in df.itertuples(index=False)]


def summarize(inc: Increment, rows: list[tuple], skipped: dict[str, str]) -> dict[str, Any]:
    """The job's answer from its result rows: per table success, rows validated, failed expectations."""
    cols = ["validation_id", "layer", "table_name", "expectation", "column", "success", "observed_value",
            "element_count", "unexpected_count", "validated_at"]
    tables: dict[str, Any] = {}
    failures: list[str] = []
    for row in sorted(rows, key=lambda r: (r[2], r[3], r[4] or "")):
        r = dict(zip(cols, row))
        t = tables.setdefault(r["table_name"], {"success": True, "rows": 0, "failed": [], "evaluated": 0})
        t["evaluated"] += 1
        if r["element_count"] is not None:
            t["rows"] = max(t["rows"], int(r["element_count"]))
        if not r["success"]:
            described = f"{r['expectation']}({r['column']})" if r["column"] else r["expectation"]
            t["success"] = False
            t["failed"].append(described)
            counts = r["unexpected_count"], r["element_count"]
            n = "" if counts[0] is None else f" ({int(counts[0])} of {int(counts[1])} rows)"
            failures.append(f"{r['table_name']} {described}{n}")
    for name, why in skipped.items():
        tables[name] = {"success": True, "rows": 0, "failed": [], "evaluated": 0, "skipped": why}
    return {"validation_id": inc.validation_id, "layer": inc.layer, "success": not failures,
            "tables": dict(sorted(tables.items())), "failures": failures}


def validate_layer(lake: str, layer: Layer, *, run_id: str | None = None, docs_dir: str | None = "",
                   fail: bool = True, reuse: bool = False, now: dt.datetime | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validate what one run wrote to the ``layer`` tables and keep the results in ``gold/validation_results``.

    Idempotent per run: the rows are MERGEd on (validation_id, table_name, expectation, column); validating the
    same run again writes the same rows (a rerun that finds the same makes no commit).

    Args:
        lake: the lake root.
        layer: ``silver`` (what an ingest run added) or ``gold`` (one reconcile run's rows).
        run_id: the ingest / reconcile run; default the newest completed one. It is the ``validation_id``.
        docs_dir: where GE's Data Docs site goes (local folders; for ``s3://`` only ``validation.json``); default
            ``<lake>/_quality/<layer>``; None for none.
        fail: raise :class:`QualityError` when a suite fails (else only report it).
        reuse: when the run's results are kept already, answer from them without starting an engine (the scheduled
            snapshot DAG validates the previous run again when an ingest found nothing new).
        now: ``validated_at`` (default the wall clock).
        progress: called with one line per table.

    Returns:
        ``{"validation_id", "layer", "success", "tables": {table: {"success", "rows", "failed", "evaluated"}},
        "failures": ["<table> <expectation>(<column>) (<n> of <m> rows)", ...]}``.

    Raises:
        UsageError: no completed run to validate (or no run ``run_id``).
        QualityError: ``fail`` and an expectation failed; the message names each table and expectation.
    """
    say = progress_lines.reporter(progress, log)
    if layer not in ("silver", "gold"):
        raise UsageError(f"--layer {layer}: expected silver or gold")
    if not storage.exists(lake):
        raise UsageError(f"--lake {lake}: no such folder or prefix; give the lake root an ingest wrote")
    inc = resolve(lake, layer, run_id)
    docs_dir = storage.join(lake, "_quality", layer) if docs_dir == "" else docs_dir
    tables = _tables(layer)
    skipped = {t.qualified: why for t in tables if (why := _nothing_to_validate(inc, t))}
    if all(skipped.get(t.qualified) == NOT_CREATED for t in tables):  # success is never reported on nothing (§6)
        todo = "ingest a landing zone that holds RocketMQ files" if layer == "silver" else "run rmq-recon reconcile"
        raise UsageError(f"--lake {lake}: no {layer} table exists yet (run {inc.validation_id} wrote none): nothing "
                         f"to validate; {todo} first")
    rows = _stored(lake, inc) if reuse else None
    if rows is not None:
        say(f"validate: {layer} of {inc.validation_id}: results kept already")
    else:
        rows = _validate(lake, inc, [t for t in tables if t.qualified not in skipped], docs_dir, now, say)
    out = summarize(inc, rows, skipped)
    if docs_dir:
        storage.write_bytes(storage.join(docs_dir, "validation.json"),
                            json.dumps(out, indent=2, sort_keys=True).encode())
    if out["failures"] and fail:
        raise QualityError(f"{layer} validation of {inc.validation_id} failed: " + "; ".join(out["failures"]))
    return out


NOT_CREATED = "table not created yet"


def _nothing_to_validate(inc: Increment, table: "Table") -> str | None:
    """Why ``table`` has nothing of ``inc``'s run to validate (None when it has)."""
    name = table.qualified
    if name not in inc.after:
        return NOT_CREATED
    if inc.layer == "silver" and inc.before.get(name) == inc.after[name]:  # a Delta version or Parquet fingerprint
        return "nothing added by this run"
    return None


def _validate(lake: str, inc: Increment, tables: list["Table"], docs_dir: str | None, now: dt.datetime | None,
              say: Callable[[str], None]) -> list[tuple]:
    from expectations import SUITES
    from expectations.runner import ephemeral_context, row_rules, validate_table
    from jobs.lake import _spark, lease, lookups
    from schemas import messages, validation_results

    validated_at = (now or dt.datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    # Data Docs are a local HTML site (GE's filesystem store); for an s3:// docs_dir only validation.json goes there.
    context = ephemeral_context(docs_dir if docs_dir and not storage.is_s3(docs_dir) else None)
    rows: list[tuple] = []
    if not tables:
        return rows
    with _spark.session() as spark:
        for table in tables:
            increment = extract_increment(spark, lake, table, inc)
            suite = SUITES[table.qualified]()
            outcome = validate_table(increment, row_rules(suite), context=context)
            results = list(outcome.results)
            indexed = table is messages.TABLE and lookups.index_enabled()
            # the increment's commitlog ranges, once for both rules that read a position-keyed table in them
            spans = lookups.spans(increment) if indexed or POSITIONAL <= set(table.key) else {}
            if any(e.expectation_type == UNIQUE for e in suite.expectations):
                results.append(key_rule(table, in_spans(extract_table(spark, lake, table, inc), spans, table),
                                        increment, outcome.rows))
            if indexed:
                results.append(indexed_rule(spark, lake, inc, increment, spans))
            rows += result_rows(inc, table, results, validated_at)
            bad = sorted(r.described for r in results if not r.success)
            say(f"validate: {table.qualified}: {outcome.rows} row(s) of {inc.validation_id}, {len(results)} "
                f"expectation(s)" + (f", FAILED {', '.join(bad)}" if bad else ", passed"))
        if rows:
            frame = spark.createDataFrame(rows, validation_results.TABLE.schema)
            with lease.hold(lake, "quality", purpose=f"validation of {inc.validation_id}", say=say):
                _delta.merge(spark, frame, lake, validation_results.TABLE)
    return rows


def gold_validation(lake: str, given: dict[str, Any] | None, run_id: str | None = None) -> dict[str, Any]:
    """The gold validation of the run just made, per table (``{table: {"success", "failed", ...}}``): from
    ``given`` (validate_gold's return), else validated again.

    Why: validate_gold raises on a failed expectation and so hands nothing on, and a failed expectation is exactly
    what alerts and metrics must report; validating again (without raising; the stored result rows are reused)
    gives the same result.
    """
    if given is None:
        given = validate_layer(lake, "gold", run_id=run_id, fail=False)
    return given["tables"] if isinstance(given.get("tables"), dict) else given
