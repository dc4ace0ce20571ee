"""Turn-taking cases of the latency benchmark (issue 19), judged from the audio alone, the same
way for voice_server and Pipecat, with an instant scripted LLM so only turn-taking is measured:

- **pauses**: "<first half> <pause> <second half>" with a 0.8 s pause mid-sentence: a *false end
  of turn* is agent speech heard before the second half ends (the system answered the first
  half); the voice-to-voice time after the whole sentence is reported too, how many
  requests the LLM served for them (an answer started in the pause and dropped is one), and
  in how many the LLM was asked the *whole sentence in one message* (the last request's last
  user message holds words of both halves, rather than the second half after the first;
  ``--turn-llm-delay-ms`` gives the LLM the first-token time of a real one, so that a turn
  that ended in the pause can be cut before its answer is heard);
- **pauses, embedded**: the pauses alone, answered by the embedded default model
  (``--embedded``; ``paused_phase``);
- **finished**: a finished question: voice-to-voice (end of speech -> first agent audio);
- **over the agent**: while the agent tells a long story, an acknowledgement ("Mm-hmm.",
  "Yeah.", "Okay.", "Right.") or a noise under ~600 ms (a cough, a click, a door bang): a *false
  barge-in* is the story stopping (under 3 s of agent speech in the 5 s after the sound, where
  the story goes on for longer; a cancelled story is followed by the short scripted reply only).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from typing import Any

import numpy as np

from bench._peers import (
    LOUD,
    _play,
    first_loud_after,
    loud_seconds,
    speech_bounds,
    turn,
    turn_end,
)
from voice_server.pipeline.audio import rms

__all__ = ["PAUSED", "end_of_turn_reasons", "make_noises", "paused_phase",
           "turn_taking_phase"]

# (first half, second half): the first half alone would be a possible, if odd, sentence too
PAUSED = [
    ("I would like to book a table for", "two people at seven o'clock."),
    ("What is the capital of", "Germany?"),
    ("Can you tell me", "how far away the moon is?"),
    ("My favourite colour is", "blue, what is yours?"),
    ("I was thinking that maybe", "we could talk about the weather."),
]
# a word of each half as speech to text writes it, whatever its spelling ("colour", "color")
PAUSED_WORDS = [("table", "people"), ("capital", "germany"), ("tell", "moon"),
                ("colo", "blue"), ("thinking", "weather")]
ACKNOWLEDGEMENTS = ["Mm-hmm.", "Yeah.", "Okay.", "Right."]
RATE = 48_000


def make_noises(seed: int = 7) -> dict[str, np.ndarray]:
    """A cough (noise burst with a fast decay), a click and a door bang (a low thump with a
    rattle), each under 600 ms, at 48 kHz."""
    rng = np.random.default_rng(seed)

    def burst(seconds: float, level: float, decay: float) -> np.ndarray:
        t = np.arange(int(RATE * seconds)) / RATE
        env = np.exp(-t / decay) * np.minimum(1, t / 0.005)
        return (rng.standard_normal(len(t)) * env * level).clip(-32000, 32000)

    t = np.arange(int(RATE * 0.5)) / RATE
    thump = np.sin(2 * np.pi * 60 * t) * np.exp(-t / 0.08) * 20000
    door = thump + burst(0.5, 3000, 0.15)
    return {"cough": burst(0.35, 12000, 0.08).astype(np.int16),
            "click": burst(0.03, 16000, 0.01).astype(np.int16),
            "door": door.clip(-32000, 32000).astype(np.int16)}


def paused_halves(speech: Any, cases: int) -> list[tuple[np.ndarray, np.ndarray,
                                                           tuple[str, str]]]:
    """``cases`` paused sentences, ``PAUSED`` in turn: each half spoken (``speech(text, pad)``
    -> 48 kHz PCM) and the word of each half that speech to text must hear."""
    picks = [i % len(PAUSED) for i in range(cases)]
    return [(speech(PAUSED[k][0], (1.0, 0.0)), speech(PAUSED[k][1], (0.0, 1.0)),
             PAUSED_WORDS[k]) for k in picks]


async def paused_turn(client: Any, first: np.ndarray, pause_s: float, second: np.ndarray,
                      fake: Any | None, words: tuple[str, str]) -> dict[str, Any]:
    """One paused sentence; ``whole`` from the scripted LLM's last request (``fake``), or
    None without one (``paused_phase`` reads it from the server's turn records)."""
    silence = np.zeros(int(RATE * pause_s), dtype=np.int16)
    first_end = speech_bounds(first)[1]
    pcm = np.concatenate([first, silence, second])
    result = await turn(client, pcm)
    first_end_at = result["speech_end"] - (speech_bounds(pcm)[1] - first_end)
    early = [t for t, p in client.heard
             if first_end_at < t < result["speech_end"] and rms(p) > LOUD]
    if fake is None:
        return {"false_end": bool(early), "v2v_ms": result["v2v_ms"], "whole": None}
    users = [m for m in fake.requests[-1]["messages"] if m["role"] == "user"] \
        if fake.requests else []
    asked = str(users[-1]["content"]).lower() if users else ""
    return {"false_end": bool(early), "v2v_ms": result["v2v_ms"],
            "whole": all(w in asked for w in words), "asked": asked}


async def _records_of_the_case(system: Any, wait_s: float = 20.0
                               ) -> tuple[list[dict[str, Any]], int, collections.Counter]:
    """The server's turn records, turns taken back and their reasons since the last dump. A
    turn is recorded once its answer has played out, which may be after the client's quiet
    wait (a case once counted no answer, and the next case two): this waits up to ``wait_s``
    for at least one record."""
    turns: list[dict[str, Any]] = []
    taken_back, reasons = 0, collections.Counter()
    started = time.monotonic()
    while True:
        dump = await system.dump()
        turns += dump["turns"]
        taken_back += dump["outcomes"]["taken_back"]
        reasons.update(dump["taken_back_reasons"])
        waited = time.monotonic() - started
        if turns or waited > wait_s:
            if waited > 0.5:
                print(f"# the case's turn record came {waited:.1f} s after the answer went "
                      "quiet", flush=True, file=sys.stderr)
            return turns, taken_back, reasons
        await asyncio.sleep(0.25)


async def paused_phase(system: Any, speech: Any, cases: int) -> dict[str, Any]:
    """The paused sentences alone, answered by voice_server's own LLM (``ours_embedded``: the
    embedded default model, with its real first-token time). Per case, from the server's
    records since the case began: the turns answered, the transcript of the last (does it hold
    both halves?) and the turns taken back."""
    runs = []
    async with system.client() as client:
        await client.negotiate()
        await asyncio.sleep(0.5)
        await system.dump()  # earlier phases' records
        for first, second, words in paused_halves(speech, cases):
            run = await paused_turn(client, first, 0.8, second, None, words)
            turns, taken_back, reasons = await _records_of_the_case(system)
            answered = [str(t["transcript"]).lower() for t in turns]
            run.update(answers=len(answered), taken_back=taken_back,
                       taken_back_reasons=dict(reasons),
                       heard=answered[-1] if answered else "",
                       whole=bool(answered) and all(w in answered[-1] for w in words))
            runs.append(run)
    entry = {"cases": len(runs), "false_end_of_turn": sum(r["false_end"] for r in runs),
             "turns_taken_back": sum(r["taken_back"] for r in runs),
             # the end-of-turn reasons that ended those turns too soon
             "taken_back_reasons": dict(sum((collections.Counter(r["taken_back_reasons"])
                                             for r in runs), collections.Counter())),
             "whole_sentence_in_one_turn": sum(r["whole"] for r in runs),
             "v2v_ms": [r["v2v_ms"] for r in runs], "runs": runs}
    print(f"# {system.name} paused sentences: false end of turn {entry['false_end_of_turn']}/"
          f"{len(runs)}, turns taken back {entry['turns_taken_back']} "
          f"{entry['taken_back_reasons']}, the whole sentence in "
          f"one turn {entry['whole_sentence_in_one_turn']}", flush=True, file=sys.stderr)
    return entry


async def over_the_agent(client: Any, story: np.ndarray, sound: np.ndarray, *,
                         on_answer: Any, talk_s: float = 1.5) -> dict[str, Any]:
    """The agent tells the story; ``talk_s`` after it starts, ``sound`` plays; did it stop?"""
    speech_end = await _play(client, story) + speech_bounds(story)[1]
    if await first_loud_after(client, speech_end) is None:
        raise TimeoutError("the agent did not begin its story")
    on_answer()
    await asyncio.sleep(talk_s)
    t0 = await _play(client, sound)
    end = t0 + len(sound) / RATE
    await asyncio.sleep(max(0.0, end + 5.0 - time.monotonic()))
    loud_s = loud_seconds(client, end, end + 5.0)
    await turn_end(client, end)
    return {"false_barge_in": loud_s < 3.0, "agent_speech_after_s": round(loud_s, 2)}


def end_of_turn_reasons(turns: list[dict[str, Any]]) -> dict[str, int]:
    """How our server decided each turn's end (its turn records)."""
    reasons: dict[str, int] = {}
    for record in turns:
        reason = record.get("end_of_turn") or "none"
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


async def turn_taking_phase(systems: list[Any], fake: Any, speech: Any, story: np.ndarray,
                            short: str, long: str, cases: int,
                            llm_delay_s: float = 0.0) -> dict[str, Any]:
    """``speech(text, pad)`` -> 48 kHz PCM; ``cases`` of each kind per system. Each case is
    spoken anew (Piper varies each rendition: one rendition replayed for every case made the
    counts move in steps of 4 or 3, by whether Whisper heard that one right), and every system
    gets the same audio."""
    halves = paused_halves(speech, cases)
    noises = make_noises()
    names = [*ACKNOWLEDGEMENTS, *noises]
    sounds = [(name, noises[name] if name in noises else speech(name, (0.0, 0.3)))
              for name in (names[i % len(names)] for i in range(cases))]
    out: dict[str, Any] = {}
    for system in systems:
        fake.default_text = short
        async with system.client() as client:
            await client.negotiate()
            await asyncio.sleep(0.5)
            paused, asked_before = [], len(fake.requests)
            fake.default_delay_s = llm_delay_s
            for first, second, words in halves:
                paused.append(await paused_turn(client, first, 0.8, second, fake, words))
            fake.default_delay_s = 0.0
            asked = len(fake.requests) - asked_before
            over = []
            for name, sound in sounds:
                fake.default_text = long
                result = await over_the_agent(client, story, sound,
                                              on_answer=lambda: setattr(fake, "default_text",
                                                                        short))
                over.append({"sound": name, **result})
        dump = await system.dump()  # ours: the server's own turn records
        entry: dict[str, Any] = {
            "pause_0_8s": {"cases": len(paused),
                           "false_end_of_turn": sum(r["false_end"] for r in paused),
                           # requests the LLM served, speculative ones dropped unheard too
                           "llm_requests": asked,
                           "llm_first_token_delay_ms": round(llm_delay_s * 1000),
                           "whole_sentence_in_one_message": sum(r["whole"] for r in paused),
                           "v2v_ms": [r["v2v_ms"] for r in paused],
                           "runs": paused},
            "over_the_agent": {"cases": len(over),
                               "false_barge_in": sum(r["false_barge_in"] for r in over),
                               "false_by_sound": {n: sum(r["false_barge_in"] for r in over
                                                         if r["sound"] == n) for n in names},
                               "runs": over},
        }
        if dump:
            # a turn that ended in a pause, cut before its answer was heard and heard again
            # with the words after the pause (conversation.py): a false end, recovered
            entry["pause_0_8s"]["turns_taken_back"] = dump["outcomes"]["taken_back"]
            entry["pause_0_8s"]["taken_back_reasons"] = dump["taken_back_reasons"]
            entry["end_of_turn_reasons"] = end_of_turn_reasons(dump["turns"])
            entry["_turns"] = dump["turns"]
        out[system.name] = entry
        print(f"# {system.name} turn-taking: false end of turn "
              f"{entry['pause_0_8s']['false_end_of_turn']}/{len(paused)} ({asked} LLM "
              f"requests, the whole sentence in one message "
              f"{entry['pause_0_8s']['whole_sentence_in_one_message']}, turns taken back "
              f"{entry['pause_0_8s'].get('turns_taken_back', '-')}), false barge-in "
              f"{entry['over_the_agent']['false_barge_in']}/{len(over)}", flush=True,
              file=sys.stderr)
    return out
