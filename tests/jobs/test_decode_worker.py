"""Decode tasks in a helper process (jobs.ingest.decode_worker): the same batches, errors that say what happened,
and no helper left in a half-read state."""
from __future__ import annotations

import json
import os
import pathlib
import threading

import pyarrow as pa
import pytest

from jobs.formats import trace
from jobs.formats.commitlog_encode import CommitLogWriter
from jobs.ingest import decode_tasks, decode_worker, landing

SEG = 256 * 1024


@pytest.fixture(autouse=True)
def _no_helper_left(monkeypatch):
    yield
    decode_worker._close_all()  # the helpers a test kept (in the list it patched in)


@pytest.fixture()
def units(tmp_path: pathlib.Path) -> list[dict]:
    """Two brokers' segments: messages and trace messages (Pub and Sub records), read 4 KiB at a time."""
    for broker in ("a", "b"):
        seg = tmp_path / "cluster=c" / f"broker={broker}" / "snapshot_ts=20260105T000000Z" / "store" / "commitlog"
        w = CommitLogWriter(str(seg), segment_size=SEG)
        for i in range(300):
            if i % 3:
                w.append(topic="T", queue_id=i % 4, queue_offset=i, body=b"x" * 50,
                         properties={"UNIQ_KEY": f"{broker}{i:04d}"}, born_ts_ms=1, store_ts_ms=2,
                         born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 10911))
            else:
                body = trace.encode_trace_records([
                    {"type": "Pub", "timestamp_ms": 1000 + i, "group": "P", "topic": "T", "msg_id": f"M{i}",
                     "store_host": "10.0.0.2:10911", "success": True},
                    {"type": "SubAfter", "request_id": f"r{i}", "msg_id": f"M{i}", "success": i % 2 == 0,
                     "timestamp_ms": 2000 + i, "group": "G"}])
                w.append(topic="RMQ_SYS_TRACE_TOPIC", queue_id=0, queue_offset=i, body=body,
                         properties={"UNIQ_KEY": f"t{broker}{i:04d}"}, born_ts_ms=1, store_ts_ms=2,
                         born_host=("10.0.0.3", 4), store_host=("10.0.0.2", 10911))
        w.close()
    snaps, problems, _ = landing.discover(str(tmp_path))
    assert problems == []
    return decode_tasks.plan_units(snaps, {}, frozenset(), lambda s, p: None, chunk_bytes=4096, batch_rows=50,
                                   trace_batch_rows=40)


def _in_process(units: list[dict]) -> pa.Table:
    return pa.Table.from_batches([b for u in units for b in decode_tasks.decode_unit(u)],
                                 schema=decode_tasks.OUTPUT_ARROW)


def test_a_helper_gives_exactly_the_batches_of_decoding_in_process(units: list[dict]) -> None:
    batches = list(decode_worker.run(units))
    want = [b for u in units for b in decode_tasks.decode_unit(u)]
    assert [b.num_rows for b in batches] == [b.num_rows for b in want]
    got = pa.Table.from_batches(batches, schema=decode_tasks.OUTPUT_ARROW)
    assert got.equals(_in_process(units))
    kinds = pa.compute.value_counts(got["kind"]).to_pylist()
    assert sorted((k["values"], k["counts"]) for k in kinds) == [
        ("message", 600), ("progress", 2), ("trace", 400)]


def test_the_mapinarrow_body_uses_a_helper_off_the_main_thread(units: list[dict], monkeypatch) -> None:
    monkeypatch.setattr(decode_worker, "_cpus", lambda: 2)
    started = _count_starts(monkeypatch)
    rows = pa.RecordBatch.from_pydict({"task": [0], "units": [json.dumps(units)]})
    out: list[pa.RecordBatch] = []
    t = threading.Thread(target=lambda: out.extend(decode_tasks.decode_tasks(iter([rows]))))
    t.start()
    t.join(120)
    assert len(started) == 1 and pa.Table.from_batches(out).equals(_in_process(units))
    # on the main thread, or with one CPU, the task decodes in its own interpreter
    assert decode_worker.isolated() is False
    monkeypatch.setattr(decode_worker, "_cpus", lambda: 1)
    flags: list[bool] = []
    t = threading.Thread(target=lambda: flags.append(decode_worker.isolated()))
    t.start()
    t.join()
    assert flags == [False]


@pytest.mark.parametrize("value, expected", [("always", True), ("never", False), (" Always ", True)])
def test_the_mode_can_be_set(monkeypatch, value: str, expected: bool) -> None:
    monkeypatch.setenv(decode_worker.ENV, value)
    assert decode_worker.isolated() is expected


def test_an_unknown_mode_is_refused_with_the_values_it_takes(monkeypatch) -> None:
    monkeypatch.setenv(decode_worker.ENV, "sometimes")
    with pytest.raises(ValueError, match=r"RMQ_RECON_DECODE_PROCESS='sometimes': expected auto, always or never"):
        decode_worker.isolated()


def test_an_error_in_the_helper_is_raised_in_the_task_and_the_helper_serves_the_next(units: list[dict],
                                                                                   monkeypatch) -> None:
    monkeypatch.setattr(decode_worker, "_idle", [])
    broken = [{k: v for k, v in units[0].items() if k != "copies"}]
    with pytest.raises(RuntimeError, match=r"(?s)a decode task failed in its helper process:.*KeyError: 'copies'"):
        list(decode_worker.run(broken))
    assert len(decode_worker._idle) == 1
    pid = decode_worker._idle[0].pid
    assert pa.Table.from_batches(list(decode_worker.run(units))).equals(_in_process(units))
    assert [w.pid for w in decode_worker._idle] == [pid]


def test_a_helper_killed_in_the_middle_of_a_task_fails_the_task_and_is_replaced(units: list[dict],
                                                                                monkeypatch) -> None:
    helper = _count_starts(monkeypatch)
    it = decode_worker.run(units)
    next(it)
    assert len(helper) == 1 and decode_worker._idle == []  # the helper in use is not idle
    os.kill(helper[0], 9)
    with pytest.raises(RuntimeError, match=r"the decode helper process \(pid \d+\) exited with code -9 in the middle "
                                           r"of a task; rerun the ingest"):
        list(it)
    assert decode_worker._idle == []
    assert pa.Table.from_batches(list(decode_worker.run(units))).equals(_in_process(units))
    assert len(helper) == 2 and [w.pid for w in decode_worker._idle] == [helper[1]]


def test_a_task_given_up_half_way_stops_its_helper(units: list[dict], monkeypatch) -> None:
    helper = _count_starts(monkeypatch)
    it = decode_worker.run(units)
    next(it)
    it.close()
    assert decode_worker._idle == [] and len(helper) == 1
    with pytest.raises(ChildProcessError):  # killed and reaped
        os.waitpid(helper[0], os.WNOHANG)


def test_tasks_beyond_the_cpus_wait_for_a_helper(units: list[dict], monkeypatch) -> None:
    monkeypatch.setattr(decode_worker, "_cpus", lambda: 1)
    monkeypatch.setattr(decode_worker, "_slots", None)
    helper = _count_starts(monkeypatch)
    results: list[pa.Table] = []
    threads = [threading.Thread(target=lambda: results.append(pa.Table.from_batches(list(decode_worker.run(units)))))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    want = _in_process(units)
    assert len(results) == 3 and all(r.equals(want) for r in results)
    assert len(helper) == 1 and len(decode_worker._idle) == 1  # one helper served the three tasks in turn


def _count_starts(monkeypatch) -> list[int]:
    """No idle helper to begin with; the pids of the helpers started from now on."""
    monkeypatch.setattr(decode_worker, "_idle", [])
    started: list[int] = []
    real = decode_worker._start

    def start():
        w = real()
        started.append(w.pid)
        return w

    monkeypatch.setattr(decode_worker, "_start", start)
    return started


def test_when_no_helper_can_start_tasks_decode_in_their_own_interpreter(units: list[dict], monkeypatch,
                                                                          tmp_path: pathlib.Path, caplog) -> None:
    """As when the ingest runs as a user who may not execute the interpreter's file (tests/faults/test_corpus.py)."""
    monkeypatch.setattr(decode_worker, "_idle", [])
    monkeypatch.setattr(decode_worker, "_unavailable", [])
    monkeypatch.setattr(decode_worker, "_cpus", lambda: 2)
    blocked = tmp_path / "python"
    blocked.write_text("")  # not executable
    monkeypatch.setattr(decode_worker.sys, "executable", str(blocked))
    flags: list[bool] = []
    t = threading.Thread(target=lambda: flags.append(decode_worker.isolated()))
    t.start()
    t.join()
    assert flags == [True]
    assert pa.Table.from_batches(list(decode_worker.run(units))).equals(_in_process(units))
    assert decode_worker._idle == [] and len(decode_worker._unavailable) == 1
    assert "a decode helper process cannot start ([Errno 13] Permission denied" in caplog.text
    t = threading.Thread(target=lambda: flags.append(decode_worker.isolated()))
    t.start()
    t.join()
    assert flags == [True, False]


def test_a_helper_started_with_another_environment_is_not_reused(units: list[dict], monkeypatch) -> None:
    """An S3 endpoint or key set after a helper started (as tests do) reaches the next task: a new helper."""
    helper = _count_starts(monkeypatch)
    list(decode_worker.run(units))
    list(decode_worker.run(units))
    assert len(helper) == 1
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert pa.Table.from_batches(list(decode_worker.run(units))).equals(_in_process(units))
    assert len(helper) == 2 and [w.pid for w in decode_worker._idle] == [helper[1]]
    with pytest.raises(ChildProcessError):  # the first one was stopped and reaped
        os.waitpid(helper[0], os.WNOHANG)


def test_a_helper_decodes_without_loading_pandas_or_scipy(units: list[dict], monkeypatch) -> None:
    """Their imports were half of a helper's start (pyarrow imports pandas, numba imports scipy, neither is used)."""
    helper = _count_starts(monkeypatch)
    assert pa.Table.from_batches(list(decode_worker.run(units))).equals(_in_process(units))
    maps = pathlib.Path(f"/proc/{helper[0]}/maps").read_text()
    assert "/numba/" in maps and "/pyarrow/" in maps  # it did decode
    assert "/pandas/" not in maps and "/scipy/" not in maps


def test_the_helper_import_finder_refuses_only_the_names_given() -> None:
    from jobs import unused

    finder = unused.Without("pandas", "scipy", why="is not used in a decode helper")
    for name in ("pandas", "pandas.core.api", "scipy.linalg"):
        with pytest.raises(ModuleNotFoundError, match=f"{name} is not used in a decode helper"):
            finder.find_spec(name)
    assert finder.find_spec("pandas_stubs") is None and finder.find_spec("pyarrow") is None


def test_a_stopped_run_kills_its_helpers_and_the_tasks_queued_for_one_give_up(units: list[dict],
                                                                               monkeypatch) -> None:
    """The engine may stop pulling a task that holds the only slot (its generator suspended): the tasks queued for
    it must not wait on, or the engine's cancel of the stopped run waits on them (the CLI hung in 1 of 9 stops
    timed)."""
    from jobs.lake import interrupts

    monkeypatch.setattr(decode_worker, "_cpus", lambda: 1)
    monkeypatch.setattr(decode_worker, "_slots", None)
    monkeypatch.setattr(interrupts, "_caught", [])
    helper = _count_starts(monkeypatch)
    holder = decode_worker.run(units)
    next(holder)  # holds the one slot, as a task the engine stopped pulling
    failed: list[BaseException] = []

    def queued() -> None:
        try:
            list(decode_worker.run(units))
        except RuntimeError as exc:
            failed.append(exc)

    t = threading.Thread(target=queued)
    t.start()
    t.join(0.5)
    assert t.is_alive()  # waiting for the slot
    interrupts._caught.append(2)  # what the signal handler records, then its callbacks run
    decode_worker._kill_all()
    t.join(5)
    assert not t.is_alive() and [str(e) for e in failed] == ["the run was stopped by a signal"]
    assert len(helper) == 1
    with pytest.raises(RuntimeError, match=r"the decode helper process \(pid \d+\) exited with code -9"):
        list(holder)  # its helper was killed: the holder fails too, and gives its slot back
    assert decode_worker._live == set()


def test_a_helper_whose_host_went_away_leaves_quietly_and_ignores_ctrl_c(units: list[dict]) -> None:
    """Ctrl-C reaches the whole process group and a stopped host exits at once: the helper's broken pipe or
    KeyboardInterrupt must not print a traceback after the host's last line."""
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-m", "jobs.ingest.decode_worker"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=decode_worker._environment())
    deadline = time.monotonic() + 60
    while not _ignores_sigint(p.pid):  # its main() has begun (past its imports)
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "slow"
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert p.poll() is None
    p.stdout.close()  # the host is gone before the answer
    payload = json.dumps(units).encode()
    p.stdin.write(decode_worker._FRAME.pack(len(payload)) + payload)
    p.stdin.close()
    assert (p.wait(60), p.stderr.read()) == (0, b"")


def _ignores_sigint(pid: int) -> bool:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (2 - 1)))
    return False
