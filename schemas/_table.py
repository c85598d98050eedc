"""The one declaration of a lake table: where it lives, its columns, and the key a MERGE matches on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

if TYPE_CHECKING:  # pragma: no cover
    from airflow.sdk import Asset


@dataclass(frozen=True)
class Table:
    """A Delta table of the lake, declared once and shared by jobs, tests and expectations.

    Args:
        layer: ``bronze``, ``silver`` or ``gold``.
        name: the table's folder name inside its layer.
        schema: the columns, in order; extract casts to it and load writes with it.
        key: the columns that identify a row; MERGE matches on them, expectations check uniqueness.
        partition_by: partition columns (usually none: the tables are small per key).
        cluster_by: columns the rows of a large table are written ordered by, in files of disjoint ranges of them,
            so that a filter on their leading columns reads only the files and row groups whose min/max admit it.
        nullable_key: key columns that are null in a row of wider scope (gold/coverage's queue_id of a topic's row).
    """

    layer: str
    name: str
    schema: StructType
    key: tuple[str, ...]
    partition_by: tuple[str, ...] = field(default_factory=tuple)
    cluster_by: tuple[str, ...] = field(default_factory=tuple)
    nullable_key: tuple[str, ...] = field(default_factory=tuple)

    @property
    def qualified(self) -> str:
        """``layer/name``, the path of the table below the lake root."""
        return f"{self.layer}/{self.name}"

    def path(self, lake: str) -> str:
        """The table's location below ``lake`` (a local folder or an ``s3://`` URI)."""
        return f"{lake.rstrip('/')}/{self.qualified}"

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema.fields]

    def asset(self, lake: str) -> "Asset":
        """The Airflow Asset of this table in ``lake``: its URI is the table's location (``file://`` of the absolute
        folder, or the ``s3://`` URI), so two lakes on one Airflow are two sets of Assets and an ingest of one never
        starts the other's reconcile. Airflow is imported lazily: jobs never need it."""
        import os
        import pathlib

        from airflow.sdk import Asset

        root = lake.rstrip("/") if lake.startswith("s3://") else pathlib.Path(os.path.abspath(lake)).as_uri()
        return Asset(name=f"rmq_recon.{self.layer}.{self.name}@{root}", uri=self.path(root))
