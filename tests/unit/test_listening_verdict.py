"""The end-of-turn verdict on a speculative pause (server/listening.py ``_judge_turn``) asks
the turn model at once, beside speech to text, and the words' language model only once the held
answer has begun: beside the answer's prompt it takes a core. Without an answer the words are
judged anyway, after ``JUDGE_AFTER_S``."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from voice_server.config import load_settings
from voice_server.pipeline.end_of_turn import Ending
from voice_server.pipeline.speech import HeldOutput
from voice_server.pipeline.stt import Hearing
from voice_server.protocol import LLMChunk, Transcript
from voice_server.server import listening
from voice_server.server.listening import Listener


class _Words:
    """Speech to text that hears one finished question and notes when its ending is asked."""

    def __init__(self) -> None:
        self.asked_at: float | None = None
        self.said_before: str | None = None

    async def hear(self, pcm: np.ndarray, *, urgent: bool = True, prompt: str = "") -> Hearing:
        return Hearing("What is the capital of France?")

    async def prepare_ending(self, said_before: str) -> None: ...

    async def ending(self, text: str, said_before: str = "") -> Ending:
        self.asked_at, self.said_before = time.monotonic(), said_before
        return Ending(0.9, -0.5)


class _Conversation:
    agent_speaking = False
    LAST_SAID = "Hello! What would you like to know?"

    def last_said(self) -> str:
        return self.LAST_SAID

    def turn_taking(self) -> dict:
        return {}


class _Voice:
    def __init__(self) -> None:
        self.asked_at: float | None = None

    async def complete(self, pcm: np.ndarray) -> float:
        self.asked_at = time.monotonic()
        return 0.95


class _Silent:
    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None: ...


async def _nothing(message) -> None: ...


def _listener(words: _Words, voice: _Voice) -> Listener:
    return Listener(settings=load_settings(), conversation=_Conversation, send=_nothing,
                    stt=words, turn_model=voice, playback=None, speech_output=_Silent,
                    busy=lambda: False)


async def test_the_voice_is_judged_at_once_the_words_once_the_answer_has_begun():
    words, voice = _Words(), _Voice()
    held = HeldOutput(_Silent(), _nothing)
    hearing = asyncio.ensure_future(words.hear(np.zeros(1600, dtype=np.int16)))
    paused = time.monotonic()
    verdict = asyncio.create_task(
        _listener(words, voice)._judge_turn(np.zeros(1600, dtype=np.int16), hearing,
                                            held.answering))
    await held.emit(Transcript(text="What is the capital of France?", isFinal=True))
    await asyncio.sleep(0.1)
    assert voice.asked_at is not None and voice.asked_at - paused < 0.05  # the audio: at once
    assert words.asked_at is None  # the transcript is no answer
    assert not verdict.done()
    began = time.monotonic()
    await held.emit(LLMChunk(content="Paris", done=False))
    result = await asyncio.wait_for(verdict, 1)
    assert result.complete and words.asked_at >= began
    assert words.said_before == _Conversation.LAST_SAID  # the words are judged as a reply


async def test_a_pause_the_user_talks_on_from_stops_the_turn_model():
    """The verdict's task is cancelled when speech resumes; the turn model's call with it."""
    words = _Words()
    calls: list[asyncio.Task] = []

    class _Slow(_Voice):
        async def complete(self, pcm: np.ndarray) -> float:
            calls.append(asyncio.current_task())
            await asyncio.sleep(10)
            return 0.95

    hearing = asyncio.ensure_future(words.hear(np.zeros(1600, dtype=np.int16)))
    verdict = asyncio.create_task(_listener(words, _Slow())._judge_turn(
        np.zeros(1600, dtype=np.int16), hearing, asyncio.Event()))
    await asyncio.sleep(0.05)
    verdict.cancel()
    await asyncio.gather(verdict, return_exceptions=True)
    await asyncio.sleep(0)
    assert len(calls) == 1 and calls[0].cancelled()


async def test_without_an_answer_the_turn_is_judged_after_a_bounded_wait():
    words, voice = _Words(), _Voice()
    started = time.monotonic()
    hearing = asyncio.ensure_future(words.hear(np.zeros(1600, dtype=np.int16)))
    result = await asyncio.wait_for(_listener(words, voice)._judge_turn(
        np.zeros(1600, dtype=np.int16), hearing, asyncio.Event()), 2)
    assert result.complete
    assert words.asked_at - started >= listening.JUDGE_AFTER_S - 0.02
    assert voice.asked_at - started < listening.JUDGE_AFTER_S


async def test_speech_to_text_failing_falls_back_at_once():
    """No transcript, no answer to wait for: the fixed silence decides straight away."""
    words, voice = _Words(), _Voice()

    async def fail() -> Hearing:
        raise RuntimeError("the worker died")

    hearing = asyncio.ensure_future(fail())
    started = time.monotonic()
    result = await asyncio.wait_for(_listener(words, voice)._judge_turn(
        np.zeros(1600, dtype=np.int16), hearing, asyncio.Event()), 2)
    assert result.reason == "fallback" and words.asked_at is None
    assert time.monotonic() - started < listening.JUDGE_AFTER_S
