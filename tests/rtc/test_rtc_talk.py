"""Talk to the server like a phone call over WebRTC (issue 3)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from voice_server.pipeline.audio import resample, rms

pytestmark = pytest.mark.slow

PAYLOAD = {"speech-start", "speech-end", "transcript", "llm-chunk", "llm", "tts-start",
           "tts-complete", "tts-cancelled", "error", "usage"}


def words(text: str) -> set[str]:
    return {w.strip(".,!?'\"").lower() for w in text.split()} - {""}


async def test_talk_hears_and_answers_on_the_audio_track(url, rtc_server, rtc_llm, make_speech):
    """Speech in -> speech-start/end, transcript, llm, tts-start/complete on the data channel;
    the agent's answer is real speech on the inbound track, between tts-start and complete."""
    rtc_llm.add("Paris is the capital of France.")
    async with RtcClient(url) as client:
        await client.negotiate()
        client.say(make_speech("What is the capital of France?", rate=48000, pad=(1.0, 1.5)))
        done = await client.wait_for("tts-complete", timeout=scaled(60))
        assert done == {"type": "tts-complete"}
        kinds = [m["type"] for m in client.messages() if m["type"] != "llm-chunk"]
        assert kinds == ["speech-start", "speech-end", "transcript", "llm", "usage",
                         "tts-start", "tts-complete"], kinds
        transcript = client.messages("transcript")[0]
        assert transcript["isFinal"] is True
        assert {"capital", "france"} <= words(transcript["text"])
        assert not client.messages("tts-chunk"), "no tts-chunk while an audio track is live"
        llm = client.messages("llm")[0]["text"]
        start, end = client.first_time("tts-start"), client.first_time("tts-complete")
        audio = client.heard_between(start, end + 0.3)
        assert rms(audio) > 300, "no speech energy between tts-start and tts-complete"
        heard = await rtc_server.stt.transcribe(resample(audio, 48000, 16000))
        assert len(words(heard) & words(llm)) >= 2, (heard, llm)
        # the same payload messages, in the same order, went to the WebSocket too
        ws_payload = [m for _, m in client.ws_messages if m["type"] in PAYLOAD]
        assert ws_payload == client.messages()[: len(ws_payload)]
        assert len(ws_payload) == len(client.messages())


async def test_renegotiation_adds_the_mic_on_the_same_connection(url, rtc_llm, make_speech):
    """Data channel first, then a second offer adding the mic (as the reference client does):
    the second offer is answered and audio flows both ways."""
    rtc_llm.add("Hello there, nice to meet you.")
    async with RtcClient(url) as client:
        await client.negotiate(with_mic=False)
        pc_before = client.pc
        await client.negotiate(with_mic=True)
        assert client.pc is pc_before
        assert len([m for _, m in client.ws_messages if m["type"] == "signal"]) == 2
        client.say(make_speech("Hello, how are you?", rate=48000, pad=(1.0, 1.5)))
        await client.wait_for("tts-complete", timeout=scaled(60))
        start = client.first_time("tts-start")
        assert rms(client.heard_between(start, start + 1.0)) > 300


async def test_peer_connections_and_tasks_are_cleaned_up(url, rtc_server, rtc_llm):
    """When the socket ends, the server closes the peer connection and leaves no task behind."""
    async with RtcClient(url) as client:
        await client.negotiate()
        session_id = client.ready["id"]
        conn = rtc_server.live[session_id]
        peer = conn.rtc
        assert peer is not None
    async with asyncio.timeout(scaled(10)):
        # server-side state has no event to wait on: poll it briefly
        while session_id in rtc_server.live or peer.pc.connectionState != "closed":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert not peer._tasks
    leftover = [t.get_name() for t in asyncio.all_tasks()
                if t.get_name().startswith(("rtc-", "turn-", "tts-", "utterance-"))
                and not t.done()]
    assert leftover == []


def quiet_after(client: RtcClient, t0: float, threshold: float = 300) -> float | None:
    """Seconds from t0 to the end of the last loud 20 ms frame received after t0."""
    loud = [t for t, pcm in client.heard if t >= t0 and rms(pcm) > threshold]
    return (max(loud) - t0) if loud else 0.0


LONG_ANSWER = ("Let me tell you a long story about the sea. The waves roll in slowly every "
               "morning. Fishermen go out before the sun rises. They bring back fish for the "
               "market. Children play on the warm sand all day. In the evening the lighthouse "
               "shines across the water. The town sleeps to the sound of the tide.")


async def test_barge_in_stops_the_agent_and_keeps_only_what_was_heard(url, rtc_server, rtc_llm,
                                                                      make_speech):
    """User speech during a long answer: tts-cancelled, audio silent within 300 ms, history
    holds only the heard part (marked interrupted), and the new question is answered."""
    rtc_llm.add(LONG_ANSWER, "Sure, I stopped.")
    async with RtcClient(url) as client:
        await client.negotiate()
        session_id = client.ready["id"]
        client.say(make_speech("Tell me a story.", rate=48000, pad=(1.0, 1.0)))
        await client.wait_for("tts-start", timeout=scaled(60))
        await asyncio.sleep(2.0)  # let the agent speak a couple of sentences
        client.say(make_speech("Stop please, I have a question.", rate=48000, pad=(0.0, 1.5)))
        cancelled = await client.wait_for("tts-cancelled", timeout=scaled(20))
        assert cancelled == {"type": "tts-cancelled"}
        t_cancel = client.first_time("tts-cancelled")
        await asyncio.sleep(1.0)
        assert quiet_after(client, t_cancel) < 0.3
        await client.wait_for("llm", count=2, timeout=scaled(60))
        await client.wait_for("tts-complete", timeout=scaled(60))
        kinds = [m["type"] for m in client.messages()]
        i_cancel = kinds.index("tts-cancelled")
        assert "speech-start" in kinds[:i_cancel][kinds.index("tts-start"):]
        assert client.messages("llm")[1]["text"] == "Sure, I stopped."
    session = await rtc_server.sessions.get(session_id)
    first_answer = session.history[1]
    assert first_answer["role"] == "assistant" and first_answer["interrupted"] is True
    assert 0 < len(first_answer["content"]) < len(LONG_ANSWER)
    assert LONG_ANSWER.startswith(first_answer["content"].split(" ")[0])
    # the next LLM call saw the truncated answer, not the full one
    sent = rtc_llm.requests[-1]["messages"]
    assert sent[2]["content"] == first_answer["content"]
    # this session's: an earlier test's interrupted turn may still be in last_turns
    rec = next(r for r in rtc_server.last_turns if r.interrupted and r.session_id == session_id)
    assert rec.summary()["barge_in_ms"] is not None


async def test_short_click_does_not_interrupt(url, rtc_llm, make_speech):
    """A 100 ms burst during agent speech does not cancel it."""
    rtc_llm.add("The weather today is sunny and warm. It is a fine day for a walk in the park.")
    rng = np.random.default_rng(7)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.say(make_speech("What is the weather like?", rate=48000, pad=(1.0, 1.0)))
        await client.wait_for("tts-start", timeout=scaled(60))
        await asyncio.sleep(0.5)
        click = (rng.standard_normal(4800) * 8000).clip(-32000, 32000).astype(np.int16)
        client.mic.enqueue(click)
        await client.wait_for("tts-complete", timeout=scaled(60))
        assert not client.messages("tts-cancelled")


async def test_reconnect_over_webrtc_keeps_context(url, rtc_server, rtc_llm, make_speech):
    """Drop the socket mid-conversation, reconnect with the session id, offer again: the next
    question is answered with the earlier context."""
    rtc_llm.add("Your name is Ada.", "You told me your name is Ada.")
    async with RtcClient(url) as first:
        await first.negotiate()
        session_id = first.ready["id"]
        first.say(make_speech("My name is Ada.", rate=48000, pad=(1.0, 1.5)))
        await first.wait_for("tts-complete", timeout=scaled(60))
    async with RtcClient(url) as second:
        await second.send({"type": "reconnect", "sessionId": session_id})
        await second.negotiate()
        acks = [m for _, m in second.ws_messages if m["type"] == "reconnect-ack"]
        assert acks and acks[0]["success"] is True and acks[0]["sessionId"] == session_id
        second.say(make_speech("What is my name?", rate=48000, pad=(1.0, 1.5)))
        await second.wait_for("tts-complete", timeout=scaled(60))
        assert second.messages("llm")[0]["text"] == "You told me your name is Ada."
    sent = rtc_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "ada" in sent[1]["content"].lower()


async def test_interim_transcripts_while_the_user_speaks(url, rtc_server, rtc_llm, make_speech):
    """A long utterance gets isFinal=false transcripts before speech-end, then the final one."""
    rtc_llm.add("That is a long question.")
    rtc_server.settings.interim_transcripts = True
    try:
        async with RtcClient(url) as client:
            await client.negotiate()
            client.say(make_speech("I would like to ask you a rather long question about the "
                                   "history of the city of Paris and its old bridges.",
                                   rate=48000, pad=(1.0, 1.5)))
            await client.wait_for("tts-complete", timeout=scaled(90))
            kinds = [m["type"] for m in client.messages()]
            transcripts = client.messages("transcript")
            interim = [t for t in transcripts if not t["isFinal"]]
            assert interim and all(t["text"] for t in interim)
            assert transcripts[-1]["isFinal"] is True
            assert kinds.index("transcript") < kinds.index("speech-end")
            assert {"paris"} <= words(transcripts[-1]["text"])
    finally:
        rtc_server.settings.interim_transcripts = False


async def test_no_interim_transcript_while_a_speculative_answer_is_held(
        url, rtc_server, rtc_llm, make_speech, monkeypatch):
    """Once the user pauses, the utterance's final transcript is already being made
    (speculative end of turn): an interim pass then would only take CPU from that answer."""
    import voice_server.server.listening as listening

    calls: list[bool] = []  # urgent flag of each transcription, in start order

    def recording(method):
        async def recorded(pcm, *, urgent=True):
            calls.append(urgent)
            return await method(pcm, urgent=urgent)
        return recorded

    monkeypatch.setattr(rtc_server.stt, "transcribe", recording(rtc_server.stt.transcribe))
    monkeypatch.setattr(rtc_server.stt, "hear", recording(rtc_server.stt.hear))
    monkeypatch.setattr(listening, "INTERIM_AFTER_S", 0.5)
    monkeypatch.setattr(listening, "INTERIM_EVERY_S", 0.05)  # as often as the pool allows
    monkeypatch.setattr(rtc_server.settings, "interim_transcripts", True)
    rtc_llm.add("Sure.")
    async with RtcClient(url) as client:
        await client.negotiate()
        client.say(make_speech("Tell me about the old bridges of Paris.", rate=48000,
                               pad=(1.0, 1.5)))
        await client.wait_for("tts-complete", timeout=scaled(90))
    assert False in calls, "no interim transcript was made: the test proves nothing"
    last_urgent = len(calls) - 1 - calls[::-1].index(True)
    assert calls[last_urgent + 1:] == [], calls
