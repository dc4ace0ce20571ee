"""Typed input (issue 22, item 3): the ``user-text`` extension message is a user turn,
answered in text and speech; bad ones get INVALID_MESSAGE."""

from __future__ import annotations

import base64

import numpy as np

from tests.support.fake_openai import Reply


async def test_a_typed_question_gets_a_spoken_answer(scripted_server, fake_llm, connect):
    fake_llm.add("Paris is the capital of France.")
    async with connect(scripted_server) as client:
        await client.send({"type": "user-text", "text": "What is the capital of France?"})
        seen = await client.until("tts-complete", timeout=60)
    kinds = [m["type"] for m in seen]
    assert seen[0] == {"type": "transcript", "text": "What is the capital of France?",
                       "isFinal": True}
    assert next(m for m in seen if m["type"] == "llm")["text"] == \
        "Paris is the capital of France."
    chunks = [m for m in seen if m["type"] == "tts-chunk"]
    assert "tts-start" in kinds and chunks
    pcm = np.frombuffer(base64.b64decode(chunks[0]["data"]), dtype=np.int16)
    assert np.abs(pcm).max() > 1000  # spoken, not silence
    assert fake_llm.requests[-1]["messages"][-1] == {
        "role": "user", "content": "What is the capital of France?"}


async def test_a_typed_turn_is_not_counted_as_speech(scripted_server, fake_llm, connect):
    """No speech to text in /metrics for a typed turn (a newcomer saw typed turns of ~0.1 ms
    in voice_stt_seconds); its LLM time and request -> first audio are counted."""
    registry = scripted_server.metrics.registry

    def count(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    before = [count("voice_stt_seconds_count"), count("voice_first_audio_seconds_count"),
              count("voice_llm_ttft_seconds_count")]
    fake_llm.add("Hello there.")
    async with connect(scripted_server) as client:
        await client.send({"type": "user-text", "text": "Hello."})
        await client.until("tts-complete", timeout=60)
    after = [count("voice_stt_seconds_count"), count("voice_first_audio_seconds_count"),
             count("voice_llm_ttft_seconds_count")]
    assert after == [before[0], before[1] + 1, before[2] + 1], (before, after)


async def test_bad_typed_input_is_refused(scripted_server, connect):
    async with connect(scripted_server) as client:
        for text in ("", "   ", "x" * 4001):
            await client.send({"type": "user-text", "text": text})
            err = await client.recv()
            assert err["type"] == "error" and err["code"] == "INVALID_MESSAGE", err
        await client.send({"type": "ping", "timestamp": 1})
        assert (await client.recv())["type"] == "pong"


async def test_turn_metrics_go_to_subscribers_only(scripted_server, fake_llm, connect,
                                                   make_speech):
    """Issue 22, item 2: the server's own turn figures, for clients that asked (extension
    ``turn-metrics-subscribe``); the reference client never asks and never gets them."""
    fake_llm.add("It is noon.", "It is noon again.")
    wav = base64.b64encode(make_speech("What time is it?")).decode()
    async with connect(scripted_server) as quiet:
        await quiet.send({"type": "audio", "data": wav})
        await quiet.until("tts-complete", timeout=60)
        await quiet.send({"type": "ping", "timestamp": 1})
        rest = await quiet.until("pong")
        assert not any(m["type"] == "turn-metrics" for m in rest)
    async with connect(scripted_server) as client:
        await client.send({"type": "turn-metrics-subscribe"})
        await client.send({"type": "audio", "data": wav})
        seen = await client.until("turn-metrics", timeout=60)
    figures = seen[-1]
    assert "tts-complete" in [m["type"] for m in seen]
    for key in ("sttMs", "llmTtftMs", "ttsFirstAudioMs", "firstAudioMs", "totalMs"):
        assert isinstance(figures[key], int | float) and figures[key] >= 0, (key, figures)
    assert figures["firstAudioMs"] >= figures["sttMs"] and figures["interrupted"] is False


async def test_the_prompt_tokens_an_answer_read_are_counted(scripted_server, fake_llm, connect):
    """/metrics counts the answers' prompt tokens the model found computed and those it read
    (an endpoint reports its cache as OpenAI documents it: prompt_tokens_details)."""
    registry = scripted_server.metrics.registry

    def count(how: str) -> float:
        return registry.get_sample_value("voice_llm_prompt_tokens_total", {"how": how}) or 0.0

    before = count("cached"), count("read")
    fake_llm.add(Reply(text="Hello there.", prompt_tokens=30, cached_tokens=24))
    async with connect(scripted_server) as client:
        await client.send({"type": "user-text", "text": "Hello."})
        await client.until("tts-complete", timeout=60)
    assert (count("cached") - before[0], count("read") - before[1]) == (24, 6)
