"""Lake table declarations (spec §8): one module per table, each with NAME, SCHEMA, KEY, PARTITION_BY and TABLE."""
from __future__ import annotations

from schemas import (
    alerts_sent,
    audit_hours,
    consumer_offsets,
    consumer_status,
    cq_files,
    delay_offsets,
    deliveries,
    dlq_candidates,
    duplicated_ranges,
    files,
    ingest_runs,
    messages,
    offset_corrections,
    offset_decreases,
    quarantine,
    queue_bounds,
    reconcile_runs,
    segments,
    series_tail,
    snapshots,
    status_samples,
    subscription_groups,
    topic_configs,
    trace_records,
    unconsumed_ranges,
    validation_results,
)
from schemas._table import Table

ALL_TABLES: list[Table] = [
    files.TABLE,
    quarantine.TABLE,
    segments.TABLE,
    snapshots.TABLE,
    cq_files.TABLE,
    ingest_runs.TABLE,
    trace_records.TABLE,
    consumer_offsets.TABLE,
    subscription_groups.TABLE,
    topic_configs.TABLE,
    delay_offsets.TABLE,
    queue_bounds.TABLE,
    messages.TABLE,
    deliveries.TABLE,
    duplicated_ranges.TABLE,
    unconsumed_ranges.TABLE,
    offset_corrections.TABLE,
    dlq_candidates.TABLE,
    consumer_status.TABLE,
    status_samples.TABLE,
    audit_hours.TABLE,
    series_tail.TABLE,
    offset_decreases.TABLE,
    reconcile_runs.TABLE,
    validation_results.TABLE,
    alerts_sent.TABLE,
]
REPORTS = [duplicated_ranges, unconsumed_ranges, offset_corrections, dlq_candidates, consumer_status]

__all__ = ["ALL_TABLES", "REPORTS", "Table"] + [t.name for t in ALL_TABLES]
