"""AnswerGuard: loops and monologues end, an empty answer becomes the spoken fallback."""

from __future__ import annotations

import pytest

from voice_server.pipeline.answer_guard import DEFAULT_FALLBACK, AnswerGuard


def stream(guard: AnswerGuard, text: str, size: int = 3) -> str:
    """Feed ``text`` in small deltas as a model streams it; return what was let through."""
    out = []
    for i in range(0, len(text), size):
        out.append(guard.admit(text[i:i + size]))
        if guard.stopped:
            break
    return "".join(out)


def test_a_normal_answer_passes_untouched():
    text = "Paris is the capital of France. It is known for the Eiffel Tower."
    guard = AnswerGuard()
    assert stream(guard, text) == text
    assert guard.stopped is None
    assert guard.fallback() is None
    assert guard.kept == text


def test_a_phrase_loop_is_cut_before_its_third_time():
    guard = AnswerGuard()
    said = stream(guard, "La femme de France la femme de France la femme de France la femme")
    assert guard.stopped == "loop"
    assert said.lower().count("la femme de france") == 2
    assert guard.kept == "La femme de France"


def test_a_repeated_sentence_is_not_said_twice():
    guard = AnswerGuard()
    said = stream(guard, "I am not sure about that. I am not sure about that. Sorry.")
    assert guard.stopped == "loop"
    assert said.count("I am not sure about that.") == 1
    assert guard.kept == "I am not sure about that."


def test_a_single_word_loop_stops():
    guard = AnswerGuard()
    said = stream(guard, "Yes yes yes yes yes yes yes", size=4)
    assert guard.stopped == "loop"
    assert said.lower().count("yes") <= 3
    assert guard.kept == "Yes"


def test_short_repeats_that_people_say_are_allowed():
    text = "Yes, yes, of course. Bye bye! It is very, very big."
    guard = AnswerGuard()
    assert stream(guard, text) == text
    assert guard.stopped is None


def test_a_long_answer_ends_at_the_sentence_after_the_cap():
    sentence = "This sentence is about forty characters. "
    guard = AnswerGuard(max_chars=100)
    said = stream(guard, "".join(f"Point {i}: {sentence}" for i in range(20)), size=5)
    assert guard.stopped == "length"
    assert 100 <= len(said) <= 160
    assert said.rstrip().endswith(".")


def test_an_empty_answer_gets_the_fallback():
    for text in ("", "   ", "\n", " ... "):
        guard = AnswerGuard()
        stream(guard, text)
        assert guard.fallback() == DEFAULT_FALLBACK
    guard = AnswerGuard(fallback="Pardon?")
    assert guard.fallback() == "Pardon?"


def test_history_window_keeps_the_newest_within_its_budget():
    from voice_server.pipeline.turn import HistoryWindow, llm_messages

    history = []
    for i in range(50):
        history += [{"role": "user", "content": f"question {i} " + "x" * 500},
                    {"role": "assistant", "content": f"answer {i}", "interrupted": True},
                    {"role": "tool", "content": "r" * 300, "tool_call_id": f"c{i}"}]
    sent = llm_messages(history, HistoryWindow(messages=40, chars=4000))
    assert sum(len(m["content"]) for m in sent) <= 4000
    assert sent[-1]["content"] == history[-1]["content"]
    assert sent[0]["role"] != "tool"
    assert all("interrupted" not in m for m in sent)
    assert len(llm_messages(history, HistoryWindow(messages=6, chars=100_000))) == 6


@pytest.mark.parametrize(("window", "chars_each"), [
    ((40, 16_000), 60),  # short spoken turns: the message count binds
    ((40, 4_000), 150),  # longer ones: the characters bind
])
def test_the_history_sent_keeps_its_start_for_turns_on_end(window, chars_each):
    """Dropping the oldest turn each turn made every prompt differ from the one before from
    its second message on: the embedded model read the whole history again for each answer
    from the 22nd turn (first token 5.5 s instead of 0.3 s). The start now moves half a
    window at a time."""
    from voice_server.pipeline.turn import HistoryWindow, llm_messages

    budget = HistoryWindow(*window)
    history: list[dict] = []
    sent: list[list[dict]] = []
    for i in range(100):
        sent.append(llm_messages(history, budget))
        history += [{"role": "user", "content": f"q{i} " + "x" * chars_each},
                    {"role": "assistant", "content": f"a{i} " + "y" * chars_each}]
    moved = [i for i in range(1, 100) if sent[i][:len(sent[i - 1])] != sent[i - 1]]
    assert len(moved) >= 4
    assert min(b - a for a, b in zip(moved, moved[1:], strict=False)) >= 5, moved  # held
    for prompt in sent:
        assert len(prompt) <= budget.messages
        assert sum(len(m["content"]) for m in prompt) <= budget.chars
        assert not prompt or prompt[0]["role"] == "user"
    for i in moved:  # about half the window is still sent after a move
        size = sum(len(m["content"]) for m in sent[i])
        assert len(sent[i]) >= budget.messages // 2 - 2 or size >= budget.chars // 2 - 400


def test_a_message_longer_than_the_window_is_left_out():
    from voice_server.pipeline.turn import HistoryWindow, llm_messages

    budget = HistoryWindow(messages=40, chars=3_000)
    history = [{"role": "user", "content": "m0 " + "z" * 5_000},
               {"role": "assistant", "content": "m1"}, {"role": "user", "content": "m2"},
               {"role": "assistant", "content": "m3"}]
    assert [m["content"] for m in llm_messages(history, budget)] == ["m2", "m3"]
    history.append({"role": "user", "content": "m4 " + "z" * 5_000})
    assert llm_messages(history, budget) == []


def test_a_loop_s_start_that_no_piece_has_said_yet_is_dropped_and_the_rest_said():
    """Nothing was cut into a piece before the loop ("There are 7,987,987,987..."; a number
    never ends an early piece): the words before the loop are still said, the loop is not."""
    from voice_server.pipeline.chunker import SentenceChunker

    guard, chunker = AnswerGuard(), SentenceChunker()
    pieces: list[str] = []
    text = "There are 7,987,987,987,987,987,987,987,987,987"
    for i in range(0, len(text), 3):
        if delta := guard.admit(text[i:i + 3]):
            pieces += chunker.feed(delta)
        if guard.stopped:
            break
    assert guard.stopped == "loop" and pieces == [] and guard.kept == "There are 7,987,"
    assert guard.repeated == len("987,987,")
    chunker.drop(guard.repeated)
    assert chunker.flush() == "There are 7,987,"
    chunker.feed("Paris.")
    chunker.drop(100)  # more than it holds: nothing is left
    assert chunker.flush() is None
    assert AnswerGuard().repeated == 0
