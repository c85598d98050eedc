"""Issue 15: every fault of the corpus (tests/faults/corpus.py) is quarantined with its file, position and reason,
and the rest of its snapshot lands as the intact broker's does. One ingest of the whole corpus, as a real process
(as user ``nobody`` when the tests run as root, so that a file without read permission is unreadable), then one
test per fault."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import pandas as pd
import pytest

from jobs.lake import _delta
from schemas import consumer_offsets, messages, quarantine, queue_bounds, subscription_groups, topic_configs
import fault_corpus as corpus

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOBODY = 65534


def _as_nobody(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]


@pytest.fixture(scope="module")
def ingested() -> Iterator[dict[str, Any]]:
    # not under pytest's own tmp folder: that one is private to root, and the ingest runs as nobody
    root = pathlib.Path(tempfile.mkdtemp(prefix="rmq-recon-corpus-"))
    os.chmod(root, 0o755)
    landing = corpus.build(root)
    lake = root / "lake"
    lake.mkdir()
    home = root / "home"
    home.mkdir()
    if os.geteuid() == 0:
        os.chown(lake, NOBODY, NOBODY)
        os.chown(home, NOBODY, NOBODY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "RUST_LOG": "warn,sail_common::actor=error",
           "NUMBA_CACHE_DIR": str(home / "numba")}
    p = subprocess.run(_as_nobody([sys.executable, "-m", "jobs.cli", "ingest", "--landing", str(landing), "--lake",
                                   str(lake)]), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    q = _delta.read_pandas(str(lake), quarantine.TABLE)
    yield {"landing": landing, "lake": str(lake), "stderr": p.stderr, "quarantine": q, "env": env}
    shutil.rmtree(root, ignore_errors=True)


def _rows(lake: str, table: Any, broker: str, columns: list[str]) -> list[tuple]:
    df = _delta.read_pandas_columns(lake, table, ["broker", *columns], filters=[("broker", "=", broker)])
    return sorted(df[columns].itertuples(index=False, name=None))


def _quarantined(q: pd.DataFrame, broker: str) -> set[tuple[str, int, str]]:
    prefix = f"cluster={corpus.CLUSTER}/broker={broker}/{corpus.FOLDER}/"
    mine = q[q["source_path"].str.startswith(f"cluster={corpus.CLUSTER}/broker={broker}/")]
    return {(r.source_path.removeprefix(prefix), int(r.position), r.reason) for r in mine.itertuples()}


def test_the_intact_broker_lands_whole_and_clean(ingested: dict[str, Any]) -> None:
    lake = ingested["lake"]
    assert _quarantined(ingested["quarantine"], "clean") == set()
    assert _rows(lake, messages.TABLE, "clean", ["physical_offset"]) == [(p,) for p, _ in corpus.RECORDS]
    assert _rows(lake, consumer_offsets.TABLE, "clean", ["queue_id", "committed_offset", "used_backup"]) == [
        (0, 5, False), (1, 7, False)]
    assert _rows(lake, queue_bounds.TABLE, "clean", ["queue_id", "min_offset", "max_offset"]) == [(0, 0, 18),
                                                                                                  (1, 0, 18)]


@pytest.mark.parametrize("fault", list(corpus.FAULTS))
def test_fault_is_quarantined_and_the_rest_lands(ingested: dict[str, Any], fault: str) -> None:
    f = corpus.FAULTS[fault]
    lake = ingested["lake"]
    expected = f.quarantined()
    if f.other_folder:  # every file of the malformed folder (full paths), and nothing of the good one
        bad = ingested["landing"] / f"cluster={corpus.CLUSTER}" / f"broker={fault}" / f.other_folder
        expected = {(p.relative_to(ingested["landing"]).as_posix(), 0,
                     f"malformed snapshot folder '{f.other_folder}': expected snapshot_ts=YYYYMMDDTHHMMSSZ (UTC); "
                     "this snapshot is skipped") for p in bad.rglob("*") if p.is_file()}
        assert len(expected) == 10  # 3 segments, 2 consume queue files, 5 config files
    got = _quarantined(ingested["quarantine"], fault)
    assert got == expected

    # the rest of the snapshot lands as the intact broker's does
    clean_msgs = _rows(lake, messages.TABLE, "clean", ["physical_offset", "queue_id", "queue_offset", "uniq_key"])
    lost = f.lost()
    assert _rows(lake, messages.TABLE, fault, ["physical_offset", "queue_id", "queue_offset", "uniq_key"]) == [
        r for r in clean_msgs if r[0] not in lost]
    offsets = _rows(lake, consumer_offsets.TABLE, fault, ["queue_id", "committed_offset", "used_backup"])
    assert offsets == [(q, o, f.offsets_from_backup) for q, o in (f.offsets or [])]
    assert _rows(lake, topic_configs.TABLE, fault, ["topic", "read_queue_nums", "write_queue_nums", "perm"]) == [
        ("T", 2, 2, 6)]
    assert _rows(lake, subscription_groups.TABLE, fault, ["consumer_group", "retry_max_times"]) == [
        ("G", f.max_retry_times)]
    bounds = dict((q, (mn, mx)) for q, mn, mx in _rows(lake, queue_bounds.TABLE, "clean",
                                                          ["queue_id", "min_offset", "max_offset"]))
    bounds.update(f.bounds or {})
    assert _rows(lake, queue_bounds.TABLE, fault, ["queue_id", "min_offset", "max_offset"]) == sorted(
        (q, mn, mx) for q, (mn, mx) in bounds.items())


def test_a_rerun_changes_nothing(ingested: dict[str, Any]) -> None:
    """The corpus taken again (--retake): no table version moves; bad input is not quarantined twice."""
    from jobs.lake import ledger

    tables = [quarantine.TABLE, messages.TABLE, consumer_offsets.TABLE, queue_bounds.TABLE, subscription_groups.TABLE]
    before = ledger.versions(ingested["lake"], tables)
    p = subprocess.run(_as_nobody([sys.executable, "-m", "jobs.cli", "ingest", "--landing", str(ingested["landing"]),
                                   "--lake", ingested["lake"], "--retake"]), cwd=ROOT, env=ingested["env"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert ledger.versions(ingested["lake"], tables) == before


def test_a_cut_consume_queue_file_is_recorded_as_it_is(ingested: dict[str, Any]) -> None:
    """The queue ends before an entry past the commitlog, but bronze/files keeps the digest of the file's own bytes."""
    import hashlib

    from schemas import files

    rel = f"cluster={corpus.CLUSTER}/broker=cq_entry_past_commitlog/{corpus.FOLDER}/store/consumequeue/T/0/" \
          "00000000000000000000"
    got = _delta.read_pandas_columns(ingested["lake"], files.TABLE, ["source_path", "size", "sha256"],
                                     filters=[("source_path", "=", rel)])
    data = (ingested["landing"] / rel).read_bytes()
    assert got[["size", "sha256"]].values.tolist() == [[len(data), hashlib.sha256(data).hexdigest()]]
