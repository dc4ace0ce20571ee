"""Every turn the client saw begin is closed for it (issue 22, item 1): a turn that streamed
any ``llm-chunk`` ends with ``tts-cancelled`` when it is cut, even before its first audio, and
with the ``llm`` text as far as it got and ``tts-complete`` when it fails mid-answer, before
the next turn starts."""

from __future__ import annotations

import base64

from tests.support.fake_openai import Reply
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer

# No sentence end for a long while: chunks stream, nothing is spoken yet.
UNFINISHED = ("well let me think about that for a moment because there is quite a lot to say "
              "about it and I would like to get it right for you so bear with me while I go "
              "through every part of the question one piece after another")


def audio(wav: bytes) -> dict:
    return {"type": "audio", "data": base64.b64encode(wav).decode()}


async def test_a_turn_cut_before_its_first_audio_is_closed(scripted_server, fake_llm, connect,
                                                           make_speech):
    fake_llm.add(Reply(text=UNFINISHED, chunk_delay_s=0.2), "Sure.")
    async with connect(scripted_server) as client:
        await client.send(audio(make_speech("Tell me about the sea.")))
        seen = await client.until("llm-chunk", timeout=60)
        assert not any(m["type"] in ("tts-start", "tts-chunk") for m in seen)
        await client.send(audio(make_speech("Never mind.")))  # supersedes the running turn
        after = await client.until("llm", timeout=60)
    kinds = [m["type"] for m in after]
    assert "tts-cancelled" in kinds, kinds
    assert kinds.index("tts-cancelled") < kinds.index("transcript"), kinds  # before the next
    assert after[-1]["text"] == "Sure."


async def test_a_turn_that_fails_mid_answer_ends_with_its_text_so_far(fake_llm, connect,
                                                                      make_speech):
    """... and what it had begun to say is said to the end of its last whole piece, then
    ``tts-complete`` closes the speech the client saw start (before, nothing followed the
    error: a client kept showing the agent speaking)."""
    settings = load_settings(port=0, llm_provider="openai_compat", llm_base_url=fake_llm.base_url,
                             llm_model="fake-model", llm_timeout_s=1.5)
    fake_llm.add(Reply(text=UNFINISHED, chunk_delay_s=0.3))
    async with VoiceServer(settings) as server, connect(server) as client:
        await client.send(audio(make_speech("Tell me about the sea.")))
        seen = await client.until("error", timeout=60)
        closing = await client.until("tts-complete", timeout=30)
    kinds = [m["type"] for m in seen]
    assert "tts-start" in kinds, kinds
    assert {m["type"] for m in closing} <= {"tts-chunk", "tts-complete"}, closing
    assert seen[-1]["code"] == "LLM_TIMEOUT"
    assert seen[-1]["message"] == "the LLM did not finish in 1.5 s"
    assert "llm-chunk" in kinds and "llm" in kinds, kinds
    final = next(m for m in seen if m["type"] == "llm")
    streamed = "".join(m["content"] for m in seen if m["type"] == "llm-chunk")
    assert final["text"] and UNFINISHED.startswith(final["text"].strip()[:20])
    assert final["text"].startswith(streamed.strip()[:20])
