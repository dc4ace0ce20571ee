"""Benchmark: which of Whisper's readings the small language model picks (pipeline/readings.py),
and the time it takes, three ways on the same readings: as the server does (``current``,
``readings.pick``); with readings that leave out words of a likelier one competing with it
("My name is Peter." against "Seven in the evening, please, my name is Peter";
``left_out_compete``, as before 2026-11-30's second change; every spelling of the same letters
competing, "Wi-Fi", "WiFi", "wifi", was measured the same way before the first, see
docs/performance.md); and without the document start a reading is scored after
(``first_word_unscored``: the first word then is the context, never scored).

Every spoken line of the other benchmarks (the questions, the restaurant's and the dental
callers' lines) and some with words written with and without hyphens, in our Piper voice and in
espeak-ng (``--renditions``: that many times; sox dithers, so each rendition is other audio),
heard once by Whisper; the pickers choose from the same readings, each with its own
model context. Prints JSON: lines heard right (the words said, numbers however written) by
each, how many lines had readings competing for each, the total and slowest time spent
choosing, and the lines where the picks differ in their words.

    python bench/readings_pick.py [--renditions 3]
    python bench/readings_pick.py --renditions 40 \
        --line "Seven in the evening, please. My name is Peter."
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
import wave
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality  # noqa: E402
from _spoken_calls import CALLERS, VISITS, caller_lines, visit_lines  # noqa: E402

from voice_server.compute import ComputePool  # noqa: E402
from voice_server.llm.profiles import profile_model_path  # noqa: E402
from voice_server.pipeline import readings  # noqa: E402
from voice_server.pipeline.readings import ReadingScorer, competing, pick, said  # noqa: E402
from voice_server.pipeline.stt import RESCORE_MARGIN, WhisperSTT  # noqa: E402

WEIGHT = 0.2  # Settings.stt_rescore_weight's default
# words a caller may say written with or without a hyphen or a space
SPELLED = ["Hi, my Wi-Fi is really slow.", "My Wi-Fi keeps dropping out.",
           "Can you reset my e-mail password?", "I need a follow-up appointment next week.",
           "My wifi router is blinking red.", "I'd like to check in for a check-up.",
           "Is there a drive-through near me?", "I want to sign up for the add-on.",
           "Can I get a refund for the pre-order?", "My e-mail says my log-in failed.",
           "The set-up of my Wi-Fi extender is stuck."]


def left_out_compete(found: Sequence[tuple[str, float]], margin: float) -> list[int]:
    """``competing`` as it was: a reading that leaves out words of a likelier one competes
    with it."""
    if not found:
        return []
    contenders: dict[str, int] = {}
    for i, (text, score) in enumerate(found):
        key = "".join(readings._WORD.findall(text.lower()))
        if found[0][1] - score <= margin and key:
            contenders.setdefault(key, i)
    chosen = list(contenders.values())
    return chosen if len({said(found[i][0]) for i in chosen}) >= 2 else []


def _letters(text: str) -> str:
    """The words said, however written: numbers as digits, no spaces or hyphens."""
    return "".join(said(text))


Rule = Callable[[Sequence[tuple[str, float]], float], list[int]]


def _pick(found: Sequence[tuple[str, float]], scorer: ReadingScorer, rule: Rule | None) -> int:
    """``readings.pick`` (``rule`` None), or its choice among the readings ``rule`` lets
    compete."""
    if rule is None:
        return pick(found, scorer, weight=WEIGHT, margin=RESCORE_MARGIN)
    chosen = rule(found, RESCORE_MARGIN)
    if not chosen:
        return 0
    return max(chosen, key=lambda i: found[i][1] + WEIGHT * scorer(found[i][0]))


def _pcm(wav_bytes: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(wav_bytes)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def default_lines() -> list[str]:
    texts = [q[0] for q in quality.QUESTIONS + quality.EXTRA_QUESTIONS]
    texts += sorted({line for c in CALLERS for line in caller_lines(c)} |
                    {line for v in VISITS for line in visit_lines(v)})
    return texts + SPELLED


async def main(texts: list[str], renditions: int = 1) -> dict[str, object]:
    voices = [("piper", quality.piper_wavs)] + [
        (f"espeak{n or ''}", quality.espeak_wavs) for n in range(renditions)]
    speech = {(voice, text): _pcm(wav) for voice, make in voices
              for text, wav in make(texts).items()}
    pickers: dict[str, tuple[ReadingScorer, Rule | None]] = {
        name: (ReadingScorer(profile_model_path("tiny"), endings=False), rule)
        for name, rule in (("current", None), ("left_out_compete", left_out_compete),
                           ("first_word_unscored", None))}
    pickers["first_word_unscored"][0]._start = []  # as before the document start
    right = dict.fromkeys(pickers, 0)
    contested = dict.fromkeys(pickers, 0)
    spent: dict[str, list[float]] = {name: [] for name in pickers}
    differ = []
    async with ComputePool(1) as pool:
        stt = WhisperSTT(pool)
        await stt.load()
        try:
            for (voice, text), pcm in speech.items():
                heard = await stt.hear(pcm)
                picked = {}
                for name, (scorer, rule) in pickers.items():
                    contested[name] += bool(heard.readings and (rule or competing)(
                        heard.readings, RESCORE_MARGIN))
                    start = time.perf_counter()
                    picked[name] = heard.readings[_pick(heard.readings, scorer, rule)][0] \
                        if heard.readings else heard.text
                    spent[name].append(time.perf_counter() - start)
                    right[name] += _letters(picked[name]) == _letters(text)
                if len({_letters(reading) for reading in picked.values()}) > 1:
                    differ.append({"voice": voice, "said": text, **picked})
        finally:
            await stt.aclose()
            for scorer, _rule in pickers.values():
                scorer.close()
    return {"lines": len(speech), "contested": contested, "right": right,
            "choosing_ms": {name: {"total": round(sum(times) * 1000),
                                   "max": round(max(times) * 1000)}
                            for name, times in spent.items()},
            "differ": differ}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renditions", type=int, default=1,
                        help="espeak-ng renditions of each line (sox dithers: each is other audio)")
    parser.add_argument("--line", action="append",
                        help="a line to say instead of the default ones (repeatable)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.line or default_lines(), args.renditions)), indent=1))
