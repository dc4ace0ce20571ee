"""Which ICE candidates a client may make this server send connectivity checks to.

Without a policy, any client can name any address in its offer (``169.254.169.254``, the
private network the server sits in, a local service's port) and the server sends STUN checks
there: a UDP scanner for anyone. Candidates reach us only inside the SDP (the llmrtc protocol
has no trickle), so the offer's ``a=candidate`` lines are filtered before aiortc sees them.

The default uses only candidates on public (globally routable) unicast addresses, on ports from
1024 up. Private, loopback, link-local (cloud metadata) and other special addresses are used
only when ``ice_candidate_allow`` lists their network; ``ice_candidate_deny`` refuses networks
even when public. Host names (``.local`` mDNS included) are never resolved: resolving can stall
negotiation, and the peer's checks to our candidates reveal its address anyway.

Dropping a client's candidates does not cut a client off: when it sends checks to our
candidates, ICE learns its address as peer-reflexive (RFC 8445 section 7.3.1.3), an address
it proved it owns by sending from it. So an offer that lost candidates also loses
``a=end-of-candidates``, and the ICE agent keeps waiting for those checks instead of failing
at once.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = ["CandidatePolicy", "filter_offer_candidates"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class CandidatePolicy:
    allow: tuple[Network, ...] = ()
    deny: tuple[Network, ...] = ()
    min_port: int = 1024

    @classmethod
    def from_lists(cls, allow: list[str], deny: list[str], min_port: int) -> CandidatePolicy:
        return cls(allow=tuple(ipaddress.ip_network(n, strict=False) for n in allow),
                   deny=tuple(ipaddress.ip_network(n, strict=False) for n in deny),
                   min_port=min_port)

    def refusal(self, host: str, port: int) -> str | None:
        """Why a candidate at ``host:port`` is not used, or None when it is."""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return "a host name (not resolved)"
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if port < self.min_port:
            return f"port {port} is below {self.min_port}"
        if any(address in net for net in self.deny):
            return "a denied network"
        if any(address in net for net in self.allow):
            return None
        if address.is_global and not address.is_multicast:
            return None
        return "not a public address (list its network in ice_candidate_allow to use it)"


_CANDIDATE = re.compile(r"a=candidate:\S+ \d+ \S+ \d+ (?P<host>\S+) (?P<port>\d{1,5}) typ ")


def filter_offer_candidates(sdp: str, policy: CandidatePolicy) -> tuple[str, list[str]]:
    """``sdp`` without the candidates ``policy`` refuses, and one line per refused candidate
    saying why. A media section that lost candidates also loses ``a=end-of-candidates``."""
    sections: list[list[str]] = [[]]
    for line in re.split(r"\r?\n", sdp):
        if line.startswith("m="):
            sections.append([])
        sections[-1].append(line)
    refused: list[str] = []
    kept_lines: list[str] = []
    for section in sections:
        kept, dropped = [], False
        for line in section:
            if line.startswith("a=candidate:"):
                match = _CANDIDATE.match(line)
                why = ("a malformed candidate" if match is None
                       else policy.refusal(match["host"], int(match["port"])))
                if why is not None:
                    refused.append(f"{match['host'] + ':' + match['port'] if match else line[:60]}"
                                   f": {why}")
                    dropped = True
                    continue
            kept.append(line)
        if dropped:
            kept = [line for line in kept if line != "a=end-of-candidates"]
        kept_lines.extend(kept)
    text = "\r\n".join(line for line in kept_lines if line)
    return text + "\r\n", refused
