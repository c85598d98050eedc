"""RocketMQ commitlog segments written as the broker writes them (``MessageExtEncoder``, ``CommitLog.doAppend``).

The simulator, the fault corpus and the benchmarks make their stores with it; the pipeline only decodes
(:mod:`jobs.formats.commitlog`, which owns the record layout and the constants both sides share).
"""
from __future__ import annotations

import os
import socket
import struct
import zlib

from jobs.formats.commitlog import (BLANK_MAGIC, BORNHOST_V6, COMPRESSION_LZ4, COMPRESSION_ZLIB, COMPRESSION_ZSTD,
                                    END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2, NAME_VALUE_SEPARATOR,
                                    PROPERTY_SEPARATOR, STOREHOST_V6)


def _host_bytes(host: tuple[str, int]) -> bytes:
    ip, port = host
    if ":" in ip:
        return socket.inet_pton(socket.AF_INET6, ip) + struct.pack(">i", port)
    return socket.inet_aton(ip) + struct.pack(">i", port)


def properties_to_string(properties: dict[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``: ``name\\x01value\\x02`` per pair, null values skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items() if v is not None)


def encode_message(*, topic: str, queue_id: int, queue_offset: int, physical_offset: int, body: bytes,
                   properties: dict[str, str], born_ts_ms: int, store_ts_ms: int, born_host: tuple[str, int],
                   store_host: tuple[str, int], sys_flag: int = 0, reconsume_times: int = 0, flag: int = 0,
                   prepared_transaction_offset: int = 0, magic: int | None = None) -> bytes:
    """One commitlog record exactly as ``MessageExtEncoder`` lays it out (big-endian)."""
    if ":" in born_host[0]:
        sys_flag |= BORNHOST_V6
    if ":" in store_host[0]:
        sys_flag |= STOREHOST_V6
    topic_b = topic.encode("utf-8")
    if magic is None:
        magic = MAGIC_V2 if len(topic_b) > 127 else MAGIC_V1
    props_b = properties_to_string(properties).encode("utf-8")
    if len(props_b) > 32767:
        raise ValueError(f"properties of {len(props_b)} bytes exceed Short.MAX_VALUE")
    topic_len = struct.pack(">h", len(topic_b)) if magic == MAGIC_V2 else struct.pack(">b", len(topic_b))
    tail = (
        struct.pack(">q", born_ts_ms) + _host_bytes(born_host)
        + struct.pack(">q", store_ts_ms) + _host_bytes(store_host)
        + struct.pack(">iq", reconsume_times, prepared_transaction_offset)
        + struct.pack(">i", len(body)) + body
        + topic_len + topic_b
        + struct.pack(">h", len(props_b)) + props_b
    )
    crc = zlib.crc32(body) & 0x7FFFFFFF if body else 0
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + len(tail)
    head = struct.pack(">iiiiiqqi", total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag)
    return head + tail


def encode_blank(remaining: int) -> bytes:
    """The end-of-file marker: ``[remaining][BLANK_MAGIC]`` (the rest of the file stays zero)."""
    return struct.pack(">ii", remaining, BLANK_MAGIC)


def compress_body(body: bytes, kind: int) -> bytes:
    if kind == COMPRESSION_ZLIB:
        return zlib.compress(body)
    if kind == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(body)
    if kind == COMPRESSION_LZ4:
        import lz4.frame  # type: ignore[import-not-found]

        return lz4.frame.compress(body)
    raise ValueError(f"unknown compression type {kind}")


def tags_hash(tags: str | None) -> int:
    """``String.hashCode()`` of the tags (the consume queue's tags code); 0 without tags."""
    if not tags:
        return 0
    h = 0
    units = tags.encode("utf-16-be")  # Java hashes UTF-16 code units (a surrogate pair above the BMP)
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class CommitLogWriter:
    """Appends records to segment files named by start offset, rolling over like ``CommitLog.doAppend``.

    Files are created full size and zero-filled (RocketMQ preallocates mapped files); when a record does not
    fit with 8 bytes to spare, the blank end-of-file marker is written and the record goes to the next file.
    """

    def __init__(self, directory: str, segment_size: int = 1 << 30) -> None:
        self.directory = directory
        self.segment_size = segment_size
        os.makedirs(directory, exist_ok=True)
        self.next_offset = 0
        self._file: "os.PathLike[str] | None" = None
        self._fh = None  # type: ignore[var-annotated]
        self._seg_start = -1

    def _open(self, start: int) -> None:
        self.close()
        path = os.path.join(self.directory, f"{start:020d}")
        self._fh = open(path, "r+b" if os.path.exists(path) else "w+b")
        self._fh.truncate(self.segment_size)
        self._seg_start = start

    def append(self, **fields: object) -> tuple[int, int]:
        """Encode and append one message; returns (physical offset, size)."""
        probe = encode_message(physical_offset=0, **fields)  # type: ignore[arg-type]
        size = len(probe)
        if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            raise ValueError(f"message of {size} bytes does not fit a {self.segment_size}-byte segment")
        seg_start = self.next_offset - self.next_offset % self.segment_size
        if self._seg_start != seg_start:
            self._open(seg_start)
        pos = self.next_offset - seg_start
        remaining = self.segment_size - pos
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            assert self._fh is not None
            self._fh.seek(pos)
            self._fh.write(encode_blank(remaining))
            self.next_offset = seg_start + self.segment_size
            self._open(self.next_offset)
            pos = 0
        record = probe[:28] + struct.pack(">q", self.next_offset) + probe[36:]
        assert self._fh is not None
        self._fh.seek(pos)
        self._fh.write(record)
        phys = self.next_offset
        self.next_offset += size
        return phys, size

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self._seg_start = -1
