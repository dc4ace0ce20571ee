"""Short-window Whisper decoding (pipeline/stt.py): the loop cutter, and the same words as
faster-whisper's 30 s decoding on real speech."""

from __future__ import annotations

import re

import numpy as np
import pytest

from voice_server.compute import ComputePool
from voice_server.pipeline.audio import decode_wav, resample
from voice_server.pipeline.stt import WhisperSTT, cut_loop, cut_restart


def test_a_loop_back_to_the_start_is_cut() -> None:
    turn_on = [1210, 319, 262, 7588, 287, 262, 9592]
    assert cut_loop([*turn_on, *turn_on[:4]], hit_budget=False) == turn_on
    assert cut_loop([*turn_on, *turn_on, *turn_on], hit_budget=False) == turn_on


def test_short_repeats_and_normal_text_are_kept() -> None:
    assert cut_loop([5, 6, 5, 6], hit_budget=False) == [5, 6, 5, 6]  # "thank you thank you"
    text = [1, 2, 3, 4, 5, 6, 7, 8]
    assert cut_loop(text, hit_budget=False) == text
    assert cut_loop(text, hit_budget=True) == text


def test_a_mid_text_loop_is_cut_only_when_the_budget_ran_out() -> None:
    tokens = [9, 8, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert cut_loop(tokens, hit_budget=False) == tokens
    assert cut_loop(tokens, hit_budget=True) == [9, 8, 1, 2, 3, 4]


def test_a_short_restart_after_a_finished_sentence_is_cut() -> None:
    """Whisper's "... the sea. Tell me" when the audio ends soon after the voice, and a whole
    question heard twice; a restart of one word, another sentence, or a sentence that only
    begins alike is speech and stays."""
    assert cut_restart("Tell me a long story about the sea. Tell me") == \
        "Tell me a long story about the sea."
    assert cut_restart("What is the capital of France? What is.") == \
        "What is the capital of France?"
    assert cut_restart("what animal gives us wool? What animal gives us wool?") == \
        "what animal gives us wool?"
    assert cut_restart("I was thinking that maybe we could talk about the weather. We could "
                       "talk about") == \
        "I was thinking that maybe we could talk about the weather."
    assert cut_restart("I was thinking that maybe we could talk about the weather We could "
                       "talk about the") == \
        "I was thinking that maybe we could talk about the weather."
    for kept in ("Stop. Stop.", "Tell me about cats. Tell me about dogs.", "Yes. Yes please",
                 "What is the capital of France?", "Hello there. How are you?", "",
                 "I like the sea. Do you like the sea?", "Book it. It is late.",
                 "I love New York New York", "Can I book a table I think I can",
                 "We went to Paris and Paris was lovely", "Tell me about Tell me",
                 "I flew from New York City to New York City"):
        assert cut_restart(kept) == kept


def test_a_sentence_said_three_times_and_more_at_the_end_is_said_once() -> None:
    """tiny.en's loop on a word heard after a pause: two tokens, below ``cut_loop``'s period."""
    assert cut_restart("What is the capital of? Germany. Germany. Germany. Germany") == \
        "What is the capital of? Germany."
    assert cut_restart("Stop. Stop. Stop.") == "Stop."
    assert cut_restart("No. No.") == "No. No."


def test_the_last_word_heard_again_after_a_pause_is_said_once() -> None:
    """Whisper's "what is the capital of germany? germany?" for a question with a pause before
    its last word; a word said again alone, or a reply that says more, stays."""
    assert cut_restart("what is the capital of germany? germany?") == \
        "what is the capital of germany?"
    assert cut_restart("I would like a table for two. Two.") == "I would like a table for two."
    for kept in ("Stop. Stop.", "No. No.", "Is it far? Far away?", "A table for two. Yes.",
                 "What is the capital of? Germany."):
        assert cut_restart(kept) == kept


def test_three_words_and_more_said_twice_at_the_end_are_said_once() -> None:
    """The end of a joined utterance heard twice; two words said again, or words said again
    with others between, stay."""
    assert cut_restart("my favorite color is blue. what is yours? blue. what is yours") == \
        "my favorite color is blue. what is yours?"
    assert cut_restart("book a table for two people, for two people") == \
        "book a table for two people"
    for kept in ("I love New York New York", "I flew from New York City to New York City",
                 "We went to Paris and Paris was lovely", "Tell me about Tell me",
                 "a b c d a b c e"):
        assert cut_restart(kept) == kept


def test_a_number_said_again_and_again_alone_is_said_once() -> None:
    """tiny.en's "5 5" for a lone "Five." (it cannot count real repeats either)."""
    assert cut_restart("5 5") == "5"
    assert cut_restart("12 12 12") == "12"
    assert cut_restart("11. 11.") == "11."
    assert cut_restart("2, 2,") == "2"  # a trailing comma would read as an unfinished reply
    assert cut_restart("7 7?") == "7?"
    for kept in ("5", "2 3", "What is 2 plus 2?", "Table for 5 5", "No. No."):
        assert cut_restart(kept) == kept


@pytest.mark.slow
async def test_a_lone_number_in_our_voice_is_heard_once() -> None:
    """The numbers a caller gives the booking playbook ("For how many people?"), in our Piper
    voice without its random variation, through the server's Whisper as the answer hears them:
    each is one number (before, "Five." and "Twelve." came back as "5 5" and "12 12")."""
    from piper import PiperVoice, SynthesisConfig

    from voice_server.pipeline.tts import default_piper_voice

    voice = PiperVoice.load(str(default_piper_voice()))
    steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    said = {"Three.": "3", "Five.": "5", "Eight.": "8", "Eleven.": "11", "Twelve.": "12"}
    async with ComputePool(1) as pool:
        stt = WhisperSTT(pool)
        await stt.load()
        try:
            heard = {}
            for text in said:
                pcm = np.concatenate([chunk.audio_int16_array.reshape(-1)
                                      for chunk in voice.synthesize(text, syn_config=steady)])
                pcm = resample(pcm, voice.config.sample_rate, 16000)
                silence = np.zeros(1920, dtype=np.int16)  # the 120 ms the server keeps
                heard[text] = await stt.transcribe(np.concatenate([pcm, silence]))
        finally:
            await stt.aclose()
    numbers = {text: re.findall(r"\w+", words.lower()) for text, words in heard.items()}
    assert all(len(found) == 1 for found in numbers.values()), heard
    assert sum(found == [said[text]] or found == [text.lower().strip(".")]
               for text, found in numbers.items()) >= 4, heard


@pytest.mark.slow
async def test_window_and_full_decoding_hear_the_same_words(make_speech) -> None:
    async with ComputePool(1) as pool:
        window = WhisperSTT(pool, window_s=8.0)
        full = WhisperSTT(pool, window_s=0.0)
        for text, key in (("Turn on the lights in the kitchen.", "kitchen"),
                          ("I would like to book a table for two people tomorrow at seven in "
                           "the evening, near the window if possible.", "window")):
            pcm = decode_wav(make_speech(text), max_seconds=30, to_rate=16000)
            heard = await window.transcribe(pcm)
            assert key in heard.lower()
            assert heard.lower().count(key) == 1  # no decoding loop
            assert key in (await full.transcribe(pcm)).lower()
        assert await window.transcribe(np.zeros(16000, dtype=np.int16)) == ""


@pytest.mark.parametrize("model", ["missing_dir", "./missing_dir"])
def test_a_model_that_is_neither_a_folder_nor_a_name_is_said_so(model: str) -> None:
    """faster-whisper said "Invalid model size 'missing_dir'" for a folder that is not there."""
    from voice_server.pipeline.stt import STTError, WhisperService

    with pytest.raises(STTError, match="no folder missing_dir|no CTranslate2 Whisper model at"):
        WhisperService(model=model)
