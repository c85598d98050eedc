"""Issue 38: `make demo` printed nothing for 184 s while it installed, 70 s while it simulated, 146 s during the
snapshot DAG and 89 s during the reconcile DAG. No step may stay silent for more than 10 s: the demo's own steps
(a real run through Airflow, timed line by line) and the install's heartbeat wrapper."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _timed_lines(args: list[str], env: dict[str, str]) -> tuple[int, list[tuple[float, str]]]:
    """Run a command; each line of its output (stdout and stderr) with the time it arrived."""
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    start = time.monotonic()
    lines = [(0.0, "")]
    assert p.stdout is not None
    for line in p.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
    rc = p.wait(timeout=600)
    lines.append((time.monotonic() - start, "<exit>"))
    return rc, lines


def _longest_gap(lines: list[tuple[float, str]]) -> tuple[float, str]:
    return max(((b[0] - a[0], b[1]) for a, b in zip(lines, lines[1:])), key=lambda g: g[0])


@pytest.mark.integration
def test_the_demo_prints_progress_at_least_every_10_seconds(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(ROOT)}
    rc, lines = _timed_lines([sys.executable, "-m", "jobs.cli", "demo", "--scenario", "blocked-head", "--workdir",
                              str(tmp_path / "demo")], env)
    text = "\n".join(line for _, line in lines)
    assert rc == 0, text[-3000:]
    gap, after = _longest_gap(lines)
    assert gap <= 10.0, f"{gap:.1f} s without a line before {after!r}"
    # the DAG tasks' own progress shows while they run, and the terminal speaks the dashboard's vocabulary
    assert "  ingest: done in " in text and "  reconcile: wrote " in text
    assert "GID_recon                          WARNING  OK      100 duplicated" in text
    assert (tmp_path / "airflow" / "rmq-recon.env").read_text() == (
        f"RMQ_RECON_LANDING={tmp_path / 'demo' / 'landing'}\nRMQ_RECON_LAKE={tmp_path / 'demo' / 'lake'}\n"
        f"RMQ_RECON_REPORTS={tmp_path / 'demo' / 'reports'}\n")


def test_the_install_steps_heartbeat_keeps_a_quiet_command_from_being_silent() -> None:
    rc, lines = _timed_lines(["infra/with-heartbeat.sh", "installing", "sleep", "9"], dict(os.environ))
    # every 8 s: eight 1-s sleeps, each a process of its own, so 9 s by the clock on a loaded machine (2026-12-03)
    beats = [line for _, line in lines[1:-1]]
    assert (rc, beats) in [(0, ["installing: still running (8 s)"]), (0, ["installing: still running (9 s)"])], beats
    assert _longest_gap(lines)[0] <= 10.0
    rc, _ = _timed_lines(["infra/with-heartbeat.sh", "failing", "false"], dict(os.environ))
    assert rc == 1
