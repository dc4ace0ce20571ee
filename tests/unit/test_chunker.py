"""Sentence chunking of streamed LLM text."""

from __future__ import annotations

import pytest

from voice_server.pipeline.chunker import SentenceChunker


def stream(text: str, step: int = 3, **options: int) -> list[str]:
    chunker = SentenceChunker(**options)
    out = []
    for i in range(0, len(text), step):
        out += chunker.feed(text[i:i + step])
    if (rest := chunker.flush()) is not None:
        out.append(rest)
    return out


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_sentences_split_whatever_the_token_size(step):
    """Sentence boundaries do not depend on how the stream was cut."""
    text = "Paris is the capital. It has 2.1 million people! Isn't that nice? Yes"
    assert stream(text, step) == ["Paris is the capital.", "It has 2.1 million people!",
                                  "Isn't that nice?", "Yes"]


def test_abbreviations_do_not_split():
    """'Dr.' and 'e.g.' are not sentence ends."""
    assert stream("Ask Dr. Smith, e.g. tomorrow. Thanks.", 1000) == \
        ["Ask Dr. Smith, e.g. tomorrow.", "Thanks."]


def test_first_piece_may_end_at_a_clause():
    """A long first clause is spoken early; later pieces wait for sentence ends."""
    out = stream("Well, the answer to your question, my friend, is simple, really. Next, a b.", 1)
    assert out[0] == "Well, the answer to your question,"
    assert out[1:] == ["my friend, is simple, really.", "Next, a b."]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_list_number_stays_with_its_item(step):
    """A markdown list's "1." opens its item rather than ending a sentence of its own (Piper
    said "One." and paused); a number ending a sentence still ends it."""
    text = "Three ideas:\n\n1. Visit the tower.\n2. See the Louvre.\nThere are 2. Go"
    assert stream(text, step) == ["Three ideas:", "1. Visit the tower.", "2. See the Louvre.",
                                  "There are 2.", "Go"]


def test_unspeakable_pieces_are_dropped():
    """Punctuation-only fragments never reach TTS."""
    assert stream("... !!! ok.", 1000) == ["ok."]
    assert stream("", 1) == []


def test_runaway_text_is_cut():
    """Text without punctuation is cut at a space before the limit."""
    out = stream("word " * 100, 7)
    assert all(len(p) <= 120 for p in out) and len(out) >= 4
    assert " ".join(out).split() == ["word"] * 100


LONG = ("Sure. The sky looks blue because the air scatters blue sunlight much more strongly "
        "than the longer red light, so blue light reaches your eyes from every direction you "
        "look, day after day. Yes.")


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_sentence_longer_than_the_cap_is_cut_at_its_last_clause(step):
    """Piper's memory grows with the longest piece, so no piece passes ``max_chars``: a long
    sentence ends at its last comma within the limit, and nothing is lost."""
    out = stream(LONG, step)
    assert out == ["Sure.", "The sky looks blue because the air scatters blue sunlight much "
                   "more strongly than the longer red light,",
                   "so blue light reaches your eyes from every direction you look, day after day.",
                   "Yes."]
    assert all(len(piece) <= 120 for piece in out)
    assert stream(LONG, step, max_chars=240)[1].endswith("day after day.")


@pytest.mark.parametrize("step", [1, 1000])
def test_without_a_late_enough_clause_the_cut_is_at_the_last_space(step):
    """A comma in the first third of the limit would leave most of the text in the next
    piece; the cut is then at the last space within the limit."""
    text = "Well, " + "many small words here " * 8 + "end. Ok."
    out = stream(text, step, first_max_words=0, max_chars=60)
    assert all(len(piece) <= 60 for piece in out)
    assert out[0].startswith("Well, many") and len(out[0]) > 50
    assert " ".join(out).split() == text.split()


@pytest.mark.parametrize("max_chars", [20, 40, 120])
def test_no_piece_passes_the_cap_whatever_the_text(max_chars):
    """Long words, numbers and clauses of any length: every piece within the cap, and the
    words all spoken in order."""
    text = ("Supercalifragilisticexpialidocious-and-more-words-without-spaces here, "
            "then 2,150,000 people; and a list: one, two, three — four. " * 3)
    for step in (1, 7, 1000):
        out = stream(text, step, max_chars=max_chars)
        assert all(len(piece) <= max_chars for piece in out), out
        assert "".join("".join(out).split()) == "".join(text.split())


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_a_long_first_sentence_is_cut_after_six_words(step):
    """Without punctuation in its first 6 words, the first piece ends at the next word
    boundary (speech starts sooner); the rest waits for the sentence end."""
    text = "The sky looks blue because the air scatters short blue waves of light. Yes."
    assert stream(text, step) == ["The sky looks blue because the",
                                  "air scatters short blue waves of light.", "Yes."]


@pytest.mark.parametrize("step", [1, 1000])
def test_the_server_default_pieces_of_two_then_eight_words(step):
    """The voice server cuts after ``tts_first_piece_words`` (2) and then after
    ``tts_second_piece_words`` (8): Piper starts on less text, and the second piece is ready
    before the first has played."""
    from voice_server.config import load_settings

    settings = load_settings()
    text = ("The sky looks blue because the air scatters the short blue waves of sunlight "
            "more than red. Yes.")
    assert stream(text, step, first_max_words=settings.tts_first_piece_words,
                  second_max_words=settings.tts_second_piece_words) == [
        "The sky", "looks blue because the air scatters the short",
        "blue waves of sunlight more than red.", "Yes."]


def test_a_late_clause_does_not_delay_the_first_piece():
    text = "The cat-like tweet is a type of tweet that uses a cat as a mascot, often. Ok."
    assert stream(text, 1000)[0] == "The cat-like tweet is a type"


def test_a_known_sentence_end_close_after_six_words_is_not_cut():
    assert stream("One two three four five six seven eight. Ok.", 1000) == [
        "One two three four five six seven eight.", "Ok."]


def test_the_first_piece_is_not_cut_after_a_number():
    out = stream("The moon is about 384400 kilometers or 238855 miles from us today. Ok.", 1)
    assert out[0] == "The moon is about 384400 kilometers"
    first = stream("It is 3 4 5 6 7 8 9 10 11 12 and more. Ok.", 1)[0]
    assert first == "It is 3 4 5 6 7 8 9 10 11 12 and"


def test_the_server_cuts_pieces_as_its_settings_say():
    """``tts_first_piece_words`` and ``tts_max_piece_chars`` reach every turn's chunker."""
    from voice_server.config import Settings
    from voice_server.server.app import VoiceServer

    server = VoiceServer(Settings(tts_first_piece_words=0, tts_max_piece_chars=40))
    chunker = server.new_chunker()
    pieces = chunker.feed("word " * 30)
    assert pieces and all(len(piece) <= 40 for piece in pieces)
    assert pieces[0] == " ".join(["word"] * 8)  # not cut after 4 words: the setting is 0


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_a_second_piece_may_end_early_too(step):
    """With ``second_max_words`` the piece after a short first one ends after that many words
    (no gap while a long sentence is written); the third waits for the sentence end."""
    text = "The sky is blue because the air scatters short blue waves of light far more " \
           "than the longer red ones do. Yes."
    assert stream(text, step, first_max_words=3, second_max_words=8) == [
        "The sky is", "blue because the air scatters short blue waves",
        "of light far more than the longer red ones do.", "Yes."]
    assert stream(text, step, first_max_words=3)[1].endswith("red ones do.")
