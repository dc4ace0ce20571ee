"""Shape checks for a client's SDP offer before it reaches the WebRTC stack.

RFC 8866 section 5: a session description is ``<type>=<value>`` lines, one letter each, that
begins with ``v=0``; each media section starts with ``m=<media> <port> <proto> <fmt> ...``.
The checks are cheap and strict enough that garbage, or an offer that would make the answer and
the peer's state grow without bound (hundreds of media sections), is refused before aiortc
builds anything for it. What passes may still fail negotiation (no common codec): that is
aiortc's to say.
"""

from __future__ import annotations

import re

__all__ = ["MAX_MEDIA_SECTIONS", "offer_problem"]

MAX_MEDIA_SECTIONS = 8  # the reference client offers 2 (audio, data channel)
_LINE = re.compile(r"[a-z]=")
_MEDIA = re.compile(r"m=(audio|video|application|text|message) \d{1,5}(/\d{1,3})? \S+( \S+)+")


def offer_problem(sdp: str) -> str | None:
    """Why ``sdp`` cannot be a client's offer, or None when its shape is acceptable."""
    lines = [line for line in re.split(r"\r?\n", sdp) if line]
    if not lines or lines[0] != "v=0":
        return "is not an SDP session description (it must begin with the line 'v=0')"
    for line in lines:
        if not _LINE.match(line):
            return f"has a line that is not '<letter>=<value>': {line[:40]!r}"
    media = [line for line in lines if line.startswith("m=")]
    if not media:
        return "offers no media section (no 'm=' line)"
    if len(media) > MAX_MEDIA_SECTIONS:
        return (f"has {len(media)} media sections; at most {MAX_MEDIA_SECTIONS} are accepted")
    for line in media:
        if not _MEDIA.fullmatch(line):
            return f"has a malformed media line: {line[:60]!r}"
    return None
