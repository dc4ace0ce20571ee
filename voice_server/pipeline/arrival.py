"""When the inbound audio at hand arrived, by the stream's own clock (sans-I/O).

A server that falls behind its inbound audio (a busy CPU: frames wait in the transport's
queue) processes audio that arrived earlier than now. Most of turn-taking does not mind, but
the echo check does: it lines the voice up with what the agent played (echo.py) and searches
a second of delay, so a voice processed 0.6 s late looked like an echo 0.6 s later than it
was; the search reaches back as far again as this clock says the audio is behind
(server/barge_in_judge.py).

The stream's media time (RTP timestamps, Twilio's media timestamps, or the samples counted)
runs with the sender's clock. ``ArrivalClock`` keeps the least offset between the local clock
and that media time: audio processed as it comes sets it, audio processed late cannot raise
it. Arrival = media time + that offset. The offset is let rise by ``RELAX_PER_S``: two
devices' clocks drift apart by well under 0.1 ms a second, but a sender's media time can
also lose time for good (an aiortc peer that stalls sends on from where it was: the
estimate is early by the stall until the offset has risen that much). A lag beyond
``MAX_LAG_S`` starts over. A stamp ahead of the last piece's end is time that passed (lost
packets, silence not sent; a new source's leap sets a new, smaller offset at once); one that
goes back is taken to follow the last piece without a gap.
"""

from __future__ import annotations

__all__ = ["ArrivalClock"]

RELAX_PER_S = 0.01  # the least offset may rise this much per second (drift, lost time)
MAX_LAG_S = 5.0  # later than this by the estimate: a discontinuity, not a lag


class ArrivalClock:
    """``heard(duration_s, now, stamp)`` for each piece of inbound audio, in order; it returns
    when the end of that piece arrived (``now``'s clock)."""

    def __init__(self, units_per_s: int = 1000, wrap: int | None = None) -> None:
        """``stamp``s count ``units_per_s`` a second and wrap at ``wrap`` (RTP: 2 ** 32)."""
        self._units = units_per_s
        self._wrap = wrap
        self._stamp: int | None = None  # the last piece's first sample
        self._start = 0.0  # its media time (s)
        self._end = 0.0  # media time at the end of the last piece
        self._least: float | None = None  # least (local clock - media time) seen, relaxed
        self._now = 0.0

    def heard(self, duration_s: float, now: float, stamp: int | None = None) -> float:
        start = self._end  # by default the piece follows the last without a gap
        if stamp is not None and self._stamp is not None:
            delta = stamp - self._stamp
            if self._wrap is not None:
                delta %= self._wrap
                if delta >= self._wrap // 2:
                    delta -= self._wrap
            ahead = self._start + delta / self._units
            if ahead >= self._end - 0.001:
                start = ahead
        if stamp is not None:
            self._stamp = stamp
        self._start, self._end = start, start + duration_s
        offset = now - self._end
        least = self._least
        if least is not None:
            least += RELAX_PER_S * max(0.0, now - self._now)
        if least is None or offset < least or offset - least > MAX_LAG_S:
            least = offset
        self._least, self._now = least, now
        return self._end + least
