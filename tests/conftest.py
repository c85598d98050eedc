"""Shared fixtures: one embedded Sail session for the whole run, paths to the real fixtures."""
from __future__ import annotations

import os
import pathlib
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
REAL = FIXTURES / "real"

os.environ.setdefault("RUST_LOG", "warn")


@pytest.fixture(scope="session")
def spark() -> Iterator["object"]:
    """An embedded Sail Spark Connect session (stopped before its server, so the run never hangs at exit)."""
    from jobs._spark import session

    with session("sail") as s:
        yield s


@pytest.fixture()
def lake(tmp_path: pathlib.Path) -> str:
    """A fresh local lake root per test."""
    p = tmp_path / "lake"
    p.mkdir()
    return str(p)
