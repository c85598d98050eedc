"""The local stack's start-up on a busy or nearly full machine: the failures CI met, kept from coming back."""
from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    out = subprocess.run([sys.executable, str(INFRA / "freeport.py"), "40"], capture_output=True, text=True,
                         check=True).stdout.split()
    ports = [int(p) for p in out]
    assert len(ports) == 40 and len(set(ports)) == 40
    assert all(20000 <= p < low for p in ports)
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


@pytest.mark.integration
def test_rgw_starts_on_a_disk_with_under_5_percent_free(tmp_path: pathlib.Path) -> None:
    """The Ceph monitor exits when its data disk has under 5% free; CI's RGW start died of it (stop 53)."""
    if shutil.which("ceph-mon") is None:
        pytest.fail("ceph-mon not found: run infra/install-debian-deps.sh")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    env = dict(os.environ, RGW_DIR=str(disk / f"rgw-{uuid.uuid4().hex[:6]}"))
    try:
        subprocess.run(["fallocate", "-l", "385m", str(disk / "fill")], check=True)
        usage = shutil.disk_usage(disk)
        assert usage.free / usage.total < 0.05
        started = subprocess.run(["bash", str(INFRA / "ceph-rgw.sh"), "start"], env=env, capture_output=True,
                                 text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
        assert started.returncode == 0, started.stderr
        assert "start attempt" not in started.stderr   # up at the first attempt, not by retrying
        assert "export AWS_ENDPOINT_URL=http://127.0.0.1:" in started.stdout
    finally:
        subprocess.run(["bash", str(INFRA / "ceph-rgw.sh"), "stop"], env=env, capture_output=True, timeout=120,
                       check=False)
        subprocess.run(["umount", str(disk)], check=False)
