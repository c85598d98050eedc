"""The key index update: silver/key_index brought up to date with silver/messages, from the rows messages gained since
the last completed ingest (issue 39: a look-up by UNIQ_KEY reads five narrow columns, not every record's key).

Safe, as the deliveries update is: the index is derived again from what was added since the versions the last
completed ingest recorded, so rows a killed run loaded are indexed by the next run; an anti-join on the index key
(silver/messages' key) makes a rerun add nothing; the rows a rewrite adds again (the late folders' MERGE, a
compaction recorded by maintenance) are in the index already. Delta lakes only: a Parquet table has no versions to
tell what is new, so its look-ups join on the key column (``jobs.lake.lookups.copies_of``)."""
from __future__ import annotations

from typing import Any

from jobs.lake import _delta, _spark, lookups, storage
from schemas import key_index, messages

STAGING = "_staging/key_index"  # where an update before one pass staged its rows (a killed one's are deleted)


def stale(lake: str, previous: dict[str, Any] | None) -> bool:
    """Whether the index must be brought up to date: messages exist and the index is missing, or either moved since
    the newest completed ingest (which left them in step), or no ingest completed before."""
    if not lookups.index_enabled() or not _delta.exists(lake, messages.TABLE):
        return False
    if not _delta.exists(lake, key_index.TABLE) or previous is None:
        return True
    recorded = previous["table_versions"]
    return any(_delta.version(lake, t) != recorded.get(t.qualified) for t in (messages.TABLE, key_index.TABLE))


def update(spark: Any, lake: str, since: dict[str, int] | None, say: Any = lambda _line: None) -> int:
    """Index the silver/messages rows added after ``since`` (the table versions of the last completed ingest; every
    row when None or when the index does not exist yet: the first run after an upgrade reads the whole table once).
    Returns the number of index rows added.

    One pass over the new rows' keys: the ranges the anti-join is restricted to are those of the new records, keyed
    or not (a range a little wider than the keyed rows' prunes the same index rows but for a few), read from their
    narrow position columns. Computing the rows once into a staging folder, then appending them, wrote and read
    them twice (bench_export's 6.1 M messages: 2.2 s)."""
    from pyspark.sql import functions as F

    whole = since is None or messages.TABLE.qualified not in since or not _delta.exists(lake, key_index.TABLE)
    if whole:
        if since is not None:  # a lake ingested before the index: once
            say("ingest: indexing every stored UNIQ_KEY (silver/key_index is new in this lake)")
        new = _delta.read(spark, lake, messages.TABLE)
    else:
        new = _delta.added_since(spark, lake, messages.TABLE, since[messages.TABLE.qualified])
    storage.delete_tree(f"{lake.rstrip('/')}/{STAGING}")  # what an ingest before this one's killed update left
    # the new rows' ranges from their files' statistics (each file of silver/messages holds one broker's records;
    # the engine's aggregate read 6.1 M rows' positions for them, 0.5 s of bench_export's ingest), else the engine's
    stats = _delta.added_spans(lake, messages.TABLE, None if whole else since[messages.TABLE.qualified])
    got = ([(c, b, lo, hi, n) for (c, b), (lo, hi, n) in stats.items()] if stats is not None else
           new.where(F.col("physical_offset").isNotNull()).groupBy("cluster", "broker")
           .agg(F.min("physical_offset"), F.max("physical_offset"), F.count(F.lit(1))).collect())
    spans = {(c, b): (int(lo), int(hi) + 1) for c, b, lo, hi, _ in got}
    rows = lookups.index_rows(new)
    if not spans:
        if not _delta.exists(lake, key_index.TABLE):  # created empty: the next run knows it is up to date
            _delta.insert_new(spark, rows, lake, key_index.TABLE, target_filter="false")
        return 0
    before = _delta.version(lake, key_index.TABLE)
    _delta.insert_new(spark, rows, lake, key_index.TABLE, target_filter=lookups.spans_filter(spans),
                      rows=sum(int(n) for *_, n in got), target_dnf=lookups.spans_dnf(spans),
                      target_rows=None if whole else _indexed_since(spark, lake, since, spans))
    return _delta.rows_added(lake, key_index.TABLE, before)


def _indexed_since(spark: Any, lake: str, since: dict[str, int], spans: dict[tuple[str, str], tuple[int, int]]
                   ) -> bool | None:
    """Whether an index row of the new copies' ranges can exist, looking at the index files added since ``since``
    only (:func:`rows_since`); None (look at the whole index) when silver/messages lost a file since then.

    The index's files are sorted by key hash, so each spans every broker and offset and no statistics skip one for a
    look-up by position: checking the whole index read all of it (41 M rows, +0.6 GiB in the ingest, bench_age)."""
    recent = rows_since(spark, lake, since)
    return None if recent is None else recent.alias("t").where(lookups.spans_filter(spans)).limit(1).count() > 0


def rows_since(spark: Any, lake: str, since: dict[str, int], until: dict[str, int] | None = None) -> Any | None:
    """The index rows that can hold the copies silver/messages gained after the versions ``since`` (up to the versions
    ``until``, else now): the rows of the index files added since, when silver/messages only gained files; None when
    the whole index must be looked at (a table missing from ``since``, a Parquet lake, or a rewrite).

    Why the added files suffice: silver/messages is keyed by the copy (the ingest's anti-join), so when the table
    only gained files its new copies were in none of its rows at ``since``. The index then was derived from those
    rows (one row per copy, the ledger rules above), so it held none of them; a row for one is a row the index gained
    since (in a run, or by a killed run before it). A rewrite (a late folder's MERGE, a layout or compaction not yet
    recorded) re-adds older copies, which the older index holds. Used by the ingest's check above and by the
    validation's indexed rule (``jobs.ops.quality``)."""
    until = until or {}
    m_since, i_since = (since.get(t.qualified) for t in (messages.TABLE, key_index.TABLE))
    if m_since is None or i_since is None or _delta.removed_since(
            lake, messages.TABLE, m_since, until=until.get(messages.TABLE.qualified)):
        return None
    return _delta.added_since(spark, lake, key_index.TABLE, i_since, until=until.get(key_index.TABLE.qualified))
