"""Turn-taking v2 over WebRTC with a real aiortc peer (issue 19): a finished question ends its
turn quickly, a mid-sentence pause does not end it, an acknowledgement over the agent does not
stop it, and the agent's own voice played back into the microphone (no echo cancellation) does
not interrupt it (test_rtc_echo.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from tests.support.fake_openai import Reply
from voice_server.pipeline.audio import (
    decode_wav,
    rms,
    trim_leading_silence,
    trim_trailing_silence,
)

pytestmark = pytest.mark.slow

# ~7 s of speech: every sound over it comes within its first 4 s; more sentences only made
# the suite longer
LONG_ANSWER = ("The weather today is sunny and warm, with a light breeze from the sea. In the "
               "morning the fishermen bring their boats into the harbour.")


def _wav48(make_speech, text: str, pad=(1.0, 0.0)) -> np.ndarray:
    """espeak-ng's speech with exactly ``pad`` seconds of silence around it: espeak-ng adds
    ~0.2 s of its own at each end, which made a "1.2 s" pause 1.6 s of silence."""
    pcm = decode_wav(make_speech(text, rate=48000, pad=(0, 0)), max_seconds=30, to_rate=48_000)
    pcm = trim_trailing_silence(trim_leading_silence(pcm, 48_000, keep_ms=0), 48_000, keep_ms=0)
    return np.concatenate([_silence(pad[0]), pcm, _silence(pad[1])])


def _paused(make_speech, first: str, pause_s: float, second: str) -> np.ndarray:
    """``first``, ``pause_s`` of silence, ``second``, and 2.5 s of silence for the answer."""
    return np.concatenate([_wav48(make_speech, first), _silence(pause_s),
                           _wav48(make_speech, second, pad=(0.0, 2.5))])


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(48_000 * seconds), dtype=np.int16)


@pytest.fixture
def short_replies(rtc_llm):
    """The scripted LLM answers "Okay." while the script is empty (the request says what was
    heard): its echo of a whole sentence took ~4 s of speech to play to the end."""
    rtc_llm.default_text = "Okay."
    yield rtc_llm
    rtc_llm.default_text = None


# alone: beside another worker's test on a 2.45 GHz EPYC speech to text took 1.5 s and the
# fixed silence ended the turn before the judges did ("silence", 1 of 5 full suites, 2026-12-01)
@pytest.mark.serial
async def test_a_finished_question_ends_its_turn_quickly(url, rtc_llm, make_speech):
    """Voice and words agree the question is over: the turn ends after ~200 ms of silence and
    the transcript's check, not held for more; the server's figure and its reason reach the
    client."""
    rtc_llm.script.clear()
    rtc_llm.add("Seven.")
    async with RtcClient(url) as client:
        await client.negotiate()
        await client.send({"type": "turn-metrics-subscribe"})
        # espeak-ng's flat voice leaves the turn model unsure on many questions, and where the
        # cut after the last voiced frame falls moves its figure ("What is the capital city of
        # France?" 0.43-0.82: one CI run ended "unsure"); this one scores 0.95-0.97 at every cut,
        # and its words (heard "... in that week?" at worst) end a sentence
        client.mic.enqueue(np.concatenate([_wav48(make_speech, "How many days are in a week?"),
                                           _silence(2.0)]))
        figures = await client.wait_for("turn-metrics", timeout=scaled(60))
        assert figures["endOfTurn"] == "complete", figures
        # not held as unfinished (that waits end_of_turn_max_ms, 1.6 s, of silence). How soon
        # it ends (~350-500 ms after the speech on an idle 2-core machine, 780 ms with a second
        # test run beside it) is the benchmark's figure (bench/voice_latency.py, turn-taking)
        assert figures["endOfTurnMs"] < 1600, figures
        assert client.messages("llm")[0]["text"] == "Seven."


async def test_a_caller_who_signs_off_is_not_kept_waiting(url, rtc_llm, piper_speech):
    """"Thank you, that's all." in our Piper voice: the turn model hears more coming (0.009)
    and the words' language model expects more after "that's all"; the sign-off ends the
    turn after the commit silence, not the 1.6 s an unfinished turn waits (end_of_turn.py,
    "sign-off")."""
    rtc_llm.script.clear()
    before = len(rtc_llm.requests)
    # every request gets the same answer: one asked speculatively at the comma's pause and
    # dropped when the words go on ("Thank you.", then "Thank you. That's all.") must not use
    # up a scripted reply (it did in 1 of ~10 runs under load, and the second reply was
    # spoken); a second turn still shows as a second answer spoken
    rtc_llm.reply_for = lambda body: Reply(text="You're welcome, goodbye.")
    try:
        async with RtcClient(url) as client:
            await client.negotiate()
            await client.send({"type": "turn-metrics-subscribe"})
            client.mic.enqueue(np.concatenate([_silence(1.0), piper_speech(
                "Thank you, that's all.", 48_000), _silence(2.5)]))
            await client.wait_for("tts-complete", timeout=scaled(60))
            await asyncio.sleep(0.5)
    finally:
        rtc_llm.reply_for = None
    # the comma's pause may end a turn of "Thank you." first: "that's all" then signs off
    # again and leaves its answer be (the next test); either way one turn, answered
    figures = client.messages("turn-metrics")[-1]
    final = [t["text"].lower() for t in client.messages("transcript") if t["isFinal"]]
    assert final and "thank you" in final[-1], final
    assert figures["endOfTurn"] == "sign-off", (figures, final)
    assert figures["endOfTurnMs"] < 1600, figures
    asked = [m["messages"][-1]["content"] for m in rtc_llm.requests[before:]]
    assert [m["text"] for m in client.messages("llm")] == ["You're welcome, goodbye."], (
        final, asked)


async def test_a_second_sign_off_does_not_cut_the_answer_to_the_first(url, rtc_server, rtc_llm,
                                                                       piper_speech):
    """"Thank you." [a pause] "That's all.": the first sign-off ends the turn, and the
    second one, spoken before its answer is heard, leaves that answer to go on, where it cut
    it and the two were answered again as one turn (a second request; the support playbook's
    intent check and wrap-up again)."""
    rtc_llm.script.clear()
    before = len(rtc_llm.requests)
    rtc_llm.add(Reply(text="You're welcome, goodbye.", delay_s=1.5), "Goodbye again.")
    async with RtcClient(url) as client:
        await _thank_you_then(client, piper_speech, "That's all.")
        await asyncio.sleep(1.0)
        final = [t["text"] for t in client.messages("transcript") if t["isFinal"]]
        asked = [m["messages"][-1]["content"] for m in rtc_llm.requests[before:]]
        assert [m["text"] for m in client.messages("llm")] == ["You're welcome, goodbye."], (
            final, asked)
        assert not client.messages("tts-cancelled"), (final, asked)
        assert len(asked) == 1 and "thank you" in asked[0].lower(), asked


async def test_words_that_go_on_after_a_second_sign_off_still_cut_the_answer(url, rtc_server,
                                                                             rtc_llm,
                                                                             piper_speech):
    """"Thank you." [a pause] "That's all, but my internet is still slow.": more than a
    sign-off (its first words alone leave the answer going; judged again as the speech goes
    on, it takes the turn): the answer, not yet heard, is taken back and the whole answered."""
    rtc_llm.script.clear()
    before = len(rtc_llm.requests)
    rtc_llm.add(Reply(text="You're welcome, goodbye.", delay_s=4.0), "Let me check your line.")
    async with RtcClient(url) as client:
        await _thank_you_then(client, piper_speech, "That's all, but my internet is still slow.")
        asked = [m["messages"][-1]["content"] for m in rtc_llm.requests[before:]]
        assert len(asked) == 2 and "slow" in asked[-1].lower(), asked
        assert [m["text"] for m in client.messages("llm")] == ["Let me check your line."]


async def _thank_you_then(client: RtcClient, piper_speech, then: str) -> None:
    """Say "Thank you.", pause until its turn ends (after 200 ms of silence and the judges'
    words: ~0.45 s on an idle machine; a fixed 0.45 s pause ended no turn on a 2.45 GHz EPYC
    beside another test, and the two were one turn), say ``then``, and wait for the agent's
    answer to be spoken."""
    await client.negotiate()
    client.mic.enqueue(np.concatenate([_silence(1.0), piper_speech("Thank you.", 48_000)]))
    await client.wait_for("speech-end", timeout=scaled(30))
    client.mic.enqueue(np.concatenate([piper_speech(then, 48_000), _silence(3.0)]))
    await client.wait_for("tts-complete", timeout=scaled(60))


# the verdicts that wait the longest silence (end_of_turn.py, ``max_ms``)
_WAITS_LONGEST = ("unfinished words", "unfinished reading", "unfinished sentence",
                  "unlikely last word", "turn model: not finished")


async def test_a_short_answer_to_the_agents_question_ends_its_turn(url, rtc_llm, make_speech):
    """"For how many people?" - "Two people.": the words' language model judges the answer
    as a reply to the question (readings.py), so a sentence may end there; judged alone, a
    sentence end after "Two people" was unlikely (0.001) and the answer waited 1.6 s as an
    "unfinished sentence"."""
    rtc_llm.script.clear()
    rtc_llm.add("For how many people?", "Lovely, a table for two.")
    async with RtcClient(url) as client:
        await client.negotiate()
        await client.send({"type": "turn-metrics-subscribe"})
        client.mic.enqueue(np.concatenate([_wav48(make_speech, "I would like to book a table."),
                                           _silence(2.0)]))
        await client.wait_for("tts-complete", timeout=scaled(60))
        client.mic.enqueue(np.concatenate([_wav48(make_speech, "Two people."), _silence(2.5)]))
        figures = await client.wait_for("turn-metrics", count=2, timeout=scaled(60))
        heard = [t["text"] for t in client.messages("transcript") if t["isFinal"]]
        assert "people" in heard[-1].lower(), heard  # "Two", "2" or "To": all a reply
        # the verdict, not the clock: on a 2.45 GHz EPYC beside another test, speech to text
        # alone took 0.8 s and the quick verdict came at 1.0 s of silence
        assert figures["endOfTurn"] not in _WAITS_LONGEST, figures


@pytest.mark.parametrize("pause_s", [0.5, 0.8, 1.2])
async def test_a_pause_mid_sentence_does_not_end_the_turn(url, short_replies, make_speech,
                                                          pause_s):
    """"I would like to book a table for, um ... two people at seven": one turn, one answer to
    both halves (a fixed 500 ms silence cut the first half off)."""
    rtc_llm = short_replies
    rtc_llm.script.clear()  # answers "Okay."
    asked_before = len(rtc_llm.requests)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.mic.enqueue(_paused(make_speech, "I would like to book a table for, um", pause_s,
                                   "two people at seven o'clock."))
        await client.wait_for("tts-complete", timeout=scaled(60))
        await asyncio.sleep(0.5)
        assert len(client.messages("speech-end")) == 1, client.messages("transcript")
        final = [t for t in client.messages("transcript") if t["isFinal"]]
        assert len(final) == 1
        heard = final[0]["text"].lower()
        assert "table" in heard and ("seven" in heard or "7" in heard), heard
        assert len(client.messages("llm")) == 1
        asked = rtc_llm.requests[-1]["messages"][-1]["content"].lower()
        assert "table" in asked and ("seven" in asked or "7" in asked), asked
        # words that stop mid-sentence ask the LLM only after 1 s of silence
        # (llm_unfinished_after_ms): a shorter pause to think costs no request; a longer one
        # may have asked for an answer to the first half, dropped unheard
        asked_for = [r["messages"][-1]["content"] for r in rtc_llm.requests[asked_before:]]
        if pause_s < 1.0:
            assert len(asked_for) == 1, asked_for


async def test_a_greeting_and_what_follows_it_are_one_turn(url, short_replies, piper_speech):
    """"Hello, I would like to book a table, please." in our Piper voice: the comma's pause
    (~300 ms) after "Hello" sounds and reads finished, but the turn waits for what the caller
    wants; one turn, one answer. Before, "Hello." took the turn and the request cut its
    answer (end_of_turn.py, "greeting")."""
    short_replies.script.clear()
    asked_before = len(short_replies.requests)
    speech = piper_speech("Hello, I would like to book a table, please.", 48_000)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.mic.enqueue(np.concatenate([_silence(1.0), speech, _silence(2.5)]))
        await client.wait_for("tts-complete", timeout=scaled(60))
        await asyncio.sleep(0.5)
        final = [t["text"].lower() for t in client.messages("transcript") if t["isFinal"]]
        assert len(client.messages("speech-end")) == 1, final
        assert len(final) == 1 and "hello" in final[0] and "table" in final[0], final
        assert not client.messages("tts-cancelled")
        asked = [r["messages"][-1]["content"].lower()
                 for r in short_replies.requests[asked_before:]]
        assert asked and "table" in asked[-1], asked


async def test_a_pause_after_words_that_go_on_does_not_end_the_turn(url, short_replies,
                                                                   make_speech):
    """"What is the largest planet in our solar ... system?": speech to text hears the first
    half as a finished question and the turn model hears a falling voice (0.97); only a
    language model knows "solar" goes on (end_of_turn.py, "unfinished sentence")."""
    short_replies.script.clear()
    async with RtcClient(url) as client:
        await client.negotiate()
        client.mic.enqueue(_paused(make_speech, "What is the largest planet in our solar", 0.8,
                                   "system?"))
        await client.wait_for("tts-complete", timeout=scaled(60))
        await asyncio.sleep(0.5)
        final = [t["text"] for t in client.messages("transcript") if t["isFinal"]]
        assert len(client.messages("speech-end")) == 1, final
        assert len(final) == 1 and "system" in final[0].lower(), final


async def test_words_that_cut_an_unheard_answer_join_the_turn_they_follow(url, rtc_server,
                                                                           rtc_llm, make_speech):
    """The turn ended too soon ("How many days are in a week?" is a finished question), and
    the user went on before a word of the answer was heard: that answer is dropped, and the
    first words are heard again with the new ones as one turn, answered once, with one user
    message in the history instead of two halves. Its first word was already shown (an
    ``llm-chunk``, so the client gets ``tts-cancelled``), not spoken: the first spoken piece
    waits for three words, and the LLM stalls after two. Prometheus counts the turn taken
    back, so an operator sees how often turns end too soon."""

    def turns(outcome: str) -> float:
        return rtc_server.metrics.registry.get_sample_value("voice_turns_total",
                                                            {"outcome": outcome})

    counted = {o: turns(o) for o in ("taken_back", "interrupted", "completed")}
    reasons_before = rtc_server.metrics.taken_back_by_reason()
    rtc_llm.script.clear()
    rtc_llm.add(Reply(text="Seven days are in a week.", stall_after_words=2, stall_s=scaled(8)),
                "Seven days, and twenty-four hours.")
    asked_before = len(rtc_llm.requests)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.mic.enqueue(_paused(make_speech, "How many days are in a week?", 1.2,
                                   "And how many hours are in a day?"))
        await client.wait_for("tts-complete", timeout=scaled(60))
        final = [t["text"].lower() for t in client.messages("transcript") if t["isFinal"]]
        # the first half's turn did end (its transcript went out), then was taken back
        assert len(client.messages("speech-end")) == 2 and len(final) == 2, final
        assert "week" in final[0] and "hours" not in final[0], final
        assert "week" in final[1] and "hours" in final[1], final
        assert [m["text"] for m in client.messages("llm")] == ["Seven days, and twenty-four hours."]
        # the first answer, shown and not heard, was closed for the client
        assert len(client.messages("tts-cancelled")) == 1
        asked = rtc_llm.requests[asked_before:]
        assert len(asked) == 2, [r["messages"][-1] for r in asked]
        users = [m["content"].lower() for m in asked[-1]["messages"] if m["role"] == "user"]
        assert len(users) == 1 and "week" in users[0] and "hours" in users[0], users
    async with asyncio.timeout(scaled(10)):  # the answer is counted once its history is saved
        while turns("completed") == counted["completed"]:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert {o: turns(o) - n for o, n in counted.items()} == {
        "taken_back": 1, "interrupted": 0, "completed": 1}
    # with the reason that ended it: one that waits less than the 1.2 s pause (words judged
    # unfinished wait 1.6 s)
    grown = {reason: value - reasons_before.get(reason, 0.0)
             for reason, value in rtc_server.metrics.taken_back_by_reason().items()
             if value > reasons_before.get(reason, 0.0)}
    assert sum(grown.values()) == 1 and set(grown) <= {"complete", "words complete", "unsure",
                                                       "fallback", "silence"}, grown


async def test_an_acknowledgement_does_not_stop_the_agent(url, rtc_server, rtc_llm,
                                                         make_speech):
    """"Mm-hmm, yeah, okay" over the agent: its audio pauses while the words are judged, then
    goes on; no tts-cancelled, no new turn, the answer is in history whole."""
    rtc_llm.script.clear()  # earlier tests' speculative answers may have left replies
    rtc_llm.add(LONG_ANSWER)
    async with RtcClient(url) as client:
        await client.negotiate()
        session_id = client.ready["id"]
        client.say(make_speech("What is the weather like?", rate=48000, pad=(1.0, 1.0)))
        await client.wait_for("tts-start", timeout=scaled(60))
        await asyncio.sleep(1.5)
        client.mic.enqueue(_wav48(make_speech, "Mm-hmm, yeah, okay.", pad=(0.0, 0.5)))
        await client.wait_for("tts-complete", timeout=scaled(90))
        assert not client.messages("tts-cancelled")
        assert len(client.messages("llm")) == 1
    session = await rtc_server.sessions.get(session_id)
    assert session.history[-1]["content"] == LONG_ANSWER
    assert not session.history[-1].get("interrupted")


async def test_an_acknowledgement_before_the_first_audio_holds_it_then_lets_it_play(
        url, rtc_server, rtc_llm, make_speech):
    """"Mm-hmm, yeah, okay" right after the question, while its answer is still on the way
    (the LLM's first byte comes 0.3 s after the request, so the answer is ready during the
    acknowledgement): the answer's first audio waits for the judgement instead of starting
    over the user, then plays whole; no tts-cancelled, no second turn."""
    answer = "It is sunny and warm today."
    rtc_llm.script.clear()
    rtc_llm.add(Reply(text=answer, delay_s=0.3))
    asked = len(rtc_llm.requests)
    async with RtcClient(url) as client:
        await client.negotiate()
        session_id = client.ready["id"]
        client.say(make_speech("What is the weather like?", rate=48000, pad=(1.0, 0.0)))
        await client.wait_for("speech-end", timeout=scaled(30))
        ack_pcm = _wav48(make_speech, "Mm-hmm, yeah, okay.", pad=(0.0, 0.5))
        ack = client.mic.enqueue(ack_pcm)
        await client.wait_for("tts-complete", timeout=scaled(60))
        assert not client.messages("tts-cancelled")
        assert len(client.messages("llm")) == 1 and len(rtc_llm.requests) - asked == 1
        assert ack.started_at is not None
        # from when the server has surely heard the voice (it pauses the agent at its first
        # 20 ms voiced frame) to before the earliest judgement (400 ms of speech, then its
        # words). On an Intel Xeon the answer began 0.92-0.96 s after the voice; with the
        # hold removed from BargeInJudge.duck, 0.32-0.41 s (the test failed 3 of 3)
        window = (ack.started_at + 0.25, ack.started_at + 0.45)
        loud = [round(t - ack.started_at, 2) for t, pcm in client.heard
                if window[0] <= t <= window[1] and rms(pcm) > 300]
        assert not loud, f"the agent talked over the acknowledgement at {loud} s"
        assert any(rms(pcm) > 300 for t, pcm in client.heard if t > window[1])
    session = await rtc_server.sessions.get(session_id)
    assert session.history[-1]["content"] == answer
    assert not session.history[-1].get("interrupted")


def _hum48(seconds: float) -> np.ndarray:
    """A hummed "mmm" (140 Hz and its harmonics): voiced, and no words."""
    t = np.arange(int(48_000 * seconds)) / 48_000
    hum = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 5))
    return (hum / np.abs(hum).max() * 8000 * np.minimum(1, t / 0.05)).astype(np.int16)


async def test_a_short_interruption_after_a_hum_is_taken(url, rtc_llm, make_speech):
    """"Mmm ... Stop!" over the agent: the first judgement hears only the hum, which is an
    acknowledgement however speech to text spells it, and the agent goes on; the "Stop!" that
    follows is judged too, cuts the agent and is answered."""
    rtc_llm.script.clear()
    rtc_llm.add(LONG_ANSWER)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.say(make_speech("What is the weather like?", rate=48000, pad=(1.0, 1.0)))
        await client.wait_for("tts-start", timeout=scaled(60))
        await asyncio.sleep(1.5)
        client.mic.enqueue(np.concatenate([_hum48(1.0), _wav48(make_speech, "Stop!",
                                                               pad=(0.0, 1.0))]))
        await client.wait_for("tts-cancelled", timeout=scaled(30))
        await client.wait_for("llm", count=2, timeout=scaled(60))
        asked = rtc_llm.requests[-1]["messages"][-1]["content"].lower()
        assert "stop" in asked, asked
