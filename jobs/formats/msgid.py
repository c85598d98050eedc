"""Message ids (formats §6): the broker's offsetMsgId and the client's UNIQ_KEY.

offsetMsgId = hex of store IP + port + commitlog offset (``MessageDecoder.createMessageId``), so it names a
stored copy; UNIQ_KEY (``MessageClientIDSetter``) survives retries and DLQ and is what reconciliation keys on.
"""
from __future__ import annotations

import socket
import struct


def offset_msg_id(store_host: str, physical_offset: int) -> str:
    """``ip:port`` + physical offset -> 32 (IPv4) or 56 (IPv6) uppercase hex characters."""
    ip, _, port = store_host.rpartition(":")
    ip = ip.strip("[]")
    raw = socket.inet_pton(socket.AF_INET6, ip) if ":" in ip else socket.inet_aton(ip)
    return (raw + struct.pack(">iq", int(port), physical_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """The inverse: (store IP, port, physical offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:8])[0], struct.unpack(">q", raw[8:])[0]
    if len(raw) == 28:
        return socket.inet_ntop(socket.AF_INET6, raw[:16]), struct.unpack(">i", raw[16:20])[0], struct.unpack(">q", raw[20:])[0]
    raise ValueError(f"offsetMsgId {msg_id!r}: expected 32 or 56 hex characters, got {len(msg_id)}")


def uniq_key_ip(uniq_key: str) -> str:
    """The producer's IPv4 address, the first 4 bytes of an IPv4 UNIQ_KEY."""
    return socket.inet_ntoa(bytes.fromhex(uniq_key[:8]))


def make_uniq_key(ip: str, pid: int, classloader_hash: int, ms_since_month_start: int, counter: int) -> str:
    """``MessageClientIDSetter``: IP(4) + pid(2) + classloader hash(4) + time since month start(4) + counter(2)."""
    # Java writes (short) pid, the int hash, (int) ms and (short) counter: each wraps to its width
    return (socket.inet_aton(ip) + struct.pack(">HIIH", pid & 0xFFFF, classloader_hash & 0xFFFFFFFF,
                                               ms_since_month_start & 0xFFFFFFFF, counter & 0xFFFF)).hex().upper()
