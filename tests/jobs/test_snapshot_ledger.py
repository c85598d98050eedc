"""Issue 12: ingest takes only complete, new or changed snapshot folders (bronze/snapshots); files that arrive late
into a folder already taken are picked up by a later run; an unchanged landing zone starts no engine.

The landing zone is ``blocked-head`` (one broker, snapshots at 00:04, 00:07, 00:10 and 00:13, 2,641 records)."""
from __future__ import annotations

import os
import pathlib
import shutil
import time
from typing import Any

import pytest

from jobs import simulate
from jobs.ingest import ingest
from jobs.lake import _delta
from schemas import consumer_offsets, deliveries, messages, queue_bounds, snapshots

BROKER = "cluster=DefaultCluster/broker=broker-a"
LAST = f"{BROKER}/snapshot_ts=20260105T001300Z"
SILVER = [messages.TABLE, deliveries.TABLE, consumer_offsets.TABLE, queue_bounds.TABLE]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("snapledger")
    landing = base / "landing"
    simulate.run("blocked-head", str(landing), seed=7)
    lake = base / "lake"
    ingest.run(str(landing), str(lake), settle_s=0)
    return {"landing": landing, "lake": lake, "rows": _rows(lake)}


def _rows(lake: pathlib.Path, tables: list = SILVER, drop: tuple[str, ...] = ()) -> dict[str, list[tuple]]:
    out = {}
    for t in tables:
        df = _delta.read_pandas(str(lake), t)
        df = df[[c for c in df.columns if c not in drop]]
        out[t.qualified] = sorted(tuple(repr(v) for v in r) for r in df.itertuples(index=False, name=None))
    return out


def _copy(clean: dict[str, Any], tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the landing zone with files of their own (the simulator hard-links unchanged segments)."""
    landing = tmp_path / "landing"
    shutil.copytree(clean["landing"], landing, ignore=shutil.ignore_patterns("_truth"))
    return landing


def _ledger(lake: pathlib.Path) -> list[tuple[str, int, str]]:
    df = _delta.read_pandas(str(lake), snapshots.TABLE).sort_values("folder")
    return [(f.rsplit("=", 1)[1], int(n), by) for f, n, by in zip(df["folder"], df["files"], df["completed_by"])]


def test_a_config_file_that_arrives_late_is_taken_by_the_next_run(clean: dict[str, Any], tmp_path: pathlib.Path) -> None:
    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    config = landing / LAST / "store" / "config"
    held = tmp_path / "held"
    held.mkdir()
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        shutil.move(str(config / name), str(held / name))
    first = ingest.run(str(landing), str(lake), settle_s=0)
    assert first["snapshots"] == 4
    offs = _delta.read_pandas(str(lake), consumer_offsets.TABLE)
    assert sorted(offs["snapshot_ts"].dt.strftime("%H%M").unique()) == ["0004", "0007", "0010"]
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        shutil.move(str(held / name), str(config / name))
    second = ingest.run(str(landing), str(lake), settle_s=0)
    assert (second["snapshots"], second["snapshots_seen"]) == (1, 4)
    assert _rows(lake) == clean["rows"]
    assert _ledger(lake)[-1] == ("20260105T001300Z", 18, "settle")


def test_a_segment_still_uploading_is_not_taken_as_complete(clean: dict[str, Any], tmp_path: pathlib.Path) -> None:
    """Segment 1310720 is the active one at 00:04 and full at 00:07 (a newer one follows). Taken at 00:07 while only
    part of it was uploaded, it must not count as complete (the broker rolls only full files; full = the distance to
    the next segment's start): its remaining records land from the next snapshot, or when the upload finishes."""
    from schemas import segments

    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    ingest.run(str(landing), str(lake), settle_s=0, snapshot_glob="*snapshot_ts=20260105T000400Z")
    state = _delta.read_pandas(str(lake), segments.TABLE).set_index("segment")
    decoded = int(state.loc["00000000000001310720", "decoded_to"])
    assert not state.loc["00000000000001310720", "complete"]
    segment = landing / BROKER / "snapshot_ts=20260105T000700Z" / "store" / "commitlog" / "00000000000001310720"
    whole = segment.read_bytes()
    cut = decoded + (len(whole) - decoded) // 2
    segment.write_bytes(whole[:cut])
    ingest.run(str(landing), str(lake), settle_s=0)
    # Every record lands; those past the cut are first held by the 00:10 snapshot, which is what 00:07 held when it
    # was taken (an as-of run of 00:07 does not see them): the columns naming that snapshot (its time, its segment
    # file's path) are compared apart.
    firsts = ("first_snapshot_ts", "after_snapshot_ts", "segment")
    assert _rows(lake, drop=firsts) == _rows(clean["lake"], drop=firsts)
    msgs = _delta.read_pandas_columns(str(lake), messages.TABLE, ["physical_offset", "first_snapshot_ts"])
    late = msgs[(msgs["physical_offset"] >= 1310720 + cut) & (msgs["physical_offset"] < 1572864)]
    assert len(msgs) == 2641 and len(late) > 0
    assert set(late["first_snapshot_ts"].dt.strftime("%H%M")) == {"0010"}
    segment.write_bytes(whole)  # the upload finishes: the folder is taken again, and nothing changes
    assert ingest.run(str(landing), str(lake), settle_s=0)["snapshots"] == 1
    assert _rows(lake, drop=firsts) == _rows(clean["lake"], drop=firsts)


def test_folders_older_than_the_late_window_are_not_listed_again(clean: dict[str, Any], tmp_path: pathlib.Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder taken already is listed again for late files until a snapshot of its broker that much newer is
    taken (RMQ_RECON_LATE_WINDOW_H, snapshot time): at 6 minutes, 00:04 and 00:07 are sealed by 00:13."""
    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    shutil.copytree(clean["lake"], lake)
    monkeypatch.setenv(ingest.LATE_WINDOW_ENV, "0.1")
    seen: list[tuple[str, ...]] = []
    for ts in ("20260105T000400Z", "20260105T000700Z", "20260105T001000Z"):
        (landing / BROKER / f"snapshot_ts={ts}" / "store" / "checkpoint").write_bytes(b"late")
        r = ingest.run(str(landing), str(lake), settle_s=0)
        seen.append((ts, r["snapshots"], r["snapshots_seen"]))
    clients = len(list((landing / "cluster=DefaultCluster").glob("clients/snapshot_ts=*")))
    total = 4 + clients
    assert seen == [("20260105T000400Z", 0, total), ("20260105T000700Z", 0, total), ("20260105T001000Z", 1, total)]
    # --retake lists every folder: the two late files of the sealed folders are taken
    assert ingest.run(str(landing), str(lake), settle_s=0, retake=True)["snapshots"] == total
    assert _ledger(lake)[:3] == [(ts, n + 1, by) for ts, n, by in _ledger(clean["lake"])[:3]]
    with pytest.raises(ingest.UsageError, match="RMQ_RECON_LATE_WINDOW_H='-1'"):
        monkeypatch.setenv(ingest.LATE_WINDOW_ENV, "-1")
        ingest.run(str(landing), str(lake), settle_s=0)


def test_settle_time_and_marker(clean: dict[str, Any], tmp_path: pathlib.Path) -> None:
    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    old = time.time() - 3600
    for p in landing.rglob("*"):
        os.utime(p, (old, old))
    for p in (landing / LAST).rglob("*"):  # the sync job is still writing the last folder
        os.utime(p, None)
    first = ingest.run(str(landing), str(lake), settle_s=600)
    assert (first["snapshots"], first["snapshots_waiting"]) == (3, [LAST])
    # the sync job writes its marker last: complete at once, whatever the settle time
    (landing / LAST / "_SUCCESS").write_bytes(b"")
    second = ingest.run(str(landing), str(lake), settle_s=600)
    assert (second["snapshots"], second["snapshots_waiting"]) == (1, [])
    assert _rows(lake) == clean["rows"]
    assert [by for _, _, by in _ledger(lake)] == ["settle", "settle", "settle", "marker"]


def test_marker_required(clean: dict[str, Any], tmp_path: pathlib.Path) -> None:
    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    for folder in sorted((landing / BROKER).iterdir())[:2]:
        (folder / "_SUCCESS").write_bytes(b"")
    first = ingest.run(str(landing), str(lake), settle_s=0, require_marker=True)
    assert (first["snapshots"], len(first["snapshots_waiting"])) == (2, 2)
    assert _delta.read_pandas(str(lake), consumer_offsets.TABLE)["snapshot_ts"].dt.strftime("%H%M").nunique() == 2


def test_an_unchanged_landing_zone_starts_no_engine(clean: dict[str, Any], tmp_path: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.lake import _spark

    landing, lake = _copy(clean, tmp_path), tmp_path / "lake"
    first = ingest.run(str(landing), str(lake), settle_s=0)

    def no_engine(*a: Any, **k: Any) -> Any:
        raise AssertionError("the engine was started for a landing zone with nothing new")

    monkeypatch.setattr(_spark, "session", no_engine)
    again = ingest.run(str(landing), str(lake), settle_s=0)
    assert (again["snapshots"], again["snapshots_seen"], again["changed_rows"], again["run_id"]) == (
        0, 4, {}, first["run_id"])


def test_the_taken_ledger_answers_per_folder_from_compact_arrays(spark: Any, tmp_path: pathlib.Path) -> None:
    """ledger.TakenSnapshots: the digest of each folder taken (a re-taken folder's newest), none for a folder not
    taken or a malformed name, and each broker's newest folder, from rows written by two MERGEs."""
    import datetime as dt

    from jobs.lake import ledger

    lake = str(tmp_path / "lake")
    at = {h: dt.datetime(2026, 1, 5, h) for h in (1, 2, 3)}

    def take(*rows: tuple) -> None:
        df = spark.createDataFrame([("C", b, at[h], f"f{b}{h}", 1, 1, d, "marker", "", at[h]) for b, h, d in rows],
                                   snapshots.TABLE.schema)
        _delta.merge(spark, df, lake, snapshots.TABLE)

    assert len(ledger.taken_snapshots(lake)) == 0
    take(("b1", 2, "a" * 64), ("b1", 1, "b" * 64), ("", 1, "c" * 64))
    take(("b1", 1, "d" * 64), ("b2", 3, "e" * 64))  # b1's 01:00 again, with a late file
    t = ledger.taken_snapshots(lake)
    assert [t.get(("C", b, ts)) for b, ts in [("b1", "20260105T010000Z"), ("b1", "20260105T020000Z"),
                                              ("", "20260105T010000Z"), ("b2", "20260105T030000Z"),
                                              ("b2", "20260105T010000Z"), ("b9", "20260105T010000Z"),
                                              ("b1", "2026-01-05")]] == ["d" * 64, "a" * 64, "c" * 64, "e" * 64,
                                                                       None, None, None]
    assert (len(t), ("C", "b1", "20260105T020000Z") in t, ("C", "b1", "20260105T030000Z") in t) == (4, True, False)
    utc = dt.timezone.utc
    assert [t.newest("C", b) for b in ("b1", "", "b2", "b9")] == [
        at[2].replace(tzinfo=utc), at[1].replace(tzinfo=utc), at[3].replace(tzinfo=utc), None]
