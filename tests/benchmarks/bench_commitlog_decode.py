"""Commitlog decode benchmark (issue 3, item 6): throughput, speed-up over a struct loop, and peak RSS.

Usage::

    .venv/bin/python tests/benchmarks/bench_commitlog_decode.py [--gib 2] [--segment-mib 1024] [--dir DIR]
        [--runs 3] [--baseline-mib 200] [--baseline-runs 3] [--small-segment-mib 256] [--samples 3000]

What it does, in one run:

1. Writes (or reuses, from ``--dir``, default /tmp/rmq-bench-commitlog) a synthetic commitlog in RocketMQ's on-disk
   format: full segments named by their 20-digit start offset, each closed by the broker's blank end-of-file
   record, and a last, partly written segment preallocated to full size (zeros after the data), as a live broker
   leaves it. Messages look like a real producer's: topics of 10-30 characters (and some %RETRY%, SCHEDULE_TOPIC_XXXX
   and transactional ones), properties TAGS, KEYS, WAIT, UNIQ_KEY (32 hex), MSG_REGION, TRACE_ON and occasionally
   RETRY_TOPIC / REAL_TOPIC / REAL_QID / DELAY / ORIGIN_MESSAGE_ID / MAX_OFFSET / MIN_OFFSET / TRAN_MSG / PGROUP,
   bodies of 200-1000 random bytes, IPv4 born and store hosts. A template of messages is written with the project's
   own ``CommitLogWriter`` and tiled with numpy; the fields that differ between copies (physical offset, queue
   offset, timestamps, the UNIQ_KEY time and counter) are patched per record. Before anything is timed, a window
   of the tiled log (crossing a template-cycle and two segment boundaries) is compared byte for byte with what
   ``CommitLogWriter`` writes for the same messages.
2. Decodes every segment with ``jobs.formats.commitlog.decode_file`` (memory-mapped, bounded chunks of ingest's
   ``CHUNK_BYTES``: full metadata, properties map, UNIQ_KEY / KEYS / TAGS, hosts, offsetMsgId) in a fresh process
   per run, timing only the decoder (wall and CPU seconds) and checking the output outside the timed region:
   every record's physical offset, queue offset and size, no problems, end-of-segment state, the total count, and
   exact equality of whole rows for a sample of records. The decoder's kernels are numba-compiled: the timed
   region includes the decoder's first call in each fresh process (numba loading the kernels from its cache in
   ``jobs/formats/__pycache__``). That one-time cost is also measured on its own, before the runs, in two fresh
   processes: the first compiles the kernels if the cache is missing or stale (so no timed run compiles), the
   second loads them from the cache.
3. Decodes the first ``--baseline-mib`` MiB with a plain ``struct.unpack_from`` loop that builds one dict per
   record with the same fields (properties as a dict), checked on the same sample.
4. Measures peak RSS (VmHWM) of a fresh process decoding one full segment of ``--segment-mib`` and one of
   ``--small-segment-mib``.

Timings are medians of ``--runs`` runs (decoder and baseline interleaved, so a noisy neighbour hits both).
This file is not collected by pytest (bench_*.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import mmap
import multiprocessing as mp
import os
import pickle
import random
import shutil
import socket
import statistics
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numba  # noqa: E402
import numpy as np  # noqa: E402

from jobs.formats import commitlog, commitlog_encode  # noqa: E402

GENERATOR_VERSION = 1
MIB = 1 << 20
GIB = 1 << 30
TEMPLATE_COUNT = 16384
SEED = 20240501
UTC = dt.timezone.utc
T0_MS = int(dt.datetime(2024, 5, 2, 8, 0, tzinfo=UTC).timestamp() * 1000)
MONTH_START_MS = int(dt.datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
MSGS_PER_MS = 4  # store timestamps advance 1 ms every 4 messages
STORE_HOST = ("10.0.0.11", 10911)
CHUNK_BYTES = 64 << 20  # jobs.ingest.decode.CHUNK_BYTES (checked against it in main; not imported in the workers)

TARGET_RATE = 1_000_000
TARGET_RATIO = 10.0
TARGET_RSS_BYTES = GIB // 2  # "well under 1 GiB"
TARGET_RSS_GROWTH = 64 * MIB  # peak RSS of the large segment minus that of the small one


# ------------------------------------------------------------------------------------------ messages


def _word(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(lo, hi)))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789ABCDEF") for _ in range(n))


def build_template_specs(count: int, seed: int) -> dict[str, Any]:
    """``count`` message specs; message ``g`` of the log is spec ``g % count`` with a few fields patched."""
    rng = random.Random(seed)
    topics = []
    for _ in range(24):
        t = f"{rng.choice(['Topic', 'TP', 'order', 'pay', 'user'])}_{_word(rng, 3, 10)}_{_word(rng, 2, 12)}"
        topics.append(t[:30] if len(t) >= 10 else (t + "_events")[:30])
    groups = [f"GID_{_word(rng, 4, 14)}" for _ in range(6)]
    producers = []
    for i in range(40):
        ip = f"10.{rng.randint(1, 9)}.{rng.randint(0, 255)}.{rng.randint(2, 254)}"
        prefix = socket.inet_aton(ip).hex().upper() + f"{rng.randrange(1 << 16):04X}" + f"{rng.randrange(1 << 32):08X}"
        producers.append((ip, rng.randint(30000, 65000), prefix))
    tag_pool = ["TagA", "TagB", "TagC", "create", "paid", "shipped", "refund", "*", "user_signup", "notify"]
    specs = []
    for _ in range(count):
        kind = rng.random()
        ip, port, uprefix = rng.choice(producers)
        topic = rng.choice(topics)
        props: dict[str, str] = {}
        sys_flag = 0
        reconsume = 0
        queue_id = rng.randrange(8)
        if rng.random() < 0.85:
            props["TAGS"] = rng.choice(tag_pool)
        if rng.random() < 0.75:
            props["KEYS"] = " ".join(f"{rng.choice(['ORDER', 'PAY', 'U'])}_{rng.randrange(10**9, 10**12)}"
                                     for _ in range(rng.choice([1, 1, 1, 2])))
        props["WAIT"] = "true"
        props["UNIQ_KEY"] = uprefix + "0" * 12  # time since month start and counter are patched per message
        if kind < 0.05:  # a retry: re-put to %RETRY%group by sendMessageBack
            group = rng.choice(groups)
            props.update({"RETRY_TOPIC": topic, "ORIGIN_MESSAGE_ID": _hex(rng, 32), "REAL_TOPIC": f"%RETRY%{group}",
                          "REAL_QID": "0", "DELAY": str(rng.randint(3, 6)),
                          "CONSUME_START_TIME": str(T0_MS - rng.randrange(10**6))})
            props["WAIT"] = "false"
            topic = f"%RETRY%{group}"[:30]
            queue_id = 0
            reconsume = rng.randint(1, 4)
        elif kind < 0.07:  # a delayed message parked in SCHEDULE_TOPIC_XXXX
            level = rng.randint(1, 18)
            props.update({"DELAY": str(level), "REAL_TOPIC": topic, "REAL_QID": str(queue_id)})
            topic, queue_id = "SCHEDULE_TOPIC_XXXX", level - 1
        elif kind < 0.08:  # a committed transactional message
            props.update({"TRAN_MSG": "true", "PGROUP": f"PID_{_word(rng, 4, 12)}", "REAL_TOPIC": topic,
                          "REAL_QID": str(queue_id), "__transactionId__": _hex(rng, 32)})
            sys_flag = 0x8
        elif kind < 0.09:
            props.update({"MIN_OFFSET": str(rng.randrange(10**6)), "MAX_OFFSET": str(rng.randrange(10**6, 10**8))})
        elif kind < 0.25:
            props["traceId"] = f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}".lower()
        props["MSG_REGION"] = "DefaultRegion"
        props["TRACE_ON"] = "true"
        body_len = rng.randint(200, 1000)
        body = bytes(rng.getrandbits(8) for _ in range(body_len))
        specs.append({"topic": topic, "queue_id": queue_id, "props": props, "body": body, "born_host": (ip, port),
                      "sys_flag": sys_flag, "reconsume_times": reconsume, "flag": rng.choice([0, 0, 0, 1]),
                      "born_delay": rng.randint(1, 5)})
    # queue offsets: spec j is the rank-th message of its queue within a cycle; a cycle adds per_cycle messages
    seen: dict[tuple[str, int], int] = {}
    for s in specs:
        k = (s["topic"], s["queue_id"])
        s["rank"] = seen.get(k, 0)
        seen[k] = s["rank"] + 1
    for s in specs:
        s["per_cycle"] = seen[(s["topic"], s["queue_id"])]
    return {"count": count, "seed": seed, "specs": specs}


def uniq_tail(born_ms: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The patched part of UNIQ_KEY: ms since month start (8 hex) and a 16-bit counter (4 hex)."""
    return (born_ms - MONTH_START_MS).astype(np.int64), (g & 0xFFFF).astype(np.int64)


def message_fields(tpl: dict[str, Any], g: int) -> dict[str, Any]:
    """What message ``g`` of the log is (the keyword arguments of ``encode_message`` / ``CommitLogWriter.append``)."""
    count = tpl["count"]
    s = tpl["specs"][g % count]
    store = T0_MS + g // MSGS_PER_MS
    born = store - s["born_delay"]
    props = dict(s["props"])
    t, c = (born - MONTH_START_MS), g & 0xFFFF
    props["UNIQ_KEY"] = props["UNIQ_KEY"][:20] + f"{t:08X}{c:04X}"
    return {"topic": s["topic"], "queue_id": s["queue_id"], "queue_offset": (g // count) * s["per_cycle"] + s["rank"],
            "body": s["body"], "properties": props, "born_ts_ms": born, "store_ts_ms": store,
            "born_host": s["born_host"], "store_host": STORE_HOST, "sys_flag": s["sys_flag"],
            "reconsume_times": s["reconsume_times"], "flag": s["flag"]}


def expected_row(tpl: dict[str, Any], g: int, physical_offset: int, size: int, segment: str) -> dict[str, Any]:
    """The row the decoder must produce for message ``g`` (computed from what was written, not by decoding)."""
    f = message_fields(tpl, g)
    p = f["properties"]
    sip, sport = f["store_host"]
    return {
        "physical_offset": physical_offset, "topic": f["topic"], "queue_id": f["queue_id"],
        "queue_offset": f["queue_offset"],
        "store_ts": dt.datetime.fromtimestamp(f["store_ts_ms"] / 1000, UTC),
        "born_ts": dt.datetime.fromtimestamp(f["born_ts_ms"] / 1000, UTC),
        "uniq_key": p.get("UNIQ_KEY"), "keys": p.get("KEYS"), "tags": p.get("TAGS"),
        "reconsume_times": f["reconsume_times"], "properties": list(p.items()), "size": size,
        "sys_flag": f["sys_flag"], "born_host": f"{f['born_host'][0]}:{f['born_host'][1]}",
        "store_host": f"{sip}:{sport}",
        "offset_msg_id": socket.inet_aton(sip).hex().upper() + f"{sport:08X}{physical_offset:016X}",
        "segment": segment, "body": None,
    }


# ------------------------------------------------------------------------------------- template + tiling


class Template:
    """The template records as written by ``CommitLogWriter``, and where each patched field lives in them."""

    def __init__(self, tpl: dict[str, Any], workdir: str) -> None:
        self.tpl = tpl
        n = tpl["count"]
        d = os.path.join(workdir, "template")
        shutil.rmtree(d, ignore_errors=True)
        w = commitlog_encode.CommitLogWriter(d, segment_size=1 << 30)
        pos, size = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for j in range(n):
            pos[j], size[j] = w.append(**message_fields(tpl, j))
        end = int(w.next_offset)
        w.close()
        with open(os.path.join(d, f"{0:020d}"), "rb") as fh:
            self.data = np.frombuffer(fh.read(end), np.uint8).copy()
        shutil.rmtree(d)
        assert pos[0] == 0 and (pos[1:] == pos[:-1] + size[:-1]).all()
        self.pos, self.size = pos, size
        self.cycle_bytes = end
        self.end = pos + size
        raw = self.data.tobytes()
        self.uniq_off = np.array([raw.index(b"UNIQ_KEY\x01", int(p), int(p + s)) + 9 + 20 - int(p)
                                  for p, s in zip(pos, size)], np.int64)
        specs = tpl["specs"]
        self.rank = np.array([s["rank"] for s in specs], np.int64)
        self.per_cycle = np.array([s["per_cycle"] for s in specs], np.int64)
        self.born_delay = np.array([s["born_delay"] for s in specs], np.int64)
        assert all(":" not in s["born_host"][0] for s in specs)  # born timestamp/host positions assume IPv4

    # stream offsets: the position of message g if the log were one endless segment
    def stream_start(self, g: np.ndarray) -> np.ndarray:
        return (g // self.tpl["count"]) * self.cycle_bytes + self.pos[g % self.tpl["count"]]

    def stream_end(self, g: np.ndarray) -> np.ndarray:
        return (g // self.tpl["count"]) * self.cycle_bytes + self.end[g % self.tpl["count"]]

    def queue_offset(self, g: np.ndarray) -> np.ndarray:
        j = g % self.tpl["count"]
        return (g // self.tpl["count"]) * self.per_cycle[j] + self.rank[j]

    def record_size(self, g: np.ndarray) -> np.ndarray:
        return self.size[g % self.tpl["count"]]

    def block(self, g_first: int, g_last: int, seg_start: int, seg_g0: int) -> np.ndarray:
        """The bytes of messages [g_first, g_last) (one template cycle at most) placed in segment ``seg_start``."""
        n = self.tpl["count"]
        assert g_first // n == (g_last - 1) // n
        j0, j1 = g_first % n, (g_last - 1) % n + 1
        out = self.data[self.pos[j0]:self.end[j1 - 1]].copy()
        g = np.arange(g_first, g_last, dtype=np.int64)
        j = g % n
        rel = self.pos[j] - self.pos[j0]
        phys = seg_start + self.stream_start(g) - self.stream_start(np.array([seg_g0]))[0]
        store = T0_MS + g // MSGS_PER_MS
        born = store - self.born_delay[j]
        _put_be64(out, rel + 20, self.queue_offset(g))
        _put_be64(out, rel + 28, phys)
        _put_be64(out, rel + 40, born)
        _put_be64(out, rel + 56, store)
        t, c = uniq_tail(born, g)
        _put_hex(out, rel + self.uniq_off[j], t, 8)
        _put_hex(out, rel + self.uniq_off[j] + 8, c, 4)
        return out


_HEXCHARS = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def _put_be64(buf: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    raw = values.astype(">i8").view(np.uint8).reshape(-1, 8)
    buf[(at[:, None] + np.arange(8)).ravel()] = raw.ravel()


def _put_hex(buf: np.ndarray, at: np.ndarray, values: np.ndarray, digits: int) -> None:
    shifts = (np.arange(digits - 1, -1, -1, dtype=np.uint64) * np.uint64(4))
    chars = _HEXCHARS[((values.astype(np.uint64)[:, None] >> shifts) & np.uint64(0xF)).astype(np.int64)]
    buf[(at[:, None] + np.arange(digits)).ravel()] = chars.ravel()


def plan_log(tmpl: Template, *, g0: int, base: int, segment_size: int, full_segments: int, tail_bytes: int
             ) -> list[dict[str, Any]]:
    """Where each message goes, as ``CommitLogWriter.append`` would put it (a record that does not fit with 8 bytes
    to spare closes the segment with the blank record and starts the next one)."""
    layout = []
    g, start = g0, base
    min_size = int(tmpl.size.min())
    for i in range(full_segments + (1 if tail_bytes else 0)):
        full = i < full_segments
        cand = np.arange(g, g + segment_size // min_size + 2, dtype=np.int64)
        rel_end = tmpl.stream_end(cand) - tmpl.stream_start(np.array([g]))[0]
        limit = segment_size - commitlog.END_FILE_MIN_BLANK_LENGTH if full else tail_bytes
        k = int(np.searchsorted(rel_end, limit, side="right"))
        layout.append({"name": f"{start:020d}", "start": start, "g0": g, "count": k, "data_end": int(rel_end[k - 1]),
                       "full": full, "segment_size": segment_size})
        g += k
        start += segment_size
    return layout


def write_log(tmpl: Template, directory: str, layout: list[dict[str, Any]]) -> None:
    os.makedirs(directory, exist_ok=True)
    n = tmpl.tpl["count"]
    for seg in layout:
        path = os.path.join(directory, seg["name"])
        with open(path, "wb") as fh:
            g, g_end = seg["g0"], seg["g0"] + seg["count"]
            while g < g_end:
                nxt = min(g_end, (g // n + 1) * n)
                fh.write(tmpl.block(g, nxt, seg["start"], seg["g0"]).tobytes())
                g = nxt
            assert fh.tell() == seg["data_end"]
            if seg["full"]:
                fh.write(commitlog_encode.encode_blank(seg["segment_size"] - seg["data_end"]))
            fh.truncate(seg["segment_size"])  # preallocated and zero-filled, like a broker's mapped file


def writer_crosscheck(tmpl: Template, workdir: str) -> int:
    """Tiled bytes == what CommitLogWriter writes, on a window crossing a cycle and two segment boundaries."""
    seg = 1 << 20
    g0 = tmpl.tpl["count"] - 1500
    base = 7 * seg
    layout = plan_log(tmpl, g0=g0, base=base, segment_size=seg, full_segments=2, tail_bytes=300_000)
    a, b = os.path.join(workdir, "crosscheck-tiled"), os.path.join(workdir, "crosscheck-writer")
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
    write_log(tmpl, a, layout)
    w = commitlog_encode.CommitLogWriter(b, segment_size=seg)
    w.next_offset = base
    total = sum(s["count"] for s in layout)
    for g in range(g0, g0 + total):
        phys, _ = w.append(**message_fields(tmpl.tpl, g))
        assert phys == _expected_phys(tmpl, layout, g)
    w.close()
    assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == [s["name"] for s in layout]
    for name in os.listdir(a):
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            if fa.read() != fb.read():
                raise AssertionError(f"tiled segment {name} differs from CommitLogWriter's")
    shutil.rmtree(a)
    shutil.rmtree(b)
    return total


def _expected_phys(tmpl: Template, layout: list[dict[str, Any]], g: int) -> int:
    for s in layout:
        if s["g0"] <= g < s["g0"] + s["count"]:
            return int(s["start"] + tmpl.stream_start(np.array([g]))[0] - tmpl.stream_start(np.array([s["g0"]]))[0])
    raise KeyError(g)


# --------------------------------------------------------------------------------------------- cache


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Write the logs unless ``--dir`` already holds them for the same parameters; returns the manifest."""
    root = args.dir
    os.makedirs(root, exist_ok=True)
    seg = args.segment_mib * MIB
    small = args.small_segment_mib * MIB
    params = {"version": GENERATOR_VERSION, "gib": args.gib, "segment_mib": args.segment_mib,
              "small_segment_mib": args.small_segment_mib, "templates": TEMPLATE_COUNT, "seed": SEED}
    manifest_path = os.path.join(root, "manifest.json")
    tpl_path = os.path.join(root, "template.pickle")
    t0 = time.perf_counter()
    tpl = build_template_specs(TEMPLATE_COUNT, SEED)
    tmpl = Template(tpl, root)
    cross = writer_crosscheck(tmpl, root)
    tmpl_sha = hashlib.sha256(tmpl.data.tobytes()).hexdigest()  # the generator's output: a changed generator rewrites
    print(f"generator: {TEMPLATE_COUNT} template messages written with CommitLogWriter; tiled bytes == "
          f"CommitLogWriter bytes on {cross} messages over 3 segments ({time.perf_counter() - t0:.1f} s)", flush=True)
    if os.path.exists(manifest_path):
        with open(manifest_path) as fh:
            old = json.load(fh)
        same = old.get("params") == params and old.get("template_sha256") == tmpl_sha
        if same and _files_ok(old):
            print(f"generator: reusing the logs in {root} (same parameters)", flush=True)
            return old
    for sub in ("log", "small"):
        shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    target = int(args.gib * GIB)
    full = max(2, -(-target // seg))
    tail = min(seg // 16, 64 * MIB)
    t0 = time.perf_counter()
    log_dir, small_dir = os.path.join(root, "log"), os.path.join(root, "small")
    layout = plan_log(tmpl, g0=0, base=0, segment_size=seg, full_segments=full, tail_bytes=tail)
    write_log(tmpl, log_dir, layout)
    small_layout = plan_log(tmpl, g0=0, base=0, segment_size=small, full_segments=1, tail_bytes=0)
    write_log(tmpl, small_dir, small_layout)
    with open(tpl_path, "wb") as fh:
        pickle.dump(tpl, fh)
    manifest = {"params": params, "log_dir": log_dir, "small_dir": small_dir, "template": tpl_path,
                "layout": layout, "small_layout": small_layout,
                "template_sha256": tmpl_sha}
    with open(manifest_path, "w") as fh:
        json.dump(manifest, fh, indent=1)
    data = sum(s["data_end"] for s in layout)
    print(f"generator: wrote {sum(s['count'] for s in layout):,} messages, {data / GIB:.2f} GiB of records in "
          f"{len(layout)} segments to {log_dir} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return manifest


def _files_ok(manifest: dict[str, Any]) -> bool:
    for d, layout in ((manifest["log_dir"], manifest["layout"]), (manifest["small_dir"], manifest["small_layout"])):
        if sorted(os.listdir(d)) != [s["name"] for s in layout] if os.path.isdir(d) else True:
            return False
        for s in layout:
            path = os.path.join(d, s["name"])
            if os.path.getsize(path) != s["segment_size"]:
                return False
            with open(path, "rb") as fh:
                fh.seek(s["data_end"])
                marker = fh.read(8)
            want = commitlog_encode.encode_blank(s["segment_size"] - s["data_end"]) if s["full"] else b"\0" * 8
            if marker != want:
                return False
    return os.path.exists(manifest["template"])


# -------------------------------------------------------------------------------------------- workers


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


class _Checker:
    """Checks decoded rows against what was written; nothing here runs inside a timed region."""

    def __init__(self, template_path: str, samples: list[int]) -> None:
        with open(template_path, "rb") as fh:
            self.tpl = pickle.load(fh)
        self.tmpl = _LightTemplate(self.tpl)
        self.samples = np.array(sorted(samples), np.int64)
        self.checked = 0
        self.errors: list[str] = []

    def expect(self, seg: dict[str, Any], g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = self.tmpl
        phys = seg["start"] + t.stream_start(g) - t.stream_start(np.array([seg["g0"]]))[0]
        return phys, t.queue_offset(g), t.size_of(g)

    def rows(self, seg: dict[str, Any], g_first: int, g_end: int, get_rows: Any) -> None:
        """Compare the sampled messages in [g_first, g_end) (decoded rows ``get_rows(idx)``) with what was written."""
        lo = np.searchsorted(self.samples, g_first)
        hi = np.searchsorted(self.samples, g_end)
        want = self.samples[lo:hi]
        if not len(want):
            return
        got = get_rows(want - g_first)
        phys, _, size = self.expect(seg, want)
        for g, ph, sz, row in zip(want.tolist(), phys.tolist(), size.tolist(), got):
            exp = expected_row(self.tpl, g, ph, sz, seg["name"])
            if row != exp:
                diff = {k: (row.get(k), exp[k]) for k in exp if row.get(k) != exp[k]}
                self.errors.append(f"message {g} ({seg['name']}): decoded != written: {diff}")
            self.checked += 1


class _LightTemplate:
    """Template offsets for the checks (no bytes)."""

    def __init__(self, tpl: dict[str, Any]) -> None:
        specs = tpl["specs"]
        self.n = tpl["count"]
        self.size = np.array([len(commitlog_encode.encode_message(physical_offset=0, **message_fields(tpl, j)))
                              for j in range(self.n)], np.int64)
        self.end = np.cumsum(self.size)
        self.pos = self.end - self.size
        self.cycle_bytes = int(self.end[-1])
        self.rank = np.array([s["rank"] for s in specs], np.int64)
        self.per_cycle = np.array([s["per_cycle"] for s in specs], np.int64)

    def stream_start(self, g: np.ndarray) -> np.ndarray:
        return (g // self.n) * self.cycle_bytes + self.pos[g % self.n]

    def queue_offset(self, g: np.ndarray) -> np.ndarray:
        return (g // self.n) * self.per_cycle[g % self.n] + self.rank[g % self.n]

    def size_of(self, g: np.ndarray) -> np.ndarray:
        return self.size[g % self.n]


def decode_worker(directory: str, layout: list[dict[str, Any]], template_path: str, samples: list[int],
                  chunk_bytes: int) -> dict[str, Any]:
    """Decode segments exactly as ingestion does (decode_file: memory map, bounded chunks), timing only the decoder."""
    import gc

    checker = _Checker(template_path, samples)
    gc.collect()
    rss_start = _status_kib("VmRSS")
    wall = cpu = 0.0
    total = chunks = 0
    errors = checker.errors
    for seg in layout:
        path = os.path.join(directory, seg["name"])
        gen = commitlog.decode_file(path, segment=seg["name"], chunk_bytes=chunk_bytes)
        g = seg["g0"]
        last = None
        while True:
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                res = next(gen)
            except StopIteration:
                break
            finally:
                wall += time.perf_counter() - w0
                cpu += time.process_time() - c0
            # ---- checks (not timed)
            chunks += 1
            last = res
            n = res.table.num_rows
            if res.problems:
                errors.append(f"{seg['name']}: problems {res.problems[:3]}")
            if n:
                gs = np.arange(g, g + n, dtype=np.int64)
                if g + n > seg["g0"] + seg["count"]:
                    errors.append(f"{seg['name']}: more records than written")
                    break
                phys, qoff, size = checker.expect(seg, gs)
                t = res.table
                for col, want in (("physical_offset", phys), ("queue_offset", qoff), ("size", size)):
                    got = t.column(col).to_numpy()
                    if not np.array_equal(got, want):
                        bad = int(np.flatnonzero(got != want)[0])
                        errors.append(f"{seg['name']}: {col} of message {g + bad} is {got[bad]}, wrote {want[bad]}")
                checker.rows(seg, g, g + n, lambda idx: t.take(idx).to_pylist())
                total += n
                g += n
        if g != seg["g0"] + seg["count"]:
            errors.append(f"{seg['name']}: decoded {g - seg['g0']} records, wrote {seg['count']}")
        want_end = (seg["data_end"], seg["full"])
        if last is None or (last.end, last.complete) != want_end:
            errors.append(f"{seg['name']}: decoder stopped at {None if last is None else (last.end, last.complete)}, "
                          f"expected (end, complete) = {want_end}")
    return {"messages": total, "wall": wall, "cpu": cpu, "chunks": chunks, "rss_start_kib": rss_start,
            "hwm_kib": _status_kib("VmHWM"), "checked_rows": checker.checked, "errors": errors[:20]}


def baseline_decode(buf: Any, seg_start: int, begin: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """A plain per-record loop: struct.unpack_from for the fixed fields, one dict per record."""
    head = struct.Struct(">iiiiiqqiq").unpack_from  # size magic crc queueId flag queueOffset phys sysFlag bornTs
    i32 = struct.Struct(">i").unpack_from
    i64 = struct.Struct(">q").unpack_from
    u16 = struct.Struct(">H").unpack_from
    i16 = struct.Struct(">h").unpack_from
    ntoa, ntop = socket.inet_ntoa, socket.inet_ntop
    out = []
    pos = begin
    while pos + 8 <= limit:
        size, magic = struct.unpack_from(">ii", buf, pos)
        if magic == commitlog.BLANK_MAGIC or (size == 0 and magic == 0):
            break
        if pos + size > limit:
            break
        if magic not in (commitlog.MAGIC_V1, commitlog.MAGIC_V2):
            raise ValueError(f"bad magic at {pos}")
        size, magic, _crc, queue_id, _flag, queue_offset, phys, sys_flag, born_ts = head(buf, pos)
        if phys != seg_start + pos:
            raise ValueError(f"physical offset mismatch at {pos}")
        p = pos + 48
        if sys_flag & commitlog.BORNHOST_V6:
            born_host = f"{ntop(socket.AF_INET6, buf[p:p + 16])}:{i32(buf, p + 16)[0]}"
            p += 20
        else:
            born_host = f"{ntoa(buf[p:p + 4])}:{i32(buf, p + 4)[0]}"
            p += 8
        store_ts = i64(buf, p)[0]
        p += 8
        if sys_flag & commitlog.STOREHOST_V6:
            store_raw = buf[p:p + 16]
            store_port = i32(buf, p + 16)[0]
            store_host = f"{ntop(socket.AF_INET6, store_raw)}:{store_port}"
            p += 20
        else:
            store_raw = buf[p:p + 4]
            store_port = i32(buf, p + 4)[0]
            store_host = f"{ntoa(store_raw)}:{store_port}"
            p += 8
        reconsume = i32(buf, p)[0]
        p += 12
        body_len = i32(buf, p)[0]
        p += 4 + body_len
        if magic == commitlog.MAGIC_V2:
            topic_len = i16(buf, p)[0]
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        topic = buf[p:p + topic_len].decode("utf-8")
        p += topic_len
        props_len = u16(buf, p)[0]
        p += 2
        props: dict[str, str] = {}
        for pair in buf[p:p + props_len].decode("utf-8").split("\x02"):
            if pair:
                k, sep, v = pair.partition("\x01")
                if sep:
                    props[k] = v
        out.append({
            "physical_offset": phys, "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset,
            "store_ts": store_ts, "born_ts": born_ts, "uniq_key": props.get("UNIQ_KEY"), "keys": props.get("KEYS"),
            "tags": props.get("TAGS"), "reconsume_times": reconsume, "properties": props, "size": size,
            "sys_flag": sys_flag, "born_host": born_host, "store_host": store_host,
            "offset_msg_id": f"{store_raw.hex().upper()}{store_port & 0xFFFFFFFF:08X}{phys & (2**64 - 1):016X}",
        })
        pos += size
    return out, pos


def baseline_worker(path: str, seg: dict[str, Any], limit: int, template_path: str, samples: list[int],
                    chunk_bytes: int) -> dict[str, Any]:
    """The baseline over the first ``limit`` bytes of a segment, in the same bounded chunks; checked on samples."""
    checker = _Checker(template_path, samples)
    wall = cpu = 0.0
    total = 0
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        pos = 0
        while pos < limit:
            hi = min(limit, pos + chunk_bytes)
            w0, c0 = time.perf_counter(), time.process_time()
            rows, end = baseline_decode(mm, seg["start"], pos, hi)
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
            g = seg["g0"] + total

            def as_decoded(idx: np.ndarray, rows: list[dict[str, Any]] = rows) -> list[dict[str, Any]]:
                out = []
                for i in idx.tolist():
                    r = dict(rows[i])
                    r["properties"] = list(r["properties"].items())
                    r["store_ts"] = dt.datetime.fromtimestamp(r["store_ts"] / 1000, UTC)
                    r["born_ts"] = dt.datetime.fromtimestamp(r["born_ts"] / 1000, UTC)
                    r["segment"], r["body"] = seg["name"], None
                    out.append(r)
                return out

            checker.rows(seg, g, g + len(rows), as_decoded)
            total += len(rows)
            if end == pos:
                break
            pos = end
        mm.close()
    return {"messages": total, "bytes": pos, "wall": wall, "cpu": cpu, "checked_rows": checker.checked,
            "errors": checker.errors[:20]}


def first_call_worker() -> dict[str, float]:
    """CPU seconds of the decoder's first call in this (fresh) process, on a few records, and of the second call:
    the first includes numba loading the compiled kernels (or compiling them, when the cache is cold)."""
    data = bytearray()
    for i in range(50):
        data += commitlog_encode.encode_message(
            topic="TopicTest", queue_id=0, queue_offset=i, physical_offset=len(data), body=b"x" * 100,
            properties={"TAGS": "a", "KEYS": "k", "UNIQ_KEY": f"{i:032X}"}, born_ts_ms=T0_MS, store_ts_ms=T0_MS,
            born_host=("10.0.0.1", 50000), store_host=STORE_HOST)
    times = []
    for _ in range(2):
        c0 = time.process_time()
        res = commitlog.decode_segment(bytes(data), segment_start=0, segment="warm-up")
        times.append(time.process_time() - c0)
        assert res.table.num_rows == 50 and not res.problems
    return {"first": times[0], "second": times[1]}


def run_in_child(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in a fresh spawned interpreter (its own peak RSS, no state carried between runs)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=2.0, help="GiB of records to write at least (default 2)")
    ap.add_argument("--segment-mib", type=int, default=1024, help="segment size in MiB (default 1024, the broker's)")
    ap.add_argument("--dir", default="/tmp/rmq-bench-commitlog", help="cache directory for the synthetic logs")
    ap.add_argument("--runs", type=int, default=3, help="decoder runs over the whole log (median reported)")
    ap.add_argument("--baseline-mib", type=int, default=200, help="MiB of the first segment the baseline decodes")
    ap.add_argument("--baseline-runs", type=int, default=3)
    ap.add_argument("--small-segment-mib", type=int, default=256, help="segment size of the second RSS measurement")
    ap.add_argument("--samples", type=int, default=3000, help="records compared field by field with what was written")
    args = ap.parse_args(argv)

    from jobs.ingest import decode

    if decode.CHUNK_BYTES != CHUNK_BYTES:
        print(f"note: jobs.ingest.decode.CHUNK_BYTES is {decode.CHUNK_BYTES}; using it", flush=True)
    chunk = decode.CHUNK_BYTES

    man = prepare(args)
    layout, small_layout = man["layout"], man["small_layout"]
    written = sum(s["count"] for s in layout)
    data_bytes = sum(s["data_end"] for s in layout)
    rng = np.random.default_rng(SEED)
    samples = set(rng.choice(written, size=min(args.samples, written), replace=False).tolist())
    for s in layout + small_layout:  # first and last record of every segment
        samples.update({s["g0"], s["g0"] + s["count"] - 1})
    samples_l = sorted(samples)
    first = layout[0]
    base_limit = min(args.baseline_mib * MIB, first["data_end"])

    print(f"benchmark: {len(layout)} segments of {args.segment_mib} MiB, {written:,} messages, "
          f"{data_bytes:,} bytes of records; chunk {chunk >> 20} MiB; {os.cpu_count()} CPUs; "
          f"load avg {os.getloadavg()[0]:.2f}", flush=True)
    jit = [run_in_child(first_call_worker) for _ in range(2)]  # the first fills numba's cache if it is cold
    print(f"  decoder first call in a fresh process: {jit[0]['first']:.2f} s CPU (compiles the kernels only if "
          f"numba's cache is missing or stale), then {jit[1]['first']:.2f} s CPU with the cache warm; a second call: "
          f"{jit[1]['second'] * 1000:.1f} ms", flush=True)
    dec_runs, base_runs = [], []
    for i in range(max(args.runs, args.baseline_runs)):
        if i < args.runs:
            r = run_in_child(decode_worker, man["log_dir"], layout, man["template"], samples_l, chunk)
            dec_runs.append(r)
            print(f"  decoder  run {i + 1}: {r['messages']:,} msgs, wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s, "
                  f"{r['messages'] / r['wall']:,.0f} msgs/s wall, {r['messages'] / r['cpu']:,.0f} msgs/cpu-s, "
                  f"peak RSS {r['hwm_kib'] / 1024:.0f} MiB, {r['checked_rows']} rows compared, "
                  f"{len(r['errors'])} errors", flush=True)
            for e in r["errors"]:
                print(f"    ERROR {e}", flush=True)
        if i < args.baseline_runs:
            b = run_in_child(baseline_worker, os.path.join(man["log_dir"], first["name"]), first, base_limit,
                             man["template"], samples_l, chunk)
            base_runs.append(b)
            print(f"  baseline run {i + 1}: {b['messages']:,} msgs ({b['bytes'] / MIB:.0f} MiB), wall {b['wall']:.2f} s, "
                  f"cpu {b['cpu']:.2f} s, {b['messages'] / b['wall']:,.0f} msgs/s wall, "
                  f"{b['messages'] / b['cpu']:,.0f} msgs/cpu-s, {b['checked_rows']} rows compared, "
                  f"{len(b['errors'])} errors", flush=True)
            for e in b["errors"]:
                print(f"    ERROR {e}", flush=True)
    rss = {}
    for label, d, lay in ((f"{args.segment_mib} MiB", man["log_dir"], [first]),
                          (f"{args.small_segment_mib} MiB", man["small_dir"], small_layout)):
        r = run_in_child(decode_worker, d, lay, man["template"], samples_l, chunk)
        rss[label] = r
        print(f"  RSS: one {label} segment: {r['messages']:,} msgs, peak RSS {r['hwm_kib'] / 1024:.0f} MiB "
              f"(RSS {r['rss_start_kib'] / 1024:.0f} MiB before decoding), {r['messages'] / r['cpu']:,.0f} msgs/cpu-s, "
              f"{len(r['errors'])} errors", flush=True)
        for e in r["errors"]:
            print(f"    ERROR {e}", flush=True)

    med = statistics.median
    dec_wall = med(r["messages"] / r["wall"] for r in dec_runs)
    dec_cpu = med(r["messages"] / r["cpu"] for r in dec_runs)
    base_wall = med(b["messages"] / b["wall"] for b in base_runs)
    base_cpu = med(b["messages"] / b["cpu"] for b in base_runs)
    ratio_cpu = med((r["messages"] / r["cpu"]) / (b["messages"] / b["cpu"]) for r, b in zip(dec_runs, base_runs))
    ratio_wall = med((r["messages"] / r["wall"]) / (b["messages"] / b["wall"]) for r, b in zip(dec_runs, base_runs))
    correct = (all(not r["errors"] and r["messages"] == written for r in dec_runs)
               and all(not b["errors"] for b in base_runs) and all(not r["errors"] for r in rss.values()))
    big, small = rss[f"{args.segment_mib} MiB"], rss[f"{args.small_segment_mib} MiB"]
    hwm_big, hwm_small = big["hwm_kib"] * 1024, small["hwm_kib"] * 1024
    growth = hwm_big - hwm_small

    def verdict(ok: bool) -> str:
        return "PASS" if ok and correct else "MISS" if correct else "INVALID (wrong output)"

    rows = [
        ("messages written", f"{written:,} in {len(layout)} segments ({sum(s['full'] for s in layout)} full + "
                             f"{sum(not s['full'] for s in layout)} partly written)", ""),
        ("bytes of records", f"{data_bytes:,} ({data_bytes / GIB:.2f} GiB); files {len(layout)} x "
                             f"{args.segment_mib} MiB", ""),
        ("messages decoded / correct", f"{med(r['messages'] for r in dec_runs):,} / "
                                       f"{'yes' if correct else 'NO'} ({dec_runs[0]['checked_rows']} rows compared "
                                       "field by field, every offset/size checked)", ""),
        ("decoder wall / CPU seconds", f"{med(r['wall'] for r in dec_runs):.2f} s / {med(r['cpu'] for r in dec_runs):.2f} s "
                                       f"(runs: {', '.join(format(r['cpu'], '.2f') for r in dec_runs)} CPU s)", ""),
        ("decoder first call, one-time", f"{jit[1]['first']:.2f} s CPU per fresh process, numba cache warm "
                                         "(included in the decoder timings)", ""),
        ("decoder msgs/s (wall)", f"{dec_wall:,.0f}", ""),
        ("decoder msgs per CPU-second", f"{dec_cpu:,.0f}", f"{verdict(dec_cpu >= TARGET_RATE)} (>= 1,000,000)"),
        ("baseline wall / CPU seconds", f"{med(b['wall'] for b in base_runs):.2f} s / "
                                        f"{med(b['cpu'] for b in base_runs):.2f} s on first {base_limit / MIB:.0f} MiB "
                                        f"({base_runs[0]['messages']:,} msgs)", ""),
        ("baseline msgs/s (wall)", f"{base_wall:,.0f}", ""),
        ("baseline msgs per CPU-second", f"{base_cpu:,.0f}", ""),
        ("ratio decoder/baseline (CPU)", f"{ratio_cpu:.1f}x (wall {ratio_wall:.1f}x)",
         f"{verdict(ratio_cpu >= TARGET_RATIO)} (>= 10x)"),
        (f"peak RSS, {args.segment_mib} MiB segment", f"{hwm_big / MIB:,.0f} MiB",
         f"{verdict(hwm_big <= TARGET_RSS_BYTES)} (<= {TARGET_RSS_BYTES // MIB} MiB)"),
        (f"peak RSS, {args.small_segment_mib} MiB segment", f"{hwm_small / MIB:,.0f} MiB", ""),
        ("RSS growth with segment size", f"{growth / MIB:+,.0f} MiB for {args.segment_mib - args.small_segment_mib:,} "
                                         "MiB more segment", f"{verdict(growth <= TARGET_RSS_GROWTH)} "
                                                             f"(<= {TARGET_RSS_GROWTH // MIB} MiB)"),
        ("peak RSS, whole-log decode", f"{med(r['hwm_kib'] for r in dec_runs) / 1024:,.0f} MiB", ""),
    ]
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    print()
    print(f"Commitlog decode benchmark ({len(dec_runs)} decoder runs, {len(base_runs)} baseline runs; medians; "
          f"python {sys.version.split()[0]}, numpy {np.__version__}, numba {numba.__version__})")
    print(f"{'figure':<{w1}} | {'value':<{w2}} | target")
    print(f"{'-' * w1}-+-{'-' * w2}-+-{'-' * 24}")
    for a, b, c in rows:
        print(f"{a:<{w1}} | {b:<{w2}} | {c}")
    print(f"\nload average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (other workloads inflate wall time "
          "and, less, CPU time); per-core throughput = messages / CPU seconds of the decoding process")
    du = sum(os.stat(os.path.join(dp, f)).st_blocks * 512 for dp, _, fs in os.walk(args.dir) for f in fs)
    print(f"\ncache: {args.dir} ({du / GIB:.2f} GiB on disk; segment files are sparse past their data)")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
