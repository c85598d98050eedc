"""Issue 37: the exporter's pieces on tiny inputs: reading a config the broker is renaming, the export folder's
recognition by the ingest, a manifest that does not match its folder, and the shipped deployment examples."""
from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import shlex
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc


def test_a_config_between_the_brokers_two_renames_is_read_once_it_is_back(tmp_path: pathlib.Path) -> None:
    from jobs.export import stable

    path = tmp_path / "consumerOffset.json"
    # MixAll.string2File: file -> file.bak, then file.tmp -> file; the read comes in between
    threading.Timer(0.12, lambda: path.write_text('{"offsetTable":{}}')).start()
    assert stable.read_stable(path, tries=20, pause_s=0.02) == b'{"offsetTable":{}}'


def test_a_config_deleted_for_good_is_not_shipped(tmp_path: pathlib.Path) -> None:
    from jobs.export import stable

    assert stable.read_stable(tmp_path / "gone.json", tries=3, pause_s=0.001) is None


def test_a_file_that_changes_during_every_read_is_not_shipped_torn(tmp_path: pathlib.Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from jobs.export import stable

    path = tmp_path / "topics.json"
    path.write_bytes(b"{}")
    real, calls = os.stat, []

    def rewritten_meanwhile(p, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202 - the broker saves between two stats
        st = real(p, *a, **k)
        calls.append(p)
        return os.stat_result(tuple(st[:10]), {"st_mtime_ns": st.st_mtime_ns + len(calls)})

    monkeypatch.setattr(stable.os, "stat", rewritten_meanwhile)
    with pytest.raises(stable.TornRead, match="changed during each of 5 reads"):
        stable.read_stable(path, tries=5, pause_s=0.001)
    assert len(calls) == 10


def test_a_rocksdb_copy_skips_the_info_log_and_is_taken_again_when_compaction_replaces_a_file(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from jobs.export import stable

    db = tmp_path / "consumequeue"
    (db / "TopicA" / "0").mkdir(parents=True)  # a file queue's topic folder beside the database's files
    (db / "TopicA" / "0" / "00000000000000000000").write_bytes(b"q" * 20)
    for name, data in {"CURRENT": b"MANIFEST-000005\n", "MANIFEST-000005": b"m", "000004.sst": b"s" * 7,
                       "LOG": b"info", "LOG.old.1700000000000000": b"older info", "OPTIONS-000007": b"o"}.items():
        (db / name).write_bytes(data)
    real, copies = shutil.copyfile, []

    def compacted_once(src, dst, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202 - the first copy races compaction
        copies.append(pathlib.Path(src).name)
        if copies == ["000004.sst"]:
            (db / "000004.sst").unlink()
            (db / "000009.sst").write_bytes(b"t" * 9)
        return real(src, dst, *a, **k)

    monkeypatch.setattr(stable.shutil, "copyfile", compacted_once)
    out = tmp_path / "out"
    assert stable.copy_dir_stable(db, out, flat=True, pause_s=0.001) == 4
    assert sorted(p.name for p in out.rglob("*")) == ["000009.sst", "CURRENT", "MANIFEST-000005", "OPTIONS-000007"]
    assert (out / "000009.sst").read_bytes() == b"t" * 9
    assert copies[0] == "000004.sst" and copies.count("000009.sst") == 1  # the torn copy was thrown away whole
    assert stable.copy_dir_stable(db, tmp_path / "deep", pause_s=0.001) == 5  # not flat: the topic folder too


def _snap(tmp_path: pathlib.Path, rels: dict[str, bytes]):  # noqa: ANN202
    from jobs.ingest import landing

    folder = "cluster=c/broker=b/snapshot_ts=20260105T010000Z"
    files = []
    for rel, data in rels.items():
        p = tmp_path / folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        files.append(landing.LandingFile(uri=str(p), path=f"{folder}/{rel}", rel=rel, size=len(data),
                                         **landing.classify(rel, clients=False)))  # type: ignore[arg-type]
    return landing.Snapshot("c", "b", dt.datetime(2026, 1, 5, 1, tzinfo=UTC), folder, files)


def _manifest(**over: object) -> bytes:
    doc = {"layout": "rmq-recon-export/1", "cluster": "c", "broker": "b",
           "segments": [{"name": "00000000000001073741824", "start": 1073741824, "size": 1073741824},
                        {"name": "00000000000000000000", "start": 0, "size": 1073741824}],
           "parts": [{"name": "store-export/records-00000000000000000000-00000000000000000100.parquet"}],
           "listing_problems": [{"source_path": "x/store/commitlog/00000000000000000000", "position": 0,
                                 "reason": "empty commitlog segment"}]}
    doc.update(over)
    return json.dumps(doc).encode()


PART = "store-export/records-00000000000000000000-00000000000000000100.parquet"
MESSAGES = "store-export/messages-00000000000000000000-00000000000000000100.parquet"
QUEUE = {"rel": "store/consumequeue/T/0/00000000000000000000", "size": 6000000, "mtime": 1767574800.5,
         "id": "pieces-0", "pieces": [["20260105T010000Z", 0, 20, 0]]}
LAYOUT2 = {"layout": "rmq-recon-export/2", "parts": [{"name": PART, "messages": {"name": MESSAGES}}]}


def test_an_export_folder_is_complete_with_its_manifest_and_marker_and_measures_min_from_its_listing(
        tmp_path: pathlib.Path) -> None:
    from jobs.ingest import landing

    snap = _snap(tmp_path, {PART: b"p", "store/config/consumerOffset.json": b"{}"})
    assert [f.kind for f in snap.files] == ["export_part", "consumer_offsets"]
    assert snap.is_export and snap.completed_by(time.time(), 0, False) is None  # no manifest, no marker: writing
    snap = _snap(tmp_path, {PART: b"p", "store-export/manifest.json": _manifest()})
    assert snap.completed_by(time.time(), 0, False) is None  # the marker comes last
    snap = _snap(tmp_path, {PART: b"p", "store-export/manifest.json": _manifest(), "_SUCCESS": b""})
    assert snap.completed_by(time.time(), 0, False) == "marker"
    layout2 = _snap(tmp_path / "2", {PART: b"p", MESSAGES: b"m", "store-export/manifest.json": _manifest(**LAYOUT2),
                                     "_SUCCESS": b""})
    assert [f.kind for f in layout2.files] == ["export_part", "export_messages", "export_manifest", "marker"]
    assert len(landing.read_manifests([layout2], lambda s, p: None)) == 1
    problems: list = []
    [got] = landing.read_manifests([snap], lambda s, p: problems.append(p))
    assert got.oldest_segment_start() == 0 and got.segment_starts() == [0, 1073741824]
    assert [(p.source_path, p.position, p.reason) for p in problems] == [
        ("x/store/commitlog/00000000000000000000", 0, "empty commitlog segment")]
    missing = [rel for rel, _ in landing.missing_files(got)]
    assert "store/commitlog/" not in missing and "store/config/consumerOffset.json" in missing


@pytest.mark.parametrize(("files", "why"), [
    ({"store-export/manifest.json": _manifest()}, "names 1 part\\(s\\) the folder lacks"),
    ({PART: b"p", "store-export/records-00000000000000000100-00000000000000000200.parquet": b"q",
      "store-export/manifest.json": _manifest()}, "holds 1 part\\(s\\) it does not name"),
    ({PART: b"p", "store-export/manifest.json": _manifest(broker="other")}, "written for cluster=c/broker=other"),
    ({PART: b"p", "store-export/manifest.json": b"{not json"}, "JSON is malformed"),
    # a queue file's entry that is not one (it stopped the whole run before it was read typed)
    ({PART: b"p", "store-export/manifest.json": _manifest(queues=[QUEUE | {"pieces": [["20260105T010000Z", "0", 20,
                                                                                        0]]}])},
     "Expected `int`, got `str` - at `\\$.queues\\[0\\].pieces\\[0\\]\\[1\\]`"),
    ({PART: b"p", "store-export/manifest.json": _manifest(queues=[{k: v for k, v in QUEUE.items() if k != "size"}])},
     "missing required field `size` - at `\\$.queues\\[0\\]`"),
    ({PART: b"p", "store-export/manifest.json": _manifest(layout="rmq-recon-export/9")},
     "layout 'rmq-recon-export/9', expected one of rmq-recon-export/1, rmq-recon-export/2 \\(an export newer than "
     "this ingest: upgrade rmq-recon where the ingest runs\\)"),
    # layout 2: a part's messages file, named and there
    ({PART: b"p", "store-export/manifest.json": _manifest(**LAYOUT2)}, "names 1 part\\(s\\) the folder lacks"),
    ({PART: b"p", MESSAGES: b"m", "store-export/manifest.json": _manifest(layout="rmq-recon-export/2")},
     "holds 1 part\\(s\\) it does not name \\(e.g. store-export/messages-0"),
])
def test_an_export_whose_manifest_does_not_match_its_folder_is_quarantined_and_not_taken(
        tmp_path: pathlib.Path, files: dict, why: str) -> None:
    from jobs.ingest import landing

    snap = _snap(tmp_path, {**files, "_SUCCESS": b""})
    problems: list = []
    assert landing.read_manifests([snap], lambda s, p: problems.append(p)) == []
    [p] = problems
    assert p.source_path == f"{snap.folder}/store-export/manifest.json"
    assert re.search(why, p.reason) and "this snapshot is not ingested" in p.reason


@pytest.mark.parametrize("name", ["rmq-recon-export.cron", "rmq-recon-export.service",
                                  "rmq-recon-export-sidecar.yaml"])
def test_the_deployment_examples_run_a_valid_export_command(name: str) -> None:
    from jobs.cli import build_parser

    text = (ROOT / "infra" / "export" / name).read_text().replace("\\\n", " ")
    if name.endswith(".yaml"):
        import yaml

        yaml.safe_load(text)  # (the whole manifest parses)
    [line] = [ln for ln in text.splitlines() if "rmq-recon export --store" in ln]
    argv = shlex.split(line[line.index("rmq-recon export"):].split("||")[0].split(">>")[0])[1:]
    args = build_parser().parse_args([a.replace("${STATE_DIRECTORY}", "/var/lib/x") for a in argv])
    assert (args.command, args.cluster, args.broker) == ("export", "DefaultCluster", "broker-a")
    assert args.store and args.to.startswith("s3://") and args.state
    assert args.every == ("15m" if name.endswith(".yaml") else None)  # the sidecar is one long-lived process


def test_the_exporter_on_a_broker_host_loads_no_spark(tmp_path: pathlib.Path) -> None:
    """The issue: no Spark on the broker host. A whole export (blocked-head's first store copy) in a fresh process,
    then its modules: importing pyspark for a constant cost every run ~0.4 s CPU, pandas (which pyarrow imports at
    its first numpy conversion) 0.18 s, scipy (which numba imports) 0.13 s. Arrow allocates from malloc there (jobs.export.host_process: its default pool
    kept 45 MiB more of a bulk broker's exporter)."""
    import subprocess
    import sys

    from jobs import simulate

    simulate.run("blocked-head", str(tmp_path / "copies"), seed=7)
    store = sorted((tmp_path / "copies").glob("cluster=*/broker=*/snapshot_ts=*"))[0] / "store"
    code = ("import sys; from jobs import cli; rc = cli.main(sys.argv[1:]); "
            "print(rc, sorted({m.split('.')[0] for m in sys.modules} "
            "& {'pyspark', 'pysail', 'delta', 'deltalake', 'pandas', 'scipy'}), "
            "__import__('pyarrow').default_memory_pool().backend_name, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code, "export", "--store", str(store), "--broker", "broker-a",
                        "--cluster", "C", "--to", str(tmp_path / "to"), "--state", str(tmp_path / "state"),
                        "--snapshot-ts", "20260105T000400Z"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.stderr.splitlines()[-1] == "0 [] system", p.stderr[-2000:]
    assert json.loads(p.stdout)["counts"]["message"] > 0


def test_an_exports_messages_are_files_of_silver_messages_beside_its_records_parts(tmp_path: pathlib.Path) -> None:
    """Export layout 2: a part's messages are a file of silver/messages (its columns and types, one broker, in
    commitlog order, with the Parquet statistics the lake's log is given), which the ingest adopts as it is; the
    records part keeps the other kinds. Two exports of blocked-head's first and last store copies."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs import simulate
    from jobs.export import layout, store
    from jobs.lake import _delta
    from schemas import messages

    simulate.run("blocked-head", str(tmp_path / "copies"), seed=7)
    history = sorted((tmp_path / "copies").glob("cluster=*/broker=*/snapshot_ts=*"))
    to = tmp_path / "to"
    made = [store.export_store(str(folder / "store"), str(to), cluster="C", broker="broker-a",
                               snapshot_ts=dt.datetime(2026, 1, 5, i + 1, tzinfo=UTC),
                               state_dir=str(tmp_path / "state"), say=lambda _: None)
            for i, folder in enumerate([history[0], history[-1]])]
    total = 0
    for m in made:
        assert m["layout"] == layout.LAYOUT == "rmq-recon-export/2"
        folder = to / "cluster=C/broker=broker-a" / f"snapshot_ts={m['snapshot_ts'].replace('-', '').replace(':', '')}"
        # the ingest's typed reader names every field the exporter writes, and reads its queue files as written
        raw = (folder / layout.MANIFEST).read_bytes()
        written, read = json.loads(raw), layout.read_manifest(raw)
        assert set(written) == set(read) == set(layout.Manifest.__struct_fields__)
        assert [[q.rel, q.size, q.mtime, q.id, [list(p) for p in q.pieces]] for q in read["queues"]] == [
            [q["rel"], q["size"], q["mtime"], q["id"], q["pieces"]] for q in written["queues"]] != []
        named = [p for p in m["parts"] if "messages" in p]
        assert sum(p["messages"]["rows"] for p in named) == m["counts"]["message"] > 0
        for p in m["parts"]:
            kinds = pq.read_table(folder / p["name"], columns=["kind"]).column("kind").to_pylist()
            assert "message" not in kinds and p["kinds"]["message" if "messages" in p else "progress"] > 0
        for p in named:
            assert p["messages"]["name"] == layout.messages_name(p["lo"], p["hi"])
            f = pq.ParquetFile(folder / p["messages"]["name"])
            assert f.schema_arrow.remove_metadata() == _delta._arrow_schema(messages.TABLE)
            t = f.read()
            assert set(t.column("cluster").to_pylist()) == {"C"} and set(t.column("broker").to_pylist()) == {"broker-a"}
            key = list(zip(t.column("physical_offset").to_pylist(), t.column("queue_offset").to_pylist()))
            assert key == sorted(key) and len(set(key)) == len(key) and p["lo"] <= key[0][0] <= key[-1][0] < p["hi"]
            g = f.metadata.row_group(0).column(2).statistics  # physical_offset
            assert (g.has_min_max, g.min, g.null_count) == (True, key[0][0], 0)
            assert pa.types.is_map(t.schema.field("properties").type)
            total += t.num_rows
    # every record of the last store copy, once, over the two exports
    assert total == 2641


def test_the_loop_exports_a_growing_store_at_each_tick_and_goes_on_after_a_failed_run(tmp_path: pathlib.Path) -> None:
    """``--every``: one process, a run at each multiple of the interval, named by its tick; a failed run is one
    line and the next tick exports what it missed; a refused option stops the loop."""
    import shutil

    from jobs import simulate
    from jobs.export import loop, store
    from jobs.problems import UsageError

    simulate.run("blocked-head", str(tmp_path / "copies"), seed=7)
    history = sorted((tmp_path / "copies").glob("cluster=*/broker=*/snapshot_ts=*"))
    live, to = tmp_path / "store", tmp_path / "to"
    now = [dt.datetime(2026, 12, 3, 10, 7, 30, tzinfo=UTC).timestamp()]
    lines: list[str] = []

    def sleep(s: float) -> None:  # the broker writes while the loop sleeps: the next store copy
        now[0] += s
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(history[len(lines) - 1] / "store", live)  # before the k-th run: the k-th copy

    def export_at(at: dt.datetime) -> None:
        if at.minute == 30:
            raise OSError("s3://landing: connection reset")
        store.export_store(str(live), str(to), cluster="C", broker="broker-a", snapshot_ts=at,
                           state_dir=str(tmp_path / "state"), say=lambda _: None)
        now[0] += 20  # the run takes 20 s

    assert loop.run_every(export_at, loop.parse_every("15m"), say=lines.append, clock=lambda: now[0], sleep=sleep,
                          runs=4) == 1
    assert [re.sub(r"\(\d+\.\d\d s CPU\)", "(CPU)", ln) for ln in lines] == [
        "export: every 900 s, the first at 2026-12-03T10:15:00Z",
        "export 2026-12-03T10:15:00Z: done (CPU)",
        "export 2026-12-03T10:30:00Z: failed (OSError: s3://landing: connection reset); the next run exports what it "
        "missed",
        "export 2026-12-03T10:45:00Z: done (CPU)",
        "export 2026-12-03T11:00:00Z: done (CPU)"]
    folders = sorted(p.name for p in (to / "cluster=C" / "broker=broker-a").iterdir())
    assert folders == ["snapshot_ts=20261203T101500Z", "snapshot_ts=20261203T104500Z", "snapshot_ts=20261203T110000Z"]
    # every record of the last store copy was exported once, over the three runs
    manifests = [json.loads((to / "cluster=C" / "broker=broker-a" / f / "store-export/manifest.json").read_text())
                 for f in folders]
    assert sum(m["counts"].get("message", 0) for m in manifests) == 2641
    with pytest.raises(UsageError, match="--every '30s': expected an interval of at least 60 s"):
        loop.parse_every("30s")

    def refused(at: dt.datetime) -> None:
        raise UsageError("--store /gone: no commitlog/ or config/ folder")

    with pytest.raises(UsageError):
        loop.run_every(refused, 60, say=lambda _: None, clock=lambda: now[0], sleep=lambda s: None)


def test_small_batches_are_written_together_as_one_row_group(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A run gives a progress row for each segment, exported before or not: written a row group each, they cost a
    small broker's exporter two thirds of its CPU (stop 55). Held until GROUP_ROWS, in order, then written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.export import store
    from jobs.ingest import decode_tasks

    def batch(first: int, n: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"kind": "progress", "unit": first + i} for i in range(n)],
                                          schema=decode_tasks.OUTPUT_ARROW)

    monkeypatch.setattr(store, "GROUP_ROWS", 1_000)
    parts = store._Parts(tmp_path)
    for i in range(50):
        parts._records.write(batch(i, 1))
    parts._records.write(batch(50, 1500))  # past GROUP_ROWS: written with the 50 held before it
    parts._records.write(batch(1550, 3))
    parts._lo, parts._hi = 0, 10
    parts.close()
    [done] = parts.done
    f = pq.ParquetFile(tmp_path / done["name"])
    assert (done["rows"], f.metadata.num_row_groups, f.metadata.row_group(0).num_rows) == (1553, 2, 1550)
    assert f.read(columns=["unit"]).column("unit").to_pylist() == list(range(1553))
    # each run of small batches becomes one, in order (the writer pays per batch and column)
    got = store._coalesced([batch(0, 1), batch(1, 1), batch(2, 2000), batch(2002, 1), batch(2003, 1500),
                            batch(3503, 1), batch(3504, 2)])
    assert [b.num_rows for b in got] == [2, 2000, 1, 1500, 3]
    assert pa.Table.from_batches(got).column("unit").to_pylist() == list(range(3506))
    assert store._coalesced([]) == []
