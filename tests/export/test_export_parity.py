"""Issue 37: a broker history exported on its host (``rmq-recon export``) lands the rows its store copies land.

``mixed`` seed 1 (every store type the simulator writes): each broker's ``store/`` copies are replayed in time order
through the exporter (one host state per broker, as on the host), each clients folder through the clients export,
into a second landing zone. Its lake must hold the silver rows, trace records and quarantine of the store copies'
lake (``conftest.mixed_world``), and a reconcile of it must write the same reports. Each of spec §7's scenarios
likewise.
"""
from __future__ import annotations

import datetime as dt
import pathlib
import re
import shutil

import pytest

from faults.test_kill_rerun import lake_rows
from jobs.simulate import SCENARIO_NAMES

UTC = dt.timezone.utc
COMPARED = ("silver/", "bronze/quarantine", "bronze/trace_records")


def folders(landing: pathlib.Path) -> list[tuple[str, str, dt.datetime, pathlib.Path]]:
    """(cluster, broker or "" for clients, time, folder) of the landing zone's snapshot folders, oldest first."""
    out = []
    for p in landing.glob("cluster=*/*/snapshot_ts=*"):
        m = re.fullmatch(r"snapshot_ts=(\d{8}T\d{6}Z)", p.name)
        if not m:
            continue
        ts = dt.datetime.strptime(m[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        broker = p.parent.name.removeprefix("broker=") if p.parent.name != "clients" else ""
        out.append((p.parent.parent.name.removeprefix("cluster="), broker, ts, p))
    return sorted(out, key=lambda x: (x[2], x[0], x[1]))


def export_history(landing: pathlib.Path, to: pathlib.Path, state: pathlib.Path, *, until: dt.datetime | None = None,
                   since: dt.datetime | None = None) -> int:
    """Replay the store copies in ``[since, until)`` through the exporters; the number of folders written."""
    from jobs.export import clients, store

    n = 0
    for cluster, broker, ts, folder in folders(landing):
        if (until and ts >= until) or (since and ts < since):
            continue
        if broker:
            store.export_store(str(folder / "store"), str(to), cluster=cluster, broker=broker, snapshot_ts=ts,
                               state_dir=str(state), say=lambda _: None)
        else:
            clients.export_clients(str(folder), str(to), cluster=cluster, snapshot_ts=ts, say=lambda _: None)
        n += 1
    return n


def as_layout_1(exported: pathlib.Path) -> int:
    """Rewrite the export folders below ``exported`` as layout 1 wrote them (before stop 70): each messages file's
    rows among its records part's, as rows of kind ``message``; the number of messages files folded in."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.ingest import decode_tasks

    n = 0
    for manifest in exported.glob("**/snapshot_ts=*/store-export/manifest.json"):
        folder = manifest.parent.parent
        doc = json.loads(manifest.read_text())
        for part in doc["parts"]:
            named = part.pop("messages", None)
            if not named:
                continue
            msgs = pq.read_table(folder / named["name"])
            rows = pa.table({f.name: msgs.column(f.name) if f.name in msgs.column_names else
                             pa.array(["message"] * len(msgs), f.type) if f.name == "kind" else
                             pa.nulls(len(msgs), f.type) for f in decode_tasks.OUTPUT_ARROW},
                            schema=decode_tasks.OUTPUT_ARROW)
            pq.write_table(pa.concat_tables([rows, pq.read_table(folder / part["name"])]), folder / part["name"])
            (folder / named["name"]).unlink()
            n += 1
        doc["layout"] = "rmq-recon-export/1"
        manifest.write_text(json.dumps(doc))
    return n


def compared(lake: pathlib.Path) -> dict[str, list[tuple]]:
    return {k: v for k, v in lake_rows(lake).items() if k.startswith(COMPARED)}


def reports(lake: pathlib.Path, out: pathlib.Path) -> dict[str, str]:
    """The §5 report files (CSV) of a reconcile of ``lake``."""
    from jobs.reconcile import reconcile

    reconcile.run(str(lake), str(out), run_id="parity")
    return {p.name: p.read_text() for p in sorted((out / "parity").glob("*.csv"))}


def assert_same_rows(want: dict[str, list[tuple]], got: dict[str, list[tuple]], label: str = "", *,
                     filled: tuple[str, ...] | None = None) -> None:
    """The same tables, each with the same rows; ``filled`` (default: every table) hold rows, so the comparison
    covered something."""
    assert sorted(got) == sorted(want), label
    for table in want:
        assert got[table] == want[table], (label, table)
    assert [t for t in (want if filled is None else filled) if not want[t]] == [], label


def assert_same_reports(copies: pathlib.Path, exports: pathlib.Path, out: pathlib.Path) -> None:
    """A reconcile of each lake writes the same report CSVs."""
    want, got = reports(copies, out / "r-copies"), reports(exports, out / "r-exports")
    assert sorted(want) == sorted(got) and len(want) >= 4
    for name in want:
        assert got[name] == want[name], name


@pytest.mark.integration
@pytest.mark.compute  # no service: in the computing process (make test), beside the S3 runs of the other
def test_exports_of_a_store_history_land_the_rows_of_its_store_copies(
        tmp_path: pathlib.Path, mixed_world: pathlib.Path) -> None:
    from jobs.ingest import ingest

    landing = mixed_world / "landing"
    times = sorted({ts for _, _, ts, _ in folders(landing)})
    half = times[len(times) // 2]
    exported = tmp_path / "exported"
    n = export_history(landing, exported, tmp_path / "state", until=half)
    ingest.run(str(exported), str(tmp_path / "lake"))  # two runs: the lake's segment ledger carries on
    n += export_history(landing, exported, tmp_path / "state", since=half)
    ingest.run(str(exported), str(tmp_path / "lake"))
    assert n == len(folders(landing))
    assert_same_rows(compared(mixed_world / "lake"), compared(tmp_path / "lake"))
    shutil.copytree(mixed_world / "lake", tmp_path / "copies")  # (the session's lake is read only)
    assert_same_reports(tmp_path / "copies", tmp_path / "lake", tmp_path)


@pytest.mark.integration
@pytest.mark.compute  # no service: make test runs it in the computing process, which finishes sooner
def test_every_scenario_exported_lands_the_rows_and_reports_of_its_store_copies(tmp_path: pathlib.Path) -> None:
    """Spec §7's scenarios (seed 7), each under a cluster of its name in one landing zone (an ingest and a reconcile
    per layout, not one per scenario: 265 s -> about 90 s), replayed through the exporters in one go and ingested in
    one run. A row names its cluster, so a difference names its scenario. Every other scenario's exports are
    rewritten as export layout 1 wrote them (the messages among the records parts' rows): the ingest reads both."""
    from jobs import simulate
    from jobs.ingest import ingest

    scenarios = [n for n in SCENARIO_NAMES if n != "mixed"]
    landing = tmp_path / "landing"
    landing.mkdir()
    for name in scenarios:
        simulate.run(name, str(tmp_path / "one"), seed=7)
        [cluster] = (tmp_path / "one").glob("cluster=*")
        cluster.rename(landing / f"cluster={name}")
        shutil.rmtree(tmp_path / "one")
    export_history(landing, tmp_path / "exported", tmp_path / "state")
    assert sum(as_layout_1(tmp_path / "exported" / f"cluster={name}") > 0 for name in scenarios[::2]) == len(
        scenarios[::2])
    ingest.run(str(landing), str(tmp_path / "copies"))
    ingest.run(str(tmp_path / "exported"), str(tmp_path / "exports"))
    want = compared(tmp_path / "copies")
    # a scenario need not fill every table (no POP, no trace); every scenario's messages are there
    assert_same_rows(want, compared(tmp_path / "exports"), filled=("silver/messages",))
    assert {r[0] for r in want["silver/messages"]} == {repr(n) for n in scenarios}
    assert_same_reports(tmp_path / "copies", tmp_path / "exports", tmp_path)


@pytest.mark.integration
@pytest.mark.compute  # no service
def test_a_broker_moving_from_store_copies_to_exports_lands_the_rows_of_its_store_copies(
        tmp_path: pathlib.Path) -> None:
    """``pop`` seed 7 (messages, trace records, POP checkpoints and acks; 8 snapshots): its first half as store
    copies, its second half exported (the host's first export decodes its retained segments from their start:
    records the copies gave are staged again); taken in one ingest run (the run's two copies of a record: the first
    is kept) and in two. (On ``mixed``, broker-a moving: 111 s; here about 30 s.)"""
    import os

    from jobs import simulate
    from jobs.export import store
    from jobs.ingest import ingest

    landing = tmp_path / "copies"
    simulate.run("pop", str(landing), seed=7)
    history = folders(landing)
    times = sorted({ts for _, b, ts, _ in history if b})
    switch = times[len(times) // 2]
    both, copies = tmp_path / "landing", tmp_path / "copies-only"
    first = None
    for cluster, broker, ts, folder in history:
        if broker and ts >= switch:
            m = store.export_store(str(folder / "store"), str(both), cluster=cluster, broker=broker, snapshot_ts=ts,
                                   state_dir=str(tmp_path / "state"), say=lambda _: None)
            first = first or m
        else:
            for to in (both, copies):
                shutil.copytree(folder, to / folder.relative_to(landing), copy_function=os.link)
    # the first export read the retained segments from their start: the copies before it hold those records too
    assert min(p["lo"] for p in first["parts"]) == min(s["start"] for s in first["segments"])
    assert first["counts"]["message"] > 0
    ingest.run(str(landing), str(tmp_path / "all-copies"))
    want = compared(tmp_path / "all-copies")
    ingest.run(str(both), str(tmp_path / "one-run"))
    ingest.run(str(copies), str(tmp_path / "two-runs"))  # two runs: the copies, then the exports after them
    ingest.run(str(both), str(tmp_path / "two-runs"))
    for lake in ("one-run", "two-runs"):
        assert_same_rows(want, compared(tmp_path / lake), lake)
