"""OpenAI-compatible servers as they really answer (tool calls streamed their way, structured
output refused), through the real ``openai`` client and ``OpenAICompatProvider``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import ChatRequest, LLMError, LLMRouter

TIME = {"anyOf": [{"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}, {"type": "null"}]}
NOTE = {"type": "json_schema", "json_schema": {"name": "note_facts", "schema": {
    "type": "object", "properties": {"time": TIME, "pattern": {"type": "null"}},
    "required": ["time", "pattern"], "additionalProperties": False}}}
# llama-cpp-python's server on a json_schema response_format: HTTP 500 and its validation error
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
REFUSAL = ("[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
           "\"Input should be 'text' or 'json_object'\"}]")


@pytest.mark.parametrize("name_in_each_chunk", [False, True])
async def test_a_call_streamed_in_chunks_has_its_name_once(fake: FakeOpenAI, router: LLMRouter,
                                                           name_in_each_chunk: bool) -> None:
    """OpenAI sends a call's name in its first chunk; llama-cpp-python's server sends it with
    every chunk, and joining them gave 'find_appointmentsfind_appointments...' (a newcomer's
    trial: 'error: unknown tool')."""
    fake.add(Reply(tool_calls=[{"name": "find_appointments", "arguments": {"name": "Tom Becker"}},
                               {"name": "book", "arguments": {"day": "monday"}}],
                   call_chunks=4, name_in_each_chunk=name_in_each_chunk))
    events = [e async for e in router.stream(ChatRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
               for n in ("find_appointments", "book")]))]
    calls = events[-1].tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("find_appointments", '{"name": "Tom Becker"}'), ("book", '{"day": "monday"}')]


async def test_structured_output_refused_is_asked_as_a_forced_call(fake: FakeOpenAI,
                                                                   router: LLMRouter,
                                                                   caplog) -> None:
    """A playbook's facts are noted with a json_schema response_format; an endpoint without
    it answered every note with an error, and no booking was ever made through it. The
    refusal is logged once with what the endpoint said, and remembered."""
    fake.add(Reply(status=500, error_message=REFUSAL),
             Reply(tool_calls=[{"name": "note_facts", "arguments": {"time": "19:30"}}]),
             Reply(tool_calls=[{"name": "note_facts", "arguments": {"time": None}}]))
    request = ChatRequest(messages=[{"role": "user", "content": "Half past seven."}],
                          temperature=0.0, response_format=NOTE)
    caplog.set_level("WARNING")
    first = await router.complete(request)
    second = await router.complete(request)
    assert (first.text, second.text) == ('{"time": "19:30"}', '{"time": null}')
    assert first.finish_reason == "stop" and not first.tool_calls
    asked = fake.requests
    assert len(asked) == 3 and asked[0]["response_format"] == NOTE  # refused once only
    for body in asked[1:]:
        assert "response_format" not in body
        assert body["tool_choice"] == {"type": "function", "function": {"name": "note_facts"}}
        # without its patterns (that server's grammar failed on a date's, and it died)
        assert body["tools"][0]["function"]["parameters"] == {
            **NOTE["json_schema"]["schema"], "properties": {
                "time": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "pattern": {"type": "null"}}}
    logged = [r.getMessage() for r in caplog.records if "structured output" in r.getMessage()]
    assert len(logged) == 1 and "Input should be" in logged[0]


async def test_another_server_error_is_not_taken_for_a_refusal(fake: FakeOpenAI,
                                                               router: LLMRouter) -> None:
    fake.add(Reply(status=500, error_message="CUDA out of memory"), "{\"time\": null}")
    request = ChatRequest(messages=[{"role": "user", "content": "Hi."}], response_format=NOTE)
    with pytest.raises(LLMError, match="HTTP 500"):
        await router.complete(request)
    assert (await router.complete(request)).text == '{"time": null}'
    assert fake.requests[1]["response_format"] == NOTE


async def test_a_stream_that_breaks_off_is_an_error_not_an_answer(fake: FakeOpenAI,
                                                                 router: LLMRouter) -> None:
    """A server that fails after its stream began (llama-cpp-python's with automatic tool
    choice) ended the stream early; the words so far were taken for the whole answer and
    the turn closed with no error."""
    fake.add(Reply(text="functions.playbook_transition:", cut_off=True))
    seen: list[str] = []
    with pytest.raises(LLMError, match="ended before its answer did"):
        async for event in router.stream(ChatRequest(messages=[{"role": "user",
                                                                "content": "hi"}])):
            seen.append(event.text)
    assert "".join(seen) == "functions.playbook_transition:"  # what came is still given


async def test_an_endpoint_that_cannot_answer_is_said_at_start(fake: FakeOpenAI, caplog) -> None:
    """A newcomer's server started against an endpoint that was down, or with a model name it
    did not have, without a word; each turn then failed. Only the models are asked for."""
    import socket

    from voice_server.llm.openai_compat import OpenAICompatProvider
    from voice_server.llm.types import ReachedRemotely

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    up = OpenAICompatProvider(base_url=fake.base_url, default_model="fake-model")
    down = OpenAICompatProvider(base_url=closed, default_model="fake-model")
    try:
        assert isinstance(up, ReachedRemotely)
        assert await up.problem("fake-model") is None
        assert await up.problem(None) is None  # no model named: the endpoint's own
        assert await up.problem("llama3.2") == \
            "the LLM endpoint has no model 'llama3.2' (it lists fake-model)"
        assert await down.problem("fake-model") == "the LLM endpoint cannot be reached"
        fake.models_delay_s = 1.5
        assert await up.problem("fake-model", timeout_s=0.3) == \
            "the LLM endpoint sent no list of models in 0.3 s"
    finally:
        fake.models_delay_s = 0
        await up.aclose()
        await down.aclose()
    async with FakeOpenAI(model="llama3.2:latest") as ollama:  # Ollama's name for llama3.2
        named = OpenAICompatProvider(base_url=ollama.base_url, default_model="llama3.2")
        assert await named.problem("llama3.2") is None
        await named.aclose()
    # a llama.cpp server lists its one model by its file and answers any name with it
    async with FakeOpenAI(model="/models/SmolLM2-135M-Instruct.Q4_1.gguf") as llama_cpp:
        any_name = OpenAICompatProvider(base_url=llama_cpp.base_url, default_model="smollm2")
        assert await any_name.problem("smollm2") is None
        await any_name.aclose()

    from voice_server.config import load_settings
    from voice_server.server.app import VoiceServer

    server = VoiceServer(load_settings(port=0, llm_provider="openai_compat", llm_base_url=closed,
                                       llm_model="llama3.2"))
    caplog.set_level("WARNING")
    try:
        await server._warm_llm()  # what load_models runs for the LLM before the port opens
    finally:
        await server.router.aclose()
        server.pool.close()
    assert f"{closed}: the LLM endpoint cannot be reached; turns fail" in caplog.text


async def test_an_endpoint_s_prompt_cache_is_counted(fake: FakeOpenAI, router: LLMRouter) -> None:
    """An endpoint that reports the prompt tokens it had cached (OpenAI's
    ``prompt_tokens_details.cached_tokens``): the turn record counts what the answer read."""
    fake.add(Reply(text="Paris.", prompt_tokens=40, completion_tokens=2, cached_tokens=32),
             Reply(text="Rome.", prompt_tokens=40, completion_tokens=2),
             Reply(text="Madrid.", prompt_tokens=40, completion_tokens=2, cached_tokens=30))
    request = ChatRequest(messages=[{"role": "user", "content": "The capital of France?"}])
    streamed = [e async for e in router.stream(request)][-1].usage
    uncached = [e async for e in router.stream(request)][-1].usage
    completed = (await router.complete(request)).usage
    assert (streamed.input_tokens, streamed.cached_tokens) == (40, 32)
    assert (uncached.input_tokens, uncached.cached_tokens) == (40, 0)
    assert (completed.input_tokens, completed.cached_tokens) == (40, 30)
    assert (streamed + completed).cached_tokens == 62 and streamed + None == streamed


async def test_an_intent_through_an_endpoint_without_structured_output(fake: FakeOpenAI,
                                                                       router: LLMRouter) -> None:
    """A playbook's intent check is a structured answer; an endpoint that refuses one is
    asked by a forced call of the same name, and the call's arguments move the playbook."""
    from tests.playbook.support import Conversation
    from voice_server.playbook import PlaybookResponder, load_playbook
    from voice_server.playbook.requests import INTENT_NAME

    fake.add(Reply(status=500, error_message=REFUSAL),
             Reply(tool_calls=[{"name": INTENT_NAME, "arguments": {"intent": "outage"}}]),
             '{"account": null}')
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "support.yaml"), router) as pb:
        call = Conversation(pb)
        reply, _, _ = await call.turn("Nothing loads at home, it keeps dropping.")
    assert call.state["stage"] == "line_check", (reply, call.state)
    refused, forced = fake.requests[:2]
    assert refused["response_format"]["json_schema"]["name"] == INTENT_NAME
    assert forced["tool_choice"] == {"type": "function", "function": {"name": INTENT_NAME}}
    assert "What is your account number?" in reply
