"""Commitlog decoding as engine tasks (issue 13): the driver plans work units, the engine's tasks decode them.

Why: sending decoded records from the driver to the engine made the driver hold and serialise every record (a
standalone cluster's Connect server died of heap exhaustion on the 100k-row local relations, and the driver could
only use one core). Now the driver lists files and reads the segment ledger (bronze/segments) only; the records
never pass through it.

A work unit is one commitlog segment of one broker with its copies in the snapshots this run takes, in snapshot
order, and the ledger's state for it: each copy is read from where the previous one stopped, so a segment's copies
stay in one task. Units are packed into tasks of about ``task_bytes`` to read; :func:`decode_tasks` (the function
handed to ``mapInArrow``, importable on any executor) reads its segments' bytes itself (local disk or S3), decodes
them with :mod:`jobs.formats.commitlog` and yields Arrow batches of one wide schema, :data:`OUTPUT`, whose ``kind`` says
what a row is: a message, a trace record, a problem (the quarantine's source path, position and reason, in the
order the decode found them) or, one per unit, its progress (the segment's new state, its bronze/files rows and the
record ranges it covered, as JSON) from which the driver records bronze/segments as before.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

UTC = dt.timezone.utc
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
UNREADABLE_HINT = "not read; fix it, then run ingest --retake"
_TS = pa.timestamp("us", tz="UTC")
_STR = pa.string()

# where a piece of a split segment looks for its first record start: a record is at most 4 MiB (the broker's
# maxMessageSize); finding none there, the pieces do not chain and the segment is decoded whole
SYNC_WINDOW = 8 << 20

# kinds of output rows
MESSAGE, TRACE, PROBLEM, PROGRESS = "message", "trace", "problem", "progress"
POP_CK, POP_ACK = "pop_ck", "pop_ack"  # POP checkpoints and acks (silver/pop_checkpoints, silver/pop_acks)
# the records whose bodies a rule reads: traces, and POP checkpoints and acks (timer copies and revive copies)
BODY_TOPICS = frozenset({TRACE_TOPIC, "rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG_*"})

_MESSAGE_FIELDS = [
    ("physical_offset", pa.int64()), ("topic", _STR), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("store_ts", _TS), ("born_ts", _TS), ("uniq_key", _STR), ("keys", _STR), ("tags", _STR),
    ("reconsume_times", pa.int32()), ("properties", pa.map_(_STR, _STR)), ("size", pa.int32()),
    ("sys_flag", pa.int32()), ("born_host", _STR), ("store_host", _STR), ("offset_msg_id", _STR), ("segment", _STR),
    ("first_snapshot_ts", _TS),
]
# trace_records columns not among the messages' (same names have the same types)
_TRACE_ONLY = [
    ("record_index", pa.int32()), ("client_host", _STR), ("type", _STR), ("timestamp", _TS), ("group", _STR),
    ("request_id", _STR), ("msg_id", _STR), ("retry_times", pa.int32()), ("cost_time_ms", pa.int64()),
    ("success", pa.bool_()), ("context_code", pa.int32()), ("msg_type", pa.int32()),
]
# POP checkpoint and ack columns not among the others' (a POP row's topic, queue_id, consumer_group are the
# popped queue's and group's; physical_offset, store_ts the carrying message's)
_POP_ONLY = [
    ("stored_topic", _STR), ("consumer_group", _STR), ("start_offset", pa.int64()), ("pop_time", pa.int64()),
    ("broker_name", _STR), ("invisible_time", pa.int64()), ("bitmap", pa.int32()), ("num", pa.int32()),
    ("revive_offset", pa.int64()), ("deltas", pa.list_(pa.int32())), ("reput_times", _STR),
    ("revive_time", pa.int64()), ("ack_offsets", pa.list_(pa.int64())), ("ack_kind", _STR),
]
OUTPUT_ARROW = pa.schema(
    [("kind", _STR), ("unit", pa.int64()), ("seq", pa.int64()), ("cluster", _STR), ("broker", _STR),
     ("snapshot_ts", _TS)]
    + _MESSAGE_FIELDS + _TRACE_ONLY + _POP_ONLY
    + [("source_path", _STR), ("position", pa.int64()), ("reason", _STR), ("info", _STR)]
)

# silver/messages' columns (schemas.messages, as jobs.lake._delta._arrow_schema gives them): the columns of an export's
# messages files (jobs.export.layout), which the lake adopts as they are
MESSAGES_ARROW = pa.schema([("cluster", _STR), ("broker", _STR)] + _MESSAGE_FIELDS)


def output_ddl() -> str:
    """:data:`OUTPUT_ARROW` as a Spark DDL string (the ``mapInArrow`` schema)."""
    names = {pa.int64(): "BIGINT", pa.int32(): "INT", _STR: "STRING", _TS: "TIMESTAMP", pa.bool_(): "BOOLEAN"}
    cols = []
    for f in OUTPUT_ARROW:
        typ = ("MAP<STRING, STRING>" if pa.types.is_map(f.type) else
               f"ARRAY<{names[f.type.value_type]}>" if pa.types.is_list(f.type) else names[f.type])
        cols.append(f"`{f.name}` {typ}")
    return ", ".join(cols)


# ------------------------------------------------------------------------------------------------- plan


def plan_units(snaps: Iterable[Any], state: dict[tuple[str, str, str], Any], seen_paths: frozenset[str],
               problem: Callable[[Any, Any], None], *, chunk_bytes: int, batch_rows: int,
               trace_batch_rows: int) -> list[dict[str, Any]]:
    """The work units of ``snaps`` (broker snapshots in ledger order): one per segment, its copies in order.

    Reads nothing but the listing. ``state`` maps (cluster, broker, segment) to the ledger's SegmentState;
    ``problem(snap, Problem)`` records what the listing alone shows (an empty segment followed by a newer one).
    """
    from jobs.problems import Problem

    units: dict[tuple[str, str, str], dict[str, Any]] = {}
    for snap in snaps:
        segs = sorted(snap.of_kind("commitlog"), key=lambda f: f.start or 0)
        for i, f in enumerate(segs):
            name = f.rel.rsplit("/", 1)[-1]
            if f.size == 0 and i < len(segs) - 1:
                # The newest segment may be empty (just created); one followed by another has lost its records.
                problem(snap, Problem(f.path, 0, "empty commitlog segment (0 bytes) followed by a newer one: its "
                                      "records are missing from this copy; nothing read"))
                continue
            key = (snap.cluster, snap.broker, name)
            u = units.get(key)
            if u is None:
                st = state.get(key)
                u = units[key] = {
                    "unit": len(units), "cluster": snap.cluster, "broker": snap.broker, "segment": name,
                    "state": None if st is None else {
                        "start_offset": st.start_offset, "decoded_to": st.decoded_to,
                        "segment_size": st.segment_size, "complete": st.complete,
                        "snapshot_ts": st.snapshot_ts.isoformat() if st.snapshot_ts else None},
                    "chunk_bytes": chunk_bytes, "batch_rows": batch_rows, "trace_batch_rows": trace_batch_rows,
                    "copies": []}
            # Full: a newer segment follows (the broker rolls only when a file is full) and this file has the full
            # size (the distance to the next one's start), so a segment still being uploaded is read again later.
            has_newer = i < len(segs) - 1 and f.size >= (segs[i + 1].start or 0) - (f.start or 0)
            u["copies"].append({"ts": snap.ts.isoformat(), "folder": snap.folder, "path": f.path, "uri": f.uri,
                                "size": f.size, "start": f.start or 0, "has_newer": has_newer,
                                "seen": f.path in seen_paths})
    return list(units.values())


def reads_nothing(unit: dict[str, Any]) -> bool:
    """Whether no copy of the unit has bytes past what the ledger says was decoded (the driver settles it)."""
    st = unit["state"]
    if st is None:
        return False
    return all(st["complete"] or c["size"] <= st["decoded_to"] for c in unit["copies"])


def split_units(units: list[dict[str, Any]], split_bytes: int) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Units whose first copy is a full segment with at least ``2 * split_bytes`` to read, cut into pieces of
    ``split_bytes`` to ``2 * split_bytes`` (a broker's 1 GiB segment is otherwise one task on one core).

    A piece is a unit with ``piece`` = {index, count, lo, hi}: it decodes the records that start in [lo, hi) of the
    first copy, from the first record start at or after ``lo`` (found by :func:`jobs.formats.commitlog.first_record_at`;
    piece 0 starts where the ledger says), and its progress row says where it started and stopped, so that
    :func:`merge_pieces` can check that the pieces chain record to record. Only a full segment (a newer one follows)
    is split: it is complete after this copy, so the later copies read nothing and the driver settles them.

    Returns the units to decode (pieces in place of the units split) and the units split, by unit number.
    """
    if split_bytes <= 0:
        return units, {}
    work: list[dict[str, Any]] = []
    split: dict[int, dict[str, Any]] = {}
    for u in units:
        st, c0 = u["state"], u["copies"][0]
        begin = st["decoded_to"] if st else 0
        k = (c0["size"] - begin) // split_bytes
        if (st and st["complete"]) or not c0["has_newer"] or k < 2:
            work.append(u)
            continue
        split[u["unit"]] = u
        cuts = [begin + (c0["size"] - begin) * j // k for j in range(k)] + [None]
        for j in range(k):
            work.append({**u, "copies": [c0], "state": st if j == 0 else None,
                         "piece": {"index": j, "count": k, "lo": cuts[j], "hi": cuts[j + 1]}})
    return work, split


def pack(units: list[dict[str, Any]], task_bytes: int, min_tasks: int) -> list[list[dict[str, Any]]]:
    """Units packed into tasks of about ``task_bytes`` to read (at least ``min_tasks`` when there are as many
    units), largest first onto the least loaded task."""
    def cost(u: dict[str, Any]) -> int:
        if u.get("piece"):
            p = u["piece"]
            return (p["hi"] if p["hi"] is not None else u["copies"][0]["size"]) - p["lo"] + 4096
        begin = u["state"]["decoded_to"] if u["state"] else 0
        return max(max((c["size"] for c in u["copies"]), default=0) - begin, 0) + 4096

    total = sum(cost(u) for u in units)
    n = max(1, min(len(units), max(min_tasks, -(-total // max(task_bytes, 1)))))
    tasks: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    load = [0] * n
    for u in sorted(units, key=cost, reverse=True):
        k = load.index(min(load))
        tasks[k].append(u)
        load[k] += cost(u)
    for t in tasks:
        t.sort(key=lambda u: u["unit"])
    return [t for t in tasks if t]


# ------------------------------------------------------------------------------------------------- decode


def decode_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: rows of (task, units JSON) -> :data:`OUTPUT_ARROW` batches.

    A task that shares its interpreter with other tasks decodes in a helper process (jobs.ingest.decode_worker)."""
    from jobs.ingest import decode_worker

    for batch in batches:
        for text in batch.column("units").to_pylist():
            units = json.loads(text)
            if decode_worker.isolated():
                yield from decode_worker.run(units)
            else:
                for unit in units:
                    yield from decode_unit(unit)


def _batch(kind: str, unit: int, n: int, cols: dict[str, pa.Array], seq0: int = 0) -> pa.RecordBatch:
    # Constant columns by pa.repeat and numpy, not Python lists: the decode runs under the GIL of the process that
    # hosts it (embedded Sail: the driver's), and building n-element lists was half of its time (issue 13).
    arrays = []
    for f in OUTPUT_ARROW:
        if f.name == "kind":
            arrays.append(pa.repeat(pa.scalar(kind, _STR), n))
        elif f.name == "unit":
            arrays.append(pa.repeat(pa.scalar(unit, pa.int64()), n))
        elif f.name == "seq":
            arrays.append(pa.array(np.arange(seq0, seq0 + n, dtype=np.int64)))
        elif f.name in cols:
            a = cols[f.name]
            arrays.append(a if a.type == f.type else a.cast(f.type))
        else:
            arrays.append(_ONE_NULL[f.name] if n == 1 else pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_ARROW)


# A progress row (one a segment and run, most of its ~50 columns null) built its null columns afresh each time:
# 0.28 ms a row, 0.1 s of a bulk broker's 23 exports (stop 59). Arrow arrays are immutable: shared.
_ONE_NULL = {f.name: pa.nulls(1, f.type) for f in OUTPUT_ARROW}
_COLUMN = {f.name: i for i, f in enumerate(OUTPUT_ARROW)}
_PROGRESS_ROW = _batch(PROGRESS, 0, 1, {})  # (seq 0, the rest null but for the columns progress_batch sets)


def _parse_ts(s: str | None) -> dt.datetime | None:
    return None if s is None else dt.datetime.fromisoformat(s)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Out:
    """What one unit yields, in the order the decode finds it."""

    def __init__(self, unit: dict[str, Any]) -> None:
        self.unit = unit["unit"]
        self.cluster, self.broker = unit["cluster"], unit["broker"]
        self.seq = 0
        self.problems: list[tuple[str, str, int, str]] = []  # (snapshot ts, path, position, reason)
        self.trace: list[dict[str, pa.Array]] = []  # trace rows, column by column, a part per chunk
        self.trace_rows = 0
        self.pop: dict[str, list[dict[str, pa.Array]]] = {POP_CK: [], POP_ACK: []}  # POP rows, as trace
        self.pop_rows = 0

    def problem(self, ts: str, path: str, position: int, reason: str) -> None:
        self.problems.append((ts, path, position, reason))

    def flush_problems(self) -> Iterator[pa.RecordBatch]:
        if not self.problems:
            return
        n = len(self.problems)
        ts, path, pos, reason = zip(*self.problems)
        yield _batch(PROBLEM, self.unit, n, {
            "cluster": pa.array([self.cluster] * n, _STR), "broker": pa.array([self.broker] * n, _STR),
            "snapshot_ts": pa.array([_parse_ts(t) for t in ts], _TS), "source_path": pa.array(path, _STR),
            "position": pa.array(pos, pa.int64()), "reason": pa.array(reason, _STR)}, self.seq)
        self.seq += n
        self.problems = []

    def flush_trace(self) -> Iterator[pa.RecordBatch]:
        n = self.trace_rows
        if not n:
            return
        cols = {name: pa.concat_arrays([p[name] for p in self.trace]) for name in self.trace[0]}
        # epoch milliseconds as the clients write them, converted column-wise (not one datetime per record)
        cols["timestamp"] = cols.pop("timestamp_ms").cast(pa.timestamp("ms", tz="UTC")).cast(_TS)
        cols["cluster"] = pa.repeat(pa.scalar(self.cluster, _STR), n)
        cols["broker"] = pa.repeat(pa.scalar(self.broker, _STR), n)
        yield _batch(TRACE, self.unit, n, cols)
        self.trace = []
        self.trace_rows = 0


    def flush_pop(self) -> Iterator[pa.RecordBatch]:
        for kind, parts in self.pop.items():
            if not parts:
                continue
            cols = {name: pa.concat_arrays([p[name] for p in parts]) for name in parts[0]}
            n = len(cols["physical_offset"])
            cols["cluster"] = pa.repeat(pa.scalar(self.cluster, _STR), n)
            cols["broker"] = pa.repeat(pa.scalar(self.broker, _STR), n)
            yield _batch(kind, self.unit, n, cols)
            self.pop[kind] = []
        self.pop_rows = 0


def _messages(tbl: pa.Table, cluster: str, broker: str, ts: dt.datetime, unit: int) -> Iterator[pa.RecordBatch]:
    """A batch per chunk of ``tbl`` (each a decoded read window's records), not one combined batch: combining copied
    every column once more, the properties maps above all (0.12 s per million messages, an exporter's profile)."""
    names = [name for name, _ in _MESSAGE_FIELDS if name in tbl.column_names]
    for rb in tbl.select(names).to_batches():
        n = rb.num_rows
        if not n:
            continue
        cols = dict(zip(names, rb.columns))
        cols["cluster"] = pa.repeat(pa.scalar(cluster, _STR), n)
        cols["broker"] = pa.repeat(pa.scalar(broker, _STR), n)
        cols["first_snapshot_ts"] = cols["snapshot_ts"] = pa.repeat(pa.scalar(ts, _TS), n)
        yield _batch(MESSAGE, unit, n, cols)


def _without(tbl: pa.Table, rows: np.ndarray) -> pa.Table:
    keep = np.ones(tbl.num_rows, dtype=bool)
    keep[rows] = False
    return tbl.filter(pa.array(keep))


def _named_records(out: _Out, tbl: pa.Table, ts: str, path: str, segment_start: int) -> pa.Table:
    """The records whose topic is one RocketMQ can write; the others quarantined (a crafted commitlog's topic would
    reach the reports: the broker validates every topic it stores, TopicValidator)."""
    from jobs.formats import names

    rows, bad = names.bad_rows(tbl.column("topic").combine_chunks(), names.topic_problem)
    if not len(rows):
        return tbl
    topics, phys = tbl.column("topic").take(rows).to_pylist(), tbl.column("physical_offset").take(rows).to_pylist()
    for topic, p in zip(topics, phys):
        at = int(p) - segment_start
        out.problem(ts, path, at, f"record at byte {at}: topic '{names.shown(topic)}' {bad[topic]}: record skipped")
    return _without(tbl, rows)


def _unwrapped(out: _Out, tbl: pa.Table, ts: str, path: str, segment_start: int) -> pa.Table:
    """The records as the messages a consumer sees (without bodies): an ``INNER_BATCH`` record (a batch sent to a
    BatchCQ topic, rocketmq5.md §5) is its inner messages, one row each at queue offset QUEUEOFFSET + i with its own
    UNIQ_KEY, KEYS, TAGS and properties and the record's other fields (``MessageDecoder.decodeMessage``, what
    ``PullAPIWrapper`` hands the listener). A record none of whose inner messages can be placed stays one row (its
    problem says why: the trace rules cannot follow its messages); problems name the record's byte."""
    from jobs.formats import inner_batch

    base = tbl.drop_columns(["body"])
    rows, problems = inner_batch.unwrap(tbl, source_path=path, segment_start=segment_start)
    for p in problems:
        out.problem(ts, path, p.position, p.reason)
    if not rows.num_rows:
        return base
    phys = base.column("physical_offset").to_numpy()
    outer = np.searchsorted(phys, rows.column("physical_offset").to_numpy())  # decoded in physical order
    replaced = np.zeros(len(phys), bool)
    replaced[outer] = True
    inner = {name: (rows.column(name) if name in rows.column_names else base.column(name).take(pa.array(outer)))
             for name in base.column_names}
    inner_tbl = pa.table({name: inner[name].cast(base.schema.field(name).type) for name in base.column_names},
                         schema=base.schema)
    if replaced.all():
        return inner_tbl
    merged = pa.concat_tables([base.filter(pa.array(~replaced)), inner_tbl])
    return merged.sort_by([("physical_offset", "ascending"), ("queue_offset", "ascending")]).combine_chunks()


def _named_traces(out: _Out, recs: pa.Table, positions: np.ndarray, ts: str, path: str) -> pa.Table:
    """The trace records whose group and topic are names RocketMQ allows; the others quarantined (a trace body is
    a message any client can write: a hostile host's group name would reach the reports)."""
    from jobs.formats import names

    for column, problem in (("group", names.group_problem), ("topic", names.topic_problem)):
        rows, bad = names.bad_rows(recs.column(column).combine_chunks(), problem)
        if not len(rows):
            continue
        cols = [recs.column(c).take(rows).to_pylist() for c in (column, "body", "record_index")]
        for value, body, index in zip(*cols):
            at = int(positions[body])
            out.problem(ts, path, at, f"trace message at byte {at}: record {index}'s {column} "
                        f"'{names.shown(value)}' {bad[value]}: record skipped")
        recs = _without(recs, rows)
    return recs


def _trace_rows(out: _Out, tbl: pa.Table, ts: str, segment_path: str, segment_start: int) -> None:
    """Decode the trace message bodies of ``tbl`` into bronze/trace_records rows (problems in order)."""
    from jobs.formats import trace

    import pyarrow.compute as pc

    sub = tbl.filter(pc.fill_null(pc.equal(tbl.column("topic"), TRACE_TOPIC), False))
    if not sub.num_rows:
        return
    offsets = sub.column("physical_offset").combine_chunks()
    recs, problems = trace.decode_trace_messages(
        sub.column("body").combine_chunks(), offsets.to_numpy() - segment_start, segment_path)
    for p in problems:
        out.problem(ts, p.source_path, p.position, p.reason)
    recs = _named_traces(out, recs, offsets.to_numpy() - segment_start, ts, segment_path)
    n = recs.num_rows
    if not n:
        return
    body = recs.column("body").combine_chunks()
    # the host part of the producer's or consumer's address (``host:port``)
    host = pc.replace_substring_regex(pc.fill_null(sub.column("born_host").combine_chunks(), ""), ":[^:]*$", "")
    part = {name: recs.column(name).combine_chunks() for name, _ in trace.COLUMNS}
    part.update(physical_offset=offsets.take(body), client_host=host.take(body),
                record_index=recs.column("record_index").combine_chunks(),
                first_snapshot_ts=pa.repeat(pa.scalar(_parse_ts(ts), _TS), n))
    out.trace.append(part)
    out.trace_rows += n


def _pop_rows(out: _Out, tbl: pa.Table, ts: str, segment_path: str, segment_start: int) -> None:
    """Decode the POP checkpoint and ack bodies of ``tbl`` (the revive topic's messages, and the timer topic's
    whose REAL_TOPIC is a revive topic) into silver/pop_checkpoints and silver/pop_acks rows (problems in order)."""
    import pyarrow.compute as pc

    from jobs.formats import names, pop

    topic = tbl.column("topic").combine_chunks()
    revive = pc.fill_null(pc.starts_with(topic, pop.REVIVE_TOPIC_PREFIX), False)
    timer = pc.fill_null(pc.equal(topic, pop.TIMER_TOPIC), False)
    if not (pc.any(revive).as_py() or pc.any(timer).as_py()):
        return
    real = (pc.map_lookup(tbl.column("properties").combine_chunks(), pop.PROPERTY_REAL_TOPIC, "first")
            if pc.any(timer).as_py() else pa.nulls(len(topic), _STR))
    wanted = pc.or_(revive, pc.and_(timer, pc.fill_null(pc.starts_with(real, pop.REVIVE_TOPIC_PREFIX), False)))
    tags = pc.fill_null(tbl.column("tags").combine_chunks(), "")
    wanted = pc.and_(wanted, pc.is_in(tags, pa.array(list(pop.TAGS), _STR)))
    sub = tbl.filter(wanted)
    if not sub.num_rows:
        return
    offsets = sub.column("physical_offset").combine_chunks()
    extra = pa.table({"physical_offset": offsets, "stored_topic": sub.column("topic").combine_chunks(),
                      "store_ts": sub.column("store_ts").combine_chunks()})
    cks, acks, problems = pop.decode_pop_bodies(sub.column("tags").combine_chunks(), sub.column("body").combine_chunks(),
                                                positions=offsets.to_numpy() - segment_start,
                                                source_path=segment_path, extra=extra, default_broker_name=out.broker)
    for p in problems:
        out.problem(ts, p.source_path, p.position, p.reason)
    first = _parse_ts(ts)
    for kind, rows in ((POP_CK, cks), (POP_ACK, acks)):
        # a body any client can send to the revive topic: names RocketMQ cannot produce are quarantined (issue 34)
        for column, problem in (("consumer_group", names.group_problem), ("topic", names.topic_problem)):
            bad_rows, bad = names.bad_rows(rows.column(column).combine_chunks(), problem)
            if not len(bad_rows):
                continue
            for value, phys in zip(rows.column(column).take(bad_rows).to_pylist(),
                                   rows.column("physical_offset").take(bad_rows).to_pylist()):
                at = int(phys) - segment_start
                out.problem(ts, segment_path, at, f"POP {kind[4:]} message at byte {at}: {column} "
                            f"'{names.shown(value)}' {bad[value]}: skipped")
            rows = _without(rows, bad_rows)
        if not rows.num_rows:
            continue
        part = {name: rows.column(name).combine_chunks() for name in rows.column_names if name != "record"}
        if kind == POP_ACK:
            part["ack_kind"] = part.pop("kind")
        part["first_snapshot_ts"] = pa.repeat(pa.scalar(first, _TS), rows.num_rows)
        out.pop[kind].append(part)
        out.pop_rows += rows.num_rows


def decode_unit(unit: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """Decode the copies of one segment in snapshot order; the last batch is the unit's progress row.

    A segment already decoded to its end is skipped without reading it; otherwise only the bytes after
    ``decoded_to`` are read. A segment followed by a newer one in the snapshot, at its full size, is complete by
    definition (the broker only rolls to a new file when the old one is full). A piece of a split segment
    (:func:`split_units`) decodes the records starting in its byte range; its progress row is a piece's
    (:func:`merge_pieces`).
    """
    from jobs.formats import commitlog, configs
    from jobs.lake import storage

    out = _Out(unit)
    piece = unit.get("piece")
    if piece:  # problems sort by (unit, seq): a piece's come after those of the pieces before it
        out.seq = piece["index"] << 40
    chunk_bytes, batch_rows, trace_rows = unit["chunk_bytes"], unit["batch_rows"], unit["trace_batch_rows"]
    st = dict(unit["state"]) if unit["state"] else None
    files: list[dict[str, Any]] = []
    ranges: list[tuple[str, int, int]] = []  # (snapshot ts, lo, hi): the record ranges known after each copy
    decoded: list[tuple[str, int, int]] = []  # (snapshot ts, lo, hi) of the bytes that gave records
    pending: list[pa.Table] = []
    pending_rows = 0
    first: int | None = None  # a piece: where it started (None: no record starts in its first window)
    reached = complete = failed = False
    end_abs = 0
    digest = hashlib.sha256()
    for c in unit["copies"]:
        ts, path = c["ts"], c["path"]
        snap_ts = _parse_ts(ts)
        if st is None:
            st = {"start_offset": c["start"], "decoded_to": 0, "segment_size": 0, "complete": False, "snapshot_ts": ts}
        start = st["start_offset"]
        begin = st["decoded_to"]
        if not piece and (st["complete"] or c["size"] <= begin):
            if c["has_newer"] and not st["complete"]:
                st["complete"] = True
            if not c["seen"]:
                files.append({"ts": ts, "path": path, "size": c["size"], "sha256": _sha(b""), "read_from": begin,
                              "read_to": begin})
            ranges.append((ts, start, start + st["decoded_to"]))
            continue
        pos = begin
        stop = piece["hi"] if piece else None  # records starting at or after it are the next piece's
        digest = hashlib.sha256()
        complete = failed = cut_short = False
        end_abs = begin
        size = c["size"]
        if piece and piece["index"] > 0:
            try:
                window = storage.read_bytes(c["uri"], piece["lo"], min(size, piece["lo"] + SYNC_WINDOW)) or b""
            except OSError:
                failed = True
                break
            at = commitlog.first_record_at(window, start + piece["lo"])
            if at < 0:
                break
            pos = end_abs = piece["lo"] + at
        first = pos
        while pos < size:
            hi = min(size, pos + chunk_bytes)
            try:
                data = storage.read_bytes(c["uri"], pos, hi) or b""
            except OSError as exc:  # this segment only; the next snapshot's copy is read from the same position
                out.problem(ts, path, pos, f"unreadable ({configs.unreadable(exc)}): {UNREADABLE_HINT}")
                failed = True
                break
            final = hi >= size
            res = commitlog.decode_segment(data, segment_start=start + pos, segment=path, final=final,
                                           body_topics=BODY_TOPICS)
            tbl, found, res_end, res_complete = res.table, res.problems, res.end, res.complete
            cut_short = cut_short or (res.cut and final)
            if stop is not None:
                cut = stop - pos
                offs = tbl.column("physical_offset").to_numpy() - (start + pos)
                later = np.flatnonzero(offs >= cut)
                if len(later) or res_end >= cut:
                    # the first record start at or after the cut ends this piece (the next one starts there)
                    res_end = int(offs[later[0]]) if len(later) else res_end
                    tbl = tbl.slice(0, int(later[0])) if len(later) else tbl
                    found = [p for p in found if p.position < res_end]
                    res_complete, reached = False, True
            for p in found:
                out.problem(ts, path, p.position + pos,
                            p.reason.replace(f"at byte {p.position}", f"at byte {p.position + pos}"))
            lo, hi_abs = pos, pos + res_end
            digest.update(memoryview(data)[:res_end])  # no copy of the chunk
            tbl = _named_records(out, tbl, ts, path, start)
            if tbl.num_rows:
                ranges.append((ts, start + lo, start + hi_abs))
                decoded.append((ts, start + lo, start + hi_abs))
                _trace_rows(out, tbl, ts, f"{c['folder']}/store/commitlog/{unit['segment']}", start)
                _pop_rows(out, tbl, ts, f"{c['folder']}/store/commitlog/{unit['segment']}", start)
                msgs = _unwrapped(out, tbl, ts, path, start)
                pending.append(msgs)
                pending_rows += msgs.num_rows
                if pending_rows >= batch_rows:
                    yield from _messages(pa.concat_tables(pending), out.cluster, out.broker, snap_ts, out.unit)
                    pending, pending_rows = [], 0
                if out.trace_rows >= trace_rows:
                    yield from out.flush_trace()
                if out.pop_rows >= trace_rows:
                    yield from out.flush_pop()
            end_abs = hi_abs
            if reached:
                break
            if res_complete:
                complete = True
                break
            if res_end == 0 and not final:
                # Zeros where a record should start: the preallocated, unwritten rest of the broker's newest
                # segment. Anything else is a record no broker writes (maxMessageSize is 4 MiB): quarantined.
                if any(data[:8]):
                    out.problem(ts, path, pos, f"a record at byte {pos} is larger than the {chunk_bytes}-byte read "
                                "window; decoding of this segment stops here")
                break
            if final or res_end == 0 or (res_end < len(data) and not tbl.num_rows):
                break
            pos += res_end
        if pending:  # a batch holds the records of one snapshot (first_snapshot_ts)
            yield from _messages(pa.concat_tables(pending), out.cluster, out.broker, snap_ts, out.unit)
            pending, pending_rows = [], 0
        if failed or piece:
            continue  # the segment's state stays as it was: a later copy is read from the same position
        # A copy cut short or damaged at its end is not the segment's last word, even with a newer segment beside it:
        # a later copy is read from where this one stopped. Unless this copy is that later one and stopped there
        # too, no larger: the damage is the broker's own file, and reading every later copy again would find it again.
        stalled = cut_short and end_abs <= begin and size <= st["segment_size"]
        st["decoded_to"] = max(st["decoded_to"], end_abs)
        st["segment_size"] = size
        st["complete"] = complete or (c["has_newer"] and (not cut_short or stalled))
        st["snapshot_ts"] = ts
        ranges.append((ts, start, start + st["decoded_to"]))
        if end_abs > begin or not c["seen"]:  # a re-read that found nothing new is not a new file version
            files.append({"ts": ts, "path": path, "size": size, "sha256": digest.hexdigest(), "read_from": begin,
                          "read_to": end_abs})
    yield from out.flush_trace()
    yield from out.flush_pop()
    yield from out.flush_problems()
    if piece:
        info = {"segment": unit["segment"], "piece": piece["index"], "count": piece["count"], "first": first,
                "end": end_abs,
                "reached": reached, "complete": complete, "failed": failed, "sha256": digest.hexdigest(),
                "ranges": ranges, "decoded": decoded}
    else:
        info = {"segment": unit["segment"], "state": st, "files": files, "ranges": ranges, "decoded": decoded}
    yield progress_batch(out.unit, out.cluster, out.broker, info)


def progress_batch(unit: int, cluster: str, broker: str, info: dict[str, Any]) -> pa.RecordBatch:
    """The progress row of a unit (or of a piece of one): the null row with its six columns set, 38 us against 210
    us for the row built column by column (:func:`_batch`); an exporter writes one for each segment at every run
    (stop 69)."""
    b = _PROGRESS_ROW
    for name, value in (("unit", pa.scalar(unit, pa.int64())), ("cluster", pa.scalar(cluster, _STR)),
                        ("broker", pa.scalar(broker, _STR)), ("info", pa.scalar(json.dumps(info), _STR))):
        i = _COLUMN[name]
        b = b.set_column(i, OUTPUT_ARROW.field(i), pa.repeat(value, 1))
    return b


def merge_pieces(unit: dict[str, Any], pieces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The progress info of a split unit from its pieces', as decoding it whole gives it; None when the pieces do
    not chain (then the caller decodes the unit whole).

    They chain when each piece started exactly where the one before stopped (the first record start at or after
    its cut), or, after a piece that reached the segment's end-of-file marker, found no record at all. Anything
    else (a piece that stopped short: zeros, an unreadable range, a damaged record across a cut) is left to the
    whole decode, whose rules for those cases are the reference. The file row's ``sha256`` is that of the pieces'
    digests (hex, in order): a digest cannot be carried from one task to the next.
    """
    ps = sorted(pieces, key=lambda p: p["piece"])
    if not ps or [p["piece"] for p in ps] != list(range(ps[0]["count"])):
        return None
    c0, st0 = unit["copies"][0], unit["state"]
    begin = st0["decoded_to"] if st0 else 0
    start = st0["start_offset"] if st0 else c0["start"]
    end, ended = begin, False
    for j, p in enumerate(ps):
        if p["failed"]:
            return None
        if ended:
            if p["first"] is not None:
                return None
            continue
        if p["first"] != end:
            return None
        end = p["end"]
        if j < len(ps) - 1 and not p["reached"]:
            if not p["complete"]:
                return None
            ended = True
    ts = c0["ts"]
    ranges = [r for p in ps for r in p["ranges"]] + [[ts, start, start + end]]
    files = []
    if end > begin or not c0["seen"]:
        joined = "".join(p["sha256"] for p in ps if p["first"] is not None)
        files.append({"ts": ts, "path": c0["path"], "size": c0["size"], "sha256": _sha(joined.encode()),
                      "read_from": begin, "read_to": end})
    state = {"start_offset": start, "decoded_to": max(begin, end), "segment_size": c0["size"], "complete": True,
             "snapshot_ts": ts}
    info = {"segment": unit["segment"], "state": state, "files": files, "ranges": ranges,
            "decoded": [d for p in ps for d in p["decoded"]]}
    if len(unit["copies"]) > 1:  # complete now: the later copies read nothing, settled by the same code
        rest = {**unit, "state": state, "copies": unit["copies"][1:]}
        tail = json.loads(list(decode_unit(rest))[-1].column("info")[0].as_py())
        info.update(state=tail["state"], files=files + tail["files"], ranges=ranges + tail["ranges"],
                    decoded=info["decoded"] + tail["decoded"])
    return info
