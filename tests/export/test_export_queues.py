"""Issue 37: an export ships only the bytes a consume queue file gained (jobs.export.queues), and the ingest reads
the pieces back as the file (jobs.ingest.landing.read_file): the exact bytes of the file on the host."""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import pathlib
import struct

import pytest

from jobs.export import layout, queues, state
from jobs.ingest import landing

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 3, 1, tzinfo=UTC)
REL = "store/consumequeue/TopicA/0/00000000000000000000"
SIZE = 2000  # 100 entries, preallocated


def _as_read(files: list[dict]) -> list:
    """A packer's queue files as the ingest reads them back from the manifest it writes."""
    return layout.read_manifest(state.encode({"queues": files}))["queues"]


def entry(i: int) -> bytes:
    return struct.pack(">qiq", 1000 + 100 * i, 100, 7 if i % 3 else 0)  # tags code 0: an entry ending in 8 zeros


class Host:
    """A queue file on a host, exported into sibling snapshot folders of one broker as the exporter would."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.file = tmp / "host" / REL
        self.file.parent.mkdir(parents=True)
        self.file.write_bytes(bytes(SIZE))
        self.landing = tmp / "landing"
        self.state: dict = {}
        self.ts = T0

    def write(self, at: int, data: bytes) -> None:
        with open(self.file, "r+b") as fh:
            fh.seek(at)
            fh.write(data)
        st = self.file.stat()
        os.utime(self.file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    def export(self, *, minutes: int = 15, reship_after_s: float = queues.RESHIP_AFTER_S,
               max_pieces: int = queues.MAX_PIECES) -> tuple[dict, landing.LandingFile]:
        ts = self.ts
        self.ts += dt.timedelta(minutes=minutes)
        folder = f"cluster=c/broker=b/snapshot_ts={landing.format_snapshot_ts(ts)}"
        out = self.landing / folder
        packer = queues.Packer(out, ts, self.state, reship_after_s, max_pieces)
        packer.add(self.file, REL)
        packer.close()
        self.state = packer.state
        snap = landing.Snapshot("c", "b", ts, folder)
        [f] = landing._queue_files(snap, str(out / layout.MANIFEST), _as_read(packer.files))
        return {"shipped": packer.shipped, "pieces": packer.files[0]["pieces"]}, f


def test_each_export_ships_the_appended_bytes_and_the_pieces_read_back_as_the_file(tmp_path: pathlib.Path) -> None:
    host = Host(tmp_path)
    host.write(0, entry(1) + entry(2) + entry(3))  # entry 3 ends in zeros: the first piece stops at byte 52
    got, f = host.export()
    assert got["shipped"] == 52 and got["pieces"] == [["20240301T000000Z", 0, 52, 0]]
    assert landing.read_file(f) == host.file.read_bytes() and f.size == SIZE and f.kind == "consumequeue"
    assert (f.topic, f.queue_id, f.start, f.path) == ("TopicA", 0, 0, f"{f.path.rsplit('/store/', 1)[0]}/{REL}")

    host.write(60, entry(4) + entry(5))
    got, f2 = host.export()
    assert got["shipped"] == 100 - 52 and got["pieces"][1] == ["20240301T001500Z", 0, 48, 52]
    assert landing.read_file(f2) == host.file.read_bytes()
    assert landing.read_file(f2, 40, 70) == host.file.read_bytes()[40:70]  # a range across the two pieces
    assert landing.read_file(f2, SIZE - 20) == bytes(20)  # past the data: the preallocated zeros
    assert f2.etag != f.etag and f2.etag.startswith("pieces-")

    got, f3 = host.export()  # nothing written: nothing shipped, the same id
    assert got["shipped"] == 0 and f3.etag == f2.etag and landing.read_file(f3) == host.file.read_bytes()
    assert not (host.landing / f3.path.split("/store/")[0] / layout.PACK).exists()
    # the id a run carries on from the state's is the one the pieces give from scratch (an entry from before stop
    # 69 has none), and another file of the same size and pieces but one gets another
    assert f2.etag == queues.piece_id({"size": SIZE, "pieces": got["pieces"]}) == queues.piece_id(
        {"size": SIZE, "pieces": [list(p) for p in got["pieces"]]})
    assert len({queues.piece_id({"size": SIZE, "pieces": got["pieces"][:1]}), f.etag,
                queues.piece_id({"size": SIZE + 20, "pieces": got["pieces"]}), f2.etag}) == 3
    host.state = {REL: {k: v for k, v in host.state[REL].items() if k != "id"}}
    host.write(112, entry(6))
    got, f4 = host.export()
    assert f4.etag == queues.piece_id({"size": SIZE, "pieces": got["pieces"]}) and len(got["pieces"]) == 3
    assert host.state[REL]["id"] == f4.etag


def test_entries_written_without_a_new_modification_time_still_ship(tmp_path: pathlib.Path) -> None:
    """The broker writes through a mapping: an entry written into a page still dirty keeps the file's time
    (``queues._written_past``). Here the time is set back after each write, as such a write leaves it."""
    host = Host(tmp_path)
    host.write(0, entry(1) + entry(2) + entry(3))  # entry 3 ends in 8 zeros: the data ends at byte 52
    host.export()
    stamp = host.file.stat().st_mtime_ns
    with open(host.file, "r+b") as fh:  # entry 4, with its time as it was
        fh.seek(60)
        fh.write(entry(4))
    os.utime(host.file, ns=(stamp, stamp))
    got, f = host.export()
    assert got["shipped"] == 80 - 52 and got["pieces"][1] == ["20240301T001500Z", 0, 28, 52]
    assert landing.read_file(f) == host.file.read_bytes() and host.state[REL]["end"] == 80

    got, f2 = host.export()  # nothing written since: nothing read past the end, nothing shipped, the same id
    assert got["shipped"] == 0 and f2.etag == f.etag

    with open(host.file, "r+b") as fh:  # entry 5 right after entry 4's end, the time kept again
        fh.seek(80)
        fh.write(entry(5))
    os.utime(host.file, ns=(stamp, stamp))
    got, f3 = host.export()
    assert got["shipped"] == 20 and got["pieces"][2] == ["20240301T004500Z", 0, 20, 80]
    assert landing.read_file(f3) == host.file.read_bytes()


def test_a_rewritten_tail_a_new_size_or_too_many_pieces_ship_the_file_whole(tmp_path: pathlib.Path) -> None:
    host = Host(tmp_path)
    host.write(0, entry(0) + entry(1))
    host.export()
    host.write(20, entry(9) + entry(2))  # recovery rewrote entry 1 (truncateDirtyLogicFiles), then one appended
    got, f = host.export()
    assert got["shipped"] == 60 and got["pieces"] == [["20240301T001500Z", 0, 60, 0]]
    assert landing.read_file(f) == host.file.read_bytes()
    assert host.state[REL]["since"] == "20240301T001500Z"

    with open(host.file, "ab") as fh:  # a file that is not the preallocated size it had
        fh.write(bytes(20))
    got, f = host.export()
    assert got["shipped"] == 60 and len(got["pieces"]) == 1 and landing.read_file(f) == host.file.read_bytes()

    for i in range(3, 3 + queues.MAX_PIECES - 1):
        host.write(20 * i, entry(i))
        got, f = host.export(minutes=1)
    assert len(got["pieces"]) == queues.MAX_PIECES and landing.read_file(f) == host.file.read_bytes()
    host.write(20 * (3 + queues.MAX_PIECES), entry(1))
    got, f = host.export(minutes=1)
    assert len(got["pieces"]) == 1 and got["shipped"] == 20 * (4 + queues.MAX_PIECES) and f.size == SIZE + 20
    assert landing.read_file(f) == host.file.read_bytes()


def test_a_store_of_many_queue_files_ships_each_whole_again_after_fewer_pieces(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host state holds PIECES_BUDGET pieces in all (its memory: 9,792 files at 32 pieces each peaked at 324 MiB):
    a file's share, from MIN_PIECES to MAX_PIECES, is how many it may have before it ships whole again."""
    assert (queues.PIECES_BUDGET, queues.MIN_PIECES, queues.MAX_PIECES) == (100_000, 4, 32)
    assert [queues.max_pieces(n) for n in (0, 1, 1_224, 3_125, 3_126, 9_792, 25_000, 25_001, 80_000)] == [
        32, 32, 32, 32, 31, 10, 4, 4, 4]
    host = Host(tmp_path)
    for i in range(4):
        host.write(20 * i, entry(i + 1))
        got, f = host.export(max_pieces=4)
    assert len(got["pieces"]) == 4 and got["shipped"] == 28  # (entry 3 ends in zeros: shipped with entry 4)
    host.write(80, entry(5))
    got, f = host.export(max_pieces=4)
    assert len(got["pieces"]) == 1 and got["shipped"] == 100 and landing.read_file(f) == host.file.read_bytes()

    # the export of a store takes the share of its number of queue files (blocked-head's first copy)
    from jobs import simulate
    from jobs.export import store

    simulate.run("blocked-head", str(tmp_path / "copies"), seed=7)
    copy = sorted((tmp_path / "copies").glob("cluster=*/broker=broker-a/snapshot_ts=*"))[0] / "store"
    asked: list[int] = []
    monkeypatch.setattr(queues, "max_pieces", lambda n: asked.append(n) or 7)
    made: list[queues.Packer] = []
    monkeypatch.setattr(queues, "Packer", lambda *a, **k: made.append(queues_Packer(*a, **k)) or made[-1])
    m = store.export_store(str(copy), str(tmp_path / "to"), cluster="C", broker="broker-a",
                           snapshot_ts=dt.datetime(2026, 12, 3, tzinfo=UTC), state_dir=str(tmp_path / "state"),
                           say=lambda _: None)
    assert asked == [len(m["queues"])] == [len(list(copy.glob("consumequeue/*/*/*")))] and made[0].max_pieces == 7


queues_Packer = queues.Packer


def test_a_file_ships_whole_again_once_its_oldest_piece_is_due(tmp_path: pathlib.Path) -> None:
    host = Host(tmp_path)
    host.write(0, entry(1))
    host.export(reship_after_s=3600)
    host.write(20, entry(2))
    got, _ = host.export(reship_after_s=3600)
    assert len(got["pieces"]) == 2
    for _ in range(2):  # 45 minutes after the first: still its pieces, nothing new shipped
        got, _ = host.export(reship_after_s=3600)
        assert got["shipped"] == 0 and len(got["pieces"]) == 2
    got, _ = host.export(reship_after_s=3600)  # an hour after the first: whole again, though unchanged
    assert got["shipped"] == 40 and got["pieces"] == [["20240301T010000Z", 0, 40, 0]]


def test_a_piece_whose_folder_is_gone_is_an_error_naming_it(tmp_path: pathlib.Path) -> None:
    host = Host(tmp_path)
    host.write(0, entry(1))
    host.export()
    host.write(20, entry(2))
    _, f = host.export()
    (host.landing / f"cluster=c/broker=b/snapshot_ts=20240301T000000Z/{layout.PACK}").unlink()
    with pytest.raises(OSError,
                       match=r"snapshot_ts=20240301T000000Z/store-export/queues.bin: missing .*--reship-after"):
        landing.read_file(f)
    assert landing.read_file(f, 20) == host.file.read_bytes()[20:]  # the later piece alone is still there


def _export_each(tmp_path: pathlib.Path, files: dict[str, pathlib.Path], writes: list[list[tuple[int, bytes]]]
                 ) -> tuple[dict[str, dict], dict[str, list[int]]]:
    """Apply each batch of writes to every file, then export each file as a queue file of its own host (a packer
    per export, the state carried); at every export all files ship the same pieces, pack bytes and state. Returns
    the last states and the bytes each export read."""
    state: dict[str, dict] = {name: {} for name in files}
    read: dict[str, list[int]] = {name: [] for name in files}
    for i, batch in enumerate(writes):
        got = {}
        for name, path in files.items():
            with open(path, "r+b") as fh:
                for at, data in batch:
                    fh.seek(at)
                    fh.write(data)
            os.utime(path, ns=(0, (i + 1) * 1_000_000_000))
            out = tmp_path / name / str(i)
            packer = queues.Packer(out, T0 + dt.timedelta(minutes=15 * i), state[name], queues.RESHIP_AFTER_S)
            packer.add(path, REL)
            packer.close()
            state[name] = packer.state
            read[name].append(packer.read)
            pack = out / layout.PACK
            got[name] = (packer.files, packer.shipped, pack.read_bytes() if pack.exists() else b"", packer.state)
        first, *others = got.values()
        assert all(g == first for g in others), f"export {i}: {list(files)} differ"
    return state, read


def test_data_extent_end_finds_the_data_by_seeking_only(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "sparse"
    with open(p, "wb") as fh:
        fh.truncate(8 << 20)
        fh.seek(3 << 20)
        fh.write(b"\x01\x00\x02")
    monkeypatch.setattr(os, "pread", None)  # (no read)
    monkeypatch.setattr(os, "preadv", None)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert (3 << 20) + 3 <= queues.data_extent_end(fd, 0, 8 << 20) <= 4 << 20  # (the end of its block)
        assert queues.data_extent_end(fd, 5 << 20, 8 << 20) == 5 << 20  # no data past 5 MiB
        assert queues.data_extent_end(fd, 0, 1 << 20) == 0  # none in the first MiB
    finally:
        os.close(fd)


def test_a_preallocated_file_is_read_to_its_written_blocks_not_its_end(tmp_path: pathlib.Path) -> None:
    """A broker's queue file is preallocated: the JDK extends a file it maps with fallocate (allocated, unwritten
    blocks, which st_blocks counts). Its unwritten blocks are not read, and it ships what a dense file with the same
    bytes ships (before, a file that looked dense by st_blocks was read to its end at every export: 5.7 MiB for a
    real broker's queue file)."""
    size = 300_000 * 20  # a broker's queue file: 300,000 entries
    (tmp_path / "host").mkdir()
    files = {"dense": tmp_path / "host" / "dense", "prealloc": tmp_path / "host" / "prealloc"}
    files["dense"].write_bytes(bytes(size))
    fd = os.open(files["prealloc"], os.O_RDWR | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, entry(1), 0)
        os.fsync(fd)
        block = os.lseek(fd, 0, os.SEEK_HOLE)  # the end of the written block
        if block >= size:
            pytest.skip("this filesystem reports unwritten extents as data")
    finally:
        os.close(fd)
    assert files["prealloc"].stat().st_blocks * 512 >= size  # dense by its size on disk
    writes = [[(0, entry(1))], [(20, entry(2) + entry(3))], [(20 * 100_000, entry(4))]]
    state, read = _export_each(tmp_path, files, writes)
    assert [p[1:] for p in state["dense"][REL]["pieces"]] == [[0, 20, 0], [0, 32, 20], [0, 1_999_968, 52]]
    assert read["dense"] == [size, size, size]  # to its end at every export
    # the written blocks only: the first one twice (the 64 KiB checked before the end start at 0), then up to the
    # end of entry 4's block (the hole between is read as zeros)
    assert read["prealloc"] == [block, block, -(-2_000_020 // block) * block]


def test_a_sparse_file_and_a_dense_one_with_the_same_bytes_ship_the_same_pieces(tmp_path: pathlib.Path) -> None:
    """A file with holes is read to the end of its last data extent; a dense one to its end: both give the same
    pieces, pack bytes and state at every export, also when a write lands past a hole."""
    size = 20 * 52_429  # 1 MiB and a bit: holes of whole blocks
    (tmp_path / "host").mkdir()
    files = {"dense": tmp_path / "host" / "dense", "sparse": tmp_path / "host" / "sparse"}
    files["dense"].write_bytes(bytes(size))
    with open(files["sparse"], "wb") as fh:
        fh.truncate(size)
    assert files["sparse"].stat().st_blocks * 512 < size <= files["dense"].stat().st_blocks * 512
    writes = [[(0, entry(1) + entry(2) + entry(3))], [(60, entry(4)), (20 * 40_000, entry(5))], [],
              [(20 * 40_001, entry(6))]]
    state, _ = _export_each(tmp_path, files, writes)
    # (entry 3 ends in zeros: the first piece stops at byte 52; the next runs to entry 5's last non-zero byte)
    assert [p[1:] for p in state["dense"][REL]["pieces"]] == [[0, 52, 0], [0, 799_968, 52], [0, 12, 800_020]]


def test_the_pieces_of_many_files_in_one_pack_cost_one_read(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.lake import storage

    hosts = []
    for q in range(3):
        h = Host(tmp_path / f"q{q}")
        h.write(0, entry(q + 1))
        hosts.append(h)
    packer = queues.Packer(tmp_path / "landing" / "cluster=c/broker=b/snapshot_ts=20240301T000000Z", T0, {}, 3600)
    for q, h in enumerate(hosts):
        packer.add(h.file, REL.replace("/0/", f"/{q}/"))
    packer.close()
    snap = landing.Snapshot("c", "b", T0, "cluster=c/broker=b/snapshot_ts=20240301T000000Z")
    fs = landing._queue_files(snap, str(tmp_path / "landing" / snap.folder / layout.MANIFEST), _as_read(packer.files))
    reads: list[tuple] = []
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda *a: reads.append(a) or real(*a))
    landing.PACKS.clear()
    assert [landing.read_file(f) for f in fs] == [h.file.read_bytes() for h in hosts]
    assert [r[1:] for r in reads] == [(0, landing.PackWindows.WINDOW)]  # the three pieces from one window
    # (a pack is never rewritten; a new step starts from a clean slate)
    with open(landing.pack_uri(fs[0], fs[0].pieces[0][0]), "r+b") as fh:
        fh.write(b"\xff")
    assert landing.read_file(fs[0])[:1] != b"\xff"
    landing.PACKS.clear()
    assert landing.read_file(fs[0])[:1] == b"\xff"


def test_a_read_finds_the_pieces_it_needs_by_bisection_when_they_are_in_file_order(tmp_path: pathlib.Path) -> None:
    """Pieces in file order (as a host writes them) are found by bisection; in another order, or overlapping, each
    is looked at in turn, and a later piece's bytes win where two overlap: the bytes read are the same."""
    pack = tmp_path / "cluster=c/broker=b/snapshot_ts=20240301T000000Z" / layout.PACK
    pack.parent.mkdir(parents=True)
    pack.write_bytes(bytes(range(1, 41)))
    packs = f"{tmp_path}/cluster=c/broker=b/"

    def file(pieces: tuple) -> landing.LandingFile:
        return landing.LandingFile(uri="", path="q", rel="q", size=40, kind="consumequeue", pieces=pieces,
                                   packs=packs)

    t = "20240301T000000Z"
    in_order = file(((t, 0, 8, 0), (t, 8, 4, 12), (t, 12, 8, 20)))
    want = bytes(range(1, 9)) + bytes(4) + bytes(range(9, 13)) + bytes(4) + bytes(range(13, 21)) + bytes(12)
    landing.PACKS.clear()
    assert in_order.piece_starts == [0, 12, 20]
    assert [landing.read_file(in_order, a, b) for a, b in ((0, None), (13, 22), (30, 40))] == [
        want, want[13:22], want[30:40]]
    reordered = file(((t, 12, 8, 20), (t, 0, 8, 0), (t, 8, 4, 12)))
    overlapping = file(((t, 0, 8, 0), (t, 20, 4, 6)))  # bytes 6-9 from the second piece
    assert (reordered.piece_starts, overlapping.piece_starts) == (None, None)
    assert landing.read_file(reordered) == want and landing.read_file(reordered, 13, 22) == want[13:22]
    assert landing.read_file(overlapping, 0, 12) == bytes(range(1, 7)) + bytes(range(21, 25)) + bytes(2)


def test_the_tail_check_covers_the_window_the_state_names(tmp_path: pathlib.Path) -> None:
    """The digest of an entry covers the last CHECKED_TAIL bytes shipped (``tail_bytes``), a CRC-32 (``tail_crc32``).
    Entries a host state kept from before are checked as they were written: before stop 59 a SHA-256 of 64 KiB (no
    ``tail_bytes``), until stop 69 a SHA-256 of 16 KiB (``tail_sha``). A rewrite inside the window ships the file
    whole; the next entry covers the new window by CRC-32."""
    import hashlib
    import zlib

    size, n = 100_000, 4000  # 80,000 bytes of entries
    data = b"".join(entry(i) for i in range(n))
    hosts = {}
    for name in ("kept", "rewritten", "sha16", "sha16-rewritten", "crc", "crc-rewritten"):
        host = Host(tmp_path / name)
        host.file.write_bytes(bytes(size))
        host.write(0, data)
        got, _ = host.export()
        assert got["shipped"] == 80_000 - 8  # (entry 3999's tags code is 0: its last 8 bytes are zeros)
        entry_ = host.state[REL]
        assert (entry_["end"], entry_["tail_bytes"]) == (80_000 - 8, queues.CHECKED_TAIL) == (79_992, 16_384)
        assert entry_["tail_crc32"] == zlib.crc32(data[79_992 - 16_384:79_992]) and "tail_sha" not in entry_
        earlier = {k: v for k, v in entry_.items() if k not in ("tail_crc32", "id")}
        if name.startswith("sha16"):
            earlier["tail_sha"] = hashlib.sha256(data[79_992 - 16_384:79_992]).hexdigest()
            host.state = {REL: earlier}
        elif not name.startswith("crc"):
            earlier.pop("tail_bytes")
            earlier["tail_sha"] = hashlib.sha256(data[79_992 - 65_536:79_992]).hexdigest()
            host.state = {REL: earlier}
        hosts[name] = host
    hosts["rewritten"].write(60_000, entry(9_999))  # entry 3000, 19,992 bytes before the shipped end: outside 16 KiB
    for name in ("sha16-rewritten", "crc-rewritten"):
        hosts[name].write(79_960, entry(9_999))  # entry 3998, inside the 16 KiB window
    for host in hosts.values():
        host.write(80_000, entry(4_001))
    for name, host in hosts.items():
        got, f = host.export()
        whole = name.endswith("rewritten")
        assert (got["shipped"], len(got["pieces"])) == ((80_020, 1) if whole else (80_020 - 79_992, 2)), name
        assert landing.read_file(f) == host.file.read_bytes()
        now = host.file.read_bytes()
        assert host.state[REL]["tail_bytes"] == 16_384 and "tail_sha" not in host.state[REL]
        assert host.state[REL]["tail_crc32"] == zlib.crc32(now[80_020 - 16_384:80_020])


@pytest.mark.parametrize("length", [0, 5, 8, 13, 4096, 4099, 20_000, 20_003])
def test_last_nonzero_is_rstrip(length: int) -> None:
    """The end of the data, found from the end in two windows, is where ``bytes.rstrip`` puts it, wherever it lies."""
    import random

    rng = random.Random(length)
    for last in sorted({0, 1, 7, 8, 9, length // 2, max(0, length - 4096 - 3), length - 9, length - 1, length}):
        if not 0 <= last <= length:
            continue
        buf = bytearray(length)
        for i in range(min(last, 50)):  # some data, ending at byte ``last`` - 1
            buf[rng.randrange(last)] = rng.randrange(1, 256)
        if last:
            buf[last - 1] = rng.randrange(1, 256)
        want = len(bytes(buf).rstrip(b"\0"))
        assert want == last
        assert queues._last_nonzero(memoryview(buf)) == want


class Bounds:
    """The queue bounds of one ingest run over a host's exports of the queue file, beside the same bytes read as
    store copies: each :meth:`export` exports the file as it is now and runs both through ``_queue_bounds`` (the
    records of 60 messages known, entries 0-59 pointing at them), each with the ledger entries of its copy before."""

    def __init__(self, tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch, oldest: int, runs: bool = False) -> None:
        """``runs``: each export is read by a run of its own, against the ledger entries the table keeps (no pieces,
        no prefix hash, no position found, no digest state: ``jobs.ingest.cq_ledger.Entry``'s fields not in the
        table)."""
        import numpy as np

        from jobs.ingest import bounds
        from jobs.ingest.known_records import _SnapshotRecords

        self.tmp, self.host, self.oldest, self.n, self.runs = tmp, Host(tmp), oldest, 0, runs
        self.known = _SnapshotRecords(np.arange(1000, 1000 + 100 * 60, 100, dtype=np.int64),
                                      np.full(60, 100, np.int32), (1000, 1000 + 100 * 60))
        self.reads: list[tuple[int, int | None]] = []
        real_read = bounds.read_file
        monkeypatch.setattr(bounds, "read_file", lambda f, start=0, end=None: self.reads.append((start, end))
                            or real_read(f, start, end))
        self.prior: dict[str, dict] = {"export": {}, "copy": {}}

    def export(self) -> tuple[landing.LandingFile, dict[str, dict]]:
        """The export's file, and per path (``export``, ``copy``): its bounds rows, problems (position, reason), ledger
        entry, byte ranges read and files row."""
        from jobs.ingest import bounds
        from jobs.ingest.extracted import Extracted
        from schemas import files, queue_bounds

        n, self.n = self.n, self.n + 1
        _, f = self.host.export()
        copy = self.tmp / "copies" / str(n) / REL
        copy.parent.mkdir(parents=True)
        copy.write_bytes(self.host.file.read_bytes())
        plain = landing.LandingFile(uri=str(copy), path=f"copy{n}/{REL}", rel=REL, size=SIZE, mtime=float(n),
                                    **landing.classify(REL, clients=False))
        snap = landing.Snapshot("c", "b", self.host.ts, f"cluster=c/broker=b/snapshot_ts={n}")
        got = {}
        for name, lf in (("export", f), ("copy", plain)):
            out = Extracted()
            self.reads.clear()
            entries, _ = bounds._queue_bounds(snap, "TopicA", 0, [lf], out, T0, self.known, self.prior[name],
                                              self.oldest)
            self.prior[name] = entries if not self.runs else {
                rel: dataclasses.replace(e, pieces=None, prefix_sha256=None, found=None, pieces_state=None)
                for rel, e in entries.items()}
            got[name] = {"bounds": [(r["min_offset"], r["max_offset"]) for r in out.rows[queue_bounds.NAME]],
                         "problems": [(p.position, p.reason) for *_, p in out.problems], "entry": entries[REL],
                         "reads": list(self.reads), "file": out.rows[files.NAME][0]}
        return f, got


def _same(got: dict[str, dict]) -> None:
    """The export path found what the store-copy path found (the ledger's summary and dangling entries too)."""
    e, c = got["export"], got["copy"]
    assert (e["bounds"], e["problems"], e["entry"].summary, e["entry"].dangling) == (
        c["bounds"], c["problems"], c["entry"].summary, c["entry"].dangling)


@pytest.mark.parametrize("runs", [False, True], ids=["one run", "a run each"])
def test_the_ingest_reads_a_grown_export_file_from_where_its_entries_ended_and_finds_what_a_whole_read_finds(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, runs: bool) -> None:
    """Three exports of one queue file, in one ingest run or a run each (the scheduled ingest: each run takes the
    broker's one new snapshot and has the ledger table's entry of the copy before, whose id the new copy's pieces
    chain to): the second and third copies are the first's pieces and more, so the bounds read only the bytes past
    the entries the copy before held (a real queue file is 5.7 MiB). Bounds, dangling entries and the ledger's summary
    equal those of the same bytes read whole as a store copy, and the files row names an export's file by its
    pieces."""
    from jobs.ingest import bounds

    run = Bounds(tmp_path, monkeypatch, oldest=1000, runs=runs)
    batches = [[entry(i) for i in range(10)],
               # entry 15 points inside record 15, entry 17 names a size its record does not have
               [struct.pack(">qiq", 1000 + 100 * i + (50 if i == 15 else 0), 120 if i == 17 else 100, 7)
                for i in range(10, 20)],
               [entry(i) for i in range(20, 30)]]
    at = 0
    for n, batch in enumerate(batches):
        for e in batch:
            run.host.write(at, e)
            at += 20
        f, got = run.export()
        _same(got)
        assert got["export"]["bounds"] == [(0, 10 * (n + 1))]
        # (entry 9's tags code ends in zero bytes: the second export's piece begins at byte 192, inside it)
        assert got["export"]["reads"] == [(0, None), (192, 400), (400, 600)][n:n + 1]
        e_file, c_file = got["export"]["file"], got["copy"]["file"]
        assert e_file["sha256"] == bounds._pieces_sha(f) != c_file["sha256"]
        assert (e_file["read_from"], e_file["read_to"], e_file["size"]) == (0, SIZE, SIZE)
    assert [(pos, why.split(" points")[0].split(" says")[0]) for pos, why in got["export"]["problems"]] == [
        (300, "entry 15"), (340, "entry 17")]
    summary = got["export"]["entry"].summary
    assert summary.entries == 30 and summary.last_commit_offset == 1000 + 100 * 29


def test_a_grown_copy_s_pieces_digest_hashes_its_new_pieces_from_the_copy_before_s_state() -> None:
    """The digest of a copy that is the one before's pieces and more, extended from that copy's hash state, equals the
    digest of all its pieces; a copy whose first pieces differ, or of another size, is hashed whole."""
    import dataclasses

    from jobs.formats.consumequeue import CQSummary
    from jobs.ingest import bounds, cq_ledger
    from jobs.ingest.landing import LandingFile

    def file(size: int, *pieces: tuple[str, int, int, int]) -> LandingFile:
        return LandingFile("u", "p", "store/consumequeue/T/0/00000000000000000000", size, "consumequeue",
                           pieces=tuple(pieces))

    p1, p2, p3 = ("20260105T001500Z", 0, 40, 0), ("20260105T003000Z", 8, 20, 40), ("20260105T004500Z", 0, 60, 60)
    before = None
    for f in (file(600), file(600, p1), file(600, p1, p2, p3)):  # none, one, then two more
        sha, state = bounds._pieces_digest(f, before)
        assert sha == bounds._pieces_sha(f)
        before = cq_ledger.Entry(600, 0.0, "", sha, CQSummary(0, False, None, None, False), pieces=f.pieces,
                                 pieces_state=state)
    for other in (file(600, p2, p3), file(620, p1, p2, p3, p3)):
        assert bounds._pieces_digest(other, before)[0] == bounds._pieces_sha(other)
    assert bounds._pieces_digest(file(600, p1, p2, p3), dataclasses.replace(before, pieces_state=None))[0] == \
        bounds._pieces_sha(file(600, p1, p2, p3))


@pytest.mark.parametrize("case", ["oldest inside", "oldest inside, searched in one read", "oldest inside, one run",
                                  "rewritten below the piece"])
def test_a_grown_export_file_the_oldest_entry_lies_inside_is_searched_and_one_whose_last_entry_was_rewritten_read_whole(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """The bounds search a file the oldest commitlog segment starts inside: a grown copy is read from where its
    entries ended, its new entries alone checked, and Min's entry among the earlier ones found by a binary search of 8
    bytes an entry (a real file is 5.7 MiB), or in one read of them when they are few (SEARCH_READ_BYTES), each
    snapshot ingested by a run of its own. In one run, the copies after the first are not searched: the first copy,
    read whole, told where Min's entry is, and the oldest segment did not move. A last entry whose zero tags code the
    broker wrote again (the host's tail check covers the bytes before the shipped end only) makes the new piece's first
    bytes non-zero: read and checked whole. Either way the rows equal those of the same bytes read as store
    copies."""
    from jobs.formats import consumequeue

    rewritten = case.startswith("rewritten")
    if case in ("oldest inside", "oldest inside, one run"):  # as a real file's: 8 bytes a step
        monkeypatch.setattr(consumequeue, "SEARCH_READ_BYTES", 0)
    run = Bounds(tmp_path, monkeypatch, oldest=1000 if rewritten else 1000 + 100 * 5,
                 runs=case in ("oldest inside", "oldest inside, searched in one read"))
    ends = [10, 19 if rewritten else 20, 30]  # entries after each export (entry 18's tags code is zero)
    # entry k's commit offset at bytes (20 k, 20 k + 8): the searches for Min (entry 5, commit offset 1500) among the
    # 10, then 20 entries the copy before held
    searched = ([[], [(80, 88), (120, 128), (100, 108)], [(180, 188), (80, 88), (120, 128), (100, 108)]]
                if case == "oldest inside" else [[], [], []] if case == "oldest inside, one run"
                else [[], [(0, 200)], [(0, 400)]])
    for n in range(3):
        for i in range(([0] + ends)[n], ends[n]):
            run.host.write(20 * i, entry(i) if i != 13 else struct.pack(">qiq", 1000 + 100 * i + 50, 100, 7))
        if n == 2 and rewritten:  # entry 18's zero tags code written again as 5: past the shipped end, unchecked
            run.host.write(20 * 18 + 12, struct.pack(">q", 5))
        _, got = run.export()
        _same(got)
        assert got["export"]["bounds"] == [(0 if rewritten else 5, ends[n])]
        assert [pos for pos, _ in got["export"]["problems"]] == ([] if n == 0 else [260])
        # the rewritten case's second export grows (from byte 192: entry 9's tags code is zero too); its third reads
        # from entry 18's last bytes, finds them no longer zero and reads the file whole
        assert got["export"]["reads"] == ([(0, None)] if n == 0 else
                                          [(192, 400 if not rewritten else 380)] + ([] if rewritten else searched[1])
                                          if n == 1 else [(372, 600), (0, None)] if rewritten
                                          else [(400, 600)] + searched[2])


def test_where_min_was_found_is_used_again_only_while_the_oldest_segment_stays(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run, three copies of a growing file: the second copy takes Min's position from the first (read whole); the
    broker then deletes a segment (the oldest start moves from entry 5's commit offset to entry 8's), so the third
    copy is searched again, and finds entry 8. Bounds as the store copies give them."""
    from jobs.formats import consumequeue

    monkeypatch.setattr(consumequeue, "SEARCH_READ_BYTES", 0)
    run = Bounds(tmp_path, monkeypatch, oldest=1000 + 100 * 5)
    for n, (lo, hi) in enumerate([(0, 10), (10, 20), (20, 30)]):
        for i in range(lo, hi):
            run.host.write(20 * i, entry(i))
        if n == 2:
            run.oldest = 1000 + 100 * 8
        _, got = run.export()
        _same(got)
        assert got["export"]["bounds"] == [(5 if n < 2 else 8, hi)]
        assert got["export"]["reads"] == [[(0, None)], [(192, 400)],
                                          [(400, 600), (180, 188), (80, 88), (120, 128), (140, 148),
                                           (160, 168)]][n]
    assert got["export"]["entry"].found == (1800, 8)


@pytest.mark.parametrize("case", ["out of order", "first entries below the oldest segment"])
def test_new_entries_out_of_order_make_the_file_read_whole_and_those_below_the_oldest_segment_are_searched_as_read(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """New entries out of order (a damaged one pointing back): the grown copy is read whole, as a store copy's is, and
    gives its rows. The first entries of a file that had none, pointing below the oldest segment: Min is found among
    the new entries just decoded (the file is not read again)."""
    below = case != "out of order"
    run = Bounds(tmp_path, monkeypatch, oldest=1000 + 100 * 5 if below else 1000)
    first = [] if below else [entry(i) for i in range(10)]
    later = [entry(i) for i in range(10)] if below else [
        entry(i) if i != 12 else struct.pack(">qiq", 1000 + 100 * 2, 100, 7) for i in range(10, 20)]
    for n, batch in enumerate([first, later]):
        for i, e in enumerate(batch):
            run.host.write(20 * (i + len(first) * n), e)
        _, got = run.export()
        _same(got)
    assert got["export"]["bounds"] == ([(5, 10)] if below else got["copy"]["bounds"])
    assert got["export"]["entry"].summary.problems is (not below)
    # the new part read; out of order, found unusable, then the file whole
    assert got["export"]["reads"] == ([(0, 200)] if below else [(192, 400), (0, None)])


def test_min_among_a_grown_copys_new_entries_is_found_in_them_without_a_search(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oldest segment starts past every entry the copy before held and inside the new ones (entries 10-19, Min
    entry 15): Min comes from the new entries just decoded, nothing else is read, and the rows equal a whole read's."""
    run = Bounds(tmp_path, monkeypatch, oldest=1000 + 100 * 15)
    for n, (lo, hi) in enumerate([(0, 10), (10, 20)]):
        for i in range(lo, hi):
            run.host.write(20 * i, entry(i))
        _, got = run.export()
        _same(got)
        assert got["export"]["bounds"] == [(10, 10) if n == 0 else (15, 20)]
    assert got["export"]["reads"] == [(192, 400)]
