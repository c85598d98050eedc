"""The expected §5 reports, computed from the simulator's own event log by spec §4 and docs/semantics.md.

This is an independent implementation: it reads what the simulator recorded (every stored record, every
trace record that reached a broker, each consumer's ProcessQueue timeline) and what each snapshot held
(C_s, Min_s, Max_s, the retained commitlog range), never the pipeline's code. A record is *known* when some
snapshot captured it (stored at or before the snapshot and still in a retained segment), as ingestion would
have seen it; deliveries are the SubBefore records carried by known trace messages.
"""
from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

from jobs.formats.topics import is_reserved_topic, is_system_group
from jobs.simulate.broker import DELAY_LEVELS_MS, SCHEDULE_TOPIC, dlq_topic, is_system_topic, retry_topic
from jobs.simulate.clock import iso_ms
from jobs.simulate.pop_truth import PopTruth

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Stored
    from jobs.simulate.engine import World

BLOCKING_MIN_AGE_MS = 15 * 60 * 1000
ORDERLY_MAX_RECONSUME = 2**31 - 1  # a 4.x orderly consumer's maxReconsumeTimes -1: Integer.MAX_VALUE
DLQ_WARN_RETRIES = 3
WINDOW = 10
CAUSE_RANK = {"REWIND": 3, "HEAD_BLOCKED": 2, "UNPERSISTED": 1, "UNKNOWN": 0}

COLUMNS = {
    "duplicated_ranges": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset",
                          "end_offset", "messages", "evidence", "cause"],
    "unconsumed_ranges": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset",
                          "end_offset", "messages", "kind"],
    "offset_corrections": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "snapshot_ts",
                           "committed_offset", "min_offset", "max_offset", "corrected_offset", "lost_messages",
                           "reason"],
    "dlq_candidates": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "queue_offset",
                       "uniq_key", "keys", "reconsume_times", "max_reconsume_times", "reason", "last_attempt_ts",
                       "dlq_eta_ts", "producer_group"],
    "consumer_status": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "snapshot_ts",
                        "committed_offset", "min_offset", "max_offset", "lag", "consumable_lag", "time_lag_s",
                        "status", "consume_mode", "inflight"],
    "coverage": ["cluster", "broker", "topic", "consumer_group", "client_id", "queue_id", "reason", "detail"],
}
SORT_KEYS = {
    "duplicated_ranges": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset",
                          "evidence"],
    "unconsumed_ranges": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "start_offset",
                          "kind"],
    "offset_corrections": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"],
    "dlq_candidates": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id", "queue_offset",
                       "uniq_key", "reason"],
    "consumer_status": ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"],
    "coverage": ["cluster", "broker", "topic", "consumer_group", "client_id", "queue_id", "reason"],
}


@dataclass
class Delivery:
    """A SubBefore (with its SubAfter) as the pipeline sees it (docs/semantics.md rule 8)."""

    group: str
    request_id: str
    uniq: str
    retry_times: int
    start: int
    end: Optional[int]
    success: Optional[bool]
    host: str
    client_id: str = ""


@dataclass
class Series:
    """C, Min, Max of one (G, client, q) over the snapshots in which it has a committed offset."""

    cluster: str
    group: str
    client_id: str
    topic: str
    broker: str
    qid: int
    points: list[tuple[int, int, int, int]]  # (ts, C, Min, Max) of the snapshots with known bounds
    commits: list[tuple[int, int]] = field(default_factory=list)  # (ts, C) of every snapshot: REWIND needs no bounds


def ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive offsets."""
    out: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if out and o == out[-1][1] + 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


class Truth:
    """All five reports for one world, as of its last snapshot."""

    def __init__(self, world: "World") -> None:
        self.w = world
        self.cluster = world.cluster
        self.t_s = max(world.snapshot_times)
        self._index_known()
        self._index_deliveries()
        self._series()
        self._modes()
        # spec §4.1 POP groups (checkpoints and acks decoded from the captured records; nothing without them)
        self.pop = PopTruth(self, blocking_min_age_ms=BLOCKING_MIN_AGE_MS, dlq_warn_retries=DLQ_WARN_RETRIES)

    # ---------------------------------------------------------------- what the snapshots captured

    def _index_known(self) -> None:
        captured = defaultdict(list)  # broker -> [(ts, lo, hi)]
        for s in self.w.writer.broker_snaps:
            captured[s.broker].append((s.ts, s.commitlog[0], s.commitlog[1]))
        self.captured = captured

        def known(broker: str, phys: int, store_ts: int) -> bool:
            return any(ts >= store_ts and lo <= phys < hi for ts, lo, hi in captured[broker])

        self.is_known = known
        self.known: list["Stored"] = [m for m in self.w.stored if m.topic != "RMQ_SYS_TRACE_TOPIC"
                                      and known(m.broker, m.phys, m.store_ts)]
        self.at: dict[tuple[str, str, int, int], "Stored"] = {}
        self.originals: dict[str, list["Stored"]] = defaultdict(list)
        self.copies: dict[tuple[str, str], list["Stored"]] = defaultdict(list)  # (uniq, topic) -> copies
        for m in self.known:
            self.at[(m.broker, m.topic, m.queue_id, m.queue_offset)] = m
            if not is_system_topic(m.topic):
                self.originals[m.uniq].append(m)
            topic = m.topic
            if topic == SCHEDULE_TOPIC:
                topic = SCHEDULE_TOPIC + ":" + m.props.get("REAL_TOPIC", "")
            self.copies[(m.uniq, topic)].append(m)
        for v in self.originals.values():
            v.sort(key=lambda m: (m.broker, m.phys))

    def original(self, uniq: str) -> Optional["Stored"]:
        v = self.originals.get(uniq)
        return v[0] if v else None

    def _index_deliveries(self) -> None:
        afters: dict[tuple[str, str], dict[str, Any]] = {}
        befores = []
        for r in self.w.trace_log:
            if not self.is_known(r["_broker"], r["_phys"], r["_store_ts"]):
                continue
            if r["type"] == "SubBefore":
                befores.append(r)
            elif r["type"] == "SubAfter":
                afters[(r["request_id"], r["msg_id"])] = r
        broadcast_clients: dict[str, list[str]] = defaultdict(list)
        for c in self.w.consumers:
            if c.broadcast and c.client_id not in broadcast_clients[c.group]:
                broadcast_clients[c.group].append(c.client_id)
        self.deliveries: dict[str, list[Delivery]] = defaultdict(list)
        for r in befores:
            if r["timestamp_ms"] > self.t_s:
                continue
            a = afters.get((r["request_id"], r["msg_id"]))
            client = ""
            if self.w.group_info.get(r["group"], {}).get("broadcast"):
                client = next((cid for cid in sorted(broadcast_clients[r["group"]])
                               if cid.startswith(r["_host"] + "@")), "")
            self.deliveries[r["group"]].append(Delivery(
                r["group"], r["request_id"], r["msg_id"], r["retry_times"], r["timestamp_ms"],
                a["timestamp_ms"] if a else None, a["success"] if a else None, r["_host"], client))
        for v in self.deliveries.values():
            v.sort(key=lambda d: (d.start, d.request_id))

    # ---------------------------------------------------------------- committed offsets over snapshots

    def _series(self) -> None:
        by_key: dict[tuple[str, str, str, str, int], list[tuple[int, int, int, int]]] = defaultdict(list)
        commits: dict[tuple[str, str, str, str, int], list[tuple[int, int]]] = defaultdict(list)
        bsnaps = sorted(self.w.writer.broker_snaps, key=lambda s: (s.broker, s.ts))
        # spec §4.2 NO_CONSUME_QUEUE: since when q held messages: a snapshot with entries for it (Max > 0), a record of
        # it held by a snapshot (stored by the snapshot's time)
        held_from: dict[tuple[str, str, int], int] = {}
        for s in bsnaps:
            for (topic, qid), (_lo, hi) in s.bounds.items():
                if hi > 0:
                    held_from.setdefault((s.broker, topic, qid), s.ts)
        first_held: dict[tuple[str, str, int], int] = {}  # the first snapshot holding a record of q (rule 0)
        for m in self.known:
            q = (m.broker, m.topic, m.queue_id)
            if q in first_held and first_held[q] <= m.store_ts:
                continue
            ts = min(t for t, lo, hi in self.captured[m.broker] if t >= m.store_ts and lo <= m.phys < hi)
            first_held[q] = min(first_held.get(q, ts), ts)
        for q, ts in first_held.items():
            held_from[q] = min(held_from.get(q, ts), ts)

        def held(broker: str, topic: str, qid: int, ts: int, c: int) -> bool:
            return c > 0 or held_from.get((broker, topic, qid), ts + 1) <= ts

        for s in bsnaps:
            for (topic, group, qid), c in s.offsets.items():
                if "@" in topic or "@" in group:
                    continue
                if is_system_group(group) or is_reserved_topic(topic):
                    continue  # RocketMQ's own progress (the POP revive scan's): never a finding (spec §4.2)
                commits[(group, "", topic, s.broker, qid)].append((s.ts, c))
                if (topic, qid) not in s.bounds and held(s.broker, topic, qid, s.ts, c):
                    continue  # no consume queue data for a queue that held messages: unknown (spec §4.2)
                lo, hi = s.bounds.get((topic, qid), (0, 0))
                by_key[(group, "", topic, s.broker, qid)].append((s.ts, c, lo, hi))
        by_broker = defaultdict(list)
        for s in bsnaps:
            by_broker[s.broker].append(s)
        for cs in sorted(self.w.writer.client_snaps, key=lambda s: (s.client_id, s.group, s.ts)):
            for (broker, topic, qid), c in cs.offsets.items():
                commits[(cs.group, cs.client_id, topic, broker, qid)].append((cs.ts, c))
                prior = [s for s in by_broker[broker] if s.ts <= cs.ts and s.bounds]
                if (not prior or (topic, qid) not in prior[-1].bounds) and held(broker, topic, qid, cs.ts, c):
                    continue
                lo, hi = prior[-1].bounds.get((topic, qid), (0, 0)) if prior else (0, 0)
                by_key[(cs.group, cs.client_id, topic, broker, qid)].append((cs.ts, c, lo, hi))
        self.series = [Series(self.cluster, g, cid, t, b, q, sorted(p)) for (g, cid, t, b, q), p in
                       sorted(by_key.items())]
        # Every key with a committed offset, bounds or not: the sequences REWIND compares (rule 3).
        self.commit_series = [Series(self.cluster, g, cid, t, b, q, [], sorted(c)) for (g, cid, t, b, q), c in
                              sorted(commits.items())]
        # retryMaxTimes per (broker, group) from each broker's latest snapshot, and per group from the latest of any
        # broker (ties: the larger broker name), for a broker without the group (rule 19)
        self.retry_max_at: dict[tuple[str, str], int] = {}
        self.retry_max: dict[str, int] = {}
        flag_at: dict[tuple[str, str], bool] = {}
        for s in sorted(bsnaps, key=lambda s: (s.ts, s.broker)):
            self.retry_max.update(s.retry_max)
            self.retry_max_at.update({(s.broker, g): v for g, v in s.retry_max.items()})
            flag_at.update({(s.broker, g): v for g, v in s.orderly_flag.items()})
        # a 5.x FIFO group: consumeMessageOrderly in its latest config on some broker (spec §4.1 rule 3)
        self.fifo_flag = {g for (_, g), v in flag_at.items() if v}

    # ---------------------------------------------------------------- consume modes (spec §4.1)

    def _modes(self) -> None:
        """BROADCAST groups, and the (G, topic) pairs with a local redelivery (4.x orderly consumers retry in memory)."""
        self.broadcast_groups = {cs.group for cs in self.w.writer.client_snaps if cs.offsets}
        retry_times: dict[tuple[str, str], set[int]] = defaultdict(set)  # (uniq, topic) -> reconsume times
        for m in self.known:
            if m.topic == SCHEDULE_TOPIC or m.topic.startswith("%RETRY%"):
                retry_times[(m.uniq, m.topic)].add(m.reconsume)
        self.local_redelivery: set[tuple[str, str]] = set()
        for g, ds in self.deliveries.items():
            for d in ds:
                if d.retry_times < 1:
                    continue
                orig = self.original(d.uniq)
                if orig is None:
                    continue
                if (d.retry_times in retry_times.get((d.uniq, retry_topic(g)), ()) or
                        d.retry_times in retry_times.get((d.uniq, SCHEDULE_TOPIC), ())):
                    continue
                self.local_redelivery.add((g, orig.topic))

    def mode(self, group: str, topic: str) -> str:
        if group in self.broadcast_groups:
            return "BROADCAST"
        if self.pop.is_pop(group, topic):
            return "POP"
        if group in self.fifo_flag or (group, topic) in self.local_redelivery:
            return "ORDERLY"
        return "CONCURRENT"

    def max_times(self, group: str, broker: str) -> int:
        return self.retry_max_at.get((broker, group), self.retry_max.get(group, 16))

    # ---------------------------------------------------------------- reports

    def _row(self, s: Series, **kw: Any) -> dict[str, Any]:
        return {"cluster": s.cluster, "consumer_group": s.group, "client_id": s.client_id, "topic": s.topic,
                "broker": s.broker, "queue_id": s.qid, **kw}

    def consumer_status(self) -> list[dict[str, Any]]:
        out = []
        known = {(s.group, s.client_id, s.topic, s.broker, s.qid): s.points[-1][0] for s in self.series}
        unknown = set()
        for s in self.commit_series:  # spec §4.2: no bounds at the newest snapshot: UNKNOWN there
            ts, c = s.commits[-1]
            key = (s.group, s.client_id, s.topic, s.broker, s.qid)
            if known.get(key) != ts:
                unknown.add(key)
                out.append(self._row(s, snapshot_ts=iso_ms(ts), committed_offset=c, min_offset=None, max_offset=None,
                                     lag=None, consumable_lag=None, time_lag_s=None, status="UNKNOWN",
                                     consume_mode=self.mode(s.group, s.topic),
                                     inflight=self.pop.inflight(s.group, s.broker, s.topic, s.qid)))
        for s in self.series:
            if (s.group, s.client_id, s.topic, s.broker, s.qid) in unknown:
                continue
            ts, c, lo, hi = s.points[-1]
            msg = self.at.get((s.broker, s.topic, s.qid, c))
            time_lag = (ts - msg.store_ts) // 1000 if (c < hi and msg is not None) else 0
            if msg is None and c < hi and self.w.bulk is not None:
                rec = self.w.bulk.stored_at(s.broker, s.topic, s.qid, c)  # bulk records have no Stored
                if rec is not None and self.is_known(s.broker, rec[0], rec[1]):
                    time_lag = (ts - rec[1]) // 1000
            out.append(self._row(s, snapshot_ts=iso_ms(ts), committed_offset=c, min_offset=lo, max_offset=hi,
                                 lag=hi - c, consumable_lag=hi - max(c, lo), time_lag_s=time_lag,
                                 status=status(s.points[-WINDOW:]), consume_mode=self.mode(s.group, s.topic),
                                 inflight=self.pop.inflight(s.group, s.broker, s.topic, s.qid)))
        return out

    def offset_corrections(self) -> list[dict[str, Any]]:
        out = []
        newest = {(s.group, s.client_id, s.topic, s.broker, s.qid): s.commits[-1][0] for s in self.commit_series}
        for s in self.series:
            ts, c, lo, hi = s.points[-1]
            if ts != newest[(s.group, s.client_id, s.topic, s.broker, s.qid)]:
                continue  # the key's newest snapshot has no bounds: no correction from an older offset (rule 17)
            if c < lo:
                out.append(self._row(s, snapshot_ts=iso_ms(ts), committed_offset=c, min_offset=lo, max_offset=hi,
                                     corrected_offset=lo, lost_messages=lo - c, reason="BELOW_MIN"))
            elif c > hi:
                out.append(self._row(s, snapshot_ts=iso_ms(ts), committed_offset=c, min_offset=lo, max_offset=hi,
                                     corrected_offset=hi, lost_messages=0, reason="ABOVE_MAX"))
        return out

    def unconsumed_ranges(self) -> list[dict[str, Any]]:
        out = []
        series_by = {(s.group, s.client_id, s.topic, s.broker, s.qid): s for s in self.series}
        dropped: dict[tuple[str, str, str, str, int], set[int]] = defaultdict(set)
        for g, ds in self.deliveries.items():
            if not self.w.group_info.get(g, {}).get("broadcast"):
                continue
            for d in ds:
                if d.success is False:  # at every original copy of the key (rule 16), as TRACE duplicates
                    for m in self.originals.get(d.uniq, []):
                        dropped[(g, d.client_id, m.topic, m.broker, m.queue_id)].add(m.queue_offset)
        newest = {(s.group, s.client_id, s.topic, s.broker, s.qid): s.commits[-1][0] for s in self.commit_series}
        for s in self.series:
            ts, c, lo, hi = s.points[-1]
            # spec §4.2: no BACKLOG for a key whose newest snapshot has no bounds
            if max(c, lo) <= hi - 1 and ts == newest[(s.group, s.client_id, s.topic, s.broker, s.qid)]:
                out.append(self._range(s, max(c, lo), hi - 1, kind="BACKLOG"))
            expired = set()
            for _, cs, mins, _ in s.points:
                if cs < mins:
                    expired.update(range(cs, mins))
            for a, b in ranges(expired):
                out.append(self._range(s, a, b, kind="EXPIRED"))
            # an offset has one kind: a broadcast client's dropped offset is BROADCAST_DROPPED, not also SKIPPED
            own_drops = dropped.get((s.group, s.client_id, s.topic, s.broker, s.qid), set())
            for a, b in ranges(self._skipped(s) - own_drops):
                out.append(self._range(s, a, b, kind="SKIPPED"))
        for (g, cid, topic, broker, qid), offs in sorted(dropped.items()):
            s = series_by.get((g, cid, topic, broker, qid)) or Series(self.cluster, g, cid, topic, broker, qid, [])
            for a, b in ranges(offs):
                out.append(self._range(s, a, b, kind="BROADCAST_DROPPED"))
        for (g, topic, broker, qid), offs in sorted(self.pop.lost().items()):
            s = Series(self.cluster, g, "", topic, broker, qid, [])
            for a, b in ranges(offs):
                out.append(self._range(s, a, b, kind="POP_LOST"))
        return out

    def _range(self, s: Series, a: int, b: int, **kw: Any) -> dict[str, Any]:
        return self._row(s, start_offset=a, end_offset=b, messages=b - a + 1, **kw)

    def _skipped(self, s: Series) -> set[int]:
        """docs/semantics.md rule 15."""
        ds = self.deliveries.get(s.group)
        if not ds or is_system_topic(s.topic) or self.mode(s.group, s.topic) == "POP":
            return set()  # spec §4.1: not evaluated for POP groups
        broadcast = bool(s.client_id)
        mapped = []  # the first delivered offset: the group's, a broadcast client's own
        for d in ds:
            m = self.original(d.uniq)
            if (m is not None and (m.topic, m.broker, m.queue_id) == (s.topic, s.broker, s.qid)
                    and (not broadcast or d.client_id == s.client_id)):
                mapped.append(m.queue_offset)
        if not mapped:
            return set()
        first = min(mapped)
        ok = {d.uniq for d in ds if d.success and (not broadcast or d.client_id == s.client_id)}
        _, c, lo, _ = s.points[-1]
        out = set()
        for o in range(max(lo, first), c):
            m = self.at.get((s.broker, s.topic, s.qid, o))
            if m is None or m.uniq in ok:
                continue
            if not broadcast and (self.copies.get((m.uniq, retry_topic(s.group))) or
                                  self.copies.get((m.uniq, dlq_topic(s.group))) or
                                  self.copies.get((m.uniq, SCHEDULE_TOPIC + ":" + retry_topic(s.group)))):
                continue
            out.add(o)
        return out

    def duplicated_ranges(self) -> list[dict[str, Any]]:
        out = []
        for s in self.commit_series:
            for (t0, c0), (t1, c1) in zip(s.commits, s.commits[1:]):
                if c1 < c0:
                    out.append(self._range(s, c1, c0 - 1, evidence="REWIND", cause="REWIND"))
        dup: dict[tuple[str, str, str, str, int], dict[int, str]] = defaultdict(dict)
        for g, ds in sorted(self.deliveries.items()):
            firsts: dict[tuple[str, str], list[Delivery]] = defaultdict(list)
            for d in ds:
                if d.retry_times == 0:
                    firsts[(d.client_id, d.uniq)].append(d)
            for (cid, uniq), fs in sorted(firsts.items()):
                if len(fs) < 2:
                    continue
                for m in self.originals.get(uniq, []):
                    cause = self._cause(g, cid, m, fs[0], fs[1])
                    key = (g, cid, m.topic, m.broker, m.queue_id)
                    prev = dup[key].get(m.queue_offset)
                    if prev is None or CAUSE_RANK[cause] > CAUSE_RANK[prev]:
                        dup[key][m.queue_offset] = cause
        for (g, cid, topic, broker, qid), offs in sorted(dup.items()):
            s = Series(self.cluster, g, cid, topic, broker, qid, [])
            for a, b in ranges(offs):
                cause = max((offs[o] for o in range(a, b + 1)), key=lambda c: CAUSE_RANK[c])
                out.append(self._range(s, a, b, evidence="TRACE", cause=cause))
        for (g, topic, broker, qid), pop_offs in sorted(self.pop.duplicated().items()):
            s = Series(self.cluster, g, "", topic, broker, qid, [])
            for a, b in ranges(pop_offs):
                out.append(self._range(s, a, b, evidence="POP_LATE_ACK", cause="INVISIBLE_TIME_EXCEEDED"))
        return out

    def _cause(self, group: str, cid: str, m: "Stored", d1: Delivery, d2: Delivery) -> str:
        """docs/semantics.md rule 12, with client A's ProcessQueue timeline from the simulator's log."""
        b = d2.start
        for s in self.commit_series:
            if (s.group, s.client_id, s.topic, s.broker, s.qid) != (group, cid, m.topic, m.broker, m.queue_id):
                continue
            for (t0, c0), (t1, c1) in zip(s.commits, s.commits[1:]):
                if c1 < c0 and c1 <= m.queue_offset < c0 and t0 >= d1.start and t1 <= b:
                    return "REWIND"
        o = m.queue_offset
        for c in self.w.consumers:
            if c.group != group or c.ip != d1.host:
                continue
            for pq in c.all_pqs:
                if (pq.mq.topic, pq.mq.broker, pq.mq.queue_id) != (m.topic, m.broker, m.queue_id):
                    continue
                span = pq.timeline.get(o)
                if span is None or span[0] > d1.start:
                    continue
                for off, (pulled, left) in pq.timeline.items():
                    if off <= o and pulled is not None and pulled <= b and (left is None or left > b):
                        return "HEAD_BLOCKED"
                return "UNPERSISTED"
        return "UNKNOWN"

    def dlq_candidates(self) -> list[dict[str, Any]]:
        out = []
        groups = sorted(set(self.w.group_info))
        for g in groups:
            info = self.w.group_info[g]
            ds = self.deliveries.get(g, [])
            by_key: dict[str, list[Delivery]] = defaultdict(list)
            for d in ds:
                by_key[d.uniq].append(d)
            dlq_msgs = [m for m in self.known if m.topic == dlq_topic(g)]
            in_dlq = set()
            for m in sorted(dlq_msgs, key=lambda m: (m.broker, m.phys)):
                in_dlq.add(m.uniq)
                orig = self.original(m.uniq) or m
                mx = (int(m.props["MAX_RECONSUME_TIMES"]) if "MAX_RECONSUME_TIMES" in m.props
                      else self.max_times(g, m.broker))  # the broker that moved it to the DLQ
                starts = [d.start for d in by_key.get(m.uniq, [])]
                out.append(self._dlq_row(g, "", orig, m.uniq, m.keys, m.reconsume - 1, mx, "IN_DLQ",
                                         max(starts) if starts else None, m.store_ts))
            if info["broadcast"]:
                failed: dict[tuple[str, str], list[Delivery]] = defaultdict(list)
                for d in ds:
                    if d.success is False:
                        failed[(d.client_id, d.uniq)].append(d)
                for (cid, uniq), fs in sorted(failed.items()):
                    orig = self.original(uniq)
                    if orig is None:
                        continue
                    last = max(fs, key=lambda d: d.start)
                    # broadcast mode never retries: 0 reconsumes of at most 0
                    out.append(self._dlq_row(g, cid, orig, uniq, orig.keys, 0, 0, "BROADCAST_DROPPED", last.start,
                                             None))
            # RETRYING: clustering groups only (broadcast mode never retries)
            for uniq, dd in ([] if info["broadcast"] else sorted(by_key.items())):
                if any(d.success for d in dd) or uniq in in_dlq:
                    continue
                r = max(d.retry_times for d in dd)
                if r < DLQ_WARN_RETRIES:
                    continue
                last = max((d for d in dd if d.retry_times == r), key=lambda d: d.start)
                base = last.end if last.end is not None else last.start
                orig = self.original(uniq)
                if orig is None:
                    continue
                if self.mode(g, orig.topic) in ("ORDERLY", "POP"):
                    continue  # an orderly queue retries locally: ORDERLY_BLOCKED at its committed offset instead;
                    # a POP group's RETRYING comes from its copies (self.pop)
                mx = self.max_times(g, orig.broker)  # the original's broker receives its send-backs
                eta = base + sum(DELAY_LEVELS_MS[min(3 + k, 18) - 1] for k in range(r, mx))
                out.append(self._dlq_row(g, "", orig, uniq, orig.keys, r, mx, "RETRYING", last.start, eta))
            # rule 20: the newest snapshot, bounds known or not; every committed offset pins alike: the group's
            # queues, its %RETRY% queues (reported at the original copy) and each broadcast client's own
            blocking_rows: dict[tuple, tuple[Delivery, dict[str, Any]]] = {}
            for s in self.commit_series:
                if s.group != g or bool(s.client_id) != bool(info["broadcast"]) or self.mode(g, s.topic) == "POP":
                    continue  # spec §4.1: BLOCKING_COMMIT does not apply to POP groups
                ts, c = s.commits[-1]
                m = self.at.get((s.broker, s.topic, s.qid, c))
                if m is None:
                    continue
                blocking = [d for d in by_key.get(m.uniq, []) if d.end is None and d.start <= ts - BLOCKING_MIN_AGE_MS
                            and (not info["broadcast"] or d.client_id == s.client_id)]
                if blocking:
                    d = max(blocking, key=lambda d: d.start)
                    place = (self.original(m.uniq) or m) if is_system_topic(s.topic) else m
                    row = self._dlq_row(g, s.client_id, place, m.uniq, m.keys, d.retry_times,
                                        0 if info["broadcast"] else self.max_times(g, s.broker), "BLOCKING_COMMIT", d.start,
                                        None)
                    where = (s.client_id, place.topic, place.broker, place.queue_id, place.queue_offset, m.uniq)
                    if where not in blocking_rows or d.start > blocking_rows[where][0].start:
                        blocking_rows[where] = (d, row)  # an original and its retry copy can both hang
            out.extend(row for _, row in blocking_rows.values())
            out.extend(self._orderly_blocked(g, by_key))
        for r in self.pop.retrying():
            last = r.pop("last_attempt")
            out.append({"cluster": self.cluster, **r, "last_attempt_ts": iso_ms(last), "dlq_eta_ts": "",
                        "producer_group": ""})
        return out + self._transactions_discarded()

    def _transactions_discarded(self) -> list[dict[str, Any]]:
        """Spec §4.3: per (real topic, broker, real queue, key) the newest record in TRANS_CHECK_MAX_TIME_TOPIC."""
        newest: dict[tuple[str, str, int, str], "Stored"] = {}
        for m in self.known:
            if m.topic != "TRANS_CHECK_MAX_TIME_TOPIC" or not m.uniq or "REAL_TOPIC" not in m.props:
                continue
            key = (m.props["REAL_TOPIC"], m.broker, int(m.props["REAL_QID"]), m.uniq)
            if key not in newest or (m.store_ts, m.phys) > (newest[key].store_ts, newest[key].phys):
                newest[key] = m
        return [{"cluster": self.cluster, "consumer_group": "", "client_id": "", "topic": t, "broker": b,
                 "queue_id": q, "queue_offset": "", "uniq_key": u, "keys": m.keys or "", "reconsume_times": "",
                 "max_reconsume_times": "", "reason": "TRANSACTION_DISCARDED", "last_attempt_ts": iso_ms(m.store_ts),
                 "dlq_eta_ts": "", "producer_group": m.props.get("PGROUP", "")}
                for (t, b, q, u), m in sorted(newest.items())]

    def _orderly_blocked(self, g: str, by_key: dict[str, list[Delivery]]) -> list[dict[str, Any]]:
        """Spec §4.1: the message at C_S of an orderly queue, delivered >= dlq_warn_retries times, never successfully."""
        rows: dict[tuple, dict[str, Any]] = {}
        for s in self.commit_series:
            if s.group != g or s.client_id or self.mode(g, s.topic) != "ORDERLY":
                continue
            ts, c = s.commits[-1]
            m = self.at.get((s.broker, s.topic, s.qid, c))
            if m is None:
                continue
            dd = by_key.get(m.uniq, [])
            if len(dd) < DLQ_WARN_RETRIES or any(d.success for d in dd):
                continue
            mx = self.max_times(g, s.broker) if g in self.fifo_flag else ORDERLY_MAX_RECONSUME
            place = (self.original(m.uniq) or m) if is_system_topic(s.topic) else m
            rows[(place.topic, place.broker, place.queue_id, place.queue_offset, m.uniq)] = self._dlq_row(
                g, "", place, m.uniq, m.keys, max(d.retry_times for d in dd), mx, "ORDERLY_BLOCKED",
                max(d.start for d in dd), None)
        return list(rows.values())

    def _dlq_row(self, g: str, cid: str, m: "Stored", uniq: str, keys: Optional[str], times: int,
                 mx: Optional[int], reason: str, last: Optional[int], eta: Optional[int]) -> dict[str, Any]:
        return {"cluster": self.cluster, "consumer_group": g, "client_id": cid, "topic": m.topic, "broker": m.broker,
                "queue_id": m.queue_id, "queue_offset": m.queue_offset, "uniq_key": uniq, "keys": keys or "",
                "reconsume_times": times, "max_reconsume_times": "" if mx is None else mx, "reason": reason,
                "last_attempt_ts": iso_ms(last), "dlq_eta_ts": iso_ms(eta), "producer_group": ""}

    # ---------------------------------------------------------------- files

    def reports(self) -> dict[str, list[dict[str, Any]]]:
        # spec §4.2: a compaction topic's reads below Min are served from the compaction log: no EXPIRED, SKIPPED or
        # BELOW_MIN on the brokers where it is one
        compacted = {(b, t) for b, t, r in getattr(self.w, "store_features", {}) if r == "COMPACTION_TOPIC"}
        unconsumed = [r for r in self.unconsumed_ranges()
                      if not ((r["broker"], r["topic"]) in compacted and r["kind"] in ("EXPIRED", "SKIPPED"))]
        corrections = [r for r in self.offset_corrections()
                       if not ((r["broker"], r["topic"]) in compacted and r["reason"] == "BELOW_MIN")]
        return {"duplicated_ranges": self.duplicated_ranges(), "unconsumed_ranges": unconsumed,
                "offset_corrections": corrections, "dlq_candidates": self.dlq_candidates(),
                "consumer_status": self.consumer_status(), "coverage": self.coverage()}

    def coverage(self) -> list[dict[str, Any]]:
        """Spec §4.2: NO_TRACE per group with offsets and no delivery by t_S; NO_CONSUME_QUEUE per queue whose newest
        snapshot (of some key of it) gives no bounds; the store features the world's brokers have."""
        out: list[dict[str, Any]] = []
        known = {(s.group, s.client_id, s.topic, s.broker, s.qid): s.points[-1][0] for s in self.series}
        unknown: dict[tuple[str, str, int], int] = {}
        groups = set()
        group_topics: dict[str, set[str]] = defaultdict(set)
        for s in self.commit_series:
            groups.add(s.group)
            group_topics[s.group].add(s.topic)
            newest = s.commits[-1][0]
            if known.get((s.group, s.client_id, s.topic, s.broker, s.qid)) != newest:
                q = (s.broker, s.topic, s.qid)
                unknown[q] = max(unknown.get(q, newest), newest)
        for (broker, topic, qid), ts in sorted(unknown.items()):
            out.append({"cluster": self.cluster, "broker": broker, "topic": topic, "consumer_group": "",
                        "client_id": "", "queue_id": qid, "reason": "NO_CONSUME_QUEUE", "detail": iso_ms(ts)})
        for g in sorted(groups):
            if not self.deliveries.get(g) and not self.pop.pop_everywhere(g, group_topics[g]):
                out.append({"cluster": self.cluster, "broker": "", "topic": "", "consumer_group": g, "client_id": "",
                            "queue_id": None, "reason": "NO_TRACE", "detail": ""})
        for (broker, topic, reason), detail in sorted(getattr(self.w, "store_features", {}).items()):
            out.append({"cluster": self.cluster, "broker": broker, "topic": topic, "consumer_group": "",
                        "client_id": "", "queue_id": None, "reason": reason, "detail": detail})
        return out

    def write(self, folder: str) -> dict[str, int]:
        os.makedirs(folder, exist_ok=True)
        counts = {}
        for name, rows in self.reports().items():
            with open(os.path.join(folder, f"{name}.csv"), "w", encoding="utf-8", newline="") as f:
                f.write(to_csv(rows, COLUMNS[name], SORT_KEYS[name]))
            counts[name] = len(rows)
        return counts


def to_csv(rows: list[dict[str, Any]], columns: list[str], sort_key: list[str]) -> str:
    """docs/semantics.md rule 22: header, sorted by the key columns, empty for null."""
    rows = sorted(rows, key=lambda r: tuple((r[k] is not None, r[k]) for k in sort_key))  # an empty field first
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r[c] is None else r[c] for c in columns])
    return buf.getvalue()


def status(points: list[tuple[int, int, int, int]]) -> str:
    """Spec §4 consumer status (Burrow's evaluator adapted), first match wins."""
    if len(points) < 2:
        return "OK"
    cs = [c for _, c, _, _ in points]
    lags = [hi - c for _, c, _, hi in points]
    if lags[-1] == 0:
        return "OK"
    if has_rewound(cs):
        return "REWIND"
    if all(lag > 0 for lag in lags):
        if len(set(cs)) == 1:
            return "STALL"
        if all(b >= a for a, b in zip(lags, lags[1:])):
            return "WARN"
    return "OK"


def has_rewound(cs: list[int]) -> bool:
    """Some C_{s+1} < C_s and the latest C is still below the largest C before that drop."""
    for i in range(len(cs) - 1):
        if cs[i + 1] < cs[i] and cs[-1] < max(cs[: i + 1]):
            return True
    return False
