"""The client ICE candidates the server will send checks to (issue 20, item 8)."""

from __future__ import annotations

import pytest

from voice_server.server.ice_policy import CandidatePolicy, filter_offer_candidates

DEFAULT = CandidatePolicy.from_lists([], [], 1024)


@pytest.mark.parametrize("host,port", [
    ("169.254.169.254", 50000),  # cloud metadata
    ("fe80::1", 50000),
    ("127.0.0.1", 50000),
    ("::1", 50000),
    ("10.0.0.7", 50000),
    ("172.20.1.1", 50000),
    ("192.168.1.20", 50000),
    ("fd00:ec2::254", 50000),  # AWS metadata over IPv6
    ("100.64.0.1", 50000),  # carrier-grade NAT
    ("0.0.0.0", 50000),
    ("224.0.0.1", 50000),
    ("255.255.255.255", 50000),
    ("::ffff:169.254.169.254", 50000),  # IPv4-mapped
    ("8.8.8.8", 53),  # a public service port
    ("1f3a-node.local", 50000),  # mDNS
    ("example.com", 50000),
])
def test_the_default_refuses_special_addresses_low_ports_and_names(host, port):
    assert DEFAULT.refusal(host, port) is not None


@pytest.mark.parametrize("host", ["8.8.8.8", "2001:4860:4860::8888", "81.2.69.160"])
def test_the_default_uses_public_addresses(host):
    assert DEFAULT.refusal(host, 50000) is None


def test_allow_and_deny_lists():
    policy = CandidatePolicy.from_lists(["127.0.0.1", "192.168.0.0/16"], ["81.2.69.0/24"], 2000)
    assert policy.refusal("127.0.0.1", 40000) is None
    assert policy.refusal("127.0.0.2", 40000) is not None
    assert policy.refusal("192.168.7.7", 40000) is None
    assert policy.refusal("81.2.69.160", 40000) is not None  # denied although public
    assert policy.refusal("192.168.7.7", 1999) is not None


OFFER = "\r\n".join([
    "v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0", "a=group:BUNDLE 0 1",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0", "a=mid:0",
    "a=candidate:1 1 udp 2130706431 81.2.69.160 50000 typ host",
    "a=candidate:2 1 udp 2130706431 169.254.169.254 50001 typ host",
    "a=candidate:3 1 udp 2130706431 abcd.local 50002 typ host",
    "a=end-of-candidates",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "c=IN IP4 0.0.0.0", "a=mid:1",
    "a=candidate:1 1 udp 2130706431 81.2.69.160 50000 typ host",
    "a=end-of-candidates", ""])


def test_the_offer_loses_refused_candidates_and_their_section_s_end_of_candidates():
    sdp, refused = filter_offer_candidates(OFFER, DEFAULT)
    assert "169.254.169.254" not in sdp and "abcd.local" not in sdp
    assert sdp.count("81.2.69.160 50000") == 2
    assert [r.split(":")[0] for r in refused] == ["169.254.169.254", "abcd.local"]
    audio, application = sdp.split("m=application")
    assert "a=end-of-candidates" not in audio  # peer-reflexive discovery may still connect
    assert "a=end-of-candidates" in application
    assert sdp.endswith("\r\n") and "\r\n\r\n" not in sdp


def test_an_offer_with_only_good_candidates_is_unchanged():
    good = OFFER.replace("a=candidate:2 1 udp 2130706431 169.254.169.254 50001 typ host\r\n",
                         "").replace("a=candidate:3 1 udp 2130706431 abcd.local 50002 typ host\r\n",
                                     "")
    assert filter_offer_candidates(good, DEFAULT) == (good, [])
