"""Issue 37: the exporter's host state across runs: a state written before stop 69 (its pending export held in the
state file itself) is finished or undone as before, and a state file changed behind a long-lived exporter's back is
read again, not taken from its memory."""
from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest

from export.test_export_kill import landing_content

UTC = dt.timezone.utc
TICKS = [dt.datetime(2026, 12, 3, 10, m, tzinfo=UTC) for m in (15, 30, 45)]


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    """The first three store copies of broker-a in ``blocked-head`` seed 7: a store that grows."""
    from jobs import simulate

    root = tmp_path_factory.mktemp("state-copies")
    simulate.run("blocked-head", str(root), seed=7)
    got = sorted(root.glob("cluster=*/broker=broker-a/snapshot_ts=*"))[:3]
    assert len(got) == 3
    return [p / "store" for p in got]


def _export(store: pathlib.Path, to: pathlib.Path, state_dir: pathlib.Path, at: dt.datetime,
            said: list[str] | None = None) -> dict:
    from jobs.export import store as export

    return export.export_store(str(store), str(to), cluster="C", broker="broker-a", snapshot_ts=at,
                               state_dir=str(state_dir), say=(said.append if said is not None else lambda _: None))


def _forget() -> None:
    from jobs.export import state

    state._KNOWN.clear()


@pytest.fixture(scope="module")
def clean(copies: list[pathlib.Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The landing zone and the state file after three exports in one process."""
    root = tmp_path_factory.mktemp("state-clean")
    for store, at in zip(copies, TICKS):
        _export(store, root / "to", root / "state", at)
    return landing_content(root / "to"), _state(root / "state")


def _state(state_dir: pathlib.Path) -> dict:
    """The committed state file but the landing folder it names (each test lands its own)."""
    doc = json.loads((state_dir / "cluster=C" / "broker=broker-a.json").read_text())
    assert doc.pop("folder").endswith("/to/cluster=C/broker=broker-a/snapshot_ts=20261203T104500Z")
    return doc


def _legacy(tmp_path: pathlib.Path, copies: list[pathlib.Path], *, complete: bool) -> tuple[pathlib.Path, list[str]]:
    """Export the first two copies, then write the state as a run before stop 69 left it when killed during the
    second export: the first export's state with the second's pending inline (its new state too when
    ``complete``: killed after the folder's marker). Then export the rest."""
    to, sd = tmp_path / "to", tmp_path / "state"
    _export(copies[0], to, sd, TICKS[0])
    path = sd / "cluster=C" / "broker=broker-a.json"
    first = json.loads(path.read_text())
    _export(copies[1], to, sd, TICKS[1])
    second = json.loads(path.read_text())
    folder = str(to / "cluster=C" / "broker=broker-a" / "snapshot_ts=20261203T103000Z")
    pending = {"folder": folder, "ts": TICKS[1].isoformat(), "segments": None, "queues": None}
    if complete:
        pending.update(segments=second["segments"], queues=second["queues"])
    path.write_text(json.dumps({**first, "pending": pending}))
    said: list[str] = []
    _forget()
    if not complete:  # the timer runs the killed export again
        _export(copies[1], to, sd, TICKS[1], said)
    _export(copies[2], to, sd, TICKS[2], said)
    return to, said


@pytest.mark.parametrize("complete, said_first", [
    (True, "ended after {folder} was complete: its state kept"),
    (False, "stopped before {folder} was complete: deleted, its range exported again")])
def test_a_state_from_before_holding_its_pending_export_is_finished_or_undone(
        complete: bool, said_first: str, copies: list, clean: tuple, tmp_path: pathlib.Path) -> None:
    to, said = _legacy(tmp_path, copies, complete=complete)
    folder = f"{to}/cluster=C/broker=broker-a/snapshot_ts=20261203T103000Z"
    assert said[0] == "export: the previous run " + said_first.format(folder=folder)
    assert landing_content(to) == clean[0]
    assert _state(tmp_path / "state") == clean[1]
    assert not (tmp_path / "state/cluster=C/broker=broker-a.pending.json").exists()


def test_a_state_file_replaced_or_moved_away_is_not_taken_from_memory(copies: list, clean: tuple,
                                                                      tmp_path: pathlib.Path) -> None:
    """Another process writes the state, or an operator moves it away (the exporter's own advice for an unreadable
    one): the next run in this process reads the file, not what it committed last."""
    sd = tmp_path / "state"
    path = sd / "cluster=C" / "broker=broker-a.json"
    _export(copies[0], tmp_path / "to", sd, TICKS[0])
    first = path.read_bytes()
    _export(copies[1], tmp_path / "to", sd, TICKS[1])
    counts = {rel.split("/")[2]: doc["counts"]["message"] for rel, doc in clean[0].items()
              if rel.endswith("manifest.json")}
    assert len(counts) == 3
    path.write_bytes(first)  # in place: the first export's state again
    m = _export(copies[2], tmp_path / "replaced", sd, TICKS[2])
    assert m["counts"]["message"] == counts["snapshot_ts=20261203T103000Z"] + counts["snapshot_ts=20261203T104500Z"]
    path.rename(tmp_path / "moved.json")  # moved away: the store is exported from its start
    m = _export(copies[2], tmp_path / "moved", sd, TICKS[2] + dt.timedelta(minutes=15))
    assert m["counts"]["message"] == sum(counts.values())
