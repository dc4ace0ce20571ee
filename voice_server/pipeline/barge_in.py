"""What the words of speech over the agent mean: an acknowledgement ("mm-hmm, yeah"), no
words at all (speech to text's stock inventions for faint sound), or the agent's own words
coming back through the user's speaker. server/listening.py asks these before a barge-in
cancels the agent's turn."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

__all__ = ["HUM_PROMPT", "acknowledges", "is_backchannel", "is_echo", "no_words"]

# Whisper's previous-text prompt when it hears speech over the agent. Without it, tiny.en
# writes a hum as words ("Mm-hmm" -> "in a month.", "I'm Emma."; "Mhm" -> "and make them.";
# "Hmm" -> "Done."), which then cut the agent off. With it, 116 short clips (hums, "yeah",
# "okay", and 18 real interruptions from "Stop." and "Wait." to "Can you repeat that?", three
# Piper renditions and espeak-ng each) are told apart wrongly 3 times instead of 16: one
# "Mm-hmm" heard as a word, and "Mom." heard as a hum twice. Only this judgement is prompted:
# a real interruption's words are heard again, unprompted, as the next utterance.
HUM_PROMPT = "Mm-hmm."

_WORD = re.compile(r"[a-z']+")
# a hum as speech to text spells it: "M-M-M", "Mmm", "hmm", "mhm", "uhm" (one word however long),
# and with its nasal onset written as an "n": "Nm-hmm.", "N-m-m-hmm." (Piper's "Mm-hmm." in 5 of
# 24 hearings)
_HUM = re.compile(r"u*[mh]+|n+[mh]+[mhn]*")
_HUM_RUN = re.compile(r"\b[mhn]+(?:-[mhn]+)+\b")
_BACKCHANNEL = frozenset("""
mm hmm mhm mmhmm mm-hmm uh-huh uh huh um yeah yep yes yup ok okay right sure alright
i see got it cool great nice good wow oh ah aha true exactly totally indeed fine thanks
""".split())


# what Whisper writes for quiet sound with no words in it (a faint echo, breath, room noise)
_NO_WORDS = frozenset({"you", "thank you", "thanks", "thank you very much", "bye",
                       "thanks for watching", "so", "the", "i", "oh"})


def no_words(text: str) -> bool:
    """Nothing said: empty, or one of speech to text's stock inventions for faint sound."""
    return " ".join(_WORD.findall(text.lower())) in _NO_WORDS | {""}


# what Whisper writes for a hum's nasal onset before the hum itself ("In Mm-hmm.", "and mm")
_HUM_ONSET = frozenset({"in", "and", "an"})


def is_backchannel(text: str) -> bool:
    """Words that acknowledge without taking the turn: "mm-hmm", "yeah, right", "okay"."""
    text = _HUM_RUN.sub(lambda hum: hum.group(0).replace("-", ""), text.lower())
    words = _WORD.findall(text.replace("-", " "))
    if len(words) > 1 and words[0] in _HUM_ONSET and all(_HUM.fullmatch(w) for w in words[1:]):
        return True
    return len(words) <= 4 and all(w in _BACKCHANNEL or _HUM.fullmatch(w) for w in words)


def acknowledges(text: str, alternatives: Sequence[str] = ()) -> bool:
    """Speech over the agent that does not take the turn: no words, or an acknowledgement in
    the words heard or in a reading nearly as likely (``stt.Hearing.alternatives``). Piper's
    "Hmm." heard "Damn." with "Mm-hmm." 0.08 behind, "Dum." with "Mm-hmm." 0.03 behind: of 48
    hums and acknowledgements 7 cut the agent off on the best reading alone, 3 with the
    others; of 96 short interruptions 2 more were taken for one ("Mom." heard "Ma. Ma.")."""
    return no_words(text) or is_backchannel(text) or any(map(is_backchannel, alternatives))


_DIGITS = dict(enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split()))


def _words(text: str) -> list[str]:
    words = re.findall(r"[a-z']+|\d+", text.lower())
    return [_DIGITS.get(int(w), w) if w.isdigit() else w for w in words]


def is_echo(text: str, agent_said: str) -> bool:
    """The agent's own words back through the user's speaker: most of what was heard is in
    what the agent is saying, or all of it but one word (speech to text of a cut fragment hears
    "fisherman" for "fishermen", "Salisbury" for "sells bread"; a close spelling matches too)."""
    words = _words(text)
    said = sorted(set(_words(agent_said)))
    if not words or not said:
        return False
    matched = sum(w in said or bool(difflib.get_close_matches(w, said, n=1, cutoff=0.75))
                  or any(s.startswith(w) for s in said if len(w) >= 3) for w in words)
    missed = len(words) - matched
    return matched >= 0.6 * len(words) or (len(words) >= 3 and missed <= 1) or \
        (len(words) >= 6 and missed <= 2)
