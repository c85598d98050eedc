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

STAGING = "_staging/key_index"  # the rows of the update, computed once


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
    Returns the number of index rows added."""
    whole = since is None or messages.TABLE.qualified not in since or not _delta.exists(lake, key_index.TABLE)
    if whole:
        if since is not None:  # a lake ingested before the index: once
            say("ingest: indexing every stored UNIQ_KEY (silver/key_index is new in this lake)")
        new = _delta.read(spark, lake, messages.TABLE)
    else:
        new = _delta.added_since(spark, lake, messages.TABLE, since[messages.TABLE.qualified])
    folder = f"{lake.rstrip('/')}/{STAGING}"
    try:
        rows = _spark.materialize(spark, lookups.index_rows(new), folder)
        spans = lookups.spans(rows)
        if not spans:
            if not _delta.exists(lake, key_index.TABLE):  # created empty: the next run knows it is up to date
                _delta.insert_new(spark, rows, lake, key_index.TABLE, target_filter="false")
            return 0
        n = rows.count()
        before = _delta.version(lake, key_index.TABLE)
        _delta.insert_new(spark, rows, lake, key_index.TABLE, target_filter=lookups.spans_filter(spans), rows=n,
                          target_dnf=lookups.spans_dnf(spans),
                          target_rows=None if whole else _indexed_since(spark, lake, since, spans))
        return _delta.rows_added(lake, key_index.TABLE, before)
    finally:
        storage.delete_tree(folder)


def _indexed_since(spark: Any, lake: str, since: dict[str, int], spans: dict[tuple[str, str], tuple[int, int]]
                   ) -> bool | None:
    """Whether an index row of the new copies' ranges can exist, looking at the index files added since ``since``
    only; None (look at the whole index) when silver/messages lost a file since then.

    The index's files are sorted by key hash, so each spans every broker and offset and no statistics skip one for a
    look-up by position: checking the whole index read all of it (41 M rows, +0.6 GiB in the ingest, bench_age).
    When silver/messages only gained files since the last completed ingest, the new copies were in none of its
    rows then (its own anti-join keeps one row per copy), so the index rows from before cannot hold them: only rows a
    killed run added since can. A rewrite (a late folder's MERGE, a layout or compaction not yet recorded) re-adds
    older copies, which the older index holds: then the whole index is checked, as before."""
    if key_index.TABLE.qualified not in since or _delta.removed_since(lake, messages.TABLE,
                                                                       since[messages.TABLE.qualified]):
        return None
    recent = _delta.added_since(spark, lake, key_index.TABLE, since[key_index.TABLE.qualified])
    return recent.alias("t").where(lookups.spans_filter(spans)).limit(1).count() > 0
