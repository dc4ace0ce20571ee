"""Sans-I/O codec of prompt.v1.PromptService/Run: requests, input, responses, Connect, framing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voice_server.adapters.prompt.codec import (
    build_response,
    connect_error,
    connect_mode,
    connect_success,
    normalize_input,
    parse_run_request,
)
from voice_server.adapters.prompt.errors import (
    InvalidArgument,
    PromptError,
    ToolNotFound,
    from_llm_error,
)
from voice_server.adapters.prompt.server import _grpc_code
from voice_server.llm.errors import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    ModelNotFound,
)


def test_parse_snake_case_request():
    """All fields of the snake_case request are decoded."""
    body = json.dumps({"tool_name": " t ", "input": "hi", "model": "m", "temperature": 0.5,
                       "max_output_tokens": 64, "unknown": 1,
                       "tools": [{"type": "function", "function": {"name": "f"}}]}).encode()
    req = parse_run_request(body)
    assert (req.tool_name, req.input, req.model, req.temperature, req.max_output_tokens) == \
        ("t", "hi", "m", 0.5, 64)
    assert req.tools == [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}}}}]


def test_parse_camel_case_request():
    """proto-JSON lowerCamelCase keys are accepted too (protobuf's JSON mapping)."""
    req = parse_run_request(b'{"toolName":"t","maxOutputTokens":8,"input":"x"}')
    assert (req.tool_name, req.max_output_tokens) == ("t", 8)


def test_zero_values_mean_unset():
    """temperature 0 and max_output_tokens 0 fall back to the tool (a proto3 zero is
    "not set")."""
    req = parse_run_request(b'{"tool_name":"t","temperature":0,"max_output_tokens":0}')
    assert (req.temperature, req.max_output_tokens) == (None, None)


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'"x"', b"\xff\xfe",
                                  b'{"tool_name":5}', b'{"tool_name":"t","temperature":"1"}',
                                  b'{"tool_name":"t","max_output_tokens":"64"}',
                                  b'{"tool_name":"t","max_output_tokens":1.5}',
                                  b'{"tool_name":"t","max_output_tokens":-1}',
                                  b'{"tool_name":"t","tools":{}}',
                                  b'{"tool_name":"t","tools":[1]}',
                                  b'{"tool_name":"t","model":3}'])
def test_invalid_body(body):
    """Undecodable bodies and wrong types are ``invalid JSON body``."""
    with pytest.raises(InvalidArgument, match="^invalid JSON body$"):
        parse_run_request(body)


@pytest.mark.parametrize("body", [b"{}", b'{"input":"x"}', b'{"tool_name":"  "}',
                                  b'{"tool_name":null}'])
def test_missing_tool_name(body):
    """A missing or blank tool_name is invalid_argument."""
    with pytest.raises(InvalidArgument, match="^tool_name is required$") as info:
        parse_run_request(body)
    assert info.value.code == "invalid_argument"


def test_tools_without_name_are_dropped():
    """Tool definitions with an empty function name are dropped."""
    req = parse_run_request({"tool_name": "t", "tools": [
        {"type": "function", "function": {"name": ""}},
        {"type": "function", "function": {"name": "get", "description": "d",
                                          "parameters": {"type": "object"}}}]})
    assert req.tools == [{"type": "function", "function": {
        "name": "get", "parameters": {"type": "object"}, "description": "d"}}]


def test_normalize_input_blocks():
    """Blocks become the origin's newline-joined prompt."""
    blocks = [{"type": "text", "text": "a"}, {"content": "b"}, "c", {"x": 1}]
    assert normalize_input(blocks) == 'a\nb\nc\n{"x":1}'


@pytest.mark.parametrize(("value", "prompt"), [
    (None, ""), ("  as is  ", "  as is  "), (5, "5"), ({"b": 1, "a": [2]}, '{"a":[2],"b":1}'),
    ([" x ", ""], "x"), ([], ""),
])
def test_normalize_input_other_values(value, prompt):
    """Strings pass, null is empty, other JSON is compact JSON text."""
    assert normalize_input(value) == prompt


def test_build_response_bytes():
    """The canonical object, explicit zeros, tool calls with object arguments."""
    resp = build_response(id="01ARZ3NDEKTSV4RRFFQ69G5FAV", model="m", created=1700000000,
                          text="hi", tool_calls=[("f", '{"a":1}'), ("g", "not json")],
                          input_tokens=3, output_tokens=2)
    assert json.dumps(resp, separators=(",", ":")) == (
        '{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","object":"response","model":"m",'
        '"created":1700000000,"output":[{"type":"output_text","text":"hi"},'
        '{"type":"tool_call","tool_call":{"name":"f","arguments":{"a":1}}},'
        '{"type":"tool_call","tool_call":{"name":"g","arguments":{"raw":"not json"}}}],'
        '"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}')


def test_build_response_tool_calls_only():
    """No empty text block when the model only called tools."""
    resp = build_response(id="x", model="m", created=1, text="", tool_calls=[("f", "{}")])
    assert [b["type"] for b in resp["output"]] == ["tool_call"]
    empty = build_response(id="x", model="m", created=1, text="")
    assert empty["output"] == [{"type": "output_text", "text": ""}]
    assert empty["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


@pytest.mark.parametrize(("content_type", "mode"), [
    ("application/json", "standard"), ("application/json; charset=utf-8", "standard"),
    ("application/connect+json", "compat"), (None, "compat"), ("text/plain", "compat"),
    ("application/proto", "unsupported"),
])
def test_connect_mode(content_type, mode):
    """The request content type picks standard Connect or the origin's variant."""
    assert connect_mode(content_type) == mode


def test_connect_success_both_modes():
    """Success: bare message; the origin's variant adds its headers and a newline."""
    assert connect_success("standard", {"a": 1}) == (
        200, {"Content-Type": "application/json"}, b'{"a":1}')
    assert connect_success("compat", {"a": 1}) == (
        200, {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"},
        b'{"a":1}\n')


def test_connect_error_standard():
    """Standard Connect: the code's HTTP status and {code, message}."""
    assert connect_error("standard", ToolNotFound()) == (
        404, {"Content-Type": "application/json"},
        b'{"code":"not_found","message":"tool not found"}')


def test_connect_error_compat():
    """The origin's variant: 200, Connect-Error-Code, {"error":{code,message,details}}."""
    status, headers, body = connect_error("compat", InvalidArgument("tool_name is required"))
    assert (status, headers["Connect-Error-Code"], headers["Content-Type"]) == (
        200, "invalid_argument", "application/connect+json")
    assert body == (b'{"error":{"code":"invalid_argument","message":"tool_name is required",'
                    b'"details":[]}}\n')


def test_connect_unsupported_codec():
    """A protobuf codec is answered 415."""
    assert connect_error("unsupported", InvalidArgument("x"))[0] == 415


@pytest.mark.parametrize(("error", "code", "http", "grpc_code"), [
    (LLMTimeout("secret-detail"), "deadline_exceeded", 504, 4),
    (LLMRateLimited("secret-detail", retry_after=3), "resource_exhausted", 429, 8),
    (LLMUnavailable("secret-detail"), "unavailable", 503, 14),
    (LLMAuthError("secret-detail"), "failed_precondition", 400, 9),
    (ModelNotFound("secret-detail"), "not_found", 404, 5),
    (LLMBadRequest("secret-detail"), "invalid_argument", 400, 3),
    (LLMError("secret-detail"), "internal", 500, 13),
])
def test_llm_errors_are_mapped_without_their_text(error, code, http, grpc_code):
    """Provider failures map to codes; the provider's message is never copied."""
    mapped = from_llm_error(error)
    assert (mapped.code, mapped.http_status) == (code, http)
    assert _grpc_code(mapped).value[0] == grpc_code
    assert "secret-detail" not in mapped.message


def test_unknown_code_rejected():
    """A PromptError only takes Connect codes."""
    with pytest.raises(ValueError):
        PromptError("x", code="bogus")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
_request_like = st.fixed_dictionaries({}, optional={
    "tool_name": _json, "toolName": _json, "input": _json, "model": _json, "tools": _json,
    "temperature": _json, "max_output_tokens": _json, "maxOutputTokens": _json})


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | _request_like.map(lambda d: json.dumps(d).encode()))
def test_parse_never_crashes(body):
    """Any bytes decode to a request or raise InvalidArgument, nothing else."""
    try:
        req = parse_run_request(body)
    except InvalidArgument as exc:
        assert exc.code == "invalid_argument"
    else:
        assert req.tool_name and req.tool_name == req.tool_name.strip()
        assert isinstance(normalize_input(req.input), str)


@settings(max_examples=100, deadline=None)
@given(_json)
def test_normalize_input_is_total(value):
    """normalize_input accepts every JSON value."""
    assert isinstance(normalize_input(value), str)
