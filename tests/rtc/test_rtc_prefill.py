"""The embedded model reads the prompt before the user is done (``Settings.llm_prefill``,
server/listening.py, llm/local_engine.py): a real aiortc peer asks a long question, and the
answer's request reads only the end of it, the rest having been read from the interim
transcripts; and the history is read in the quiet after an answer, before the user speaks."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer
from voice_server.server.listening import PREFILL_MIN_WORDS

pytestmark = pytest.mark.slow

LONG = ("Please tell me a short story about a brave little dragon who lives on a tall green "
        "mountain near the sea, and who likes to read books about the stars at night.")
ANSWER_HEAD = 5  # "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n": never read ahead


@pytest_asyncio.fixture(scope="module")
async def server():
    settings = load_settings(port=0, llm_max_tokens=24, llm_temperature=0.0,
                             ice_host_addresses="127.0.0.1", ice_candidate_allow="127.0.0.1")
    assert settings.llm_prefill and settings.interim_transcripts  # the defaults
    async with VoiceServer(settings) as srv:
        yield srv


@pytest.fixture(scope="module")
def tokens():
    """The served model's tokenizer (the tiny bundled model in tests: SmolLM2's ChatML)."""
    from llama_cpp import Llama

    from voice_server.llm.local import tiny_gguf_path

    vocab = Llama(model_path=str(tiny_gguf_path()), vocab_only=True, verbose=False)
    return lambda text: vocab.tokenize(text.encode(), add_bos=False, special=False)


@pytest.mark.serial  # a prefill runs only while the server has nothing else to compute
async def test_a_long_question_is_read_while_it_is_spoken(server, make_speech, tokens) -> None:
    async with RtcClient(f"ws://127.0.0.1:{server.port}/ws") as client:
        await client.negotiate()
        client.say(make_speech("What is the capital of France?", rate=48000, pad=(1.0, 1.0)))
        await client.wait_for("tts-complete", timeout=scaled(60))
        client.say(make_speech(LONG, rate=48000, pad=(0.5, 1.0)))
        await client.wait_for("tts-complete", count=2, timeout=scaled(90))
    record = next(r for r in reversed(server.last_turns) if "dragon" in r.transcript.lower())
    read_ahead = []  # the interim transcripts whose words the model read ahead
    for text in _interim(client, "dragon"):  # ~9 s of speech: one every second after 1.5 s
        if len(text.split()) >= len(read_ahead[-1].split() if read_ahead else "") \
                + PREFILL_MIN_WORDS:
            read_ahead.append(text)
    assert len(read_ahead) >= 2, (read_ahead, record.transcript)
    # read without them: the whole message, then the answer's head (the history and the
    # message's start were read as the user began: "<|im_start|>user\n")
    whole = len(tokens(record.transcript)) + ANSWER_HEAD
    read = record.prompt_tokens - record.prompt_cached
    # read with them: the words after those read ahead that the final transcript kept (an
    # interim one may end misheard: "Please tell me a short story I'm out and ready."); on a
    # busy machine a prefill may not be done when the user stops: the first one is ~6 s before
    kept = _common_head(tokens(read_ahead[0]), tokens(record.transcript))
    assert kept >= 4, (read_ahead[0], record.transcript)
    assert read <= whole - kept + 3, (read, whole, record.transcript, read_ahead)
    print(f"read {read} of the {whole} tokens after the history; interim transcripts read "
          f"ahead: {[len(tokens(text)) for text in read_ahead]} tokens")


def _common_head(a: list[int], b: list[int]) -> int:
    """How many tokens ``a`` and ``b`` begin with alike."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _interim(client: RtcClient, word: str) -> list[str]:
    """The interim transcripts, in order, of the utterance whose final transcript has
    ``word``."""
    texts: list[str] = []
    for m in client.messages("transcript"):
        if not m["isFinal"]:
            texts.append(m["text"])
        elif word in m["text"].lower():
            return texts
        else:
            texts = []
    return []


@pytest.mark.serial
async def test_the_history_is_read_in_the_quiet_after_an_answer(server, make_speech,
                                                                 monkeypatch) -> None:
    """Once the agent's answer is over and before the user speaks again, the model reads the
    prompt of their next answer up to their words: the history with the answer just given.
    Before, it waited for their voice, and a short reply left it little time (behind a
    playbook's intent check, the support playbook's ticket note took it all)."""
    read: list[list[dict]] = []
    warm = server.router.warm

    async def spy(request, *, save=True):
        if not save:  # a read-ahead for the coming turn (a stage's prompt is saved)
            read.append(request.messages)
        return await warm(request, save=save)

    monkeypatch.setattr(server.router, "warm", spy)
    async with RtcClient(f"ws://127.0.0.1:{server.port}/ws") as client:
        await client.negotiate()
        client.say(make_speech("What is the capital of France?", rate=48000, pad=(1.0, 0.5)))
        await client.wait_for("tts-complete", timeout=scaled(60))
        answer = client.messages("llm")[0]["text"]
        await asyncio.sleep(scaled(2.0))  # the user says nothing more
        assert len(client.messages("speech-start")) == 1
    # read with the answer in the history: after it, and the user has not spoken since
    after = [messages for messages in read
             if any(m["role"] == "assistant" and m["content"] == answer for m in messages)]
    assert after, read
    assert after[0][-1] == {"role": "user", "content": ""}, after[0][-1]
