"""The quality benchmark's judge (bench/quality.py): whole-word answers, loops, language."""

from __future__ import annotations

from bench.quality import QUESTIONS, english, holds, judge, loops


def test_an_accepted_answer_counts_only_as_whole_words() -> None:
    assert holds("Paris is the capital of France.", ("paris",))
    assert not holds("A Parisian café.", ("paris",))
    assert holds("A spider has 8 legs.", ("eight", "8"))
    assert holds("There are twenty-four hours.", ("24", "twenty four"))
    assert holds("It is carbon dioxide, CO2.", ("carbon dioxide",))
    assert not holds("Neptune is the largest planet.", ("jupiter",))


def test_loops_and_other_languages_are_misses() -> None:
    looping = "La femme au martyre, la femme au martyre. La femme au martyre, la femme au."
    assert loops(looping) and judge(looping, ("paris",)) == "loops"
    assert not english("L'Étoile, la Marseillaise") and english("The sky is blue.")
    assert judge("La capitale est Paris.", ("paris",)) == "not English"
    assert judge("  ", ("paris",)) == "empty"
    assert judge("An elephant says moo.", ("cow",)) == "wrong"
    assert judge("A cow says moo.", ("cow", "cows")) is None


def test_fifty_questions_each_with_words_to_hear_and_answers() -> None:
    assert len(QUESTIONS) >= 50
    assert len({q for q, _, _ in QUESTIONS}) == len(QUESTIONS)
    for question, heard, accepted in QUESTIONS:
        assert heard and accepted, question
        assert set(heard) <= set(question.lower().replace("?", "").split()), question
