"""Echo cases of the latency benchmark: a client without echo cancellation (a laptop's speaker
beside its microphone, a phone on speaker), judged from the audio alone, the same way for
voice_server and Pipecat, with the instant scripted LLM:

- **echo alone**: the agent tells its long story and hears it back at ``gain_db``; a *self
  interruption* is the story ending early (under 80% of the agent speech the same story gives
  without echo, measured in the same run);
- **interrupted through the echo**: 2.5 s into the story, once the agent has begun a sentence,
  the user says "Stop please. What time is it in Tokyo?" over the echo: the *reaction* (onset
  of the user's voice -> the agent's audio silent, as in ``_peers.barge_in``), whether the
  agent *stopped* at all before the user had finished, and whether the LLM was asked the
  user's question *clean* (its requests since the story began hold "Tokyo" and no word of the
  story the echo carried); an agent already silent when the user speaks (it cut itself on its
  echo) is counted apart (``silent_at_onset``);
- the same interruption **without echo**, the baseline of the reaction.

The microphone is a real-time mixer (``EchoPath``): every 20 ms it sends what the client heard
since (scaled by ``gain_db``, about 20 ms later) plus what the user says.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import time
from typing import Any

import numpy as np

from bench._peers import LOUD, first_loud_after, loud_seconds, speech_bounds, turn_end
from voice_server.pipeline.audio import rms

__all__ = ["INTERRUPTION", "STORY_WORDS", "EchoPath", "echo_phase"]

RATE = 48_000
FRAME = RATE // 50
INTERRUPTION = "Stop please. What time is it in Tokyo?"
# words of the scripted story (voice_latency.LONG) that the question does not hold
STORY_WORDS = frozenset("tell long story sea waves roll slowly morning fishermen sun rises "
                        "bring fish market children play warm sand evening lighthouse shines "
                        "water".split())


class Spoken:
    """One utterance the user says through an ``EchoPath``: ``onset`` and ``end`` (client
    clock) are known once its first loud sample has gone out."""

    def __init__(self, start: int, pcm48: np.ndarray) -> None:
        first, last = speech_bounds(pcm48)
        self.onset_sample = start + round(first * RATE)
        self.length_s = float(last - first)
        self.sent = asyncio.Event()
        self.onset: float | None = None

    @property
    def end(self) -> float:
        assert self.onset is not None
        return self.onset + self.length_s


class EchoPath:
    """The client's microphone, mixing the user's voice with the agent's voice played back at
    ``gain_db`` (``None``: no echo, a client that cancels it). ``async with`` runs it."""

    def __init__(self, client: Any, gain_db: float | None) -> None:
        self._client = client
        self._gain = 0.0 if gain_db is None else 10 ** (gain_db / 20)
        self._played = np.zeros(0, dtype=np.float32)
        self._voice = np.zeros(0, dtype=np.float32)
        self._voice_pos = 0  # where ``_voice`` starts in all the user has said
        self._pending: list[Spoken] = []
        self._task: asyncio.Task[None] | None = None
        self._marks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> EchoPath:
        self._task = asyncio.create_task(self._run(), name="echo-path")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def say(self, pcm48: np.ndarray) -> Spoken:
        spoken = Spoken(self._voice_pos + len(self._voice), pcm48)
        self._voice = np.concatenate([self._voice, pcm48.astype(np.float32)])
        self._pending.append(spoken)
        return spoken

    async def _run(self) -> None:
        client = self._client
        seen = len(client.heard)
        start, frames_sent = time.monotonic(), 0
        while True:
            await asyncio.sleep(0.02)
            fresh = client.heard[seen:]
            seen += len(fresh)
            if fresh:
                self._played = np.concatenate([self._played, *(p.astype(np.float32)
                                                               for _, p in fresh)])
            self._played = self._played[-RATE // 5:]  # never more than 200 ms behind
            due = int((time.monotonic() - start) / 0.02) - frames_sent
            if due <= 0:
                continue
            frames_sent += due
            n = due * FRAME
            out = np.zeros(n, dtype=np.float32)
            echo, self._played = self._played[:n], self._played[n:]
            out[:len(echo)] = echo * self._gain
            voice, self._voice = self._voice[:n], self._voice[n:]
            out[:len(voice)] += voice
            clip = client.mic.enqueue(np.clip(out, -32768, 32767).astype(np.int16))
            for spoken in [s for s in self._pending
                           if s.onset_sample < self._voice_pos + len(voice)]:
                self._pending.remove(spoken)
                mark = asyncio.create_task(self._mark(spoken, clip, spoken.onset_sample
                                                      - self._voice_pos))
                self._marks.add(mark)
                mark.add_done_callback(self._marks.discard)
            self._voice_pos += len(voice)

    @staticmethod
    async def _mark(spoken: Spoken, clip: Any, offset: int) -> None:
        await clip.started.wait()
        spoken.onset = clip.started_at + max(0, offset) / RATE
        spoken.sent.set()


async def _sentence_begun(client: Any, after: float, timeout: float = 15) -> None:
    """Wait until, after ``after``, the agent has begun a sentence (its voice back after at
    least 150 ms of quiet) and said 300 ms of it: the user then speaks over its voice, not into
    the pause between two sentences (where the agent is silent whatever it does)."""
    deadline = time.monotonic() + timeout
    begun = None
    while time.monotonic() < deadline:
        quiet = 0
        for t, p in client.heard[-1000:]:
            if t <= after:
                continue
            if rms(p) > LOUD:
                if quiet >= 8 and begun is None:
                    begun = t
                quiet = 0
            else:
                quiet += 1
        if begun is not None and time.monotonic() >= begun + 0.3:
            return
        await asyncio.sleep(0.02)


async def _ask_story(path: EchoPath, client: Any, story: np.ndarray) -> float | None:
    spoken = path.say(story)
    await asyncio.wait_for(spoken.sent.wait(), 10)
    return await first_loud_after(client, spoken.end)


async def story_alone(client: Any, path: EchoPath, story: np.ndarray) -> dict[str, Any]:
    """The whole story with its echo: seconds of agent speech."""
    started = await _ask_story(path, client, story)
    if started is None:
        return {"no_answer": True, "speech_s": 0.0}
    last = await turn_end(client, started, timeout=60) or started
    return {"no_answer": False, "speech_s": round(loud_seconds(client, started, last), 2)}


async def interrupted(client: Any, path: EchoPath, story: np.ndarray, question: np.ndarray,
                      fake: Any, on_answer: Any, talk_s: float = 2.5) -> dict[str, Any]:
    """The story, then the user's question over it (and over its echo)."""
    started = await _ask_story(path, client, story)
    if started is None:
        return {"no_answer": True}
    on_answer()
    asked_before = len(fake.requests)
    await asyncio.sleep(talk_s)
    await _sentence_begun(client, time.monotonic())
    spoken = path.say(question)
    await asyncio.wait_for(spoken.sent.wait(), 10)
    onset, end = spoken.onset, spoken.end
    assert onset is not None
    await asyncio.sleep(max(0.0, end - time.monotonic()) + 0.3)
    before = [t for t, p in client.heard if onset - 0.3 <= t < onset and rms(p) > LOUD]
    loud = [t for t, p in client.heard if onset <= t <= end + 0.2 and rms(p) > LOUD]
    stopped = bool(not loud or max(loud) < end)
    await turn_end(client, end)
    asked = [m["messages"][-1]["content"] for m in fake.requests[asked_before:]
             if m.get("messages")]
    words = set(re.findall(r"[a-z]+", " ".join(asked).lower()))
    return {"no_answer": False, "talking_at_onset": bool(before), "stopped": stopped,
            "reaction_ms": round(((max(loud) if loud else onset) - onset) * 1000, 1),
            "asked": asked, "clean": "tokyo" in words and not words & STORY_WORDS}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


async def echo_phase(systems: list[Any], fake: Any, speech: Any, story: np.ndarray,
                     short: str, long: str, cases: int, gain_db: float = -10.0
                     ) -> dict[str, Any]:
    """``cases`` of each kind per system; ``speech(text, pad)`` -> 48 kHz PCM."""
    question = speech(INTERRUPTION, (0.0, 0.3))
    out: dict[str, Any] = {}
    for system in systems:
        entry: dict[str, Any] = {"gain_db": gain_db}
        for label, gain in (("no_echo", None), ("echo", gain_db)):
            async with system.client() as client:
                await client.negotiate()
                async with EchoPath(client, gain) as path:
                    await asyncio.sleep(0.5)
                    alone = []
                    for _ in range(cases):
                        fake.default_text = long
                        alone.append(await story_alone(client, path, story))
                    cut = []
                    for _ in range(cases):
                        fake.default_text = long
                        cut.append(await interrupted(
                            client, path, story, question, fake,
                            on_answer=lambda: setattr(fake, "default_text", short)))
            entry[label] = {"story": alone, "interrupted": cut}
        reference = _median([r["speech_s"] for r in entry["no_echo"]["story"]
                             if not r["no_answer"]]) or 0.0
        for label in ("no_echo", "echo"):
            # an agent already silent when the user spoke (it cut itself) was not interrupted
            runs = [r for r in entry[label]["interrupted"]
                    if not r["no_answer"] and r["talking_at_onset"]]
            entry[label]["summary"] = {
                "self_interruptions": sum(1 for r in entry[label]["story"]
                                          if r["speech_s"] < 0.8 * reference),
                "story_speech_s": [r["speech_s"] for r in entry[label]["story"]],
                "interruptions": len(runs),
                "silent_at_onset": sum(1 for r in entry[label]["interrupted"]
                                       if not r["no_answer"] and not r["talking_at_onset"]),
                "stopped": sum(1 for r in runs if r["stopped"]),
                "reaction_ms_p50": _median([r["reaction_ms"] for r in runs if r["stopped"]]),
                "asked_clean": sum(1 for r in runs if r["clean"]),
            }
        entry["story_reference_s"] = reference
        out[system.name] = entry
        print(f"# {system.name} echo at {gain_db} dB: {entry['echo']['summary']}; without: "
              f"{entry['no_echo']['summary']}", flush=True, file=sys.stderr)
    return out
