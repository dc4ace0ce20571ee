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
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .end_of_turn import Ending

__all__ = ["ONES", "OPENING_LINE", "SAID_BEFORE_WORDS", "SENTENCE_BREAK", "TENS", "ReadingScorer",
           "competing", "pick", "said"]

_WORD = re.compile(r"[a-z0-9']+")
_FINAL_PUNCTUATION = re.compile(r"[\s?.!,;:…]+$")
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")  # between two sentences
# what the user's words answer before the agent has said anything: an open question
OPENING_LINE = "Hello! How can I help you today?"
SAID_BEFORE_WORDS = 12


# number words, by value: ONES[n] for 0-19, TENS[n] for 20 + 10 * n (playbook/collect.py too)
ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen").split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_DIGITS = {word: str(n) for n, word in enumerate(ONES)} | {
    word: str(20 + 10 * n) for n, word in enumerate(TENS)}


def said(text: str) -> tuple[str, ...]:
    """The words of a reading as a voice says them: readings that differ only in how they
    write a number ("7.30", "730", "7:30", "seven thirty"; "two", "2"; "seven twenty five",
    "7:25") say the same. Number words become digits, a tens word and a unit after it one
    number, and neighbouring numbers one run of digits."""
    out: list[str] = []
    after_tens = False
    for word in _WORD.findall(text.lower()):
        digits = _DIGITS.get(word, word)
        if digits.isdigit() and out and out[-1].isdigit():
            joined = after_tens and len(digits) == 1 and digits != "0"
            out[-1] = out[-1][:-1] + digits if joined else out[-1] + digits
        else:
            out.append(digits)
        after_tens = word in TENS
    return tuple(out)


def competing(readings: Sequence[tuple[str, float]], margin: float) -> list[int]:
    """Indexes of the readings within ``margin`` of the best that say different words (of
    readings that differ only in case, punctuation, hyphens or spaces, the likelier spelling:
    "Wi-Fi", "WiFi" and "wifi", "e-mail" and "email", "checkup" and "check-up" are one reading;
    the model took 90-140 ms to choose between such spellings alone); fewer than two:
    nothing to choose. Nor when they differ only in how a number is written ("at 7.30 / 730 /
    seven thirty"): a language model cannot tell which was said, and asking it took 300-600 ms
    for an utterance with a time in it. Where other words differ too, every spelling of a
    number competes: the model's view of "Half past 8" beat "Half-past-date" where "Half past
    eight" did not. Nor does a reading that leaves out two words or more of a likelier one,
    or adds as many to it: the mean log-probability per token cannot weigh words left out
    (without "Seven in the evening, please," "My name is Peter." scored better than the whole,
    which Whisper heard a little likelier, and the booking lost its time in 2 of 40 dithered
    renditions of the sentence in espeak-ng); the audio decides between them."""
    if not readings:
        return []
    best = readings[0][1]
    contenders: dict[str, int] = {}
    for i, (text, score) in enumerate(readings):
        key = "".join(_WORD.findall(text.lower()))  # the letters said, in their order
        if best - score <= margin and key:
            contenders.setdefault(key, i)
    words = {i: said(readings[i][0]) for i in contenders.values()}
    found = [i for i in words if not any(
        _leaves_out(words[i], words[j], 2) or _leaves_out(words[j], words[i], 2)
        for j in words if j < i)]
    if len({words[i] for i in found}) < 2:
        return []
    return found


def _leaves_out(short: tuple[str, ...], long: tuple[str, ...], least: int) -> bool:
    """``short`` is ``long`` with ``least`` words or more left out, the rest in order."""
    if len(long) - len(short) < least:
        return False
    rest = iter(long)
    return all(word in rest for word in short)


def pick(readings: Sequence[tuple[str, float]], lm: Callable[[str], float], *,
         weight: float, margin: float) -> int:
    """Index of the reading to believe: ``readings`` are (text, Whisper score), best first;
    ``lm(text)`` is the language model's mean log-probability per token, asked only when
    different words compete."""
    contenders = competing(readings, margin) if weight > 0 else []
    if not contenders:
        return 0
    return max(contenders, key=lambda i: readings[i][1] + weight * lm(readings[i][0]))


class _Context:
    """One llama.cpp context on the model, with the tokens it last read kept: the next call
    evaluates only what differs. The worker serves calls from several threads and a context
    is not thread-safe (two at once failed a ggml assertion and killed the worker), hence the
    lock."""

    def __init__(self, model_path: str | Path, threads: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(str(model_path), n_ctx=256, n_batch=256, logits_all=True,
                         n_threads=threads, n_threads_batch=threads, verbose=False)
        self._lock = threading.Lock()

    def logits(self, tokens: list[int], first: int = 0) -> np.ndarray:
        """The logits after each of ``tokens`` from the ``first`` on."""
        with self._lock:
            llm = self.llm
            kept = 0
            for old, new in zip(llm.input_ids[:min(llm.n_tokens, len(tokens) - 1)], tokens,
                                strict=False):
                if old != new:
                    break
                kept += 1
            llm.n_tokens = kept  # eval() drops the cache past it
            llm.eval(tokens[kept:])
            return np.array(llm.scores[first:len(tokens)], dtype=np.float32)  # a copy

    def close(self) -> None:
        with self._lock:
            self.llm.close()


class ReadingScorer:
    """Mean log-probability per token of a short text under a small GGUF language model
    (rescoring readings), and how a reply ends (the end of turn), each in its own context
    (_Context) on the same mapped model file.

    Readings of one utterance mostly differ near their end, so the tokens shared with the last
    text scored are not evaluated again. The end of turn's context keeps the agent's words
    read by ``prepare``: in one shared context, rescoring between them evicted those and the
    judgement read them again (~145 ms instead of ~40). It runs on one thread: it runs beside
    the turn model or the first piece's synthesis (the compute pool admits two jobs), where
    two threads on a busy core took it 70-140 ms; rescoring runs while the LLM waits for the
    words, on all of ``threads``."""

    def __init__(self, model_path: str | Path, *, threads: int = 1, rescoring: bool = True,
                 endings: bool = True) -> None:
        """Only the contexts asked for are made (each holds ~116 MB of buffers)."""
        self._contexts = {use: _Context(model_path, n) for use, n, wanted in
                          (("rescoring", threads, rescoring), ("endings", 1, endings)) if wanted}
        llm = next(iter(self._contexts.values())).llm
        self._ends = [llm.tokenize(mark.encode(), add_bos=False)[0] for mark in "?.!"]
        self._start = _document_start(llm)

    @property
    def _rescorer(self) -> _Context:
        return self._contexts["rescoring"]

    @property
    def _judge(self) -> _Context:
        return self._contexts["endings"]

    def __call__(self, text: str) -> float:
        llm = self._rescorer.llm
        said = llm.tokenize((" " + text.strip()).encode(), add_bos=False)
        tokens = [*self._start, *said][:llm.n_ctx()]
        if len(tokens) < 2:
            return 0.0
        return float(_log_probs(self._rescorer.logits(tokens)[:-1], tokens[1:]).mean())

    def ending(self, text: str, said_before: str = "") -> Ending:
        """How the words end, by the model (end_of_turn.py): the chance of a sentence end after
        them (``?``, ``.`` or ``!`` next) and the log-probability of their last word after the
        others, the words given as a chat user's message without the final punctuation speech
        to text wrote (it puts a question mark after a fragment too).

        The message answers ``said_before``, the agent's last words (its last
        ``SAID_BEFORE_WORDS``; none yet: ``OPENING_LINE``): a reply is judged as a reply.
        Without them "Two people." had a sentence-end chance of 0.001 and "At seven." 0.002, so
        answers to the playbook's "For how many people?" waited the full 1.6 s; after the
        question, 0.013. Fragments stay far below (docs/turn-taking.md)."""
        words = _FINAL_PUNCTUATION.sub("", text.strip())
        if not words:
            return Ending(0.0, 0.0)
        before = _answered(said_before)
        tokens = self._tokens(words, before)
        if len(tokens) > self._judge.llm.n_ctx():
            return Ending(1.0, 0.0)  # longer than the model reads: no judgement
        head = self._tokens(words.rsplit(" ", 1)[0], before) if " " in words else tokens
        splits = len(head) < len(tokens) and tokens[:len(head)] == head
        # only the rows read below: the last word's tokens and what follows them (all the
        # rows, the agent's words' too, took ~8 ms more to copy and normalize)
        first = len(head) - 1 if splits else len(tokens) - 1
        logits = self._judge.logits(tokens, first)
        ends = logits[-1, self._ends] - _log_norms(logits[-1:])[0]
        sentence_end = float(np.exp(ends.astype(np.float64)).sum())
        if not splits:
            return Ending(sentence_end, 0.0)  # one word, or it does not split at the space
        # the rows before the last predict the last word's tokens
        return Ending(sentence_end, float(_log_probs(logits[:-1], tokens[len(head):]).sum()))

    def prepare(self, said_before: str = "", words: str = "") -> None:
        """Read the framing of a reply to ``said_before`` now (the user is still speaking),
        so that ``ending`` evaluates only the user's words: the tokens shared with the last
        call are kept (``_Context``). Without it the agent's words cost ~50 ms more there.
        ``words``: the user's so far (an interim transcript); all but the last, which the
        final transcript may hear otherwise, are read too: "A table for two people at 7.30
        in the evening, please." was then judged in ~50 ms instead of ~145."""
        heard = _FINAL_PUNCTUATION.sub("", words.strip())
        tokens = self._tokens(heard.rsplit(" ", 1)[0] if " " in heard else "",
                              _answered(said_before))
        self._judge.logits(tokens, len(tokens) - 1)

    def _tokens(self, words: str, said_before: str) -> list[int]:
        chat = f"<|im_start|>assistant\n{said_before}<|im_end|>\n<|im_start|>user\n{words}"
        return self._judge.llm.tokenize(chat.encode(), add_bos=False, special=True)

    def close(self) -> None:
        for context in self._contexts.values():
            context.close()


def _answered(said_before: str) -> str:
    """What the user's words are framed as answering; ``prepare`` and ``ending`` must agree
    on it, or the prepared tokens are not shared and are read again."""
    return _recent(said_before) or OPENING_LINE


def _recent(said: str) -> str:
    """The last whole sentences of ``said`` within ``SAID_BEFORE_WORDS`` words (the last words
    of one longer sentence): what a reply answers, kept short for the model's 256 tokens."""
    kept: list[str] = []
    for sentence in reversed(SENTENCE_BREAK.split(said.strip())):
        if sum(len(s.split()) for s in kept) + len(sentence.split()) > SAID_BEFORE_WORDS:
            if not kept:
                kept.append(" ".join(sentence.split()[-SAID_BEFORE_WORDS:]))
            break
        kept.insert(0, sentence)
    return " ".join(kept)


def _document_start(llm: Any) -> list[int]:
    """The token a scored reading follows, so that its first word is scored too: the
    model's BOS where it adds one, else its document separator ``<|endoftext|>``. SmolLM2
    adds no BOS: a reading's first word was the context, never scored, and "I table for four
    people at 8 o'clock tonight" beat "A table ..." (-4.26 against -4.60 per token; after
    the separator -4.99 against -4.35), which Whisper had read first."""
    bare = llm.tokenize(b" x", add_bos=False)
    with_bos = llm.tokenize(b" x", add_bos=True)
    if len(with_bos) > len(bare):
        return with_bos[:1]
    start = llm.tokenize(b"<|endoftext|>", add_bos=False, special=True)
    return start if len(start) == 1 else []


def _log_probs(logits: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """The log-probability of ``tokens[i]`` by row ``i`` of ``logits`` (float64)."""
    return (logits[np.arange(len(tokens)), tokens] - _log_norms(logits)).astype(np.float64)


def _log_norms(logits: np.ndarray) -> np.ndarray:
    """Each row's log-sum-exp (a token's logit minus it is its log-probability), in the
    logits' float32. Only the tokens read need it, so the rows are not normalized whole:
    with a whole-row log-softmax in float64 a 14-token reading took 68 ms on 2 threads,
    this way 61."""
    top = logits.max(axis=-1)
    return top + np.log(np.exp(logits - top[:, None]).sum(axis=-1))
