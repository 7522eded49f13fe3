"""Ports for cluster tests: free ones on 127.0.0.1, and which local addresses listen on one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 (the OS's choice; free again once this returns)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def listening_hosts(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on `port`, from Linux's /proc/net/tcp and tcp6:
    {"127.0.0.1"} for a socket bound to loopback, {"::"} or {"0.0.0.0"} for every interface. An IPv6
    socket bound to a v4-mapped address (::ffff:127.0.0.1: IPv4 connections to that address only) counts
    as that IPv4 address. Skips the test where /proc/net/tcp does not exist."""
    hosts = set()
    for name, family, size in (("tcp", socket.AF_INET, 4), ("tcp6", socket.AF_INET6, 16)):
        path = Path("/proc/net") / name
        if not path.exists():
            pytest.skip(f"no {path} (not Linux)")
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] == "0A" and int(port_hex, 16) == port:              # 0A: LISTEN
                raw = bytes.fromhex(address)                                    # 32-bit words, host order
                host = socket.inet_ntop(family, b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4)))
                hosts.add(host.removeprefix("::ffff:") if host.startswith("::ffff:") and "." in host else host)
    return hosts
