"""A landing zone made of the real RocketMQ files under tests/fixtures/real (the first demo's input).

Each real store becomes one broker of cluster ``DefaultCluster`` in the §3 layout, so the pipeline reads
exactly the bytes real brokers and clients wrote: a 3.x store (humphery755), a 4.x store with a broadcast
client's offsets.json (yunai), a 5.x store (guoming) and a unit-test store with commitlog and consumequeue
segments (ericpan).
"""
from __future__ import annotations

import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
SNAPSHOT = "20260105T000000Z"

# (broker name, source folder inside REAL, what to copy into store/)
BROKERS = [
    ("broker-a", "humphery755-store/store", ["config"]),
    ("broker-b", "yunai-broadcast-offsets/store", ["config"]),
    ("broker-c", "guoming-5x-store/data/broker/store", ["config"]),
    ("broker-ut", "ericpan-unit-test-store/store/unit_test_store", ["commitlog", "consumequeue"]),
]
CLIENTS = "yunai-broadcast-offsets/.rocketmq_offsets"


def build(out: str | pathlib.Path, *, cluster: str = "DefaultCluster", snapshot: str = SNAPSHOT) -> pathlib.Path:
    """Write the landing zone to ``out`` (replacing it); returns its path."""
    out = pathlib.Path(out)
    shutil.rmtree(out, ignore_errors=True)
    for broker, src, parts in BROKERS:
        store = out / f"cluster={cluster}" / f"broker={broker}" / f"snapshot_ts={snapshot}" / "store"
        for part in parts:
            shutil.copytree(REAL / src / part, store / part)
    shutil.copytree(REAL / CLIENTS, out / f"cluster={cluster}" / "clients" / f"snapshot_ts={snapshot}")
    return out
