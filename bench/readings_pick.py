"""Benchmark: which of Whisper's readings the small language model picks (pipeline/readings.py),
with the document start a reading is scored after (``ReadingScorer``) and without it (the first
word then is the context, never scored), on the same readings.

Every spoken line of the other benchmarks (the questions, the restaurant's and the dental
callers' lines), in our Piper voice and in espeak-ng, heard once by Whisper; the two pickers
choose from the same readings. Prints JSON: lines heard right (the words said, numbers however
written) by each, how many lines had readings competing, and the lines where they differ.

    python bench/readings_pick.py
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality  # noqa: E402
from _spoken_calls import CALLERS, VISITS, caller_lines, visit_lines  # noqa: E402

from voice_server.compute import ComputePool  # noqa: E402
from voice_server.llm.profiles import profile_model_path  # noqa: E402
from voice_server.pipeline.readings import ReadingScorer, competing, pick, said  # noqa: E402
from voice_server.pipeline.stt import RESCORE_MARGIN, WhisperSTT  # noqa: E402

WEIGHT = 0.2  # Settings.stt_rescore_weight's default


def _pcm(wav_bytes: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(wav_bytes)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


async def main() -> dict[str, object]:
    texts = [q[0] for q in quality.QUESTIONS + quality.EXTRA_QUESTIONS]
    texts += sorted({line for c in CALLERS for line in caller_lines(c)} |
                    {line for v in VISITS for line in visit_lines(v)})
    speech = {(voice, text): _pcm(wav) for voice, make in
              (("piper", quality.piper_wavs), ("espeak", quality.espeak_wavs))
              for text, wav in make(texts).items()}
    scorers = {"with_start": ReadingScorer(profile_model_path("tiny"), endings=False),
               "first_word_unscored": ReadingScorer(profile_model_path("tiny"), endings=False)}
    scorers["first_word_unscored"]._start = []  # as before the document start
    right = dict.fromkeys(scorers, 0)
    contested, differ = 0, []
    async with ComputePool(1) as pool:
        stt = WhisperSTT(pool)
        await stt.load()
        try:
            for (voice, text), pcm in speech.items():
                heard = await stt.hear(pcm)
                contested += bool(competing(heard.readings, RESCORE_MARGIN))
                picked = {name: heard.readings[pick(heard.readings, scorer, weight=WEIGHT,
                                                    margin=RESCORE_MARGIN)][0]
                          for name, scorer in scorers.items()} if heard.readings else \
                    dict.fromkeys(scorers, heard.text)
                for name, reading in picked.items():
                    right[name] += said(reading) == said(text)
                if len(set(picked.values())) > 1:
                    differ.append({"voice": voice, "said": text, **picked})
        finally:
            await stt.aclose()
            for scorer in scorers.values():
                scorer.close()
    return {"lines": len(speech), "contested": contested, "right": right, "differ": differ}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=1))
