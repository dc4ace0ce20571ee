"""Is this process in a network namespace whose only addresses are loopback?"""

from __future__ import annotations

import ifaddr

__all__ = ["only_loopback"]


def only_loopback() -> bool:
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            if not (addr.startswith("127.") or addr == "::1"):
                return False
    return True
