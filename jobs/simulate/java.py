"""Java's hash functions and map iteration orders, so generated files list entries as the JVM would.

fastjson serialises a ``HashMap``/``ConcurrentHashMap`` in iteration order: by bucket index
(``spread(hashCode) & (n - 1)``), then insertion order inside a bucket. Message properties are a ``HashMap``
(``Message.properties``, default capacity 16), the broker's tables are ``ConcurrentHashMap``s created with an
initial capacity (``TopicConfigManager``/``SubscriptionGroupManager`` 1024, ``ConsumerOffsetManager`` 512, the
per-queue map 32).
"""
from __future__ import annotations

import functools
from typing import Any, Iterable


@functools.lru_cache(maxsize=1 << 16)
def string_hash(s: str) -> int:
    """``String.hashCode()`` as a signed 32-bit int."""
    h = 0
    # ASCII: the UTF-16 code units are the bytes (the common case, and much faster to iterate)
    for unit in (s.encode("ascii") if s.isascii() else _utf16_units(s)):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(s: str) -> Iterable[int]:
    b = s.encode("utf-16-be")
    return (int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2))


def hash_of(key: Any) -> int:
    """``hashCode()`` of a String, Integer or a MessageQueue given as (brokerName, queueId, topic)."""
    if isinstance(key, str):
        return string_hash(key)
    if isinstance(key, bool):
        raise TypeError("no booleans")
    if isinstance(key, int):
        return key
    if isinstance(key, tuple) and len(key) == 3:  # MessageQueue.hashCode
        broker, qid, topic = key
        h = 31 + string_hash(broker)
        h = 31 * h + qid
        h = 31 * h + string_hash(topic)
        h &= 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h
    raise TypeError(f"no Java hash for {key!r}")


def table_size(entries: int, initial: int, *, concurrent: bool) -> int:
    """The bucket array length after ``entries`` inserts (``tableSizeFor``, resize at 0.75)."""
    if concurrent:  # ConcurrentHashMap(initialCapacity): tableSizeFor(c + c/2 + 1)
        n = 1
        while n < initial + (initial >> 1) + 1:
            n <<= 1
    else:
        n = 1
        while n < initial:
            n <<= 1
    while entries > n * 0.75:
        n <<= 1
    return n


def iteration_order(keys: list[Any], *, initial: int = 16, concurrent: bool = False) -> list[Any]:
    """``keys`` (in insertion order) in the order a Java hash map iterates them."""
    n = table_size(len(keys), initial, concurrent=concurrent)

    def bucket(k: Any) -> int:
        h = hash_of(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (n - 1)

    return [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


def ordered(d: dict[Any, Any], *, initial: int = 16, concurrent: bool = False,
            key_of: Any = None) -> dict[Any, Any]:
    """A copy of ``d`` in Java iteration order (``key_of`` maps a key to the object whose hash is used)."""
    keys = list(d)
    if key_of is None:
        order = iteration_order(keys, initial=initial, concurrent=concurrent)
    else:
        proxies = {key_of(k): k for k in keys}
        order = [proxies[p] for p in iteration_order(list(proxies), initial=initial, concurrent=concurrent)]
    return {k: d[k] for k in order}
