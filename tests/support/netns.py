"""Loopback networking for tests: is this process in a network namespace whose only addresses
are loopback, and a free port on 127.0.0.1."""

from __future__ import annotations

import socket

import ifaddr

__all__ = ["free_port", "only_loopback"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def only_loopback() -> bool:
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            if not (addr.startswith("127.") or addr == "::1"):
                return False
    return True
