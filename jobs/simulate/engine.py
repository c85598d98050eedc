"""The world a scenario builds: the event loop, the brokers, the clients, the traffic and the snapshots.

:class:`World` only wires actors together and records what happened (the event log the truth is computed
from): every stored record (``stored``), every consumption (``deliveries``), every trace record that reached a
broker (``trace_log``), every injected anomaly (``injected``), and what each snapshot held.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Optional

from jobs.simulate.broker import Broker, BrokerConfig, Stored
from jobs.simulate.clock import SECOND, EventLoop, iso_ms
from jobs.simulate.consumer import (Behaviour, Delivery, GroupRegistry, OrderlyPushConsumer, Producer, PushConsumer,
                                    default_behaviour)
from jobs.simulate.snapshot import SnapshotWriter

if TYPE_CHECKING:  # pragma: no cover
    import random

    from jobs.simulate.bulk import BulkFleet
    from jobs.simulate.stores import StoreKind



# Where simulate.run sends progress lines while a world runs (None: silent). A module setting, not a World
# argument, so the scenario builders stay as they are.
PROGRESS: Callable[[str], None] | None = None

class World:
    """One simulated cluster (or several) on one virtual clock."""

    def __init__(self, out: str, seed: int, *, cluster: str = "DefaultCluster",
                 broker_cfg: Optional[BrokerConfig] = None) -> None:
        self.out = out
        self.seed = seed
        self.cluster = cluster
        self.loop = EventLoop(seed)
        self.rng = self.loop.rng
        self.cfg = broker_cfg or BrokerConfig()
        self.brokers: list[Broker] = []
        self.stored: list[Stored] = []
        self.deliveries: list[Delivery] = []
        self.trace_log: list[dict[str, Any]] = []
        self.registries: dict[str, GroupRegistry] = {}
        self.consumers: list[PushConsumer] = []
        self.producers: list[Producer] = []
        self.group_info: dict[str, dict[str, Any]] = {}
        self.injected: list[dict[str, Any]] = []
        self.snapshot_times: list[int] = []
        self.writer = SnapshotWriter(out)
        self._ip = 0
        self.bulk_brokers: list[Broker] = []
        self.bulk: Optional["BulkFleet"] = None

    # ---------------------------------------------------------------- actors

    def add_broker(self, name: str, store: Optional["StoreKind"] = None) -> Broker:
        """A broker; ``store``: its 5.x store types (jobs.simulate.stores), a 4.x store when None."""
        b = Broker(self.loop, self.cluster, name, f"10.0.0.{len(self.brokers) + 11}", self.cfg, self.stored.append)
        if store is not None:
            b.store = store
        self.brokers.append(b)
        return b

    @property
    def store_features(self) -> dict[tuple[str, str, str], str]:
        """(broker, topic, reason) -> detail: the coverage rows the brokers' store types give (spec §4.2)."""
        out: dict[tuple[str, str, str], str] = {}
        for b in self.brokers:
            if any(t >= b.store.since for t in self.snapshot_times) or not b.store.rocksdb:
                out.update(b.store.features(b.name))
            else:  # no snapshot after the switch to RocksDB: no stale JSON seen
                out.update({k: v for k, v in b.store.features(b.name).items() if k[2] != "STALE_JSON_IGNORED"})
        return out

    def add_bulk(self, brokers: int, topics: int, messages: int, *, cfg: BrokerConfig, start: int, end: int,
                 group_start: int) -> "BulkFleet":
        """Brokers with the vectorised healthy traffic of ``bulk`` (not in ``brokers``: no event-loop client
        sees them, so adding them changes nothing else)."""
        from jobs.simulate.bulk import BulkFleet

        new = [Broker(self.loop, self.cluster, f"broker-bulk-{i:02d}", f"10.0.1.{i + 11}", cfg, self.stored.append)
               for i in range(brokers)]
        self.bulk_brokers += new
        self.bulk = BulkFleet(self, new, topics, messages, start=start, end=end, group_start=group_start,
                              seed=self.seed * 1_000_003 + 17)
        return self.bulk

    def next_ip(self) -> str:
        self._ip += 1
        return f"10.1.{self._ip // 250}.{self._ip % 250 + 2}"

    def topic(self, name: str, queues: int, brokers: Optional[list[Broker]] = None) -> None:
        for b in brokers or self.brokers:
            b.create_topic(name, queues)

    def producer(self, *, trace: bool = False, rng: Optional["random.Random"] = None) -> Producer:
        """A producer process; ``rng``: its own generator (default the world's)."""
        p = Producer(self.loop, self.next_ip(), self.brokers, trace=trace, trace_log=self.trace_log, rng=rng)
        self.producers.append(p)
        return p

    def consumer(self, group: str, topic: str, *, broadcast: bool = False, trace: bool = True,
                 behaviour: Behaviour = default_behaviour, from_first: bool = False,
                 start_at: Optional[int] = None, orderly: bool = False, fifo_flag: bool = False,
                 brokers: Optional[list[Broker]] = None, rng: Optional["random.Random"] = None) -> PushConsumer:
        """A push consumer process; ``orderly``: a ``MessageListenerOrderly`` (:class:`OrderlyPushConsumer`),
        ``fifo_flag``: the group's subscription config says ``consumeMessageOrderly`` (5.x FIFO); ``brokers``: the
        brokers it knows (default every broker so far); ``rng``: a generator of its own (default the world's)."""
        reg = self.registries.setdefault(group, GroupRegistry(self.loop, group))
        self.group_info.setdefault(group, {"group": group, "topic": topic, "broadcast": broadcast, "trace": trace,
                                           "orderly": orderly, "fifo_flag": fifo_flag})
        kind = OrderlyPushConsumer if orderly else PushConsumer
        c = kind(self.loop, self.next_ip(), brokers or self.brokers, reg, topic, broadcast=broadcast, trace=trace,
                 behaviour=behaviour, trace_log=self.trace_log, deliveries=self.deliveries,
                 from_first=from_first, fifo_flag=fifo_flag, rng=rng)
        self.consumers.append(c)
        self.loop.at(self.loop.now if start_at is None else start_at, c.start)
        return c

    def traffic(self, producer: Producer, topic: str, *, every_ms: int, start: int, end: int,
                brokers: Optional[list[Broker]] = None, queues: Optional[list[int]] = None,
                count: Optional[int] = None, key_prefix: str = "order") -> None:
        """Round-robin sends over the topic's queues every ``every_ms`` (SelectMessageQueueByHash-free default)."""
        targets = [(b, q) for b in (brokers or self.brokers)
                   for q in (queues if queues is not None else range(b.topics[topic]["writeQueueNums"]))]
        state = {"i": 0}

        def send() -> Optional[bool]:
            i = state["i"]
            if count is not None and i >= count:
                return False
            b, q = targets[i % len(targets)]
            state["i"] += 1
            producer.send(b, topic, q, keys=f"{key_prefix}-{i}", tags="TagA", body=b"payload-%08d" % i)
            return None

        self.loop.every(start, every_ms, send, until_ms=end)

    def batch_traffic(self, producer: Producer, topic: str, *, every_ms: int, start: int, end: int,
                      brokers: list[Broker], sizes: tuple[int, int], rng: "random.Random",
                      key_prefix: str = "batch") -> None:
        """Round-robin batches (``Producer.send_batch``) over a BatchCQ topic's queues every ``every_ms``, each of
        ``rng.randint(*sizes)`` messages (keys ``<key_prefix>-<i>``, numbered over every batch)."""
        targets = [(b, q) for b in brokers for q in range(b.topics[topic]["writeQueueNums"])]
        state = {"batch": 0, "i": 0}

        def send() -> None:
            b, q = targets[state["batch"] % len(targets)]
            state["batch"] += 1
            n, i = rng.randint(*sizes), state["i"]
            state["i"] += n
            producer.send_batch(b, topic, q, [{"keys": f"{key_prefix}-{j}", "tags": "TagA",
                                               "body": b"payload-%08d" % j} for j in range(i, i + n)])

        self.loop.every(start, every_ms, send, until_ms=end)

    def fill(self, producer: Producer, broker: Broker, topic: str, qid: int, n: int, *, at: int,
             spacing_ms: int = 0, key_prefix: str = "msg") -> None:
        """Send ``n`` messages to one queue starting at ``at`` (one per ``spacing_ms``)."""
        for i in range(n):
            self.loop.at(at + i * spacing_ms, lambda i=i: producer.send(
                broker, topic, qid, keys=f"{key_prefix}-{i}", tags="TagA", body=b"body-%06d" % i))

    # ---------------------------------------------------------------- snapshots and running

    def snapshots(self, times: list[int]) -> None:
        for t in times:
            self.snapshot_times.append(t)
            self.loop.at(t, lambda t=t: self._snapshot(t))

    def _snapshot(self, t: int) -> None:
        for b in self.brokers + self.bulk_brokers:
            self.writer.broker(b, t)
        for c in self.consumers:
            if c.broadcast:
                self.writer.client(self.cluster, c, t)
        if PROGRESS is not None:
            done = sum(1 for x in self.snapshot_times if x <= t)
            PROGRESS(f"simulate: snapshot {done}/{len(self.snapshot_times)} at {iso_ms(t)}: "
                     f"{self.writer.files_written} files, {self.writer.bytes_written / 2**20:.0f} MiB written")

    def inject(self, kind: str, **detail: Any) -> None:
        self.injected.append({"kind": kind, "at": iso_ms(self.loop.now), **detail})

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self.loop.at(t, fn)

    def run(self) -> None:
        self.loop.run_until(max(self.snapshot_times) + SECOND)
        os.makedirs(self.out, exist_ok=True)

    @property
    def bulk_messages(self) -> int:
        """Records the bulk path wrote (they have no ``Stored``)."""
        return self.bulk.messages if self.bulk is not None else 0

    def message_count(self) -> int:
        """Records stored on every broker (originals, retry/DLQ/schedule copies, trace messages, bulk)."""
        return len(self.stored) + self.bulk_messages
