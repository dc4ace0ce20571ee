"""Typed input (issue 22, item 3): the ``user-text`` extension message is a user turn,
answered in text and speech; bad ones get INVALID_MESSAGE."""

from __future__ import annotations

import base64

import numpy as np


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


async def test_bad_typed_input_is_refused(scripted_server, connect):
    async with connect(scripted_server) as client:
        for text in ("", "   ", "x" * 4001):
            await client.send({"type": "user-text", "text": text})
            err = await client.recv()
            assert err["type"] == "error" and err["code"] == "INVALID_MESSAGE", err
        await client.send({"type": "ping", "timestamp": 1})
        assert (await client.recv())["type"] == "pong"
