"""The agent's own voice played back into the user's microphone (a client without echo
cancellation, a speaker beside the microphone) over WebRTC with a real aiortc peer: it does not
interrupt the agent, not even with the event loop stalling or the server behind its inbound
audio, and the user talking through it still does (barge_in_judge.py, pipeline/echo.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from tests.rtc.test_rtc_turn_taking import LONG_ANSWER, _wav48
from voice_server.server.listening import Listener
from voice_server.server.playout import Clip

pytestmark = pytest.mark.slow


class EchoingMic:
    """A client without echo cancellation: every frame it plays comes back into its microphone
    at ``gain`` a frame later (a speaker beside the microphone), mixed with what the user says.
    It starts once the mic has sent ``after`` (the question), so the echo is not queued behind
    it."""

    def __init__(self, client: RtcClient, gain_db: float, after: Clip) -> None:
        self._client = client
        self._after = after
        self._gain = 10 ** (gain_db / 20)
        self._voice = np.zeros(0, dtype=np.float32)
        self.mute: tuple[float, float] | None = None  # (from, to) s into the echo: zeros

    def say(self, pcm48: np.ndarray) -> None:
        self._voice = np.concatenate([self._voice, pcm48.astype(np.float32)])

    async def run(self) -> None:
        client = self._client
        await self._after.finished.wait()
        sent = len(client.heard)
        echoed = 0.0  # seconds of echo sent
        while True:
            await asyncio.sleep(0.02)
            fresh = client.heard[sent:]
            sent += len(fresh)
            for _, pcm in fresh:
                muted = self.mute is not None and self.mute[0] <= echoed < self.mute[1]
                echoed += len(pcm) / 48_000
                out = pcm.astype(np.float32) * (0.0 if muted else self._gain)
                voice, self._voice = self._voice[:len(out)], self._voice[len(out):]
                out[:len(voice)] += voice
                client.mic.enqueue(np.clip(out, -32768, 32767).astype(np.int16))


@contextlib.asynccontextmanager
async def _long_answer_with_echo(url, rtc_llm, make_speech, gain_db: float
                                 ) -> AsyncIterator[tuple[RtcClient, EchoingMic]]:
    """A client without echo cancellation asks for the long answer; yields once the answer
    plays, with the echo running."""
    rtc_llm.script.clear()  # earlier tests' speculative answers may have left replies
    rtc_llm.add(LONG_ANSWER)
    async with RtcClient(url) as client:
        await client.negotiate()
        question = client.mic.enqueue(_wav48(make_speech, "What is the weather like?",
                                             pad=(1.0, 0.3)))
        await client.wait_for("tts-start", timeout=scaled(60))
        mic = EchoingMic(client, gain_db, question)
        echo = asyncio.create_task(mic.run())
        try:
            yield client, mic
        finally:
            echo.cancel()


# alone: beside another worker's test on a 2.45 GHz EPYC the echo share fell to 0.00 and the
# agent stopped for its own words (1 of 4 full suites, 2026-12-01). The 0.00 was a pause in the
# echo (the client's busy loop sent silence: the next test) and is no longer measured; under
# four busy loops 0 of 32 runs failed since, 2-3 of ~24 before; it may run beside others again
# once full suites agree
@pytest.mark.serial
@pytest.mark.parametrize("gain_db", [-20, -10, 0])
async def test_the_agent_does_not_interrupt_itself_on_its_own_echo(url, rtc_llm, make_speech,
                                                                   gain_db, caplog):
    """A client without echo cancellation: what it hears goes back into its microphone at
    -20 dB, -10 dB and 0 dB (a speaker against the microphone; +6 dB, clipped, passed too).
    The agent finishes its answer."""
    caplog.set_level(logging.DEBUG, logger="voice_server.server")  # listening, barge_in_judge
    async with _long_answer_with_echo(url, rtc_llm, make_speech, gain_db) as (client, _):
        await client.wait_for("tts-complete", timeout=scaled(90))
        # (in a full suite the echo of a sentence's last words was taken for the user in 3 of
        # 7 runs at -10 dB, while echo.py measured in 200 ms blocks: the next test)
        _assert_not_interrupted(client, caplog)


async def test_an_event_loop_that_stalls_does_not_make_the_echo_the_user_s(
        url, rtc_llm, make_speech, caplog):
    """The event loop stops for 0.3 s every 0.6 s (a long garbage collection, a CPU hog; here
    the client's too, which shares it): each stall holds audio back and bursts it after, so
    the echo comes back later from that point on. A block of the echo across such a jump is
    explained only in part: measured in 200 ms blocks a loud one took the echo's share under
    the threshold, the agent paused for its own voice and stopped (2 of 3 runs; shares down
    to 0.44). In 100 ms blocks the least share was 0.59-0.73 in 4 runs (0.49 once in 3 more,
    a pause but no stop: the words are the agent's)."""
    caplog.set_level(logging.DEBUG, logger="voice_server.server")

    async def stall() -> None:
        while True:
            await asyncio.sleep(0.6)
            time.sleep(0.3)  # noqa: ASYNC251 (the stall is the point)

    async with _long_answer_with_echo(url, rtc_llm, make_speech, -10) as (client, _):
        stalls = asyncio.create_task(stall())
        try:
            await client.wait_for("tts-complete", timeout=scaled(90))
        finally:
            stalls.cancel()
        _assert_not_interrupted(client, caplog)
    shares = [float(m[1]) for r in caplog.records
              if (m := re.match(r"echo share of the voice over the agent: ([0-9.]+)",
                                r.getMessage()))]
    assert len(shares) > 20, shares  # the echo was measured all along the answer


async def test_a_silent_stretch_in_the_echo_is_not_the_user_s_voice(url, rtc_llm, make_speech,
                                                                    caplog):
    """The echo stops for 0.8 s and comes back (the client sends digital silence: a
    microphone gate, or a client whose loop stalled and sent zeros in its place). The latest
    voice then holds no sound: its echo share was 0.00, the speech was taken for the user's,
    the agent ducked, and the echo's next words ("Both.", "Will.") were judged its own and
    stopped the agent (2 of 3 runs of the echo test in a row under four CPU hogs on a
    2.45 GHz EPYC, 2026-12-01). Silence is judged neither way."""
    caplog.set_level(logging.DEBUG, logger="voice_server.server")
    async with _long_answer_with_echo(url, rtc_llm, make_speech, -10) as (client, mic):
        mic.mute = (1.5, 2.3)
        await client.wait_for("tts-complete", timeout=scaled(90))
        _assert_not_interrupted(client, caplog)
        assert not [r for r in caplog.records if r.getMessage().startswith(
            ("not a barge-in", "barge-in:"))], _decisions(caplog)  # never judged by its words


def _decisions(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The echo shares and barge-in decisions logged: why, when a test fails."""
    return [r.getMessage() for r in caplog.records
            if "echo share" in r.getMessage() or "barge-in" in r.getMessage()
            or "speech started" in r.getMessage()]


def _assert_not_interrupted(client: RtcClient, caplog: pytest.LogCaptureFixture) -> None:
    assert not client.messages("tts-cancelled"), _decisions(caplog)
    assert len(client.messages("llm")) == 1


async def test_a_server_behind_its_inbound_audio_still_knows_its_echo(
        rtc_server, url, rtc_llm, make_speech, caplog, monkeypatch):
    """The echo is searched for as far back as the server is behind its inbound audio: a
    server that has fallen behind (a busy CPU; here its listener takes 50 ms or more for
    each 20 ms of audio for 3 s, ~1.8 s behind) saw its echo later than the second of delay
    it searched, heard the user, and stopped (every run of this test before
    pipeline/arrival.py). /metrics shows how far behind it was."""
    caplog.set_level(logging.DEBUG, logger="voice_server.server")
    registry = rtc_server.metrics.registry

    def frames(name: str, **labels: str) -> float:
        return registry.get_sample_value(f"voice_audio_behind_seconds_{name}", labels) or 0.0

    late_before = frames("count") - frames("bucket", le="1.0")
    feed = Listener.feed
    slow_from: list[float] = []
    behind: list[float] = []

    async def slow_feed(self: Listener, pcm: np.ndarray, arrived: float | None = None) -> None:
        if slow_from and 0 < time.monotonic() - slow_from[0] < 3.0:
            await asyncio.sleep(0.05)
        if arrived is not None:
            behind.append(time.monotonic() - arrived)
        await feed(self, pcm, arrived)

    monkeypatch.setattr(Listener, "feed", slow_feed)
    async with _long_answer_with_echo(url, rtc_llm, make_speech, -10) as (client, _):
        slow_from.append(time.monotonic() + 1.0)  # 1 s into the answer and its echo
        await client.wait_for("tts-complete", timeout=scaled(90))
        _assert_not_interrupted(client, caplog)
        assert max(behind) > 1.2, max(behind)  # beyond the echo's search (ECHO_DELAY_S)
    # the frames that waited over 1 s, counted in voice_audio_behind_seconds
    assert frames("count") - frames("bucket", le="1.0") - late_before > 10


async def test_the_user_interrupts_through_the_echo(url, rtc_llm, make_speech, caplog):
    """The same client, echo at -10 dB: a real question over the agent's echoed voice still
    stops it at the user's first words, and is answered; the echo heard before the user spoke
    is not part of the question.

    Not at 0 dB (a speaker against the microphone, the echo as loud as the user): there a mix
    of the two scores about the threshold (``barge_in_echo_share``, 0.5) by construction, what
    is left of the echo after its removal is only 6-10 dB under the user's voice, and the
    outcome is a rate, measured by ``bench/voice_latency.py --echo-gain-db 0``. In ~40 runs of
    this test at 0 dB (2026-12-01) the agent always stopped, but the first judgement heard a
    hum ("Uh-oh.", "No, no.", "Come on.") in 4 of the 9 where it was logged, and the agent
    resumed for a second; once in a CI the first two heard "The lights top."; and in 2 "Stop!"
    became a turn of its own, the next answer began at once, and the question over that
    answer's echo was heard as "Mm-hmm." and then scored as echo: never asked (1 of 30 more;
    0 of 30 since such a voice's words are judged with the echo out, ``BargeInJudge._judge``)."""
    caplog.set_level(logging.DEBUG, logger="voice_server.server")
    before = len(rtc_llm.requests)  # the fake LLM serves the whole session: earlier tests asked
    async with _long_answer_with_echo(url, rtc_llm, make_speech, -10) as (client, mic):
        await asyncio.sleep(2.5)
        mic.say(_wav48(make_speech, "Stop. When does the market open?", pad=(0.0, 0.0)))
        await client.wait_for("tts-cancelled", timeout=scaled(30))
        # the first judgement of the user's words stops the agent: judged with the echo kept
        # before the voice in it, Whisper heard the agent's words ("With the light") and, at
        # an echo share of 0.2 or more, took them for echo, and the agent went on over the
        # question (barge_in_judge.py, pipeline/echo.without_echo)
        # (the first judgement was the barge-in in ~43 of 45 runs; in two, once in a CI, it
        # heard a hum or the agent's words, and the second, a second later, stopped the agent:
        # a rate to measure, not to assert on one run; tests/unit/test_echo.py pins the
        # echo's removal itself)
        judged = [r.getMessage() for r in caplog.records
                  if r.getMessage().startswith(("barge-in:", "not a barge-in:"))]
        assert any(j.startswith("barge-in:") for j in judged[:2]), judged
        # the question is asked; "Stop." and its pause may make a turn of their own first
        # (tiny.en seldom hears espeak-ng's "Stop.", its "market" is sometimes "mark get",
        # and its "when does the market open" once "when the market opened")
        def questions() -> list[str]:
            texts = [m["messages"][-1]["content"].lower() for m in rtc_llm.requests[before:]]
            return [text for text in texts
                    if "when" in text and ("market" in text or "open" in text)]

        try:
            async with asyncio.timeout(scaled(60)):
                while not questions():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:  # what was heard and asked says why (CI runs of 2026-11-29:
            # the question heard inside the echo, "with a light burst off from the sea, and
            # dust them on their kids"); and the echo shares and barge-in decisions, whether
            # the echo before the user's voice was taken for theirs
            pytest.fail(f"the question was not asked: heard "
                        f"{[m['text'] for m in client.messages('transcript')]}, asked "
                        f"{[m['messages'][-1]['content'] for m in rtc_llm.requests[before:]]}, "
                        f"decisions {_decisions(caplog)}")
        asked = questions()
        assert "open" in asked[-1], asked
        # the turn starts near the user's voice, not at the echo that came before it (it
        # began "the weather today is sunny and warm with a lot. when does ..."), and that
        # echo is out of the turn's audio as it was out of the judged words (3 of 6 runs
        # without: "with a light top when does the market open?")
        assert "the weather today" not in asked[-1], asked
        assert "with a light" not in asked[-1].lower(), asked
