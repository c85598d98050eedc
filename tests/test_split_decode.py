"""Issue 13: a full commitlog segment decoded in pieces (jobs.ingest.decode_tasks.split_units) lands exactly what
decoding it whole lands, and when the pieces do not chain the ingest decodes the segments whole.

``mixed`` with bulk traffic (seed 4): a 4 MiB bulk segment and 256 KiB segments on the other brokers. The lake
first takes the 04:xx snapshots, where many segments are already full, then the later ones (the split segments'
ledger state carries on). Pieces of 0.1 MiB cut every full segment through records: 40 pieces of a 4 MiB one, 2 of a
256 KiB one.
"""
from __future__ import annotations

import logging
import pathlib

import pytest

from faults.test_kill_rerun import lake_rows

SPLIT_MB = "0.1"
FIRST, THEN = "*/snapshot_ts=20260105T04*", "*/snapshot_ts=20260105T0[56]*"


def _rows(lake: pathlib.Path) -> dict[str, list[tuple]]:
    rows = lake_rows(lake)
    # a read split into pieces records the digest of its pieces' digests (schemas/files.py); the rest is equal
    from schemas import files

    sha = files.TABLE.columns.index("sha256")
    rows[files.TABLE.qualified] = sorted(r[:sha] + r[sha + 1:] for r in rows[files.TABLE.qualified])
    return rows


def _ingest(landing: pathlib.Path, lake: pathlib.Path, split_mb: str, glob: str, mp: pytest.MonkeyPatch,
            caplog: pytest.LogCaptureFixture) -> list[str]:
    """One ingest of the snapshots matching ``glob``; its log lines."""
    from jobs.ingest import ingest

    mp.setenv("RMQ_RECON_DECODE_SPLIT_MB", split_mb)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobs.ingest.ingest"):
        ingest.run(str(landing), str(lake), snapshot_glob=glob)
    return [r.getMessage() for r in caplog.records]


def _extra_pieces(landing: pathlib.Path, glob: str, split_bytes: int) -> int:
    """Pieces beyond one per segment: every segment first seen full (a newer one follows it in its snapshot)."""
    seen: set[tuple[str, str]] = set()
    extra = 0
    for folder in sorted(landing.glob(glob), key=lambda p: p.name):
        if folder.parent.name == "clients":
            continue
        segs = sorted((folder / "store" / "commitlog").iterdir(), key=lambda p: p.name)
        for i, seg in enumerate(segs):
            key = (folder.parent.name, seg.name)
            if key in seen:
                continue
            seen.add(key)
            k = seg.stat().st_size // split_bytes
            if i < len(segs) - 1 and k >= 2:
                extra += k - 1
    return extra


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, mixed_bulk_landing: tuple[pathlib.Path, dict]) -> dict:
    from jobs.ingest import ingest

    root = tmp_path_factory.mktemp("split")
    landing = mixed_bulk_landing[0]  # read only

    mp = pytest.MonkeyPatch()
    mp.setenv("RMQ_RECON_DECODE_SPLIT_MB", "0")
    for glob in (FIRST, THEN):
        ingest.run(str(landing), str(root / "whole"), snapshot_glob=glob)
    mp.undo()
    return {"root": root, "landing": landing, "whole": _rows(root / "whole")}


@pytest.mark.integration
def test_segments_decoded_in_pieces_land_what_the_whole_decode_lands(world: dict, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    lake = world["root"] / "pieces"
    extra = _extra_pieces(world["landing"], "cluster=*/broker=*/snapshot_ts=20260105T04*", int(0.1 * (1 << 20)))
    assert extra >= 39 + 2  # the bulk broker's first segment, and more
    lines = _ingest(world["landing"], lake, SPLIT_MB, FIRST, monkeypatch, caplog)
    planned = [line for line in lines if "to decode in" in line]
    assert len(planned) == 1 and planned[0].endswith(f"({extra} more pieces of split segments)")
    assert not any("did not chain" in line for line in lines)
    _ingest(world["landing"], lake, SPLIT_MB, THEN, monkeypatch, caplog)
    got = _rows(lake)
    assert got.keys() == world["whole"].keys()
    assert len(got["silver/messages"]) == len(world["whole"]["silver/messages"]) > 100_000
    for table, rows in world["whole"].items():
        assert got[table] == rows, table


@pytest.mark.integration
def test_pieces_that_do_not_chain_make_the_ingest_decode_every_segment_whole(
        world: dict, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A record start right after a cut whose size field is damaged: the piece after the cut starts there, the one
    before skips it (as the whole decode does) and stops at the next record: they do not chain. The lake equals that
    of a whole decode of the same damaged landing zone, quarantine row included."""
    import shutil

    from jobs.formats import commitlog

    landing = world["root"] / "damaged"
    shutil.copytree(world["landing"], landing, copy_function=shutil.copy)
    seg = next(landing.glob("cluster=*/broker=broker-bulk-00/snapshot_ts=20260105T040000Z/store/commitlog/"
                            "00000000000000000000"))
    data = seg.read_bytes()
    res = commitlog.decode_segment(data, segment_start=0, segment=str(seg), final=True)
    cut = (4 << 20) * 4 // 40  # the 4th cut of the 40 pieces of the full 4 MiB segment
    at = min(p for p in res.table.column("physical_offset").to_pylist() if p >= cut)
    for copy in landing.glob("cluster=*/broker=broker-bulk-00/snapshot_ts=*/store/commitlog/00000000000000000000"):
        b = bytearray(copy.read_bytes())
        if b[at:at + 36] == data[at:at + 36]:  # the copies that hold the record
            b[at:at + 4] = (1).to_bytes(4, "big")
            copy.write_bytes(bytes(b))
    _ingest(landing, world["root"] / "damaged-whole", "0", FIRST, monkeypatch, caplog)
    whole = _rows(world["root"] / "damaged-whole")
    # the segment is decoded once (its later copies are complete): one row
    assert [r[4] for r in whole["bronze/quarantine"] if r[4] == repr(at)] == [repr(at)]
    lines = _ingest(landing, world["root"] / "damaged-pieces", SPLIT_MB, FIRST, monkeypatch, caplog)
    assert sum("did not chain" in line for line in lines) == 1
    assert _rows(world["root"] / "damaged-pieces") == whole
