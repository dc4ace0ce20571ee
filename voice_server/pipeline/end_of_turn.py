"""When is the user's turn over? A decision from the voice and the words, not silence alone
(sans-I/O: the caller supplies the turn model's probability and the transcript).

A fixed silence cannot be both quick and patient: 500 ms cuts off a caller who pauses to think
("I'd like to book a table for ... um") and makes one who clearly finished ("... of France?")
wait. So, at the first short pause (``vad_spec_silence_ms``, when the speculative answer starts
anyway), two judges look at the turn so far:

- the **turn model** (Smart Turn v3.2, turn_model.py) hears the prosody of the last 8 s and gives
  the probability that the speaker is done;
- the **words** of the speculative transcript: a turn that ends on a filler, an article, a
  preposition, a conjunction or a trailing comma/ellipsis is not finished, whatever the voice
  (unless it is a question asking for that word's object: "Which planet do we live on?");
  Whisper often ends a cut-off sentence with a word it invents ("What is the capital of" heard
  "What is the capital done?"), so the other readings its beam search found nearly as likely
  count too: one of them unfinished is enough to wait;
- a **language model** on the words, where the rules see a finished sentence: a small model's
  probability that a sentence ends after them (readings.py ``ReadingScorer.ending``);
  "Who painted the Mona" or "... in our solar" end in a falling voice and look finished to
  the rules, but a sentence end there is unlikely (< 0.001); and a last word it finds very
  unlikely after the others is what speech to text invents for a cut-off sentence ("What is
  the capital done?": "done" at log-probability -15.5, "France" in "What is the capital of
  France?" at -2.8).

The verdict is the silence the turn needs before it ends (``Verdict.wait_ms``): ``commit_ms``
(about 200 ms) when both say complete; ``max_ms`` (about 1.6 s) when the words (any reading, or
the language model) are unfinished or the model is sure the speaker is not done; ``fallback_ms``
(the old fixed 500 ms) when a judge could not tell (no words, a model failure or the model
switched off, a probability between the two thresholds). On our Piper voice's 50 finished
questions the model gave >= 0.5 for 43, 0.29 to 0.47 for 4 and 0.034 to 0.069 for 3; on
unfinished ones ("... a table for, um", "So I was thinking that") 0.006 to 0.016, hence 0.03;
but 0.97 for "What is the capital of" (synthetic speech falls at the end of any text: the words
catch it). On espeak-ng's robotic voice the model is no guide at all (finished questions 0.009
to 0.95, fragments 0.22 to 0.98): tests and benchmarks speaking espeak-ng measure the words'
judge and the fallback more than the model. Speech that resumes before then continues the same
turn and the speculative answer is discarded unheard.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Ending", "EndOfTurnPolicy", "Verdict", "only_a_greeting", "only_asks_to_wait",
           "only_signs_off", "signs_off", "unfinished"]

_WORD = re.compile(r"[a-z0-9']+")
# words a finished English sentence does not end on
_OPEN_ENDED = frozenset("""
a an the my your his her its our their this these those some any every
of to for with in on at from about into onto by as than like via per
and or but so because if that which who whose whether while when where although though
um uh er erm hmm mm ah eh
is are was were am be been being do does did have has had can could would should will shall
may might must i'd i'm i'll i've we're we'd you're it's there's let's that's here's he's she's
maybe probably just also
""".split())
# last two words a sentence of more than them does not end on: a verb still owed its object
# ("can you tell me", "I want"); speech to text often writes a question mark after them anyway
_OPEN_ENDED_PAIRS = frozenset(tuple(pair.split()) for pair in """
tell me/show me/give me/send me/bring me/remind me/teach me/tell us/show us/give us/tell you
i want/i need/i think/i wonder/i mean/i guess/i was/we want/we need/i wanted/i'd like
""".strip().replace("\n", "/").split("/"))
_TRAILING_OPEN = ("...", "…", ",", "-", "—", ":", ";")
# A question whose question word is the object of its last word ends on that word ("Which planet
# do we live on?", "How many legs does a spider have?", "What is it made of?"): a question word
# first, then a subject or do-support before the end; "What is the capital of" has neither. So
# does a question asked inside a request ("Do you know where the station is?").
_QUESTION_WORDS = frozenset("what which who whom whose where when why how".split())
_STRANDABLE = frozenset("""
of to for with in on at from about into onto by like
have do be is are was were am
""".split())
_ASKING = frozenset("me us know wonder ask remember explain say guess sure idea".split())
# "What is the weather like?", "What was the film about?": the thing asked about is the subject
# (no pronoun needed), and "like"/"about" take the question word as their object
_BE = frozenset("is are was were".split())
_ASKS_WHAT_IT_IS = frozenset(("like", "about"))
_SUBJECT_OR_DO = frozenset("""
i you we they he she it this that these those there
do does did can could will would should shall may might must
""".split())


def unfinished(text: str) -> bool:
    """The transcript stops mid-sentence: a trailing comma, dash or ellipsis, or a last word no
    finished sentence ends on ("... capital of", "a table for, um")."""
    stripped = text.strip()
    if not stripped:
        return False
    if stripped.endswith(_TRAILING_OPEN):
        return True
    words = [part for word in _words(stripped) for part in _contraction(word)]
    if not words:
        return False
    if words[-1] in _OPEN_ENDED:
        return not _asks_for_its_last_word(words)
    # "Tell me." alone is a finished request; "Can you tell me" is not
    return tuple(words[-2:]) in _OPEN_ENDED_PAIRS and (len(words) > 2 or words[0] in ("i", "we"))


def _contraction(word: str) -> tuple[str, ...]:
    """A question word's "'s" spelled out ("what's" -> "what is"): the rules below read it."""
    head, _, tail = word.partition("'")
    return (head, "is") if tail == "s" and head in _QUESTION_WORDS else (word,)


def _asks_for_its_last_word(words: list[str]) -> bool:
    if words[-1] not in _STRANDABLE:
        return False
    if words[-1] in _ASKS_WHAT_IT_IS and words[0] == "what" and any(
            w in _BE for w in words[1:-1]):
        return True
    if words[0] in _QUESTION_WORDS and any(w in _SUBJECT_OR_DO for w in words[1:-1]):
        return True
    # a question inside a request ends on its verb: "Can you tell me how far away the moon is?"
    return any(words[i] in _QUESTION_WORDS and words[i - 1] in _ASKING
               for i in range(1, len(words) - 2))


# a greeting alone: words of these, one of them a greeting's own
_GREETING = frozenset("hello hi hey hiya howdy greetings morning afternoon evening".split())
_IN_A_GREETING = _GREETING | frozenset("good there everyone again oh".split())


def only_a_greeting(text: str) -> bool:
    """"Hello.", "Hi there.", "Good morning.": the words are a greeting and nothing else. A
    caller greets and then says what they want ("Hello, I would like to book a table"), with a
    comma's pause between (160-380 ms in our Piper voice) that voice and words both find
    finished (Smart Turn 0.94-0.98, Whisper "Hello."): answered after 200 ms, the greeting
    took the turn, and the request that followed cut the answer."""
    words = _WORD.findall(text.lower())
    return bool(words) and set(words) <= _IN_A_GREETING and not _GREETING.isdisjoint(words)


# a request to stop or wait alone: words of these, one of them a request's own (or "one
# second", "just a moment": a while asked for; "Second." alone may answer "Which one?")
_WAIT = frozenset("stop wait hold hang pause".split())
_A_WHILE = frozenset("moment second sec minute".split())
_ASKING_A_WHILE = frozenset("one just a".split())
_IN_A_WAIT = _WAIT | _A_WHILE | _ASKING_A_WHILE | frozenset(
    "on it please sorry hey oh okay ok".split())


def only_asks_to_wait(text: str) -> bool:
    """"Stop, please.", "Wait.", "Hold on a second.": the words ask the agent to stop or wait
    and say nothing else. A caller who interrupts so mostly goes on ("Stop, please. What time
    is it in Tokyo?") after a sentence's pause, which voice and words find finished: answered
    after 200 ms, the answer began in that pause and the caller's question cut it (the latency
    benchmark's echo phase, on a CPU quick enough to answer within the pause)."""
    words = set(_WORD.findall(text.lower()))
    asks_a_while = not words.isdisjoint(_A_WHILE) and not words.isdisjoint(_ASKING_A_WHILE)
    return bool(words) and words <= _IN_A_WAIT and (not words.isdisjoint(_WAIT) or asks_a_while)


# what a caller ends a call or a request with, as the last words of the turn
_SIGN_OFFS = tuple(tuple(phrase.split()) for phrase in """
that's all/that is all/that'll be all/that will be all/that's it/that's everything
nothing else/that's all i need/that's all i needed/that's all for now
thank you/thanks/thank you very much/thanks a lot/many thanks/cheers
bye/goodbye/bye bye/good bye/have a nice day/have a good day/see you
""".strip().replace("\n", "/").split("/"))


def signs_off(text: str) -> bool:
    """"Okay, thank you, that's all.", "No, that's it, bye.": the words end on a sign-off.
    Both other judges misread one: Smart Turn heard our Piper voice's "Thank you, that's
    all." as surely unfinished (0.009; "No, that's all." 0.06, "Okay, thank you, that's all."
    0.024), and the small language model expects more after "that's all" (a sentence end
    0.002-0.013: "... that I wanted"), so a caller who was done waited the longest silence,
    1.6 s. Said as the turn's last words, the caller has finished; one who goes on after all
    continues the same turn, or cuts an answer not yet heard and is heard again with it."""
    return _sign_off_ending(tuple(_words(text))) is not None


def _sign_off_ending(words: tuple[str, ...]) -> tuple[str, ...] | None:
    """The sign-off ``words`` end on, if any."""
    return next((phrase for phrase in _SIGN_OFFS if words[-len(phrase):] == phrase), None)


# said before or between sign-offs ("Okay, thank you.", "No, that's it.", "All right, bye.")
_BEFORE_A_SIGN_OFF = frozenset("okay ok no yes yeah yep well alright all right great perfect "
                               "so oh and then fine good".split())


def only_signs_off(text: str) -> bool:
    """"That's all.", "No, that's it, bye.", "Thanks, bye.": the words say nothing but that
    the caller is done (sign-offs, and the small words said with them)."""
    words = tuple(_words(text))
    if _sign_off_ending(words) is None:
        return False
    while words:
        if (phrase := _sign_off_ending(words)) is not None:
            words = words[:-len(phrase)]
        elif words[-1] in _BEFORE_A_SIGN_OFF:
            words = words[:-1]
        else:
            return False
    return True


def _goes_on_after_a_sign_off(transcript: str, reading: str) -> bool:
    """A reading that is the transcript, ending on a sign-off, and more: Whisper's beam
    invents a word after a finished call's end ("Okay, thank you. That's all. Okay,")."""
    said = _words(transcript)
    return signs_off(transcript) and _words(reading)[:len(said)] == said


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


def _one_word(text: str) -> bool:
    """A reply of one word ("Seven.", "Two.", "Smith.") that the rules find finished: the small
    language model wants more after a bare number or name ("Seven" -> " years" 0.2, a sentence
    end 0.0025 after "What time would you like the table?"), so its sentence-end chance
    says nothing there and the voice decides."""
    return len(_WORD.findall(text.lower())) == 1


_LAST_WORD = re.compile(r"(?:^|(?P<before>\S)\s+)(?P<word>[\w'’-]+)\W*$")


def _ends_on_a_name(text: str) -> bool:
    """Whisper capitalizes names: a last word capitalized inside a sentence ("Under Garcia.",
    "The name is Olson.") is one. A name is a rare word by nature (-14.5 and -15.1 after the
    words before it), so the unlikely-last-word check, meant for the common word Whisper
    invents to finish a cut-off sentence ("What is the capital done?"), does not apply."""
    match = _LAST_WORD.search(text.strip())
    if match is None or match["before"] is None or match["before"][-1] in ".?!":
        return False
    word = match["word"]
    return word[0].isupper() and word != "I"


class Ending(NamedTuple):
    """How the words end, by a language model (readings.py ``ReadingScorer.ending``)."""

    sentence_end: float  # probability that a sentence ends after them
    last_word: float  # natural log-probability of the last word after the words before it


@dataclass(frozen=True)
class Verdict:
    wait_ms: int  # trailing silence the turn needs before it ends
    # "complete", "words complete", "sign-off", "unfinished words", "unfinished reading",
    # "unfinished sentence", "unlikely last word", "turn model: not finished", "greeting",
    # "asks to wait", "unsure", "fallback"
    reason: str
    probability: float | None = None  # the turn model's, when it answered

    @property
    def complete(self) -> bool:
        return self.reason in ("complete", "words complete")


@dataclass(frozen=True)
class EndOfTurnPolicy:
    commit_ms: int = 200
    max_ms: int = 1600
    fallback_ms: int = 500
    complete_from: float = 0.5  # turn model's probability of "complete" that counts as done
    unfinished_below: float = 0.03  # and below which the speaker is surely not done
    sentence_end_below: float = 0.005  # a language model's chance of a sentence end
    last_word_below: float = -14.0  # and its log-probability of the last word: invented?
    words_complete_from: float = 0.2  # a sentence end this likely settles an unsure voice

    def words_wait(self, transcript: str, alternatives: Sequence[str] = (),
                   probability: float | None = None) -> Verdict | None:
        """The longest wait when the words alone say the speaker goes on (the transcript or
        a nearly as likely reading is unfinished); None when the words leave it open."""
        if unfinished(transcript):
            return Verdict(self.max_ms, "unfinished words", probability)
        if any(unfinished(text) for text in alternatives
               if not _goes_on_after_a_sign_off(transcript, text)):
            return Verdict(self.max_ms, "unfinished reading", probability)
        return None

    def judge(self, probability: float | None, transcript: str | None,
              alternatives: Sequence[str] = (), ending: Ending | None = None) -> Verdict:
        """``probability``: the turn model's (None: off or failed); ``transcript``: the words
        so far (None: speech to text failed); ``alternatives``: other readings of them nearly
        as likely (stt.Hearing); ``ending``: a language model's view of how the words end
        (None: not asked)."""
        words = (transcript or "").strip()
        if not words:
            return Verdict(self.fallback_ms, "fallback", probability)
        if (waits := self.words_wait(words, alternatives, probability)) is not None:
            return waits
        if signs_off(words):
            return Verdict(self.commit_ms, "sign-off", probability)
        if only_asks_to_wait(words):  # and what they want, after the pause?
            return Verdict(self.max_ms, "asks to wait", probability)
        if (ending is not None and ending.sentence_end < self.sentence_end_below
                and not _one_word(words)):
            return Verdict(self.max_ms, "unfinished sentence", probability)
        if (ending is not None and ending.last_word < self.last_word_below
                and not _ends_on_a_name(words)):
            return Verdict(self.max_ms, "unlikely last word", probability)
        if probability is None:
            return Verdict(self.fallback_ms, "fallback", probability)
        if probability < self.unfinished_below:
            return Verdict(self.max_ms, "turn model: not finished", probability)
        if only_a_greeting(words):
            return Verdict(self.fallback_ms, "greeting", probability)  # and what they want?
        if probability >= self.complete_from:
            return Verdict(self.commit_ms, "complete", probability)
        if ending is not None and ending.sentence_end >= self.words_complete_from:
            # a finished sentence the voice doubts (over WebRTC in our Piper voice: "Why is
            # the sky blue?" 0.44, "What is 2 plus 2?" 0.48, words 0.63 and 0.28): the words
            # settle it (docs/turn-taking.md)
            return Verdict(self.commit_ms, "words complete", probability)
        return Verdict(self.fallback_ms, "unsure", probability)
