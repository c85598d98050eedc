"""The POP part of the truth (reconciliation spec §4.1 "POP groups"), from the records the snapshots captured.

Independent of the pipeline and of the simulator's POP model (:mod:`jobs.simulate.pop`): it reads only what a
reconcile could read, the commitlog records the snapshots captured (``Truth.known``: every CK, ack and bAck
message body decoded with :func:`jobs.formats.pop.decode_pop_bodies`, the retry and DLQ copies, the originals) and
the committed offsets per snapshot (``Truth.series``).

Readings (where §4.1 leaves room, RocketMQ decides):

1. A checkpoint is a CK body identified by (t, q, so, c, pt, bn), counted once however many copies are stored (its
   timer copy in ``rmq_sys_wheel_timer``, the re-put copy in ``rmq_sys_REVIVE_LOG_<cluster>``). Its revive time is
   pt + it. Records in either topic are read (the timer copy is the first one stored; a CK still in the timer at S
   is a pop in flight).
2. A CK whose ``rp`` is set (``PopReviveService.rePutCK``: an offset the revive could not write yet, n = 1,
   d = [0], so = that offset, the old pt, ``it`` grown by the rewrite interval) is a checkpoint like any other: the
   same identity as the pop it rewrites when so is that pop's start offset (counted once: the first stored copy),
   else a pop of its own offset with its own revive time, which no client ack names (clients ack the handle they
   hold, the old identity; RocketMQ "never expect[s] an ACK matched in the future").
3. Acks: ``ack`` (``ao``) and ``bAck`` (``aol``) bodies with the checkpoint's identity (an ack without ``bn`` takes
   the broker whose commitlog holds it, as the revive scan does). The stored ``bm`` is always 0 (every writer calls
   ``setBitMap(0)``), but a set bit counts as an ack stored with that CK copy. An offset's ack time is the store time
   of the first stored copy of its first ack; acked in time when that is before the revive time, late otherwise.
4. The popped record of a pop is the record at (bn, t, q, offset) (bn null in an old CK: the broker storing it); its
   UNIQ_KEY names the message and its reconsumeTimes the copy. The message of a POP pair (G, T) is its originals on
   T (UNIQ_KEY) with its revive copies in G's POP retry topics of T (``%RETRY%G_T``, ``%RETRY%G+T``). A popped
   record the lake does not hold is a message of its own (one copy, that offset). Rows are reported at the
   original's topic, queue and offset (each original of the key); a message without an original in the lake at the
   popped copy's own.
5. ``consume_mode`` POP for (G, X) when a checkpoint has c = G and t = X, t = a POP retry topic of X for G, or X = a
   POP retry topic of t for G (the retry topic of a POP pair is POP too, before any of its copies was popped).
6. POP_LATE_ACK: a message some copy of which (reconsumeTimes r) was acked late while its revive copy r + 1 is in
   the lake; cause INVISIBLE_TIME_EXCEEDED; one row per maximal run of offsets.
7. POP_LOST: the original was popped, no copy was ever acked, the key is not in ``%DLQ%G``, and the newest copy
   (highest reconsumeTimes, then the newest stored) was popped, the last time (highest pt) by a checkpoint whose
   revive time (the latest of that pop time's, reading 2) is at least ``blocking_min_age`` before t_S. A newest
   copy not popped yet is
   BACKLOG of the retry topic, as §4 computes.
8. RETRYING: the newest copy has reconsumeTimes >= ``dlq_warn_retries``, none of its pops acked, the key not in
   ``%DLQ%G``; reconsume_times = that reconsumeTimes, max = the group's ``retryMaxTimes`` (the broker of the original;
   §4's rule for IN_DLQ too), last_attempt_ts = the newest pop time of any copy of the message (empty when none was
   popped), dlq_eta_ts empty. IN_DLQ is §4's, unchanged.
9. inflight of (G, q) at S: distinct offsets of q popped for G by a checkpoint whose revive time is after t_S with no
   ack stored by t_S (the last snapshot holds every record stored by then).
10. For a pair that is POP: no SKIPPED, no BLOCKING_COMMIT, no delivery-based RETRYING; no NO_TRACE row for a group
   that is POP on every topic it has offsets for. BACKLOG, EXPIRED, BELOW_MIN, ABOVE_MAX, lag and status are §4's
   with C = the next offset to pop.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from jobs.formats import pop as fmt
from jobs.simulate.broker import dlq_topic

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Stored
    from jobs.simulate.truth import Truth

Identity = tuple[str, int, int, str, int, str]  # (t, q, so, c, pt, bn)


@dataclass
class Pop:
    """One offset popped by one checkpoint."""

    identity: Identity
    offset: int
    revive_time: int  # the checkpoint's pt + it
    ack_ts: Optional[int]  # first stored copy of the first ack of this offset; None: never acked
    record: Optional["Stored"]  # the popped record, when the lake holds it
    broker: str  # the popped queue's broker: bn, or the broker storing the CK when it has none (an old CK)

    @property
    def group(self) -> str:
        return self.identity[3]

    @property
    def pop_time(self) -> int:
        return self.identity[4]

    @property
    def queue(self) -> tuple[str, str, int]:
        """(broker, topic, queue id) of the popped queue."""
        return (self.broker, self.identity[0], self.identity[1])

    @property
    def late(self) -> bool:
        return self.ack_ts is not None and self.ack_ts >= self.revive_time


@dataclass
class Message:
    """A POP message of one (G, T): its originals and revive copies, and every pop of any of them."""

    group: str
    topic: str
    uniq: str
    originals: list["Stored"] = field(default_factory=list)
    copies: list["Stored"] = field(default_factory=list)  # originals + revive copies
    pops: list[Pop] = field(default_factory=list)

    def newest(self) -> Optional["Stored"]:
        return max(self.copies, key=lambda m: (m.reconsume, m.store_ts, m.broker, m.phys), default=None)


class PopTruth:
    """Spec §4.1 POP outputs of one world (readings in the module docstring)."""

    def __init__(self, truth: "Truth", *, blocking_min_age_ms: int, dlq_warn_retries: int) -> None:
        self.truth = truth
        self.t_s = truth.t_s
        self.blocking_min_age_ms = blocking_min_age_ms
        self.dlq_warn_retries = dlq_warn_retries
        self._decode()
        self._pops()
        self._messages()

    # ---------------------------------------------------------------- checkpoints and acks

    def _decode(self) -> None:
        by_broker: dict[str, list["Stored"]] = defaultdict(list)
        for m in self.truth.known:
            if (m.topic == fmt.TIMER_TOPIC or fmt.is_revive_topic(m.topic)) and m.tags in fmt.TAGS:
                by_broker[m.broker].append(m)
        ck_copies: dict[Identity, list[tuple[dict[str, Any], "Stored"]]] = defaultdict(list)
        acks: dict[tuple[Identity, int], int] = {}
        self.problems: list[Any] = []
        for broker, recs in sorted(by_broker.items()):
            recs.sort(key=lambda m: (m.store_ts, m.phys))
            cks, ack_rows, problems = fmt.decode_pop_bodies([m.tags for m in recs], [m.body for m in recs],
                                                            default_broker_name=broker)
            self.problems += problems
            for row in cks.to_pylist():
                m = recs[row["record"]]
                ident = fmt.ck_identity(row["topic"], row["queue_id"], row["start_offset"], row["consumer_group"],
                                        row["pop_time"], row["broker_name"])
                ck_copies[ident].append((row, m))
            for row in ack_rows.to_pylist():
                m = recs[row["record"]]
                ident = fmt.ck_identity(row["topic"], row["queue_id"], row["start_offset"], row["consumer_group"],
                                        row["pop_time"], row["broker_name"])
                for o in row["ack_offsets"]:
                    key = (ident, o)
                    if key not in acks or m.store_ts < acks[key]:
                        acks[key] = m.store_ts
        self.ck_copies = ck_copies
        self.acks = acks

    def _pops(self) -> None:
        at = self.truth.at
        pops: dict[tuple[Identity, int], Pop] = {}
        for ident, copies in sorted(self.ck_copies.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            copies.sort(key=lambda rm: (rm[1].store_ts, rm[1].broker, rm[1].phys))
            row, first = copies[0]
            bn = ident[5] or first.broker
            offsets = fmt.covered_offsets(row["start_offset"], row["num"], row["deltas"])
            for i, o in enumerate(offsets):
                ack = self.acks.get((ident, o))
                for r, m in copies:  # a set bit of bm: acked with that stored copy (reading 3)
                    if r["bitmap"] & (1 << i) and (ack is None or m.store_ts < ack):
                        ack = m.store_ts
                pops[(ident, o)] = Pop(ident, o, row["revive_time"], ack, at.get((bn, ident[0], ident[1], o)), bn)
        self.pops = [pops[k] for k in sorted(pops, key=lambda k: (tuple(str(x) for x in k[0]), k[1]))]

    # ---------------------------------------------------------------- modes

    def _base(self, group: str, topic: str) -> str:
        """The topic a POP checkpoint's topic serves for ``group``: T for ``%RETRY%G_T`` / ``%RETRY%G+T``."""
        split = fmt.pop_retry_split(topic, [group])
        return split[0][1] if split else topic

    @property
    def pop_topics(self) -> dict[str, set[str]]:
        """group -> the topics that are POP for it (reading 5)."""
        if not hasattr(self, "_pop_topics"):
            out: dict[str, set[str]] = defaultdict(set)
            for ident in self.ck_copies.keys() | {p.identity for p in self.pops}:
                t, c = ident[0], ident[3]
                base = self._base(c, t)
                out[c] |= {t, base, fmt.pop_retry_topic(c, base), fmt.pop_retry_topic(c, base, True)}
            self._pop_topics = dict(out)
        return self._pop_topics

    def is_pop(self, group: str, topic: str) -> bool:
        return topic in self.pop_topics.get(group, ())

    def pop_everywhere(self, group: str, topics: set[str]) -> bool:
        return bool(topics) and all(self.is_pop(group, t) for t in topics)

    # ---------------------------------------------------------------- messages

    def _messages(self) -> None:
        truth = self.truth
        msgs: dict[tuple[str, str, str], Message] = {}
        for p in self.pops:
            group, topic = p.group, self._base(p.group, p.identity[0])
            if p.record is None or not p.record.uniq:
                key = (group, topic, "@%s@%s@%d@%d" % (p.queue + (p.offset,)))
                msg = msgs.setdefault(key, Message(group, topic, ""))
                msg.pops.append(p)
                continue
            uniq = p.record.uniq
            key = (group, topic, uniq)
            if key not in msgs:
                msg = msgs[key] = Message(group, topic, uniq)
                msg.originals = sorted((m for m in truth.originals.get(uniq, []) if m.topic == topic),
                                       key=lambda m: (m.broker, m.phys))
                retry = [m for rt in (fmt.pop_retry_topic(group, topic), fmt.pop_retry_topic(group, topic, True))
                         for m in truth.copies.get((uniq, rt), [])]
                msg.copies = msg.originals + sorted(retry, key=lambda m: (m.broker, m.phys))
            if all(p.record is not m for m in msgs[key].copies):  # a popped copy the key lookup did not give
                msgs[key].copies.append(p.record)
            msgs[key].pops.append(p)
        self.messages = [msgs[k] for k in sorted(msgs)]
        self.in_dlq = {(m.uniq, m.topic) for m in truth.known if m.topic.startswith("%DLQ%")}

    def _places(self, msg: Message, fallback: Optional["Stored"]) -> list[tuple[str, str, int, int]]:
        """(broker, topic, queue, offset) the message is reported at (reading 4)."""
        if msg.originals:
            return [(m.broker, m.topic, m.queue_id, m.queue_offset) for m in msg.originals]
        if fallback is not None:
            return [(fallback.broker, fallback.topic, fallback.queue_id, fallback.queue_offset)]
        return []

    # ---------------------------------------------------------------- reports

    def duplicated(self) -> dict[tuple[str, str, str, int], set[int]]:
        """(G, T, broker, q) -> offsets with evidence POP_LATE_ACK (reading 6)."""
        out: dict[tuple[str, str, str, int], set[int]] = defaultdict(set)
        for msg in self.messages:
            originals = {id(m) for m in msg.originals}
            retry_times = {m.reconsume for m in msg.copies if id(m) not in originals}
            late = [p for p in msg.pops if p.late and p.record is not None and p.record.reconsume + 1 in retry_times]
            if not late:
                continue
            for broker, topic, q, o in self._places(msg, late[0].record):
                out[(msg.group, topic, broker, q)].add(o)
        return out

    def lost(self) -> dict[tuple[str, str, str, int], set[int]]:
        """(G, T, broker, q) -> offsets of kind POP_LOST (reading 7)."""
        out: dict[tuple[str, str, str, int], set[int]] = defaultdict(set)
        for msg in self.messages:
            if any(p.ack_ts is not None for p in msg.pops) or (msg.uniq, dlq_topic(msg.group)) in self.in_dlq:
                continue
            if msg.originals:
                popped_original = any(p.record is m for p in msg.pops for m in msg.originals)
                if not popped_original:
                    continue
                newest = msg.newest()
                newest_pops = [p for p in msg.pops if p.record is newest]
            else:  # a popped record the lake does not hold, or a copy without its original (reading 4)
                newest = msg.newest()
                newest_pops = [p for p in msg.pops if newest is None or p.record is newest]
            if not newest_pops:
                continue  # the newest copy is not popped yet: BACKLOG of the retry topic
            last = max(newest_pops, key=lambda p: (p.pop_time, p.revive_time))
            if last.revive_time > self.t_s - self.blocking_min_age_ms:
                continue
            places = self._places(msg, newest)
            if not places:
                b, t, q = last.queue
                places = [(b, t, q, last.offset)]
            for broker, topic, q, o in places:
                out[(msg.group, topic, broker, q)].add(o)
        return out

    def retrying(self) -> list[dict[str, Any]]:
        """RETRYING rows of POP groups (reading 8), without the cluster column."""
        rows = []
        for msg in self.messages:
            newest = msg.newest()
            if newest is None or newest.reconsume < self.dlq_warn_retries:
                continue
            if (msg.uniq, dlq_topic(msg.group)) in self.in_dlq:
                continue
            if any(p.ack_ts is not None for p in msg.pops if p.record is newest):
                continue
            last = max((p.pop_time for p in msg.pops), default=None)
            place = msg.originals or [newest]
            for m in place:
                rows.append({"consumer_group": msg.group, "client_id": "", "topic": m.topic, "broker": m.broker,
                             "queue_id": m.queue_id, "queue_offset": m.queue_offset, "uniq_key": msg.uniq,
                             "keys": (msg.originals[0] if msg.originals else newest).keys or "",
                             "reconsume_times": newest.reconsume,
                             "max_reconsume_times": self.truth.max_times(msg.group, m.broker), "reason": "RETRYING",
                             "last_attempt": last})
        return rows

    def inflight(self, group: str, broker: str, topic: str, qid: int) -> int:
        """Reading 9."""
        if not hasattr(self, "_inflight"):
            counts: dict[tuple[str, str, str, int], set[int]] = defaultdict(set)
            for p in self.pops:
                if p.revive_time > self.t_s and (p.ack_ts is None or p.ack_ts > self.t_s):
                    b, t, q = p.queue
                    counts[(p.group, b, t, q)].add(p.offset)
            self._inflight = {k: len(v) for k, v in counts.items()}
        return self._inflight.get((group, broker, topic, qid), 0)
