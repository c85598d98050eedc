"""Where an ``rmq-recon`` command spends its CPU, the engine's included (how issue 39's audit costs were found).

Runs the command in this process; a thread samples the main thread's stack every 20 ms and charges the process's CPU
time since the previous sample (user + system: Sail's engine threads run in this process) to the innermost frames
under ``jobs/``. A step waiting on the engine is charged what the engine did meanwhile. Prints the top frames and
stacks, and writes them as JSON; two runs (a young and an old lake) compare with ``--compare A.json B.json``.

    .venv/bin/python tests/benchmarks/profile_cpu.py --out /tmp/p40.json -- \
        reconcile --lake L --reports R --retention-h 3
    .venv/bin/python tests/benchmarks/profile_cpu.py --compare /tmp/p10.json /tmp/p40.json
"""
from __future__ import annotations

import argparse
import collections
import json
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = str(ROOT / "jobs") + "/"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def profile(argv: list[str], out: str, every: float = 0.02) -> int:
    stacks: collections.Counter[str] = collections.Counter()
    lines: collections.Counter[str] = collections.Counter()
    main, done = threading.main_thread().ident, threading.Event()

    def sample() -> None:
        last = _cpu()
        while not done.wait(every):
            now = _cpu()
            spent, last = now - last, now
            frame, chain = sys._current_frames().get(main), []  # noqa: SLF001
            while frame is not None:
                if frame.f_code.co_filename.startswith(JOBS):
                    chain.append(f"{frame.f_code.co_filename[len(str(ROOT)) + 1:]}:{frame.f_lineno} "
                                 f"{frame.f_code.co_name}")
                frame = frame.f_back
            chain = chain or ["<outside jobs/>"]
            lines[chain[0]] += spent
            stacks[" < ".join(chain[:4])] += spent

    sys.path.insert(0, str(ROOT))
    from jobs import cli

    t = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    t.start()
    try:
        code = cli.main(argv)
    finally:
        done.set()
        t.join()
        total = {"cpu_s": round(_cpu(), 2), "wall_s": round(time.perf_counter() - t0, 2), "argv": argv}
        Path(out).write_text(json.dumps({**total, "line": lines.most_common(80), "stack": stacks.most_common(80)},
                                        indent=1))
        sys.stderr.write(f"profile: {total['cpu_s']} s CPU, {total['wall_s']} s wall -> {out}\n")
        for k, v in stacks.most_common(15):
            sys.stderr.write(f"{v:8.2f}  {k[:200]}\n")
    return code or 0


def compare(a: str, b: str, top: int = 25) -> None:
    pa, pb = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    print(f"CPU s: {pa['cpu_s']} -> {pb['cpu_s']}")
    da, db = dict(pa["stack"]), dict(pb["stack"])
    for k in sorted(set(da) | set(db), key=lambda k: -(db.get(k, 0) - da.get(k, 0)))[:top]:
        print(f"{da.get(k, 0):7.2f} {db.get(k, 0):7.2f} {db.get(k, 0) - da.get(k, 0):+7.2f}  {k[:200]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="/tmp/rmq-profile.json")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the rmq-recon command and its arguments")
    a = p.parse_args()
    if a.compare:
        compare(*a.compare)
        return 0
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv:
        p.error("give the rmq-recon command after --")
    return profile(argv, a.out)


if __name__ == "__main__":
    sys.exit(main())
