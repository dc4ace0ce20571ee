"""Benchmark: how often the words' end-of-turn judge holds a finished utterance, and how often
it lets a fragment through (pipeline/end_of_turn.py: the rules, Whisper's other readings and the
small language model on the words; Smart Turn, the voice's judge, is left out).

Each utterance is spoken in our Piper voice (``--renditions`` times: Piper varies each one),
followed by 120 ms of silence as at the speculative start, and heard by the server's Whisper
(``WhisperService.hear``). The sets:

- **questions**: the 50 finished questions of bench/quality.py, the first thing a user says;
- **answers**: short replies to the booking playbook's questions ("For how many people?" -
  "Four people."), each judged as a reply to its question;
- **fragments**: the questions without their last word, and replies that stop mid-phrase
  ("Half past", "It's under").

"held" is a finished utterance the judge makes wait the full ``end_of_turn_max_ms`` (1.6 s);
"through" is a fragment it would let end (the voice's judge may still hold it). Each hearing
is judged twice: as a reply to what the agent said (``reply``, the server's way) and as a
message on its own (``alone``, the framing before 2026-11-26), so both see the same audio.

    python bench/end_of_turn_words.py [--renditions 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from voice_server.workers import OFFLINE_ENVIRONMENT  # noqa: E402

# onnxruntime (the Piper voice, Smart Turn, Pipecat's models) reads it when imported
os.environ.update(OFFLINE_ENVIRONMENT)

from bench.quality import QUESTIONS  # noqa: E402
from voice_server.pipeline.audio import resample  # noqa: E402
from voice_server.pipeline.end_of_turn import EndOfTurnPolicy  # noqa: E402
from voice_server.pipeline.stt import (  # noqa: E402
    Hearing,
    WhisperService,
    default_rescore_model,
    default_whisper_dir,
)
from voice_server.pipeline.tts import PiperService, default_piper_voice  # noqa: E402

PEOPLE, TIME = "For how many people?", "At what time would you like the table?"
NAME, BOOK = "And what name shall I put the booking under?", "Shall I book it for you?"
ANSWERS = {
    PEOPLE: ["Four.", "Four people.", "Two of us.", "Just me.", "A table for two people.",
             "Six people, please.", "Two.", "There will be three of us."],
    TIME: ["Seven.", "At seven.", "Half past eight.", "Eight thirty.", "Seven thirty, please.",
           "At eight o'clock.", "Around nine.", "Tomorrow at seven."],
    NAME: ["Laura Chen.", "Smith.", "It's under Jane Miller.", "John.",
           "My name is Peter Brown.", "Under Garcia.", "The name is Olsen."],
    BOOK: ["Yes.", "Yes, please.", "No thanks.", "Sure, go ahead.",
           "Please go ahead and book the table."],
}
CUT_ANSWERS = {
    PEOPLE: ["Two of", "There will be three of", "We are", "Maybe"],
    TIME: ["Half past", "At", "Around", "Let me think, maybe at"],
    NAME: ["It's under", "The name is", "My name is", "Put it under"],
    BOOK: ["Please go ahead and book the", "Yes, but"],
}


def utterances() -> dict[str, list[tuple[str, str]]]:
    """(what the agent said before, "" for nothing yet; what the user says) for each set."""
    questions = [("", question) for question, *_ in QUESTIONS]
    cut = [("", " ".join(q.rstrip("?.!").split()[:-1])) for _, q in questions
           if len(q.split()) > 2]
    return {"questions": questions,
            "answers": [(said, text) for said, texts in ANSWERS.items() for text in texts],
            "fragments": cut + [(said, text) for said, texts in CUT_ANSWERS.items()
                                for text in texts]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renditions", type=int, default=3)
    args = parser.parse_args()
    started = time.monotonic()
    piper = PiperService(voice=str(default_piper_voice()))
    stt = WhisperService(model=str(default_whisper_dir()),
                         rescore_model=str(default_rescore_model()), endings=True)
    scorer, policy = stt._scorer, EndOfTurnPolicy()
    assert scorer is not None
    reply = scorer._tokens
    framings = {"reply": reply, "alone": lambda words, said_before: scorer._judge.llm.tokenize(
        f"<|im_start|>user\n{words}".encode(), add_bos=False, special=True)}
    silence = np.zeros(1920, dtype=np.int16)  # 120 ms at 16 kHz: the speculative start

    def hear(text: str) -> Hearing:
        pcm = resample(piper.synthesize(text, False), piper.sample_rate, 16000)
        return stt.hear(np.concatenate([np.zeros(4000, dtype=np.int16), pcm, silence]))

    def waits(said: str, heard: Hearing) -> bool:
        ending = (None if policy.words_wait(heard.text, heard.alternatives)
                  else scorer.ending(heard.text, said))
        verdict = policy.judge(1.0, heard.text, heard.alternatives, ending)
        return verdict.wait_ms == policy.max_ms

    heard = {name: [(said, text, hear(text)) for said, text in items
                    for _ in range(args.renditions)] for name, items in utterances().items()}
    result: dict[str, dict[str, object]] = {}
    for framing, tokens in framings.items():
        scorer._tokens = tokens  # type: ignore[method-assign]
        counts: dict[str, object] = {}
        for name, items in heard.items():
            judged = [(text, h.text, waits(said, h)) for said, text, h in items]
            if name == "fragments":
                through = [text for text, _, waited in judged if not waited]
                counts[name] = {"through": len(through), "of": len(items),
                                "which": sorted(set(through))}
            else:
                held = [f"{text} (heard {h!r})" for text, h, waited in judged if waited]
                counts[name] = {"held": len(held), "of": len(items), "which": sorted(set(held))}
        result[framing] = counts
    print(json.dumps({"bench": "end_of_turn_words", "renditions": args.renditions, **result,
                      "seconds": round(time.monotonic() - started, 1)}, indent=2))


if __name__ == "__main__":
    main()
