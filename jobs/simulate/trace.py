"""Message trace: each client's ``AsyncTraceDispatcher`` writing records as ``RMQ_SYS_TRACE_TOPIC`` messages.

Contexts are buffered and sent in batches of up to 20 records (``batchNum``), or 500 ms after the first
buffered one; the trace message is born on the client's host (so the pipeline can tell clients apart), its
keys are the traced msgIds plus the user keys (``AsyncTraceDispatcher.sendTraceData``). Records still in the
buffer when a process is killed are lost, as in the real client.
"""
from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any

from jobs.formats.msgid import make_uniq_key
from jobs.simulate import java
from jobs.simulate.clock import EventLoop, month_start_ms

if TYPE_CHECKING:  # pragma: no cover
    from jobs.simulate.broker import Broker

TRACE_BATCH = 20
TRACE_WAIT_MS = 500
REGION = "DefaultRegion"


class UniqIdGenerator:
    """``MessageClientIDSetter``: one per JVM (the counter is static), shared by producers and trace contexts."""

    def __init__(self, ip: str, pid: int, classloader_hash: int) -> None:
        self.ip = ip
        self.pid = pid
        self.classloader_hash = classloader_hash
        self.counter = 0

    def next(self, now_ms: int) -> str:
        self.counter += 1
        return make_uniq_key(self.ip, self.pid, self.classloader_hash, now_ms - month_start_ms(now_ms), self.counter)


def ip_bytes(ip: str) -> bytes:
    return socket.inet_aton(ip)


def host_int(ip: str, port: int) -> bytes:
    return ip_bytes(ip) + struct.pack(">i", port)


class TraceDispatcher:
    """``AsyncTraceDispatcher`` of one client: buffers trace records and sends them as trace messages."""

    def __init__(self, loop: EventLoop, ip: str, port: int, uniq: UniqIdGenerator, brokers: list["Broker"],
                 log: list[dict[str, Any]], rng: Any = None) -> None:
        self.loop = loop
        self.rng = rng if rng is not None else loop.rng  # the client's generator picks the broker
        self.ip = ip
        self.port = port
        self.uniq = uniq
        self.brokers = brokers
        self.buffer: list[dict[str, Any]] = []
        self.flush_scheduled = False
        self.alive = True
        self.log = log  # every record that reached a broker, with where it was stored

    def add(self, record: dict[str, Any]) -> None:
        if not self.alive:
            return
        self.buffer.append(record)
        if len(self.buffer) >= TRACE_BATCH:
            self.flush()
        elif not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.after(TRACE_WAIT_MS, self._timed_flush)

    def _timed_flush(self) -> None:
        self.flush_scheduled = False
        self.flush()

    def kill(self) -> None:
        """The process died: whatever is buffered is lost."""
        self.alive = False
        self.buffer = []

    def flush(self) -> None:
        from jobs.formats.trace import encode_trace_records

        while self.alive and self.buffer:
            batch, self.buffer = self.buffer[:TRACE_BATCH], self.buffer[TRACE_BATCH:]
            body = encode_trace_records(batch)
            keys: list[str] = []
            for r in batch:
                for k in [r.get("msg_id")] + (r.get("keys") or "").split(" "):
                    if k and k not in keys:
                        keys.append(k)
            keys = java.iteration_order(keys)  # a HashSet joined with " " (Message.setKeys(Collection))
            now = self.loop.now
            props = {"KEYS": " ".join(keys), "WAIT": "true", "UNIQ_KEY": self.uniq.next(now)}
            broker = self.brokers[self.rng.randrange(len(self.brokers))]
            stored = broker.put(topic="RMQ_SYS_TRACE_TOPIC", queue_id=0, props=props, body=body, born_ts=now,
                                born_host=(self.ip, self.port))
            for r in batch:
                self.log.append({**r, "_broker": broker.name, "_phys": stored.phys, "_store_ts": stored.store_ts,
                                 "_host": self.ip})
