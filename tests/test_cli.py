"""Issue 15: the command line refuses what cannot work with one line naming the option, the value and what to do,
and exit code 2, before it writes anything (spec §6: success is never reported on nothing). Real processes."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def cli(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_LOG": "warn,sail_common::actor=error"}
    p = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """blocked-head (snapshots 00:04-00:13 of 2026-01-05, group GID_recon) ingested."""
    from jobs import simulate
    from jobs.ingest import ingest

    root = tmp_path_factory.mktemp("cli")
    simulate.run("blocked-head", str(root / "landing"), seed=7)
    ingest.run(str(root / "landing"), str(root / "lake"))
    return root


def test_ingest_of_a_landing_zone_that_is_not_there(tmp_path: pathlib.Path) -> None:
    code, out, err = cli("ingest", "--landing", str(tmp_path / "nope"), "--lake", str(tmp_path / "lake"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon ingest: error: --landing {tmp_path / 'nope'}: no such folder or prefix; give "
                             "the landing zone's root (the sync job's destination)")
    assert not (tmp_path / "lake").exists()


def test_ingest_of_an_empty_landing_zone(tmp_path: pathlib.Path) -> None:
    (tmp_path / "landing").mkdir()
    code, _, err = cli("ingest", "--landing", str(tmp_path / "landing"), "--lake", str(tmp_path / "lake"))
    assert code == 2
    assert one_line(err).startswith(f"rmq-recon ingest: error: --landing {tmp_path / 'landing'}: no snapshot folder")


def test_ingest_into_a_lake_that_is_a_file(lake: pathlib.Path, tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = cli("ingest", "--landing", str(lake / "landing"), "--lake", str(tmp_path / "file"))
    assert code == 2
    assert one_line(err) == (f"rmq-recon ingest: error: --lake {tmp_path / 'file'}: is a file; give a folder (created "
                             "if missing) or an s3:// URI")


def test_reconcile_of_a_lake_that_is_not_there(tmp_path: pathlib.Path) -> None:
    code, out, err = cli("reconcile", "--lake", str(tmp_path / "nope"), "--reports", str(tmp_path / "reports"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon reconcile: error: --lake {tmp_path / 'nope'}: no such lake; give the folder "
                             "or s3:// URI that `rmq-recon ingest --lake` wrote")
    assert not (tmp_path / "reports").exists()


def test_reconcile_of_a_lake_that_is_a_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = cli("reconcile", "--lake", str(tmp_path / "file"), "--reports", str(tmp_path / "reports"))
    assert code == 2
    assert one_line(err) == f"rmq-recon reconcile: error: --lake {tmp_path / 'file'}: is a file; give a folder (or an s3:// URI)"


def test_reconcile_of_a_lake_with_no_completed_ingest(tmp_path: pathlib.Path) -> None:
    """The scheduled reconcile that ran before the first ingest finished 'succeeded' with 0 rows; now it fails."""
    (tmp_path / "lake").mkdir()
    code, _, err = cli("reconcile", "--lake", str(tmp_path / "lake"), "--reports", str(tmp_path / "reports"))
    assert code == 2
    assert one_line(err) == (f"rmq-recon reconcile: error: no completed ingest in {tmp_path / 'lake'} "
                             "(bronze/ingest_runs is empty or missing): run `rmq-recon ingest --landing ... --lake ...` "
                             "first")
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("value, says", [
    ("1", "argument --window: 1: the status needs at least 2 snapshots; give 2 or more (default 10)"),
    ("0", "argument --window: 0: the status needs at least 2 snapshots; give 2 or more (default 10)"),
    ("ten", "argument --window: 'ten' is not a whole number; give 2 or more (default 10)"),
])
def test_reconcile_window_below_2(tmp_path: pathlib.Path, value: str, says: str) -> None:
    code, _, err = cli("reconcile", "--lake", str(tmp_path), "--reports", str(tmp_path / "r"), "--window", value)
    assert code == 2
    assert one_line(err) == f"rmq-recon reconcile: error: {says} (see rmq-recon reconcile --help)"
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("option, value, says", [
    ("--dlq-warn-retries", "-5", "-5: a number of retries cannot be negative; give 0 or more (default 3)"),
    ("--dlq-warn-retries", "x", "'x' is not a whole number of retries; give 0 or more (default 3)"),
    ("--blocking-min-age", "-5", "-5: a number of seconds cannot be negative; give 0 or more (default 900)"),
])
def test_reconcile_negative_thresholds(tmp_path: pathlib.Path, option: str, value: str, says: str) -> None:
    """The audit ran both at -5 and the run reported success."""
    code, _, err = cli("reconcile", "--lake", str(tmp_path), "--reports", str(tmp_path / "r"), option, value)
    assert code == 2
    assert one_line(err) == f"rmq-recon reconcile: error: argument {option}: {says} (see rmq-recon reconcile --help)"
    assert not (tmp_path / "r").exists()


def test_reconcile_as_of_that_is_not_a_time(tmp_path: pathlib.Path) -> None:
    code, _, err = cli("reconcile", "--lake", str(tmp_path), "--reports", str(tmp_path / "r"), "--as-of", "yesterday")
    assert code == 2
    assert one_line(err) == ("rmq-recon reconcile: error: argument --as-of: 'yesterday' is not a time; expected "
                             "ISO-8601 UTC such as 2026-01-05T02:00:00Z, or the snapshot folder form 20260105T020000Z "
                             "(see rmq-recon reconcile --help)")


def test_reconcile_as_of_before_the_first_snapshot(lake: pathlib.Path) -> None:
    code, _, err = cli("reconcile", "--lake", str(lake / "lake"), "--reports", str(lake / "r1"),
                       "--as-of", "2026-01-04T00:00:00Z")
    assert code == 2
    assert one_line(err) == ("rmq-recon reconcile: error: --as-of 2026-01-04T00:00:00.000Z: before the first snapshot "
                             f"with consumer offsets in {lake / 'lake'} (2026-01-05T00:04:00.000Z): nothing to "
                             "reconcile then; give a later time")
    assert not (lake / "r1").exists()


def test_reconcile_groups_not_in_the_lake(lake: pathlib.Path) -> None:
    code, _, err = cli("reconcile", "--lake", str(lake / "lake"), "--reports", str(lake / "r2"),
                       "--groups", "GID_nope,GID_recon,GID_other")
    assert code == 2
    assert one_line(err) == ("rmq-recon reconcile: error: --groups GID_nope,GID_other: not in the lake (no offsets, "
                             "subscription, delivery or DLQ record of that group); check the names (case matters) or "
                             "drop them")
    assert not (lake / "r2").exists()


def test_version_and_scenarios_and_simulate_progress(tmp_path: pathlib.Path) -> None:
    from jobs.simulate import SCENARIO_NAMES

    assert cli("--version") == (0, "rmq-recon 0.1.0\n", "")
    code, out, _ = cli("simulate", "--help")
    assert code == 0 and all(name in "".join(out.split()) for name in SCENARIO_NAMES)  # help wraps at hyphens
    code, _, err = cli("simulate", "--scenario", "nope", "--out", str(tmp_path / "x"))
    assert code == 2 and "argument --scenario: invalid choice: 'nope'" in one_line(err)
    code, _, err = cli("simulate", "--scenario", "blocked-head", "--out", str(tmp_path / "l"))
    assert code == 0
    assert err.splitlines() == [
        f"simulate: blocked-head (seed 7, scale 1) into {tmp_path / 'l'}",
        "simulate: snapshot 1/4 at 2026-01-05T00:04:00.000Z: 17 files, 2 MiB written",
        "simulate: snapshot 2/4 at 2026-01-05T00:07:00.000Z: 35 files, 3 MiB written",
        "simulate: snapshot 3/4 at 2026-01-05T00:10:00.000Z: 53 files, 5 MiB written",
        "simulate: snapshot 4/4 at 2026-01-05T00:13:00.000Z: 71 files, 7 MiB written",
        "simulate: 2641 messages stored in " + err.splitlines()[-1].split(" stored in ")[1],
    ]


@pytest.mark.parametrize("rust_log", [None, "warn"], ids=["unset", "warn"])
def test_a_reconcile_writes_nothing_to_stderr_that_airflow_would_show_as_an_error(lake: pathlib.Path, rust_log: str | None,
                                                                                  tmp_path: pathlib.Path) -> None:
    """Airflow shows every stderr line of a task as ERROR: Sail's shutdown notice ("aborting N task(s) for
    SessionManagerActor", a WARN of sail_common::actor) was one in every task log, also with RUST_LOG=warn set."""
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    if rust_log:
        env["RUST_LOG"] = rust_log
    p = subprocess.run([sys.executable, "-m", "jobs.cli", "reconcile", "--lake", str(lake / "lake"), "--reports",
                        str(tmp_path)], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [line for line in p.stderr.splitlines() if "sail" in line.lower() or "WARN" in line] == []


def test_maintain_of_a_lake_that_is_not_there_and_of_a_lake(lake: pathlib.Path, tmp_path: pathlib.Path) -> None:
    code, out, err = cli("maintain", "--lake", str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon maintain: error: --lake {tmp_path / 'nope'}: no such lake; give the folder or "
                             "s3:// URI that `rmq-recon ingest --lake` wrote")
    code, _, err = cli("maintain", "--lake", str(lake / "lake"), "--retention-h", "-1")
    assert (code, one_line(err)) == (2, "rmq-recon maintain: error: --retention-h -1.0: give 0 or more hours")


def test_soak_options_of_simulate(tmp_path: pathlib.Path) -> None:
    code, _, err = cli("simulate", "--scenario", "mixed", "--every", "20", "--hours", "2", "--out", str(tmp_path / "x"))
    assert code == 2 and "argument --every: invalid choice: 20 (choose from 15, 30)" in one_line(err)
    code, _, err = cli("simulate", "--scenario", "blocked-head", "--hours", "2", "--out", str(tmp_path / "x"))
    assert (code, one_line(err)) == (2, "rmq-recon simulate: error: --hours, --rate and --every apply to the mixed "
                                        "scenario only, not 'blocked-head'")
    assert not (tmp_path / "x").exists()


def test_landing_and_lake_swapped_are_refused(lake: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Issue 38: `ingest --landing <a lake>` quarantined 115 files and exited 0."""
    code, out, err = cli("ingest", "--landing", str(lake / "lake"), "--lake", str(tmp_path / "new"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon ingest: error: --landing {lake / 'lake'}: is a lake (bronze/, silver/ or "
                             "gold/ Delta tables), not a landing zone; did you swap --landing and --lake?")
    assert not (tmp_path / "new").exists()
    code, out, err = cli("ingest", "--landing", str(lake / "lake"), "--lake", str(lake / "landing"))
    assert (code, out) == (2, "")
    assert one_line(err).startswith(f"rmq-recon ingest: error: --landing {lake / 'lake'}: is a lake")
    (tmp_path / "cluster=c").mkdir()
    code, out, err = cli("ingest", "--landing", str(tmp_path / "cluster=c"), "--lake", str(lake / "landing"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon ingest: error: --lake {lake / 'landing'}: is a landing zone (cluster=<c>/... "
                             "snapshot folders), not a lake; did you swap --landing and --lake?")
    code, out, err = cli("reconcile", "--lake", str(lake / "landing"), "--reports", str(tmp_path / "r"))
    assert (code, out) == (2, "")
    assert one_line(err) == (f"rmq-recon reconcile: error: --lake {lake / 'landing'}: is a landing zone (cluster=<c>/"
                             "... snapshot folders), not a lake; give the folder or s3:// URI that `rmq-recon ingest "
                             "--lake` wrote")


@pytest.mark.parametrize("code", [0, 2])
def test_the_command_exits_with_main_s_code_after_the_exit_handlers_and_with_its_output_flushed(code: int) -> None:
    """``rmq-recon`` (``jobs.cli.console``) leaves without tearing the interpreter down: the exit code is main's, a
    handler registered with atexit still runs, and what main wrote to stdout and stderr, unflushed, arrives whole."""
    script = ("import atexit, sys\n"
              "from jobs import cli\n"
              "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
              f"cli.main = lambda: (sys.stdout.write('x' * 100000 + '\\n'), sys.stderr.write('said\\n'), {code})[-1]\n"
              "cli.console()\n"
              "print('never')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": ""}
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (code, "x" * 100000 + "\n", "said\nhandler ran\n")
