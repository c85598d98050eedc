"""Data-quality job: run the Great Expectations suites of ``expectations/`` on lake tables.

Reads each table with delta-rs (small pandas reads), validates it and raises :class:`QualityError`
naming every failed expectation. With ``docs_dir`` the results also go to ``validation.json`` there and,
for a local folder, to a Great Expectations Data Docs site (``index.html``).
"""
from __future__ import annotations

import json
from typing import Any

from jobs import _delta, storage
from jobs.problems import ReconError


class QualityError(ReconError):
    """A table failed its expectation suite."""


def validate(lake: str, tables: list[str], *, docs_dir: str | None = None, fail: bool = True) -> dict[str, Any]:
    """Validate ``tables`` (``layer/name``) in ``lake``; a table that does not exist yet is skipped.

    Returns:
        ``{table: {"success", "rows", "failed", "evaluated"}}``.
    Raises:
        QualityError: when ``fail`` and any suite fails, listing table and expectation types.
    """
    import schemas
    from expectations import SUITES
    from expectations.runner import ephemeral_context, validate_table

    by_name = {t.qualified: t for t in schemas.ALL_TABLES}
    # Data Docs are a local HTML site (GE's filesystem store); for an s3:// docs_dir only validation.json goes there.
    context = ephemeral_context(docs_dir if docs_dir and not storage.is_s3(docs_dir) else None)
    out: dict[str, Any] = {}
    for name in tables:
        table = by_name[name]
        if not _delta.exists(lake, table):
            out[name] = {"success": True, "rows": 0, "failed": [], "evaluated": 0, "skipped": "table not created yet"}
            continue
        df = _delta.read_pandas(lake, table)
        o = validate_table(df, SUITES[name](), context=context)
        out[name] = {"success": o.success, "rows": o.rows, "failed": o.failed, "evaluated": o.evaluated}
    if docs_dir:
        storage.write_bytes(storage.join(docs_dir, "validation.json"),
                            json.dumps(out, indent=2, sort_keys=True).encode())
    bad = {k: v["failed"] for k, v in out.items() if not v["success"]}
    if bad and fail:
        raise QualityError("expectation suites failed: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in bad.items()))
    return out


def validate_layer(lake: str, layer: str, *, fail: bool = True) -> dict[str, Any]:
    """Validate every table of ``layer`` (``silver`` or ``gold``); Data Docs go to ``<lake>/_quality/<layer>``."""
    from expectations import GOLD, SILVER

    tables = {"silver": SILVER, "gold": GOLD}[layer]
    return validate(lake, tables, docs_dir=storage.join(lake, "_quality", layer), fail=fail)
