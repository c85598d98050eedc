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
                          target_dnf=lookups.spans_dnf(spans))
        return _delta.rows_added(lake, key_index.TABLE, before)
    finally:
        storage.delete_tree(folder)
