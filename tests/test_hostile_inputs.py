"""Issue 34: names, paths and values from the landing zone are untrusted. A landing zone with every hostile input of
the audit (a compromised broker or consumer host, a careless sync job) lands the good data exactly as the clean one,
quarantines each bad input by name, reads nothing outside the landing root, and reports none of the hostile names.
The operator's run id cannot name a folder outside the report root. Real files, the real pipeline.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from jobs.formats import fastjson
from jobs.lake._delta import arrow_filesystem

ROOT = pathlib.Path(__file__).resolve().parents[1]
BROKER = "cluster=DefaultCluster/broker=broker-a"
SECRET = "root:x:0:0:root:/root:/bin/bash\n"
SEG0 = "store/commitlog/00000000000000000000"
CQ0 = "store/consumequeue/TopicTest/0/00000000000000000000"
HOSTILE_GROUP = "g\ntouch /tmp/pwned\n#"


def _snap(root: pathlib.Path, ts: str) -> pathlib.Path:
    return root / BROKER / f"snapshot_ts={ts}"


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """blocked-head (broker-a, snapshots 00:04, 00:07, 00:10, 00:13) ingested as it is and with every hostile input."""
    from jobs import simulate
    from jobs.ingest import ingest

    root = tmp_path_factory.mktemp("hostile")
    clean, bad = root / "clean", root / "bad"
    simulate.run("blocked-head", str(clean), seed=7)
    shutil.copytree(clean, bad)
    (root / "secret").write_text(SECRET)
    # links out of the landing zone: a config file (its .bak is used), a segment, a consume queue file
    (_snap(bad, "20260105T000700Z") / "store/config/topics.json").unlink()
    os.symlink(root / "secret", _snap(bad, "20260105T000700Z") / "store/config/topics.json")
    os.symlink(root / "secret", _snap(bad, "20260105T001000Z") / "store/commitlog/00000000000009999999")
    os.symlink(root / "secret", _snap(bad, "20260105T001000Z") / "store/consumequeue/TopicTest/0/00000000000006000000")
    # snapshot times no snapshot was taken at, and a second spelling of 00:13
    for ts, like in (("99991231T235959Z", "20260105T001300Z"), ("00010101T000000Z", "20260105T000400Z"),
                     ("20260105T0013Z", "20260105T001300Z")):
        shutil.copytree(_snap(bad, like), _snap(bad, ts))
    # '..' as a cluster and as a broker folder name
    shutil.copytree(_snap(bad, "20260105T001300Z"), bad / "cluster=../broker=broker-a/snapshot_ts=20260105T001300Z")
    shutil.copytree(_snap(bad, "20260105T001300Z"), bad / "cluster=DefaultCluster/broker=../snapshot_ts=20260105T001300Z")
    # a 0-byte consume queue file in the newest snapshot (its queue has entries in every other one)
    (_snap(bad, "20260105T001300Z") / CQ0).write_bytes(b"")
    # the oldest copy of segment 0 cut short, its last 150 bytes damaged (the later copies are intact)
    seg = _snap(bad, "20260105T000400Z") / SEG0
    data = bytearray(seg.read_bytes()[:131030])
    data[-150:] = b"\xab" * 150
    seg.write_bytes(bytes(data))
    # names RocketMQ never writes, in the newest consumerOffset.json
    co = _snap(bad, "20260105T001300Z") / "store/config/consumerOffset.json"
    doc = fastjson.loads(co.read_text())
    doc["offsetTable"][f"TopicTest@{HOSTILE_GROUP}"] = {0: 5}
    doc["offsetTable"]['=HYPERLINK("http://x")@GID_recon'] = {0: 7}
    co.write_text(fastjson.dumps(doc))
    # the oldest copy alone first, as a schedule meets it, then the rest
    for name, world in (("clean", clean), ("bad", bad)):
        ingest.run(str(world), str(root / f"lake_{name}"), snapshot_glob="*T000400Z")
        ingest.run(str(world), str(root / f"lake_{name}"))
    return {"root": root, "clean": root / "lake_clean", "bad": root / "lake_bad", "landing": bad}


def _table(lake: pathlib.Path, name: str, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    from deltalake import DeltaTable

    df = DeltaTable(str(lake / name)).to_pandas(filesystem=arrow_filesystem(str(lake / name)))
    df = df.drop(columns=[c for c in ("ingested_at", "detected_at", *drop) if c in df.columns])
    return df.sort_values(list(df.columns[:6])).reset_index(drop=True)


def test_every_good_record_and_offset_lands_as_from_the_clean_landing_zone(worlds) -> None:  # noqa: ANN001
    held = ("segment", "first_snapshot_ts")
    clean, bad = (_table(worlds[w], "silver/messages") for w in ("clean", "bad"))
    assert len(clean) == 2641
    pd.testing.assert_frame_equal(bad.drop(columns=list(held)), clean.drop(columns=list(held)))
    # the records the cut copy lacked were first held by the next copy, 00:07 (as-of runs see what snapshots held)
    later = bad["first_snapshot_ts"] != clean["first_snapshot_ts"]
    assert sorted(bad[later]["physical_offset"]) == sorted(
        clean[(clean["physical_offset"] >= 130858) & (clean["physical_offset"] < 262144)
              & (clean["first_snapshot_ts"] == pd.Timestamp("2026-01-05T00:04:00Z"))]["physical_offset"])
    assert set(bad[later]["first_snapshot_ts"]) == {pd.Timestamp("2026-01-05T00:07:00Z")}
    pd.testing.assert_frame_equal(_table(worlds["bad"], "bronze/trace_records", ("first_snapshot_ts",)),
                                  _table(worlds["clean"], "bronze/trace_records", ("first_snapshot_ts",)))
    pd.testing.assert_frame_equal(_table(worlds["bad"], "silver/consumer_offsets"),
                                  _table(worlds["clean"], "silver/consumer_offsets"))
    # topics.json of 00:07 was a link: its .bak (the broker's previous version) was loaded instead
    clean, bad = (_table(worlds[w], "silver/topic_configs") for w in ("clean", "bad"))
    at07 = pd.Timestamp("2026-01-05T00:07:00Z")
    pd.testing.assert_frame_equal(bad[bad["snapshot_ts"] != at07].reset_index(drop=True),
                                  clean[clean["snapshot_ts"] != at07].reset_index(drop=True))
    bak = fastjson.loads((_snap(worlds["landing"], "20260105T000700Z") / "store/config/topics.json.bak").read_text())
    assert sorted(bad[bad["snapshot_ts"] == at07]["topic"]) == sorted(bak["topicConfigTable"])
    assert set(bad[bad["snapshot_ts"] == at07]["used_backup"]) == {True}
    taken = _table(worlds["bad"], "bronze/snapshots")
    assert sorted(taken["folder"]) == sorted(_table(worlds["clean"], "bronze/snapshots")["folder"])


def test_a_zero_byte_consume_queue_file_gives_no_bounds_not_an_empty_queue(worlds) -> None:  # noqa: ANN001
    clean, bad = (_table(worlds[w], "silver/queue_bounds") for w in ("clean", "bad"))
    newest = (clean["topic"] == "TopicTest") & (clean["queue_id"] == 0) & \
        (clean["snapshot_ts"] == pd.Timestamp("2026-01-05T00:13:00Z"))
    assert clean[newest][["min_offset", "max_offset"]].values.tolist() == [[0, 2201]]
    unknown = clean.assign(min_offset=clean["min_offset"].where(~newest), max_offset=clean["max_offset"].where(~newest))
    pd.testing.assert_frame_equal(bad, unknown, check_dtype=False)


def test_each_bad_input_is_quarantined_by_name_and_none_is_read(worlds) -> None:  # noqa: ANN001
    q = _table(worlds["bad"], "bronze/quarantine")
    rows = sorted((r.source_path, r.position, r.reason) for r in q.itertuples())
    s13, s10, s07, s04 = (f"{BROKER}/snapshot_ts={t}" for t in ("20260105T001300Z", "20260105T001000Z",
                                                                "20260105T000700Z", "20260105T000400Z"))
    link = ("not a regular file (a symbolic link, a device or a pipe): not read; the sync job must copy the file, "
            "not link it")
    want = {
        (f"{s07}/store/config/topics.json", 0): link,
        (f"{s10}/store/commitlog/00000000000009999999", 0): link,
        (f"{s10}/store/consumequeue/TopicTest/0/00000000000006000000", 0): link,
        (f"{s13}/{CQ0}", 0): "consume queue file of TopicTest/0 is empty (0 bytes; the broker preallocates each file "
                             "at its full size): a truncated copy, so the queue's bounds are unknown in this "
                             "snapshot",
        (f"{s04}/{SEG0}", 130858): "record at byte 130858: size 188 runs past the end of the segment (131030 bytes); "
                                   "no valid record after it in this copy: the segment's next copy is read from here",
    }
    got = {(p, pos): reason for p, pos, reason in rows}
    for key, reason in want.items():
        assert got.pop(key) == reason
    # every file of the bad folders, one row each, with the folder's reason
    by_reason: dict[str, int] = {}
    for (p, pos), reason in list(got.items()):
        for folder, why in (
                ("cluster=DefaultCluster/broker=broker-a/snapshot_ts=99991231T235959Z/",
                 "snapshot folder 'snapshot_ts=99991231T235959Z' is more than a day after this host's clock"),
                ("cluster=DefaultCluster/broker=broker-a/snapshot_ts=00010101T000000Z/",
                 "snapshot folder 'snapshot_ts=00010101T000000Z' is before 2010-01-01: not a time"),
                ("cluster=DefaultCluster/broker=broker-a/snapshot_ts=20260105T0013Z/",
                 "malformed snapshot folder 'snapshot_ts=20260105T0013Z': expected snapshot_ts=YYYYMMDDTHHMMSSZ"),
                ("cluster=../", "cluster folder name 'cluster=..' is a relative path ('.' or '..'): this snapshot is "
                                "skipped"),
                ("cluster=DefaultCluster/broker=../", "broker folder name 'broker=..' is a relative path ('.' or "
                                                      "'..'): this snapshot is skipped")):
            if p.startswith(folder):
                assert pos == 0 and reason.startswith(why), (p, reason)
                by_reason[folder] = by_reason.get(folder, 0) + 1
                del got[(p, pos)]
    files_13 = len([p for p in _snap(worlds["landing"], "20260105T001300Z").rglob("*") if p.is_file()])
    assert by_reason == {"cluster=DefaultCluster/broker=broker-a/snapshot_ts=99991231T235959Z/": files_13,
                         "cluster=DefaultCluster/broker=broker-a/snapshot_ts=00010101T000000Z/":
                             len([p for p in _snap(worlds["landing"], "20260105T000400Z").rglob("*") if p.is_file()]),
                         "cluster=DefaultCluster/broker=broker-a/snapshot_ts=20260105T0013Z/": files_13,
                         "cluster=../": files_13, "cluster=DefaultCluster/broker=../": files_13}
    # the two hostile names of the newest consumerOffset.json, escaped in their reasons
    assert sorted(got.values()) == sorted(v for v in got.values() if "entry skipped" in v) and len(got) == 2
    assert any("g\\ntouch /tmp/pwned\\n#" in v for v in got.values())
    assert not any("\n" in r or "root:" in r for _, _, r in rows)


def test_the_reports_hold_no_hostile_name_and_correct_nothing_they_cannot_know(worlds, tmp_path) -> None:  # noqa: ANN001
    from jobs.reconcile import reconcile

    summary = reconcile.run(str(worlds["bad"]), str(tmp_path / "reports"))
    folder = pathlib.Path(summary["report_dir"])
    text = "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    assert "touch" not in text and "HYPERLINK" not in text and "root:" not in text
    # no correction from the 0-byte file's [0, 0] (it was three ABOVE_MAX rows and a corrected file setting 0)
    assert (folder / "offset_corrections.csv").read_text().count("\n") == 1
    assert not (folder / "corrected").exists()
    assert (folder / "duplicated_ranges.csv").read_text().splitlines()[1:] == [
        "DefaultCluster,GID_recon,,TopicTest,broker-a,0,2101,2200,100,TRACE,HEAD_BLOCKED"]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.parametrize("run_id", ["..", ".", "dashboard", ".hidden"])
def test_a_run_id_cannot_name_a_folder_outside_its_own(worlds, tmp_path, run_id: str) -> None:  # noqa: ANN001
    reports = tmp_path / "a" / "b" / "reports"
    (reports / "older-run").mkdir(parents=True)
    (tmp_path / "a" / "b" / "other").mkdir()
    p = _cli("reconcile", "--lake", str(worlds["bad"]), "--reports", str(reports), "--run-id", run_id)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"rmq-recon reconcile: error: --run-id {run_id}: a run id names its report folder <reports>/<run_id>; give "
        "letters, digits, '_', '-' or '.', not starting with '.' and not dashboard"]
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["other", "reports"]
    assert [p.name for p in reports.iterdir()] == ["older-run"]


def test_verbose_logs_never_print_the_access_key_and_a_failure_exits_2(tmp_path) -> None:  # noqa: ANN001
    key = "AKIAHOSTILETEST12345"
    p = _cli("-v", "ingest", "--landing", "s3://landing/x", "--lake", str(tmp_path / "lake"),
             env={"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "s3cr3t-value-for-test",
                  "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1", "AWS_REGION": "us-east-1"})
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("rmq-recon ingest: error: ")
    assert "Sending http request" in p.stderr or "Traceback" in p.stderr  # -v did show the detail
    assert key not in p.stderr + p.stdout and "s3cr3t-value-for-test" not in p.stderr + p.stdout
    assert "AKIA" not in p.stderr
