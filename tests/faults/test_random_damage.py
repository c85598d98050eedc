"""Random damage to a landing zone never fails the ingest: it is quarantined and the rest lands.

Each case copies ``blocked-head`` (one broker, four snapshots), damages 1-3 of its files or names at random with a
fixed seed (content: cut, bytes flipped or zeroed, random bytes, emptied, deleted, grown; names: a segment named
beyond a Java long, odd files and folders, a folder where a file belongs, dangling links), and ingests it. The
ingest must complete; every snapshot folder that is still well formed must land in bronze/snapshots. Fuzzing this
way found two ways one damaged file failed the whole ingest: a segment named 99999999999999999999 (tests in
tests/jobs/test_landing.py) and a topic or property that is not UTF-8 (seed 47; tests/jobs/test_commitlog.py).
"""
from __future__ import annotations

import os
import pathlib
import random
import shutil
from typing import Any

import pytest

from jobs import simulate
from jobs.ingest import ingest

pytestmark = pytest.mark.integration

NAMES = ["99999999999999999999", "09223372036854775808", "0" * 19, "\u0660" * 20, "a b", ".hidden", "lock",
         "checkpoint", "config", "commitlog", "consumequeue", "_SUCCESS", "offsets.json", "consumerOffset.json",
         "snapshot_ts=2026", "x" * 200]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    src = tmp_path_factory.mktemp("damage") / "landing"
    simulate.run("blocked-head", str(src), seed=7, scale=1)
    return src


def _damage(land: pathlib.Path, rng: random.Random) -> list[tuple[str, str]]:
    done: list[tuple[str, str]] = []
    want = rng.randint(1, 3)
    for _ in range(50):
        if len(done) == want:
            break
        items = sorted(p for p in land.rglob("*") if "_truth" not in p.parts and not p.is_symlink())
        p = rng.choice(items)
        folder = p if p.is_dir() else p.parent
        op, name = rng.choice(["cut", "flip", "zero", "random", "empty", "delete", "grow", "rename", "add-file",
                               "add-dir", "file-as-dir", "dangling"]), rng.choice(NAMES)
        if p.is_file() and op in ("cut", "flip", "zero", "random", "empty", "grow"):
            data = bytearray(p.read_bytes())
            if op == "cut":
                data = data[:rng.randint(0, max(len(data) - 1, 0))]
            elif op == "flip" and data:
                for _ in range(rng.randint(1, 20)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == "zero" and data:
                at = rng.randrange(len(data))
                data[at:at + 4096] = bytes(len(data[at:at + 4096]))
            elif op == "random":
                data = bytearray(rng.randbytes(rng.randint(0, 5000)))
            elif op == "empty":
                data = bytearray()
            elif op == "grow":
                at = rng.randint(0, len(data))
                data[at:at] = rng.randbytes(rng.randint(1, 64))
            p.write_bytes(bytes(data))
        elif op == "delete" and p.is_file():
            p.unlink()
        elif op == "rename" and p != land and not p.with_name(name).exists():
            p.rename(p.with_name(name))
        elif op == "add-file" and not (folder / name).exists():
            (folder / name).write_bytes(rng.randbytes(rng.randint(0, 300)))
        elif op == "add-dir" and not (folder / name).exists():
            (folder / name).mkdir()
            (folder / name / rng.choice(NAMES)).write_bytes(b"{}")
        elif op == "file-as-dir" and p.is_dir() and p != land:
            shutil.rmtree(p)
            p.write_bytes(b"x")
        elif op == "dangling" and not (folder / name).exists():
            os.symlink(folder / "nowhere", folder / name)
        else:
            continue
        done.append((op, str(p.relative_to(land))))
    return done


def _well_formed(land: pathlib.Path) -> set[str]:
    """The broker snapshot folders with a valid time that hold anything: each is taken (its bad files quarantined)."""
    import datetime as dt

    out = set()
    for snap in land.glob("cluster=*/broker=*/snapshot_ts=*"):
        try:
            dt.datetime.strptime(snap.name.split("=", 1)[1], "%Y%m%dT%H%M%SZ")
        except ValueError:
            continue
        if snap.is_dir() and not snap.is_symlink() and any(p.is_file() or p.is_symlink() for p in snap.rglob("*")):
            out.add(str(snap.relative_to(land)))
    return out


# 47 damages a topic's bytes (outside the body CRC): it failed the whole load before jobs.formats.commitlog._utf8.
@pytest.mark.parametrize("seed", [*range(10), 47])
def test_a_randomly_damaged_landing_zone_is_ingested_and_its_good_snapshots_land(
        seed: int, source: pathlib.Path, tmp_path: pathlib.Path) -> None:
    from jobs.lake import _delta
    from schemas import snapshots

    land = tmp_path / "landing"
    shutil.copytree(source, land, copy_function=shutil.copy2)
    done = _damage(land, random.Random(seed))
    assert done
    result: dict[str, Any] = ingest.run(str(land), str(tmp_path / "lake"), settle_s=0)
    landed = set(_delta.read_pandas(str(tmp_path / "lake"), snapshots.TABLE)["folder"])
    assert landed == _well_formed(land), done
    assert result["snapshots"] == len(landed)
