"""Which of Whisper's readings did the user say? A small language model breaks near-ties.

Whisper's beam search returns several readings of one utterance, each with a length-normalized
log-probability from the audio alone. Where the audio is ambiguous, the best of them can be
words nobody says ("How many days are in a leap here?", "What do you call a baby sheet?",
"Who wrote Romido and Juliet?") while a reading nearly as likely is the sentence meant. Speech
recognizers have long rescored such n-best lists with a language model: each reading's score
becomes ``whisper + weight * lm``, where ``lm`` is the mean log-probability per token of the
reading as text, and only readings within ``margin`` of Whisper's best compete, so the audio
keeps the last word when it is clear.

The language model is the bundled SmolLM2-135M (the ``tiny`` LLM profile, 98 MB), loaded in
the speech-to-text worker next to Whisper. ``pick`` is pure (sans-I/O); ``ReadingScorer`` holds
the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["ReadingScorer", "pick"]

_WORD = re.compile(r"[a-z0-9']+")


def pick(readings: Sequence[tuple[str, float]], lm: Callable[[str], float], *,
         weight: float, margin: float) -> int:
    """Index of the reading to believe: ``readings`` are (text, Whisper score), best first;
    ``lm(text)`` is the language model's mean log-probability per token. Readings that differ
    only in case or punctuation are one reading (the likelier spelling); the model runs only
    when two or more different word sequences compete."""
    if weight <= 0 or len(readings) < 2:
        return 0
    best = readings[0][1]
    contenders: dict[tuple[str, ...], int] = {}
    for i, (text, score) in enumerate(readings):
        key = tuple(_WORD.findall(text.lower()))
        if best - score <= margin and key:
            contenders.setdefault(key, i)
    if len(contenders) < 2:
        return 0
    return max(contenders.values(),
               key=lambda i: readings[i][1] + weight * lm(readings[i][0]))


class ReadingScorer:
    """Mean log-probability per token of a short text under a small GGUF language model."""

    def __init__(self, model_path: str | Path, *, threads: int = 1) -> None:
        from llama_cpp import Llama

        self._llm = Llama(str(model_path), n_ctx=256, n_batch=256, logits_all=True,
                          n_threads=threads, n_threads_batch=threads, verbose=False)

    def __call__(self, text: str) -> float:
        llm = self._llm
        tokens = llm.tokenize((" " + text.strip()).encode(), add_bos=True)[:llm.n_ctx()]
        if len(tokens) < 2:
            return 0.0
        llm.reset()
        llm.eval(tokens)
        logits = np.asarray(llm.scores[:len(tokens) - 1], dtype=np.float64)
        top = logits.max(axis=1, keepdims=True)
        log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        chosen = logits[np.arange(len(tokens) - 1), tokens[1:]]
        return float((chosen - log_z).mean())

    def close(self) -> None:
        self._llm.close()
