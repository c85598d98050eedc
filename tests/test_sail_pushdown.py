"""Issue 33: the default engine reads tables shaped like the ingest's without failing, and the known Sail issue that
made pushdown unsafe is still there (so the README's known-issues entry and the default stay right)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import sail_pushdown_case as case

ROOT = pathlib.Path(__file__).resolve().parents[1]
ATTEMPTS = 4


def test_the_default_leaves_pushdown_off() -> None:
    from jobs.lake._spark import SAIL_DEFAULTS

    assert SAIL_DEFAULTS["SAIL_PARQUET__PUSHDOWN_FILTERS"] == "false"


def test_the_default_engine_reads_the_failing_shape_exactly(spark, tmp_path: pathlib.Path) -> None:
    folder = str(tmp_path)
    expected = case.build(folder)
    assert len(expected) == 10_951  # every traced key that is not a trace message: one original copy each
    got = case.read_like_the_ingest(spark, folder, case.write_table(spark, folder))
    assert got == expected


def _run_case(tmp_path: pathlib.Path, pushdown: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SAIL_PARQUET__PUSHDOWN_FILTERS": pushdown}
    return subprocess.run([sys.executable, str(ROOT / "tests" / "sail_pushdown_case.py"), str(tmp_path / pushdown)],
                          env=env, capture_output=True, text=True, timeout=300)


def test_pushdown_still_fails_on_it(tmp_path: pathlib.Path) -> None:
    """When this fails, the engine no longer fails on the reproduction: re-run the benchmark-size check
    (tests/benchmarks/bench_exactness.py) with pushdown on before making it a default again, and update the README.

    The failure is intermittent (stop 57 saw one clean read in many), so the case is tried up to ATTEMPTS times and
    the canary fails only if pushdown never errors."""
    runs = []
    for attempt in range(ATTEMPTS):
        on = _run_case(tmp_path / f"attempt-{attempt}", "true")
        runs.append((on.returncode, on.stdout.strip()[-200:]))
        if on.returncode == 1:
            break
    assert on.returncode == 1, runs
    assert "Invalid offset in sparse column chunk data" in on.stdout
    off = _run_case(tmp_path, "false")
    assert (off.returncode, off.stdout.strip()) == (0, "ok 10951"), off.stderr
