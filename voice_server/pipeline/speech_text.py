"""The words of an answer's piece as a voice should say them.

Models write for a screen: markdown (``**Paris**``, ``- item``, ``### Summary``, backticks,
links), emoji and pictographs. Piper reads every mark it is given: ``**Paris** is the capital``
is heard as "asterisk, asterisk, asterisk, asterisk is the capital", "✓" as "simple two seven
one three", "😊" as "smiling face with smiling eyes", a URL from "https colon slash slash".
The bundled model writes plain sentences; a model of the user's own (an OpenAI-compatible
endpoint, ``--llm-model-path``) often does not.

``speech_text`` is applied to each piece just before synthesis; the text the client is sent,
the history and what a barge-in keeps are the model's own words. A piece is a fragment of the
answer (the chunker cuts it at a sentence, a clause or a line), so no rule needs both halves
of a pair: a ``**`` that opens in one piece and closes in the next is dropped in each.
"""

from __future__ import annotations

import re

__all__ = ["speech_text"]

_FENCE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)  # a code fence line, with its language
_LINE_MARK = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-*+•][ \t]+)", re.MULTILINE)
_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\s]*\)")  # [text](url) and ![alt](src) -> the text
_SCHEME = re.compile(r"\bhttps?://(?:www\.)?", re.IGNORECASE)
_TIMES = re.compile(r"(?<=\d)[ \t]*[*×][ \t]*(?=\d)")  # 3 * 4, 3×4
_STRUCK = re.compile(r"~~[^~\n]*~~")  # struck-out words are not said
_EMPHASIS = re.compile(r"\*+|~~|`+")  # * ** ~~ and backticks; an underscore becomes a space
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$",
                         re.MULTILINE)
_CELL_BAR = re.compile(r"[ \t]*\|[ \t]*")
_ARROW = re.compile(r"[ \t]*(?:→|⇒|->|=>)[ \t]*")
# emoji and pictographs, dingbats (✓ ✨ ❤), stars and arrows (⭐ ⬆), the joiners and variation
# selectors that build emoji sequences, keycaps and flag tags; ° € © stay (Piper says them)
_PICTOGRAPH = re.compile(
    "[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2190-\u21FF\uFE00-\uFE0F\u200D\u20E3"
    "\U000E0020-\U000E007F]+")
_SPACES = re.compile(r"[ \t]{2,}")
_SPACE_BEFORE_MARK = re.compile(r"[ \t]+([,.!?;:])")


def speech_text(text: str) -> str:
    """``text`` without the marks a voice should not read aloud (module docstring)."""
    text = _FENCE.sub("", text)
    text = _TABLE_RULE.sub("", text)
    text = _LINE_MARK.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _SCHEME.sub("", text)
    text = _TIMES.sub(" times ", text)
    # _Paris_, __init__ and book_table alike: an underscore is a space
    text = _EMPHASIS.sub("", _STRUCK.sub("", text)).replace("_", " ")
    text = _ARROW.sub(" to ", text)
    text = _PICTOGRAPH.sub(" ", text)
    if "|" in text:  # a table row: its cells as a list
        text = _CELL_BAR.sub(", ", text).strip(", ")
    text = _SPACE_BEFORE_MARK.sub(r"\1", _SPACES.sub(" ", text))
    return text.strip()
