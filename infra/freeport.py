"""Print N distinct free TCP ports on 127.0.0.1, one per line, chosen below the kernel's ephemeral range.

A port from ``bind(0)`` lies inside that range, so between the check and the daemon's own bind any outgoing connection
on the machine can take it (a busy test run opens thousands). Below the range only another listener can.
"""
import random
import socket
import sys


def ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main(n: int) -> None:
    lo, hi = 20000, ephemeral_low() - 1
    chosen: list[int] = []
    for _ in range(1000):
        if len(chosen) == n:
            break
        if hi - lo < 1000:   # no room below the range: take the kernel's pick
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        else:
            port = random.randint(lo, hi)
        if port not in chosen and free(port):
            chosen.append(port)
    if len(chosen) < n:
        sys.exit(f"freeport: found only {len(chosen)} of {n} free ports on 127.0.0.1")
    print("\n".join(map(str, chosen)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
