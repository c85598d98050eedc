"""Issue 39: maintenance lays silver/messages out per broker (jobs.lake.layout), rows, statistics and kills exact.

Sizes are shrunk (row groups of 4 rows, chunks of 5, bins of 30, merged files up to 12, small below 6) so that a
few dozen rows exercise every cut: two ingest files holding three brokers, then a third file."""
from __future__ import annotations

import datetime as dt
import json
import pathlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.lake import _delta
from jobs.lake import layout
from schemas import messages

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def small_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"ROW_GROUP_ROWS": 4, "CHUNK_ROWS": 5, "BUFFER_ROWS": 8, "BIN_ROWS": 30, "TARGET_ROWS": 12,
                        "SMALL_ROWS": 6}.items():
        monkeypatch.setattr(layout, name, value)


def _rows(spec: list[tuple[str, int]]) -> pa.Table:
    """silver/messages rows: (broker, physical offset) each; the other columns follow from them."""
    schema = _delta._arrow_schema(messages.TABLE)
    cols: dict[str, list[Any]] = {c: [] for c in schema.names}
    for broker, off in spec:
        row = {c: None for c in schema.names}
        row.update(cluster="C", broker=broker, physical_offset=off, topic="T", queue_id=0, queue_offset=off // 10,
                   store_ts=T0 + dt.timedelta(seconds=off, microseconds=500), uniq_key=f"K{broker}{off}",
                   properties=[("UNIQ_KEY", f"K{broker}{off}")], size=10, sys_flag=0, first_snapshot_ts=T0)
        for c in schema.names:
            cols[c].append(row[c])
    return pa.table(cols, schema=schema)


# file A: 8 rows of b1, 8 of b2, 4 of b3, interleaved; file B: 4 of b1, 6 of b2 (later offsets)
A = [(b, o) for i in range(8) for b, o in (("b2", 1000 - 10 * i), ("b1", 10 * i))] + [("b3", 40 * i) for i in range(4)]
B = [("b1", 100 + 10 * i) for i in range(4)] + [("b2", 2000 + 10 * i) for i in range(6)]
C = [("b3", 500), ("b1", 300), ("b3", 510)]


def _table(tmp_path: pathlib.Path, *files: list[tuple[str, int]]) -> str:
    lake = str(tmp_path / "lake")
    for spec in files:
        write_deltalake(messages.TABLE.path(lake), _rows(spec), mode="append")
    return lake


def _content(lake: str) -> list[tuple]:
    path = messages.TABLE.path(lake)
    t = DeltaTable(path).to_pyarrow_table(filesystem=_delta.arrow_filesystem(path))
    return sorted((r["broker"], r["physical_offset"], r["uniq_key"], r["store_ts"], tuple(r["properties"]))
                  for r in t.to_pylist())


def _files(lake: str) -> list[tuple[str, int, int, int]]:
    """(broker, rows, first, last offset) of each live file, from its Delta statistics."""
    acts = pa.table(DeltaTable(messages.TABLE.path(lake)).get_add_actions(flatten=True)).to_pylist()
    assert all(a["min.broker"] == a["max.broker"] for a in acts)
    return sorted((a["min.broker"], a["num_records"], a["min.physical_offset"], a["max.physical_offset"])
                  for a in acts)


def test_split_then_merge_gives_one_sorted_file_per_broker_and_keeps_every_row(tmp_path: pathlib.Path) -> None:
    lake = _table(tmp_path, A, B)
    before = _content(lake)
    said: list[str] = []
    out = layout.arrange(lake, messages.TABLE, said.append)
    # A and B (30 rows) are one bin: one file per broker; b3's lone file of 4 rows has no neighbour to merge with
    assert out == {"files_before": 2, "files_after": 3, "files_removed": 2, "files_added": 3}
    assert said == ["silver/messages: split 1/1: 2 file(s), 30 rows -> 3 file(s)"]
    assert _files(lake) == [("b1", 12, 0, 130), ("b2", 14, 930, 2050), ("b3", 4, 0, 120)]
    assert _content(lake) == before
    root = pathlib.Path(messages.TABLE.path(lake))
    for uri in DeltaTable(str(root)).file_uris():
        meta = pq.ParquetFile(uri).metadata
        groups = [pq.ParquetFile(uri).read_row_group(i).column("physical_offset").to_pylist()
                  for i in range(meta.num_row_groups)]
        assert all(len(g) <= 4 and g == sorted(g) for g in groups)
    # the commit is a rewrite: no data change, statistics of every primitive column (timestamps widened to the ms)
    log = [json.loads(line) for line in (root / "_delta_log" / "00000000000000000002.json").read_text().splitlines()]
    assert {a[k]["dataChange"] for a in log for k in ("add", "remove") if k in a} == {False}
    b1 = next(json.loads(a["add"]["stats"]) for a in log if "add" in a and '"b1"' in a["add"]["stats"])
    assert (b1["numRecords"], b1["minValues"]["store_ts"], b1["maxValues"]["store_ts"], b1["nullCount"]["tags"]) == (
        12, "2026-01-05T00:00:00.000Z", "2026-01-05T00:02:10.001Z", 12)
    assert "properties" not in b1["minValues"]


def test_a_rerun_commits_nothing_and_a_later_file_is_split_and_merged(tmp_path: pathlib.Path) -> None:
    lake = _table(tmp_path, A, B)
    layout.arrange(lake, messages.TABLE)
    version = DeltaTable(messages.TABLE.path(lake)).version()
    assert layout.arrange(lake, messages.TABLE) == {"files_before": 3, "files_after": 3, "files_removed": 0,
                                                     "files_added": 0}
    assert DeltaTable(messages.TABLE.path(lake)).version() == version
    write_deltalake(messages.TABLE.path(lake), _rows(C), mode="append")
    before = _content(lake)
    # C splits into b1 (1 row) and b3 (2 rows); b3's two small files merge (6 rows), b1's 12-row file is not small
    assert layout.arrange(lake, messages.TABLE) == {"files_before": 4, "files_after": 4, "files_removed": 3,
                                                     "files_added": 3}
    assert _files(lake) == [("b1", 1, 300, 300), ("b1", 12, 0, 130), ("b2", 14, 930, 2050), ("b3", 6, 0, 510)]
    assert _content(lake) == before


def test_the_ingest_splits_only_what_it_appended(tmp_path: pathlib.Path) -> None:
    lake = _table(tmp_path, A, B)  # versions 0 (A) and 1 (B)
    said: list[str] = []
    assert layout.split_added(lake, messages.TABLE, 0, said.append) == 1
    assert said == ["silver/messages: split 1/1: 1 file(s), 10 rows -> 2 file(s)"]
    acts = pa.table(DeltaTable(messages.TABLE.path(lake)).get_add_actions(flatten=True)).to_pylist()
    # A, of every broker, waits for maintenance; B is one file per broker
    assert sorted((a["min.broker"], a["max.broker"], a["num_records"]) for a in acts) == [
        ("b1", "b1", 4), ("b1", "b3", 20), ("b2", "b2", 6)]
    assert layout.split_added(lake, messages.TABLE, 2, said.append) == 0  # nothing added since: no commit
    assert DeltaTable(messages.TABLE.path(lake)).version() == 2
    assert layout.split_added(lake, messages.TABLE, None) == 1  # a first ingest: every file is its own
    assert _files(lake) == [("b1", 4, 100, 130), ("b1", 8, 0, 70), ("b2", 6, 2000, 2050), ("b2", 8, 930, 1000),
                            ("b3", 4, 0, 120)]


def test_killed_before_a_commit_then_rerun_leaves_what_a_clean_run_leaves(tmp_path: pathlib.Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    clean = _table(tmp_path / "clean", A, B, C)
    layout.arrange(clean, messages.TABLE)
    lake = _table(tmp_path / "killed", A, B, C)

    class Killed(BaseException):
        pass

    def die(name: str) -> None:
        if name == "layout.split.before_commit":
            raise Killed

    hit = layout.failpoints.hit
    monkeypatch.setattr(layout.failpoints, "hit", die)
    with pytest.raises(Killed):
        layout.arrange(lake, messages.TABLE)
    assert DeltaTable(messages.TABLE.path(lake)).version() == 2  # the outputs are written, not committed
    left = names(lake)[1]
    monkeypatch.setattr(layout.failpoints, "hit", hit)
    layout.arrange(lake, messages.TABLE)

    assert (_files(lake), _content(lake)) == (_files(clean), _content(clean))
    # the rerun wrote over what the killed run left (names follow from the inputs): no orphan stays
    assert (len(left), set(left) <= set(names(lake)[1])) == (3, True)
    assert [len(n) for n in names(lake)] == [len(n) for n in names(clean)] == [4, 6]  # split 3 + 2 files, merge 1


def names(root: str) -> tuple[list[str], list[str]]:
    """The live files, and the files the layout wrote (live or removed)."""
    table = pathlib.Path(messages.TABLE.path(root))
    return (sorted(pathlib.Path(u).name for u in DeltaTable(str(table)).file_uris()),
            sorted(p.name for p in table.glob("part-*.zstd.parquet")
                   if p.name.startswith(("part-split-", "part-merge-"))))


def test_only_tables_clustered_by_broker_are_laid_out() -> None:
    import schemas

    assert [t.qualified for t in schemas.ALL_TABLES if layout.applies(t)] == ["silver/messages"]
    assert layout.sort_key(messages.TABLE) == ["cluster", "broker", "physical_offset", "queue_offset"]


def test_a_row_group_is_sorted_as_arrow_sorts_it() -> None:
    """The split sorts a broker's row group by its offsets with numpy (``layout._sort``): the same rows in the same
    order as Arrow's sort by the whole key, ties kept in their order, and Arrow's own sort where a name or a null
    needs it."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    key = [(c, "ascending") for c in layout.KEY_ORDER]
    kinds = {"one broker": 0, "two brokers": 0, "a null offset": 0, "in order": 0}
    for trial in range(120):
        n = int(rng.integers(2, 300))
        po, qo = rng.integers(0, 50, n), rng.integers(0, 5, n)
        kind = ["one broker", "two brokers", "a null offset", "in order"][trial % 4]
        kinds[kind] += 1
        if kind == "in order":
            po, qo = np.arange(n) * 3, np.zeros(n, np.int64)
        t = pa.table({"cluster": ["c"] * n,
                      "broker": [("a" if i % 2 else "b") if kind == "two brokers" else "b" for i in range(n)],
                      "physical_offset": po,
                      "queue_offset": pa.array([None if kind == "a null offset" and i == 0 else int(x)
                                                for i, x in enumerate(qo)], pa.int64()),
                      "row": np.arange(n)})
        got = layout._sort(t, key)
        assert got.equals(t.sort_by(key)), (kind, trial)
        if kind == "in order":
            assert got is t  # nothing to sort: the same table, no copy
    assert kinds == {"one broker": 30, "two brokers": 30, "a null offset": 30, "in order": 30}


def _chunks(spec: list[tuple[str, int]], size: int) -> list[pa.Table]:
    t = _rows(spec)
    return [t.slice(i, size) for i in range(0, len(t), size)]


def test_the_ingest_appends_new_rows_as_a_sorted_file_per_broker(tmp_path: pathlib.Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``layout.append`` (the ingest's load of records decoded for the first time): the rows of chunks that
    interleave brokers land as one file per broker, every row group sorted, in one commit of new data."""
    lake = _table(tmp_path, B)  # version 0: the table's own file (b1 and b2)
    said: list[str] = []
    rows = A + C  # 23 rows, three brokers interleaved, b2's offsets descending
    held: list[int] = []  # rows held back across brokers after each chunk: at most one row group (4)
    add = layout._Outputs.add

    def add_and_count(out: Any, broker: tuple[str, str], chunk: pa.Table) -> None:
        add(out, broker, chunk)
        held.append(sum(len(t) for ts in out.buffers.values() for t in ts))

    monkeypatch.setattr(layout._Outputs, "add", add_and_count)
    assert layout.append(lake, messages.TABLE, _chunks(rows, 5), "run1", said.append) == 23
    assert max(held) == 4
    assert said == ["silver/messages: appended 23 rows as 3 file(s) of one broker each"]
    assert _content(lake) == sorted(_content(_table(tmp_path / "ref", B, rows)))
    root = pathlib.Path(messages.TABLE.path(lake))
    log = [json.loads(line) for line in (root / "_delta_log" / "00000000000000000001.json").read_text().splitlines()]
    adds = [a["add"] for a in log if "add" in a]
    assert not [a for a in log if "remove" in a]
    assert sorted((json.loads(a["stats"])["minValues"]["broker"], json.loads(a["stats"])["numRecords"],
                   a["dataChange"], a["path"]) for a in adds) == [
        # numbered as each is first written: the first chunk's 3 rows of b2 and 2 of b1 are 5 rows held, more than
        # a row group (4), so b2's, the largest, are written first
        ("b1", 9, True, "part-append-run1-0001.zstd.parquet"),
        ("b2", 8, True, "part-append-run1-0000.zstd.parquet"),
        ("b3", 6, True, "part-append-run1-0002.zstd.parquet")]
    for a in adds:
        f = pq.ParquetFile(str(root / a["path"]))
        groups = [f.read_row_group(i).column("physical_offset").to_pylist() for i in range(f.metadata.num_row_groups)]
        assert all(len(g) <= 4 and g == sorted(g) for g in groups)
        assert sum(len(g) for g in groups) == json.loads(a["stats"])["numRecords"]
    assert layout.append(lake, messages.TABLE, [], "run2") == 0  # nothing to append: no commit
    assert DeltaTable(str(root)).version() == 1


def test_an_append_killed_before_its_commit_changes_nothing(tmp_path: pathlib.Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    lake = _table(tmp_path, B)
    before = _content(lake)

    class Killed(BaseException):
        pass

    def die(name: str) -> None:
        if name == "layout.append.before_commit":
            raise Killed

    monkeypatch.setattr(layout.failpoints, "hit", die)
    with pytest.raises(Killed):
        layout.append(lake, messages.TABLE, _chunks(A, 5), "run1")
    assert (DeltaTable(messages.TABLE.path(lake)).version(), _content(lake)) == (0, before)


def test_message_chunks_read_only_the_staged_records(tmp_path: pathlib.Path) -> None:
    """The staging folder holds every kind of the decode's output rows; the append reads the records' rows only,
    with the table's columns."""
    from jobs.ingest import decode_tasks
    from jobs.ingest.decode import Decoded

    staging = tmp_path / "staging"
    staging.mkdir()
    kinds = ["message", "trace", "message", "progress", None, "message", "problem"]
    t = pa.table({f.name: pa.nulls(len(kinds), f.type) for f in decode_tasks.OUTPUT_ARROW},
                 schema=decode_tasks.OUTPUT_ARROW)
    t = t.set_column(0, "kind", pa.array(kinds, pa.string()))
    t = t.set_column(t.schema.get_field_index("physical_offset"), "physical_offset", pa.array(range(7), pa.int64()))
    pq.write_table(t, staging / "a.parquet", row_group_size=3)
    pq.write_table(t.filter(pa.array([k == "trace" for k in kinds])), staging / "b.parquet")
    part = tmp_path / "landing" / "records-0-7.parquet"  # an export's part, read where it landed
    part.parent.mkdir()
    pq.write_table(t.slice(3), part)
    got = list(Decoded(staging=str(staging), decoded_here=True, parts=[str(part)]).message_chunks(messages.TABLE, 2))
    assert [c.column_names for c in got] == [list(messages.TABLE.columns)] * len(got)
    assert [c.column("physical_offset").to_pylist() for c in got] == [[0], [2], [5], [5]]
    assert [c.column("physical_offset").to_pylist()
            for c in Decoded(staging=str(staging), parts=[str(part)]).message_chunks(messages.TABLE, 9)] == [[5]]


def test_export_parts_are_read_for_the_kinds_their_manifests_count_when_the_counts_add_up() -> None:
    """An export part is read for a kind only if its manifest counts rows of it (layout 2 counts the messages its
    messages file holds: the part holds none); when the manifests' counts differ from the rows the parts hold, every
    part is read for every kind."""
    from types import SimpleNamespace as NS

    from jobs.ingest.decode import Decoded, _part_kinds

    def snap(folder: str, parts: list[dict]) -> NS:
        return NS(manifest={"parts": parts}, files=[NS(kind="export_part", rel=p["name"], uri=f"{folder}/{p['name']}")
                                                   for p in parts])

    a = snap("a", [{"name": "records-0-9.parquet", "kinds": {"progress": 1, "message": 7},
                    "messages": {"name": "messages-0-9.parquet", "rows": 7}},
                   {"name": "records-9-20.parquet", "kinds": {"progress": 1, "trace": 2, "message": 3},
                    "messages": {"name": "messages-9-20.parquet", "rows": 3}}])
    b = snap("b", [{"name": "records-0-5.parquet", "kinds": {"progress": 1, "message": 4, "pop_ck": 0}}])  # layout 1
    held = {"progress": 3, "trace": 2, "message": 4}
    kinds = _part_kinds([a, b], held)
    assert kinds == {"a/records-0-9.parquet": {"progress"}, "a/records-9-20.parquet": {"progress", "trace"},
                     "b/records-0-5.parquet": {"progress", "message"}}
    staged = Decoded(staging="s", parts=list(kinds), part_kinds=kinds)
    assert [staged.parts_of(k) for k in ("trace", "message", "pop_ck", "progress")] == [
        ["a/records-9-20.parquet"], ["b/records-0-5.parquet"], [], list(kinds)]
    assert _part_kinds([a, b], {**held, "trace": 3}) == {}  # a part holds a trace row its manifest does not count
    assert _part_kinds([a, snap("c", [{"name": "records-0-1.parquet"}])], held) == {}  # no counts
    assert Decoded(staging="s", parts=["x", "y"]).parts_of("trace") == ["x", "y"]


def test_files_admitting_choose_a_brokers_files_by_its_range_and_mixed_files_by_any(tmp_path: pathlib.Path,
                                                                                   caplog: pytest.LogCaptureFixture
                                                                                   ) -> None:
    """The ingest's read of the records it checks consume queue entries against (``known_records.lake_records``)
    reads only these files: a file of one broker when its offsets meet that broker's range (another broker's file
    at the same offsets is skipped), a file of several brokers, or of a name its statistics may truncate, when its
    offsets meet any wanted range."""
    long = "b" * 40  # a broker name statistics may truncate (32 characters): not trusted as the file's one broker
    lake = _table(tmp_path, A, B)
    layout.arrange(lake, messages.TABLE)  # b1 [0, 130], b2 [930, 2050], b3 [0, 120]
    write_deltalake(messages.TABLE.path(lake), _rows(C), mode="append")  # mixed: b1 300, b3 500 and 510
    write_deltalake(messages.TABLE.path(lake), _rows([(long, 3000), (long, 3010)]), mode="append")
    acts = pa.table(DeltaTable(messages.TABLE.path(lake)).get_add_actions(flatten=True)).to_pylist()
    name = {a["path"]: (a["min.broker"] if a["min.broker"] == a["max.broker"] else "mixed") for a in acts}
    assert sorted(name.values()) == sorted(["b1", "b2", "b3", "mixed", long])

    def chosen(wanted: dict[tuple[str, str], tuple[int, int]]) -> list[str]:
        return sorted(name[p] for p in layout.files_admitting(lake, messages.TABLE, wanted))

    assert chosen({("C", "b3"): (100, 121)}) == ["b3"]  # not b1's file, whose offsets 0-130 meet the range too
    assert chosen({("C", "b3"): (121, 300)}) == []  # b3's file ends at 120, the mixed file starts at 300 (hi excluded)
    assert chosen({("C", "b1"): (120, 301)}) == ["b1", "mixed"]
    assert chosen({("C", "b2"): (2050, 2051), ("C", "b1"): (0, 1)}) == ["b1", "b2"]
    assert chosen({("C", "b2"): (2051, 3001)}) == [long]  # b2 ends at 2050, the mixed file at 510
    assert chosen({("C", "b9"): (0, 10_000)}) == [long, "mixed"]
    assert layout.files_admitting(lake, messages.TABLE, {}) is None

    def scanned(files: list[str] | None) -> list[tuple[str, int]]:
        return sorted((r["broker"], r["physical_offset"]) for b in _delta.scan_batches(
            lake, messages.TABLE, ["broker", "physical_offset"], filters=None, files=files) for r in b.to_pylist())

    b3 = layout.files_admitting(lake, messages.TABLE, {("C", "b3"): (100, 121)})
    assert scanned(b3) == [("b3", 40 * i) for i in range(4)]
    assert scanned([]) == []
    every = sorted((b, o) for b, o in A + B + C + [(long, 3000), (long, 3010)])
    assert scanned(None) == every
    with caplog.at_level("WARNING"):  # a path the dataset does not know: every file, never a silently short read
        assert scanned([*b3, "part-gone.parquet"]) == every
    assert "1 of 2 chosen data files not found by name; reading every file" in caplog.text


def _export_file(path: pathlib.Path, spec: list[tuple[str, int]], *, row_group: int = 3, **over: Any) -> str:
    """A file as an exporter writes its messages (jobs.export.store._Parts: statistics, zstd), ``over`` replacing
    columns (name -> Arrow array)."""
    t = _rows(spec)
    for name, values in over.items():
        t = t.set_column(t.schema.get_field_index(name), name, values)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path, row_group_size=row_group, compression="zstd", write_statistics=True)
    return str(path)


def test_an_append_adopts_an_exports_messages_file_as_written_with_its_footers_statistics(
        tmp_path: pathlib.Path) -> None:
    """An export's messages file (one broker, the table's columns) becomes a file of the table as it is, its Delta
    statistics taken from its Parquet footer: the ones :class:`layout._Stats` gives its rows, in the same commit as
    the chunks' files."""
    lake = _table(tmp_path, B)
    # 7 rows of b3 in 3 row groups; a tag in 2 rows only (null counts per row group)
    spec = [("b3", 600 + 10 * i) for i in range(7)]
    tags = pa.array([None, "x", None, None, None, "a", None], pa.string())
    f = _export_file(tmp_path / "landing" / "messages-600-670.parquet", spec, tags=tags)
    said: list[str] = []
    assert layout.append(lake, messages.TABLE, _chunks(C, 5), "run1", said.append, adopt=[f]) == 10
    assert said == ["silver/messages: appended 10 rows as 3 file(s) of one broker each (1 adopted as written)"]
    root = pathlib.Path(messages.TABLE.path(lake))
    log = [json.loads(line) for line in (root / "_delta_log" / "00000000000000000001.json").read_text().splitlines()]
    [adopted] = [a["add"] for a in log if "add" in a and "adopted" in a["add"]["path"]]
    assert adopted["path"].startswith("part-adopted-run1-") and adopted["dataChange"] is True
    assert (root / adopted["path"]).read_bytes() == pathlib.Path(f).read_bytes()
    want = layout._Stats(_delta._arrow_schema(messages.TABLE))
    want.add(pq.read_table(f))
    assert json.loads(adopted["stats"]) == json.loads(want.json())
    stats = json.loads(adopted["stats"])
    assert (stats["numRecords"], stats["minValues"]["physical_offset"], stats["maxValues"]["physical_offset"],
            stats["nullCount"]["tags"], stats["minValues"]["tags"], stats["maxValues"]["tags"]) == (
        7, 600, 660, 5, "a", "x")
    # timestamps to the millisecond, widened outwards (store_ts has 500 us)
    assert (stats["minValues"]["store_ts"], stats["maxValues"]["store_ts"]) == (
        "2026-01-05T00:10:00.000Z", "2026-01-05T00:11:00.001Z")
    assert _content(lake) == sorted(_content(_table(tmp_path / "ref", B, C, spec)))


@pytest.mark.parametrize("why", ["two brokers", "another schema", "no statistics"])
def test_a_file_that_is_not_laid_out_as_the_tables_is_written_again(tmp_path: pathlib.Path, why: str) -> None:
    """Not adopted but read and written per broker as chunks are: a file of two brokers (statistics of one broker
    each would be wrong), of other columns (an older exporter's: a column it lacks is null), without statistics."""
    lake = _table(tmp_path, B)
    spec = [("b3", 600), ("b3", 610), ("b4", 5)] if why == "two brokers" else [("b3", 600), ("b3", 610)]
    path = tmp_path / "landing" / "m.parquet"
    if why == "another schema":
        t = _rows(spec).drop_columns(["segment"])
        path.parent.mkdir()
        pq.write_table(t, path)
    elif why == "no statistics":
        path.parent.mkdir()
        pq.write_table(_rows(spec), path, write_statistics=False)
    else:
        _export_file(path, spec)
    said: list[str] = []
    assert layout.append(lake, messages.TABLE, [], "run1", said.append, adopt=[str(path)]) == len(spec)
    assert said == [f"silver/messages: appended {len(spec)} rows as {len({b for b, _ in spec})} file(s) of one "
                    "broker each"]
    root = pathlib.Path(messages.TABLE.path(lake))
    log = [json.loads(line) for line in (root / "_delta_log" / "00000000000000000001.json").read_text().splitlines()]
    stats = [json.loads(a["add"]["stats"]) for a in log if "add" in a]
    assert sorted((s["minValues"]["broker"], s["maxValues"]["broker"], s["numRecords"],
                   s["minValues"]["physical_offset"], s["maxValues"]["physical_offset"]) for s in stats) == [
        ("b3", "b3", 2, 600, 610), *([("b4", "b4", 1, 5, 5)] if why == "two brokers" else [])]
    assert all("adopted" not in a["add"]["path"] for a in log if "add" in a)
    assert _content(lake) == sorted(_content(_table(tmp_path / "ref", B, spec)))


def test_export_parts_are_read_back_here_as_the_engine_read_them(spark, tmp_path: pathlib.Path) -> None:  # noqa: ANN001
    """The problem and progress rows of export parts and their rows counted by kind, read in one Arrow scan, equal
    what the engine's query over the same parts gives (a part without a column reads it as null); a part that is not
    Parquet stops the ingest with an error saying what to do."""
    from jobs.ingest import decode_tasks
    from jobs.ingest.decode import _read_back, _read_back_parts

    def part(path: pathlib.Path, rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        t = pa.Table.from_pylist([{c: r.get(c) for c in decode_tasks.OUTPUT_ARROW.names} for r in rows],
                                 schema=decode_tasks.OUTPUT_ARROW)
        pq.write_table(t.drop_columns(list(drop)), path)
        return str(path)

    base = {"cluster": "c", "broker": "b", "snapshot_ts": dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)}
    a = part(tmp_path / "broker=b" / "snapshot_ts=1" / "store-export" / "records-0-10.parquet", [
        {**base, "kind": "trace", "unit": 0, "seq": 0}, {**base, "kind": "trace", "unit": 0, "seq": 1},
        {**base, "kind": "progress", "unit": 0, "seq": 2, "info": '{"end": 10}'},
        {**base, "kind": "problem", "unit": 0, "seq": 3, "source_path": "p/00", "position": 7, "reason": "bad"}])
    b = part(tmp_path / "broker=d" / "snapshot_ts=2" / "store-export" / "records-10-20.parquet", [
        {**base, "broker": "d", "kind": "pop_ck", "unit": 1, "seq": 0},
        {**base, "broker": "d", "kind": "progress", "unit": 1, "seq": 1, "reason": "r"}], drop=("info",))
    rows, counts = _read_back_parts([a, b])
    want_rows, want_counts = _read_back(spark.read.schema(decode_tasks.output_ddl()).parquet(a, b))
    assert counts == want_counts == {"trace": 2, "progress": 2, "problem": 1, "pop_ck": 1}
    key = lambda r: (r["unit"], r["seq"])  # noqa: E731
    got = sorted(pa.Table.from_batches(rows).to_pylist(), key=key)
    assert got == sorted(pa.Table.from_batches(want_rows).to_pylist(), key=key)
    assert [(r["broker"], r["kind"], r["position"], r["reason"], r["info"]) for r in got] == [
        ("b", "progress", None, None, '{"end": 10}'), ("b", "problem", 7, "bad", None),
        ("d", "progress", None, "r", None)]
    only_b, counts_b = _read_back_parts([b])
    assert [(r["broker"], r["kind"], r["seq"]) for r in pa.Table.from_batches(only_b).to_pylist()] == [
        ("d", "progress", 1)] and counts_b == {"pop_ck": 1, "progress": 1}

    bad = tmp_path / "broker=e" / "records-0-1.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not parquet")
    with pytest.raises(OSError, match="export parts not readable .* run ingest again"):
        _read_back_parts([a, str(bad)])
