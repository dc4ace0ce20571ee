"""Limits that keep one instance healthy under abuse.

Sans-I/O: counters and a token bucket over an injectable clock. The connection code asks them
and answers ``error{RATE_LIMITED}`` (spec: "Error Codes") when they say no.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Admission", "MemoryBudget", "TokenBucket", "client_address", "request_client"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def request_client(remote_address: Any, headers: Any, trusted: Sequence[Network]) -> str:
    """``client_address`` of a request: its TCP peer (``remote_address``, a (host, port, ...)
    tuple or None) and its headers' ``X-Forwarded-For`` (``headers`` may be None)."""
    peer = str(remote_address[0]) if remote_address else "?"
    forwarded = headers.get("X-Forwarded-For") if headers is not None else None
    return client_address(peer, forwarded, trusted)


def client_address(peer: str, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """The address limits and logs should use: the TCP peer, unless the peer is a trusted
    proxy; then the right-most ``X-Forwarded-For`` hop that is not itself trusted (hops left of
    it were written by the client and can be forged)."""
    def is_trusted(text: str) -> bool:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return False
        return any(address in network for network in trusted)

    if not forwarded_for or not is_trusted(peer):
        return peer
    current = peer
    for hop in reversed(forwarded_for.split(",")):
        hop = hop.strip()
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return current  # garbage in the header: the last address we could vouch for
        current = hop
        if not is_trusted(hop):
            return hop
    return current


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take()`` is False when empty."""

    def __init__(self, rate: float, burst: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def address_group(ip: str) -> str:
    """What one client is, for per-address limits: an IPv4 address, or an IPv6 /64 (one host
    or home gets a whole /64 and may pick any address in it)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Admission:
    """Counts live connections per instance and per client address."""

    def __init__(self, *, max_total: int, max_per_ip: int) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def admit(self, ip: str) -> str | None:
        """Count a new connection; returns None, or why it is refused (nothing counted)."""
        ip = address_group(ip)
        if self.total >= self.max_total:
            return f"this server is full ({self.max_total} sessions); try another instance"
        if self._per_ip.get(ip, 0) >= self.max_per_ip:
            return f"too many sessions from this address (limit {self.max_per_ip})"
        self.total += 1
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        return None

    def release(self, ip: str) -> None:
        ip = address_group(ip)
        count = self._per_ip.get(ip, 0)
        if count <= 0:
            return
        self.total -= 1
        if count == 1:
            del self._per_ip[ip]
        else:
            self._per_ip[ip] = count - 1


class MemoryBudget:
    """Bytes of client input held at once across all connections (audio being decoded, images
    waiting for their turn); ``take`` is False, counting nothing, when ``n`` would pass the
    limit. Small messages are not worth counting: callers count those from ``counted_from``."""

    counted_from = 64 * 1024

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0

    def take(self, n: int) -> bool:
        if self.in_use + n > self.limit:
            return False
        self.in_use += n
        return True

    def give_back(self, n: int) -> None:
        self.in_use = max(0, self.in_use - n)
