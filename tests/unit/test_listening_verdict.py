"""The end-of-turn verdict on a speculative pause (server/listening.py ``_judge_turn``) asks
the turn model at once, beside speech to text, and the words' language model right after the
transcript; an LLM on this machine's cores is asked only once the words are judged, so that no
judge shares them, a remote one at once."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from voice_server.config import load_settings
from voice_server.metrics import TurnRecord
from voice_server.pipeline.end_of_turn import Ending
from voice_server.pipeline.stt import Hearing
from voice_server.server.listening import Listener


class _Words:
    """Speech to text that hears one finished question and notes when its ending is asked."""

    def __init__(self) -> None:
        self.asked_at: float | None = None
        self.judged_at: float | None = None
        self.said_before: str | None = None
        self.judging_s = 0.0

    async def hear(self, pcm: np.ndarray, *, urgent: bool = True, prompt: str = "") -> Hearing:
        return Hearing("What is the capital of France?")

    async def prepare_ending(self, said_before: str, words: str = "") -> None: ...

    async def ending(self, text: str, said_before: str = "") -> Ending:
        self.asked_at, self.said_before = time.monotonic(), said_before
        await asyncio.sleep(self.judging_s)
        self.judged_at = time.monotonic()
        return Ending(0.9, -0.5)

    async def choose(self, heard: Hearing) -> str:
        return heard.text


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


def _listener(words: _Words, voice: _Voice, *, llm_shares_cpu: bool = True) -> Listener:
    return Listener(settings=load_settings(), conversation=_Conversation, send=_nothing,
                    stt=words, turn_model=voice, playback=None, speech_output=_Silent,
                    busy=lambda: False, llm_shares_cpu=llm_shares_cpu)


def _judging(listener: Listener, hearing: asyncio.Future) -> asyncio.Task:
    return asyncio.ensure_future(listener._words_end(hearing))


PCM = np.zeros(1600, dtype=np.int16)  # the pause's audio: the fakes above do not read it


def _verdict(listener: Listener, hearing: asyncio.Future) -> asyncio.Task:
    """The verdict on a pause, its words judged as ``_speculate`` judges them."""
    return asyncio.ensure_future(listener._judge_turn(PCM, hearing, _judging(listener, hearing)))


async def test_the_voice_is_judged_at_once_the_words_after_the_transcript():
    words, voice = _Words(), _Voice()
    listener = _listener(words, voice)
    heard = asyncio.get_running_loop().create_future()
    paused = time.monotonic()
    verdict = _verdict(listener, heard)
    await asyncio.sleep(0.1)
    assert voice.asked_at is not None and voice.asked_at - paused < 0.05  # the audio: at once
    assert words.asked_at is None and not verdict.done()  # no transcript yet
    transcribed = time.monotonic()
    heard.set_result(await words.hear(PCM))
    result = await asyncio.wait_for(verdict, 1)  # no answer needed
    assert result.complete and words.asked_at >= transcribed
    assert words.said_before == _Conversation.LAST_SAID  # the words are judged as a reply


async def test_the_llm_gets_the_words_once_they_are_judged():
    """The transcript goes to the LLM after the words' judge, not beside it."""
    words, voice = _Words(), _Voice()
    words.judging_s = 0.2
    listener = _listener(words, voice)
    hearing = asyncio.ensure_future(words.hear(PCM))
    judging = _judging(listener, hearing)
    started = time.monotonic()
    text = await listener._text_of(hearing, judging, asyncio.Event(), TurnRecord("s"))
    returned = time.monotonic()
    assert text == "What is the capital of France?"
    assert words.judged_at is not None and words.judged_at <= returned
    assert returned - started >= words.judging_s - 0.02


async def test_a_remote_llm_gets_the_words_beside_their_judge():
    words, voice = _Words(), _Voice()
    words.judging_s = 0.3
    listener = _listener(words, voice, llm_shares_cpu=False)
    hearing = asyncio.ensure_future(words.hear(PCM))
    judging = _judging(listener, hearing)
    started = time.monotonic()
    assert await listener._text_of(hearing, judging, asyncio.Event(), TurnRecord("s"))
    assert time.monotonic() - started < 0.2 and not judging.done()
    assert (await judging).sentence_end == 0.9


async def test_unfinished_words_are_not_asked_of_the_language_model():
    """Words the rules find unfinished wait anyway: the language model adds nothing."""
    words, voice = _Words(), _Voice()

    async def fragment() -> Hearing:
        return Hearing("I'd like to book a table for")

    listener = _listener(words, voice)
    result = await asyncio.wait_for(_verdict(listener, asyncio.ensure_future(fragment())), 1)
    assert not result.complete and words.asked_at is None


async def test_a_pause_the_user_talks_on_from_stops_the_turn_model():
    """The verdict's task is cancelled when speech resumes; the turn model's call with it."""
    words = _Words()
    calls: list[asyncio.Task] = []

    class _Slow(_Voice):
        async def complete(self, pcm: np.ndarray) -> float:
            calls.append(asyncio.current_task())
            await asyncio.sleep(10)
            return 0.95

    listener = _listener(words, _Slow())
    verdict = _verdict(listener, asyncio.ensure_future(words.hear(PCM)))
    await asyncio.sleep(0.05)
    verdict.cancel()
    await asyncio.gather(verdict, return_exceptions=True)
    await asyncio.sleep(0)
    assert len(calls) == 1 and calls[0].cancelled()


async def test_speech_to_text_failing_falls_back_at_once():
    """No transcript, no words to judge: the fixed silence decides straight away."""
    words, voice = _Words(), _Voice()

    async def fail() -> Hearing:
        raise RuntimeError("the worker died")

    listener = _listener(words, voice)
    started = time.monotonic()
    result = await asyncio.wait_for(_verdict(listener, asyncio.ensure_future(fail())), 2)
    assert result.reason == "fallback" and words.asked_at is None
    assert time.monotonic() - started < 0.2


class _Interim(_Words):
    """Hears "A table for two people at seven" so far, and notes what the judge read ahead."""

    def __init__(self) -> None:
        super().__init__()
        self.prepared: list[tuple[str, str]] = []

    async def transcribe(self, pcm: np.ndarray, *, urgent: bool = True) -> str:
        return "A table for two people at seven"

    async def prepare_ending(self, said_before: str, words: str = "") -> None:
        self.prepared.append((said_before, words))


async def test_the_words_judge_reads_an_interim_transcript_ahead():
    """While the user speaks, an interim transcript's words go to the words' judge, so that
    at the pause it reads only the words after them (readings.py ``prepare``)."""
    words = _Interim()
    listener = _listener(words, _Voice())
    listener._vad.speaking = True  # as the VAD has it mid-utterance
    await listener._interim_transcript(PCM)
    await asyncio.sleep(0.05)  # the judge's reading is a task of its own
    assert words.prepared == [(_Conversation.LAST_SAID, "A table for two people at seven")]
