"""jobs.problems.fail_fast: what an Airflow task says and does on an error a retry would meet again."""
from __future__ import annotations

import pytest

from jobs.problems import UsageError, fail_fast


def _task(error: Exception):  # noqa: ANN202
    @fail_fast
    def body(params: dict | None = None) -> str:
        raise error

    return body


@pytest.mark.parametrize("message, params, says", [
    ("--lake var/x: no such lake; give the folder", {"lake": "var/x"},
     "Param lake (--lake on the command line) var/x: no such lake; give the folder"),
    ("--as-of 'x': not a time", {"as_of": "x", "lake": "l"}, "Param as_of (--as-of on the command line) 'x': not a time"),
    ("--snapshots '*': matches nothing", {"lake": "l"}, "--snapshots '*': matches nothing"),  # no such Param
    ("retention_h '0': not a positive number", {"retention_h": 0}, "retention_h '0': not a positive number"),
], ids=["param", "dashed_param", "option_without_param", "no_option"])
def test_a_usage_error_fails_at_once_naming_the_param(message: str, params: dict, says: str) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException) as e:
        _task(UsageError(message))(params=params)
    assert str(e.value) == says


def test_a_failed_suite_fails_at_once_and_other_errors_are_retried() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from jobs.ops.quality import QualityError

    with pytest.raises(AirflowFailException, match="^silver validation of r1 failed: x$"):
        _task(QualityError("silver validation of r1 failed: x"))(params={})
    with pytest.raises(OSError, match="^connection reset$"):
        _task(OSError("connection reset"))(params={})
