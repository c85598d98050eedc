"""Shared pieces of the suites: every suite starts from its table's schema and key."""
from __future__ import annotations

from typing import Any

from schemas._table import Table


def base(table: Table) -> list[Any]:
    """Key columns present and not null, one row per key, columns as declared."""
    import great_expectations.expectations as gxe

    exps: list[Any] = [gxe.ExpectTableColumnsToMatchSet(column_set=table.columns, exact_match=False)]
    exps += [gxe.ExpectColumnValuesToNotBeNull(column=k) for k in table.key if k not in table.nullable_key]
    exps.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(table.key)))
    return exps


def non_negative(*columns: str) -> list[Any]:
    import great_expectations.expectations as gxe

    return [gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0) for c in columns]


def one_of(column: str, values: list[str]) -> Any:
    import great_expectations.expectations as gxe

    return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=values)


def make_suite(table: Table, extra: list[Any]) -> Any:
    import great_expectations as gx

    return gx.ExpectationSuite(name=f"{table.layer}.{table.name}", expectations=base(table) + extra)
