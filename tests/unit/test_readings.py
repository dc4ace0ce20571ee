"""Whisper's readings rescored by a small language model (pipeline/readings.py)."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.pipeline.end_of_turn import EndOfTurnPolicy
from voice_server.pipeline.readings import (
    SAID_BEFORE_WORDS,
    ReadingScorer,
    _recent,
    competing,
    pick,
    said,
)
from voice_server.pipeline.stt import default_rescore_model

# (reading, Whisper's length-normalized log-probability): the readings and the gaps between them
# that Whisper tiny.en gave for our Piper voice asking these questions (bench/quality.py)
LEAP = [("How many days are in a leap here?", -0.21), ("How many days are in a leap year?", -0.34),
        ("how many days are in a leap here?", -0.43)]
SHEEP = [("What do you call a baby sheet?", -0.18), ("What do you call a baby sheet? What do",
                                                     -0.28),
         ("What do you call a baby sheep?", -0.34)]
PARIS = [("What is the capital of France?", -0.10), ("What is the capital of Francis?", -0.25)]


def test_the_audio_decides_unless_the_readings_nearly_tie():
    lm = {"a": -9.0, "b": -1.0}.__getitem__
    assert pick([("a", -0.1), ("b", -0.2)], lm, weight=0.2, margin=0.2) == 1
    assert pick([("a", -0.1), ("b", -0.5)], lm, weight=0.2, margin=0.2) == 0  # too far behind
    assert pick([("a", -0.1), ("b", -0.2)], lm, weight=0.0, margin=0.2) == 0  # off
    assert pick([("a", -0.1)], lm, weight=0.2, margin=0.2) == 0
    assert pick([("a", -0.1), ("", -0.1)], lm, weight=0.2, margin=0.2) == 0  # no words


def test_the_model_runs_only_when_different_words_compete():
    asked: list[str] = []

    def lm(text: str) -> float:
        asked.append(text)
        return 0.0

    same = [("Why is the sky blue?", -0.1), ("why is the sky blue", -0.15),
            ("Why is the sky blue.", -0.2)]
    assert pick(same, lm, weight=0.2, margin=0.2) == 0 and asked == []
    assert pick([*same, ("Why is this guy blue?", -0.35)], lm, weight=0.2, margin=0.2) == 0
    assert asked == []  # the other words are too far behind
    pick([*same[:2], ("Why is this guy blue?", -0.2)], lm, weight=0.2, margin=0.2)
    assert asked == ["Why is the sky blue?", "Why is this guy blue?"]


@pytest.mark.parametrize(("one", "other"), [
    ("A table for two people at 7.30 in the evening, please.",
     "A table for 2 people at seven thirty in the evening, please."),
    ("at 730", "at 7:30"), ("at seven twenty five", "at 7.25"),
    ("at 8 o'clock", "at eight o'clock"),
    ("My account number is 8 7 6 5", "My account number is 8765."),
    ("twenty", "20"), ("for ten people", "for 10 people"),
])
def test_numbers_written_differently_are_the_same_words(one, other):
    assert said(one) == said(other)


@pytest.mark.parametrize(("one", "other"), [
    ("A table for two people", "A table for four people"), ("at 7.30", "at 7.13"),
    ("twenty five", "twenty"), ("table for", "table four"), ("at 8 o'clock", "at 18 o'clock"),
])
def test_different_numbers_are_not(one, other):
    assert said(one) != said(other)


def test_readings_that_differ_only_in_a_number_s_spelling_do_not_compete():
    """Whisper's five readings of our Piper voice's "A table for two people at seven thirty in
    the evening, please." (bench/playbook_voice.py): the model ran on all of them, 300-600 ms
    on 2 cores, to choose a spelling."""
    times = [("A table for two people at 7.30 in the evening, please.", -0.2),
             ("A table for two people at 730 in the evening, please.", -0.25),
             ("A table for two people at seven thirty in the evening, please.", -0.28),
             ("A table for 2 people at 7.30 in the evening, please.", -0.3),
             ("A table for two people at 7:30 in the evening, please.", -0.31)]
    assert competing(times, 0.2) == []
    other = ("A table for two people at 7.13 in the evening.", -0.3)
    # then every spelling ("7.30", "730" and "7:30" are one: the same letters, other
    # punctuation)
    assert competing([*times, other], 0.2) == [0, 2, 3, 5]


def test_readings_that_differ_only_in_hyphens_spaces_or_case_are_one():
    """Whisper's readings of our Piper voice: the language model took 90-140 ms to choose
    between "Wi-Fi" and "wifi", "email" and "e-mail", "check-up" and "checkup"."""
    wifi = [("Hi, my Wi-Fi is really slow.", -0.18), ("Hi. My Wi-Fi is really slow.", -0.31),
            ("Hi, my wifi is really slow.", -0.32), ("Hi, my WiFi is really slow.", -0.34),
            ("Hi, my Wi-Fi is really slow", -0.41)]
    assert competing(wifi, 0.2) == []
    mail = [("Can you reset my email password?", -0.07),
            ("Can you reset my e-mail password?", -0.26)]
    assert competing(mail, 0.2) == []
    checkup = [("I'd like to check in for a checkup.", -0.15),
               ("I'd like to check in for a check-up.", -0.21),
               ("I'd like to check-in for a check-up", -0.3),
               ("I'd like to check in for a check up.", -0.32),
               ("I'd like to check in for a checkup. I", -0.32)]
    assert competing(checkup, 0.2) == [0, 4]  # Whisper's spelling, against a word more
    router = [("My Wi-Fi router is blinking red.", -0.21), ("My wife I router is blinking red.",
                                                           -0.3),
              ("My wifi router is blinking red.", -0.34)]
    assert competing(router, 0.2) == [0, 1]  # different words still compete


def test_a_reading_that_leaves_out_words_does_not_compete_with_the_whole():
    """Whisper tiny.en's readings of one of 40 dithered espeak-ng renditions of "Seven in the
    evening, please. My name is Peter.": the language model preferred the half, "My name is
    Peter." (fewer words, fewer unlikely tokens), and the booking lost its time. Between a
    reading and one with two words or more left out or added, the audio decides; one word
    ("What is the capital?" against "What is the capital of?") still competes."""
    peter = [("7 in the evening, please, my name is Peter", -0.70), ("My name is Peter.", -0.73),
             ("7 in the evening, please. My name is Peter", -0.78), ("My name is Peter.", -1.0),
             ("7 in the evening, please.", -1.06)]
    assert competing(peter, 0.2) == []
    assert pick(peter, lambda text: 0.0 if text == "My name is Peter." else -9.0,
                weight=0.2, margin=0.2) == 0
    half_first = [("My name is Peter.", -0.70), ("Seven in the evening. My name is Peter.", -0.72)]
    assert competing(half_first, 0.2) == []  # nor the other way round: the audio's best stays
    thanks = [("What is the capital of France?", -0.3), ("What is the capital of friends?", -0.35),
              ("What is the capital of France? Thank you.", -0.4)]
    assert competing(thanks, 0.2) == [0, 1]  # words added at the end do not compete either
    one_word = [("What is the capital?", -0.3), ("What is the capital of?", -0.35)]
    assert competing(one_word, 0.2) == [0, 1]


@pytest.mark.slow
def test_the_bundled_model_prefers_the_sentence_people_say():
    scorer = ReadingScorer(default_rescore_model())
    try:
        assert "leap year" in LEAP[pick(LEAP, scorer, weight=0.2, margin=0.2)][0]
        assert SHEEP[pick(SHEEP, scorer, weight=0.2, margin=0.2)][0].endswith("baby sheep?")
        assert pick(PARIS, scorer, weight=0.2, margin=0.2) == 0  # a clear best stays
        assert scorer("What is the capital of France?") > scorer("What is the capital done?")
        # the first word is scored too: SmolLM2 adds no BOS of its own
        assert scorer("A table for four people at 8 o'clock tonight, please.") > \
            scorer("I table for four people at 8 o'clock tonight, please.")
    finally:
        scorer.close()


@pytest.mark.slow
def test_scores_are_the_same_from_any_thread_and_after_any_text():
    """The worker calls from several threads at once (a lock keeps llama.cpp to one), and a
    text scored after another that shares its start reuses that start: same figures."""
    from concurrent.futures import ThreadPoolExecutor

    scorer = ReadingScorer(default_rescore_model(), threads=2)
    try:
        texts = [text for text, _ in LEAP + SHEEP + PARIS]
        alone = []
        for text in texts:
            scorer("Something else entirely.")
            alone.append(scorer(text))
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(scorer, texts * 4))
        assert together == pytest.approx(alone * 4, abs=1e-3)
    finally:
        scorer.close()


@pytest.mark.slow
def test_the_bundled_model_tells_a_finished_sentence_from_one_that_goes_on():
    """A sentence end after words the model would go on with is unlikely, whatever
    punctuation speech to text wrote after them (end_of_turn.py: "unfinished sentence"); a
    last word invented for a cut-off sentence is unlikely after the others ("unlikely last
    word"). Thresholds: config end_of_turn_sentence_end_below and _last_word_below."""
    scorer = ReadingScorer(default_rescore_model())
    below, unlikely = 0.005, -14.0
    try:
        for cut, whole in [("Who painted the Mona?", "Who painted the Mona Lisa?"),
                           ("What is the largest planet in our solar?",
                            "What is the largest planet in our solar system?"),
                           ("What is five plus?", "What is five plus five?"),
                           ("How many players are on a soccer", "How many players are on a "
                                                                 "soccer team?")]:
            assert scorer.ending(cut).sentence_end < below, cut
            assert scorer.ending(whole).sentence_end > below, whole
        assert scorer.ending("What is the capital done?").last_word < unlikely
        for said in ("Hello.", "Yes.", "Why is the sky blue?", "What is 2 plus 2?",
                     "What is the capital of France?", "What animal says moo?"):
            ending = scorer.ending(said)
            assert ending.sentence_end > 10 * below and ending.last_word > unlikely, said
        assert scorer.ending(" ?! ") == (0.0, 0.0)
        assert scorer.ending("Hello").last_word == 0.0  # one word: nothing to judge it by
        rambling = "and then we went to the shop " * 60  # more tokens than the model reads
        assert scorer.ending(rambling) == (1.0, 0.0)
        assert scorer(rambling) < 0
    finally:
        scorer.close()


@pytest.mark.slow
def test_a_reply_is_judged_as_a_reply_to_what_the_agent_said():
    """Short answers to the booking playbook's questions end a sentence once the question
    comes before them (alone, "Two people." and "At seven." were below the 0.005 threshold:
    a 1.6 s wait for every answer); fragments after the same questions stay far below, and a
    first question is judged after an opening line ("Who wrote Romeo and Juliet?": 0.003
    alone, 0.58 after it)."""
    scorer = ReadingScorer(default_rescore_model())
    below = 0.005
    people, when = "For how many people?", "At what time would you like the table?"
    try:
        assert scorer.ending("Two people.").sentence_end < below  # what it was
        assert scorer.ending("Two people.", people).sentence_end > below
        assert scorer.ending("At seven.", when).sentence_end > below
        assert scorer.ending("Who wrote Romeo and Juliet?").sentence_end > 0.1
        for before, cut in [(people, "There will be"), (when, "Around"),
                            ("And what name shall I put the booking under?", "It's under"),
                            ("Good evening, Luigi's. How can I help you?",
                             "Who painted the Mona")]:
            assert scorer.ending(cut, before).sentence_end < below, cut
        long_answer = "Paris is the capital of France, on the Seine. " * 20
        assert scorer.ending("And Germany?", long_answer).sentence_end > below
    finally:
        scorer.close()


@pytest.mark.slow
def test_bare_numbers_and_names_end_a_reply_and_fragments_still_wait():
    """With the bundled model's own figures: "Seven." (a sentence end 0.0025 after the time
    question) and names ("Under Garcia.": its last word -14.5) waited 1.6 s in the booking
    playbook; the fragments after the same questions still wait."""
    scorer = ReadingScorer(default_rescore_model())
    policy = EndOfTurnPolicy()
    when, name = "What time would you like the table?", "And what name shall I put it under?"
    try:
        for before, reply in [(when, "Seven."), (name, "Under Garcia."),
                              (name, "The name is Olson.")]:
            assert policy.judge(0.9, reply, (), scorer.ending(reply, before)).complete, reply
        for before, cut in [(when, "Half past"), (name, "It's under the name of"),
                            (name, "My name is"), ("", "Who painted the Mona")]:
            verdict = policy.judge(0.9, cut, (), scorer.ending(cut, before))
            assert verdict.wait_ms == policy.max_ms, cut
    finally:
        scorer.close()


@pytest.mark.slow
def test_the_ending_figures_are_the_models_own():
    """``ending`` reads only the last rows of the model's output, on one thread; its figures
    are those of the whole output read directly from llama.cpp."""
    from llama_cpp import Llama

    scorer = ReadingScorer(default_rescore_model(), threads=2)
    model = Llama(str(default_rescore_model()), n_ctx=256, logits_all=True, verbose=False)
    said, words = "For how many people?", "Two people"
    try:
        got = scorer.ending(words + ".", said)
        tokens = scorer._tokens(words, said)
        head = scorer._tokens("Two", said)
        model.eval(tokens)
        logits = np.asarray(model.scores[:len(tokens)], dtype=np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        ends = [model.tokenize(mark.encode(), add_bos=False)[0] for mark in "?.!"]
        assert got.sentence_end == pytest.approx(np.exp(log_probs[-1, ends]).sum(), rel=1e-3)
        last = sum(log_probs[i - 1, tokens[i]] for i in range(len(head), len(tokens)))
        assert got.last_word == pytest.approx(last, abs=1e-3)
    finally:
        scorer.close()
        model.close()


def test_only_the_contexts_asked_for_are_made():
    """Each llama.cpp context holds ~116 MB: a scorer for endings alone (rescoring off) or
    for rescoring alone (endings off: another language) makes only its own."""
    judge = ReadingScorer(default_rescore_model(), rescoring=False)
    rescorer = ReadingScorer(default_rescore_model(), endings=False)
    try:
        assert list(judge._contexts) == ["endings"]
        assert judge.ending("Who painted the Mona").sentence_end < 0.005
        assert list(rescorer._contexts) == ["rescoring"]
        assert rescorer("What is the capital of France?") > rescorer("What is the capital done?")
    finally:
        judge.close()
        rescorer.close()


@pytest.mark.slow
def test_a_prepared_judge_reads_only_the_users_words():
    """``prepare`` (called while the user speaks) reads the framing and the agent's words, so
    the judgement at the pause evaluates the user's words alone, with the same figures, even
    when readings were rescored in between (they evicted the framing once: ~145 ms, not ~40)."""
    scorer = ReadingScorer(default_rescore_model())
    said, words = "Would you like a table inside or outside?", "Outside, please."
    try:
        cold = scorer.ending(words, said)
        scorer("Something else entirely.")  # the next call shares nothing with the last
        scorer.prepare(said)
        scorer("Outside please.")  # rescoring readings meanwhile does not evict the framing
        evaluated: list[int] = []
        eval_tokens = scorer._judge.llm.eval
        scorer._judge.llm.eval = lambda tokens: (evaluated.append(len(tokens)), eval_tokens(tokens))
        warm = scorer.ending(words, said)
        unpunctuated = scorer._tokens("Outside, please", said)  # ending drops the final "."
        assert evaluated == [len(unpunctuated) - len(scorer._tokens("", said))]
        assert warm.sentence_end == pytest.approx(cold.sentence_end, rel=0.05)
        assert warm.last_word == pytest.approx(cold.last_word, abs=0.2)
    finally:
        scorer.close()


@pytest.mark.slow
def test_an_interim_transcript_s_words_are_read_ahead_but_its_last():
    """``prepare`` with an interim transcript's words reads all but its last word (the final
    transcript may hear it otherwise): the judgement at the pause evaluates only the words
    after them, with the same figures (~50 ms instead of ~145 for a 12-word booking line)."""
    scorer = ReadingScorer(default_rescore_model())
    said = "For how many people, and at what time?"
    final = "A table for two people at 7.30 in the evening, please."
    try:
        cold = scorer.ending(final, said)
        scorer.prepare(said, "A table for two people at seven")
        evaluated: list[int] = []
        eval_tokens = scorer._judge.llm.eval
        scorer._judge.llm.eval = lambda tokens: (evaluated.append(len(tokens)), eval_tokens(tokens))
        warm = scorer.ending(final, said)
        whole = scorer._tokens("A table for two people at 7.30 in the evening, please", said)
        read_ahead = scorer._tokens("A table for two people at", said)
        assert whole[:len(read_ahead)] == read_ahead
        assert evaluated == [len(whole) - len(read_ahead)]
        assert warm.sentence_end == pytest.approx(cold.sentence_end, rel=0.05)
        assert warm.last_word == pytest.approx(cold.last_word, abs=0.2)
    finally:
        scorer.close()


def test_what_the_agent_said_is_cut_to_its_last_sentences():
    said = ("Paris is the capital of France, on the Seine. Would you like to know more? "
            "Or shall we talk about Berlin?")  # 17 words: the last two sentences are 11
    assert SAID_BEFORE_WORDS == 12
    assert _recent(said) == "Would you like to know more? Or shall we talk about Berlin?"
    assert _recent("For how many people?") == "For how many people?"
    assert _recent("  ") == ""
    assert _recent("word " * 50) == " ".join(["word"] * SAID_BEFORE_WORDS)


@pytest.mark.slow
async def test_the_speech_to_text_worker_judges_endings_only_when_asked():
    from voice_server.compute import ComputePool
    from voice_server.config import load_settings
    from voice_server.pipeline.stt import Hearing, WhisperSTT

    async with ComputePool(1) as pool:
        plain = WhisperSTT(pool, rescore_weight=0)
        assert await plain.ending("Who painted the Mona") is None  # no worker trip
        off = load_settings(end_of_turn_sentence_end_below=0, end_of_turn_last_word_below=-1000,
                            end_of_turn_words_complete_from=1)
        assert await WhisperSTT.from_settings(pool, off).ending("Who painted the Mona") is None
        german = load_settings(stt_language="de")
        assert await WhisperSTT.from_settings(pool, german).ending("Wer malte die Mona") is None
        # nor does the English model rescore German readings that nearly tie
        tie = Hearing("Wer malte die Mona Lisa?", (("Wer malte die Mona Lisa?", -0.10),
                                                   ("Wer malt die Mona Lisa?", -0.11)))
        for settings, trips in ((german, []), (load_settings(), ["choose"])):
            stt, asked = WhisperSTT.from_settings(pool, settings), []

            async def recorded(method, *args, urgent, asked=asked):
                asked.append(method)
                return tie.text

            stt._models.call = recorded
            assert await stt.choose(tie) == tie.text
            assert asked == trips
        # the last-word judge alone still needs the model
        one_judge = load_settings(stt_rescore_weight=0, end_of_turn_sentence_end_below=0)
        stt = WhisperSTT.from_settings(pool, one_judge)
        await stt.load()
        try:
            assert (await stt.ending("Who painted the Mona")).sentence_end < 0.005
            assert (await stt.ending("Who painted the Mona Lisa?")).sentence_end > 0.05
        finally:
            await stt.aclose()


@pytest.mark.slow
async def test_the_speech_to_text_worker_chooses_only_when_words_compete():
    """``hear`` gives what the audio says (the end of turn is judged on it at once); ``choose``
    asks the worker's language model only when different words nearly tie."""
    from voice_server.compute import ComputePool
    from voice_server.pipeline.stt import Hearing, WhisperSTT

    async with ComputePool(1) as pool:
        stt = WhisperSTT(pool, rescore_weight=0.2)
        await stt.load()
        try:
            leap = Hearing(LEAP[0][0], tuple(LEAP))
            assert "leap year" in await stt.choose(leap)
            same = Hearing("Why is the sky blue?", (("Why is the sky blue?", -0.1),
                                                    ("why is the sky blue", -0.2)))
            asked: list[str] = []
            call = stt._models.call

            async def recorded(method, *args, urgent):
                asked.append(method)
                return await call(method, *args, urgent=urgent)

            stt._models.call = recorded
            assert await stt.choose(same) == "Why is the sky blue?"
            assert "leap year" in await stt.choose(leap)
            assert asked == ["choose"]  # only the tie went to the worker
        finally:
            await stt.aclose()


def test_the_alternatives_are_the_other_readings_within_the_margin():
    from voice_server.pipeline.stt import ALTERNATIVE_MARGIN, Hearing

    heard = Hearing("a", (("a", -0.1), ("b", -0.2), ("b", -0.22), ("a", -0.25),
                          ("c", -0.1 - ALTERNATIVE_MARGIN - 0.01)))
    assert heard.alternatives == ("b",)
    assert Hearing("a").alternatives == ()
