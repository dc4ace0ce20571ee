"""Strict broker DTOs and safe parsing (spec "Data model", "Error handling")."""

from __future__ import annotations

import pytest

from voice_server.adapters.broker import messages as m
from voice_server.adapters.broker.errors import WireValidationError
from voice_server.llm import LLMTimeout


@pytest.mark.parametrize(("data", "substring"), [
    ({"prompt": "x", "correlation_id": 5}, "correlation_id must be a string"),
    ({"prompt": "x", "model": 1}, "model must be a string"),
    ({"prompt": "x", "prompts": ["y"]}, "only one of 'prompt' or 'prompts'"),
    ({"prompt": 3}, "prompt must be a valid Prompt"),
    ({"prompt": [{"role": "user"}, "x"]}, "prompt must be a valid Prompt"),
    ({"prompts": "x"}, "prompts must be a list"),
    ({"prompts": []}, "must not be empty"),
    ({"prompts": ["ok", 7]}, "each item must be a valid Prompt"),
    ({"prompt": "x", "depth": 1}, "Unknown keys"),
    ({"model": "m"}, "missing 'prompt' or 'prompts'"),
    ([1], "must be a JSON object"),
])
def test_request_validation_messages(data, substring):
    """Each invalid request is refused with the origin's stable substring."""
    with pytest.raises(WireValidationError, match=substring.replace("(", r"\(")):
        m.WireRequest.from_dict(data)


@pytest.mark.parametrize("prompt", ["hi", {"role": "user", "content": "hi"},
                                    [{"role": "user", "content": "hi"}], ""])
def test_the_three_prompt_shapes_are_accepted(prompt):
    """str, dict and list-of-dicts prompts parse and serialise back unchanged."""
    request = m.WireRequest.from_dict({"prompt": prompt, "correlation_id": "c", "model": None})
    assert request.to_dict() == {"correlation_id": "c", "model": None, "prompt": prompt}


def test_try_parse_request_echoes_only_string_correlation_ids():
    """A validation error echoes a string correlation_id; otherwise it is null."""
    bad = m.try_parse_request(b'{"correlation_id":"c1","prompts":[]}')
    assert bad.to_dict() == {"correlation_id": "c1", "results": None,
                             "error": "WireRequest.prompts must not be empty"}
    assert m.try_parse_request({"correlation_id": 9, "prompt": "x", "x": 1}).correlation_id is None
    framing = m.try_parse_request(b'{"correlation_id":"c1",')
    assert framing.correlation_id is None and framing.results is None
    assert m.try_parse_request(b'{"prompt":"x"}') == m.WireRequest(prompt="x")


def test_response_writer_always_writes_every_key():
    """Responses and results carry explicit nulls; error xor results holds."""
    ok = m.WireResponse(results=[m.WireResult(chat_completion={"response": ""})])
    assert ok.to_dict() == {"correlation_id": None, "error": None,
                            "results": [{"error": None, "chat_completion": {"response": ""}}]}
    with pytest.raises(WireValidationError, match="cannot include both"):
        m.WireResponse(error="x", results=[])


@pytest.mark.parametrize(("data", "substring"), [
    ({"error": "x", "results": []}, "cannot include both"),
    ({"results": "nope"}, "WireResponse.results must be a list"),
    ({"results": [{"error": None, "chat_completion": None}]}, "either 'error' or"),
    ({"results": [{"error": "e", "chat_completion": {}}]}, "cannot include both"),
    ({"error": None, "results": None, "extra": 1}, "Unknown keys"),
])
def test_response_parsing_is_strict(data, substring):
    """The reader refuses what the writer never produces."""
    with pytest.raises(WireValidationError, match=substring):
        m.WireResponse.from_dict(data)


def test_response_with_both_null_parses():
    """As in the origin, the reader accepts error and results both null (callers check)."""
    assert m.WireResponse.from_dict({"error": None, "results": None}) == m.WireResponse()


def test_chat_completion_shape_and_tolerant_reader():
    """to_dict emits the superset of the spec's keys; from_dict accepts the subset."""
    cc = m.ChatCompletion(root_model="m", prompt="p", response="r",
                          usage={"m": m.ModelUsage(1, 3, 2)}, execution_time=0.5)
    assert cc.to_dict() == {
        "root_model": "m", "prompt": "p", "response": "r",
        "usage_summary": {"model_usage_summaries": {
            "m": {"total_calls": 1, "total_input_tokens": 3, "total_output_tokens": 2}}},
        "prompt_tokens": 3, "completion_tokens": 2, "execution_time": 0.5}
    flat = m.ChatCompletion.from_dict({"root_model": "m", "prompt": "p", "response": "r",
                                       "prompt_tokens": 4, "completion_tokens": 1})
    assert (flat.prompt_tokens, flat.completion_tokens) == (4, 1)
    assert m.ChatCompletion.from_dict(cc.to_dict()) == cc


@pytest.mark.parametrize(("exc", "text"), [
    (LLMTimeout("upstream slow"), "upstream slow"),
    (ValueError("bad value"), "bad value"),
    (TimeoutError(), "Request timed out"),
    (ConnectionResetError(), "Connection error"),
    (RuntimeError("secret internals"), "Internal broker error"),
])
def test_safe_error_message(exc, text):
    """Known errors pass their text; unknown ones never leak details."""
    assert m.safe_error_message(exc) == text
