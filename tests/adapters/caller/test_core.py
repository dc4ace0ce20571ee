"""Sans-I/O parts of the caller: taxonomy, clamp, routing, rate limiter, sanitizer, SSE parser,
schemas and config loaders (spec sections cited in each module)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import voice_server.adapters.caller as caller_pkg
from tests.support.sse import SSEDecoder
from voice_server.adapters.caller.config import (
    CallerConfigError,
    load_client_registry,
    load_providers,
    parse_providers,
)
from voice_server.adapters.caller.errors import (
    ProviderError,
    clamp_retry_after_ms,
    classify,
    retry_after_header,
)
from voice_server.adapters.caller.http import is_loopback
from voice_server.adapters.caller.routing import (
    FixedWindowLimiter,
    UnknownProvider,
    select_provider,
)
from voice_server.adapters.caller.schemas import SchemaSet, load_schema, mcp_input_schema
from voice_server.adapters.caller.stream import sanitize_event, sanitize_text
from voice_server.llm import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    ModelNotFound,
)


@pytest.mark.parametrize(("hint", "expected"), [
    (0, None), (-5, None), (math.nan, None), (math.inf, None), ("100", None), (True, None),
    (None, None), (1, 1), (1500.2, 1501), (60000, 60000), (60001, 60000), (120000, 60000),
])
def test_clamp_retry_after(hint: object, expected: int | None) -> None:
    """Non-numeric, non-finite or <= 0 hints drop; others ceil and clamp to 60000 ms."""
    assert clamp_retry_after_ms(hint) == expected


@pytest.mark.parametrize(("ms", "header"), [(1, "1"), (3000, "3"), (5000, "5"), (1001, "2"),
                                            (60000, "60")])
def test_retry_after_header(ms: int, header: str) -> None:
    """The header is whole seconds, rounded up, at least 1."""
    assert retry_after_header(ms) == header


@pytest.mark.parametrize(("exc", "cls", "status"), [
    (LLMRateLimited("x", retry_after=2.5), "RATE_LIMIT", 429),
    (LLMAuthError("x", status=401), "AUTH", 502),
    (LLMBadRequest("x", status=400), "PERMANENT", 422),
    (ModelNotFound("x", status=404), "PERMANENT", 422),
    (LLMTimeout("x"), "TEMPORARY", 503),
    (LLMUnavailable("x", status=502), "TEMPORARY", 503),
    (LLMError("x", status=409), "PERMANENT", 422),
    (LLMError("x", status=429), "RATE_LIMIT", 429),
    (LLMError("x"), "TEMPORARY", 503),
])
def test_classify(exc: LLMError, cls: str, status: int) -> None:
    """The LLM layer's errors map onto the taxonomy and its status table."""
    error = classify(exc)
    assert (error.classification, error.status, error.code) == (cls, status, cls)
    assert "x" not in error.message  # sanitized text only


def test_rate_limit_hint_in_ms() -> None:
    """LLMRateLimited.retry_after (seconds) becomes retryAfterMs."""
    assert classify(LLMRateLimited("x", retry_after=2.5)).retry_after_ms == 2500
    assert ProviderError("CONFIG").body("t") == {
        "error": "CONFIG", "message": "Provider configuration error.", "traceId": "t"}


CATALOG = parse_providers({"providers": {
    "a": {"baseUrl": "http://127.0.0.1:1/v1", "defaultModel": "a-chat",
          "capabilities": ["chat", "embed"], "defaults": {"embed": "a-embed"},
          "scores": {"chat": 60, "embed": 10}},
    "b": {"baseUrl": "http://127.0.0.1:2/v1", "defaultModel": "b-chat",
          "capabilities": ["chat", "chatStream"], "defaults": {"chat": "b-best"},
          "scores": {"chat": 20}},
    "c": {"baseUrl": "http://127.0.0.1:3/v1", "defaultModel": "c-chat",
          "capabilities": ["chat"], "scores": {"chat": 70}},
}})


def test_routing_scores_defaults_and_overrides() -> None:
    """Score = scores[cap] + 50 with a default; override and fallback strategies."""
    chat = select_provider(CATALOG, "chat")
    assert (chat.provider, chat.model, chat.strategy) == ("b", "b-best", "capability-default")
    embed = select_provider(CATALOG, "embed")
    assert (embed.provider, embed.model, embed.strategy) == ("a", "a-embed",
                                                             "capability-default")
    stream = select_provider(CATALOG, "chatStream")
    assert (stream.provider, stream.model, stream.strategy) == ("b", "b-chat", "fallback")
    override = select_provider(CATALOG, "chat", provider="c", model="custom")
    assert (override.provider, override.model, override.strategy) == (
        "c", "custom", "caller-override")
    assert override.routing() == {"capability": "chat", "strategy": "caller-override"}
    with pytest.raises(UnknownProvider):
        select_provider(CATALOG, "chat", provider="zzz")


def test_routing_ties_and_undeclared_capability() -> None:
    """Ties go to the earlier provider; an undeclared capability falls back to the first."""
    tie = parse_providers({"providers": {
        "x": {"baseUrl": "u", "defaultModel": "x", "capabilities": ["chat"]},
        "y": {"baseUrl": "u", "defaultModel": "y", "capabilities": ["chat"]}}})
    assert select_provider(tie, "chat").provider == "x"
    only_chat = select_provider(tie, "embed")
    assert (only_chat.provider, only_chat.strategy) == ("x", "fallback")


def test_fixed_window_limiter() -> None:
    """max 2 per 1000 ms per key; the wait counts down; a new window resets; keys apart."""
    limiter = FixedWindowLimiter(2, 1000)
    assert limiter.hit("k", 10.0) is None and limiter.hit("k", 10.1) is None
    assert limiter.hit("k", 10.25) == 750
    assert limiter.hit("other", 10.3) is None
    assert limiter.hit("k", 11.0) is None
    assert not FixedWindowLimiter(0, 1000).enabled and FixedWindowLimiter(0, 1000).hit("k", 0) \
        is None


@pytest.mark.parametrize(("text", "expected"), [
    ("hello", "hello"),
    ("A" * 4100 + "\x07", "A" * 4000),
    ("\x01\x02Binary", None),  # 25% control characters
    ("\x01 ten chars", " ten chars"),  # under 20%: stripped, kept
    ("\x00\x1f", None),
    ("", None),
    ("tab\tand\nnewline\r", "tab\tand\nnewline\r"),
    ("\U0001f600" * 2001, "\U0001f600" * 2000),  # 4000 UTF-16 units
    ("a" + "\U0001f600" * 2000, "a" + "\U0001f600" * 1999),  # no split surrogate
])
def test_sanitize_text(text: str, expected: str | None) -> None:
    """Control characters stripped, 4000 UTF-16 units kept, noisy text dropped."""
    assert sanitize_text(text) == expected


def test_sanitize_event_drops_role_only_deltas() -> None:
    """A delta with only a role has no content: dropped."""
    assert sanitize_event({"type": "delta", "delta": {"role": "assistant"}}) is None
    assert sanitize_event({"type": "other"}) is None


def test_sse_decoder() -> None:
    """CRLF lines, multi-line data, comments and other fields; over-long lines refused."""
    decoder = SSEDecoder(max_line=64)
    out = decoder.feed(b": comment\r\nevent: x\r\ndata: a\r\ndata:b\r\n\r\ndata: [DONE]\n")
    assert out == ["a\nb"]
    assert decoder.feed(b"\n") == ["[DONE]"]
    with pytest.raises(ValueError, match="too long"):
        decoder.feed(b"data: " + b"x" * 100)


def test_schemas_and_mcp_input_schema() -> None:
    """Published schemas load; the MCP view drops callerTool; validation messages name paths."""
    assert load_schema("chat_request")["required"] == ["requestId", "callerTool", "messages"]
    tool_schema = mcp_input_schema("embed_request")
    assert "callerTool" not in tool_schema["properties"]
    assert tool_schema["required"] == ["requestId", "inputs"]
    schemas = SchemaSet()
    with pytest.raises(caller_pkg.CallerError) as info:
        schemas.validate("chat_request", {"requestId": "r", "callerTool": "t",
                                          "messages": [{"role": "user", "content": 1}]})
    assert info.value.status == 400
    assert info.value.message.startswith("Schema validation failed: /messages/0/content")
    assert not schemas.is_valid("chat_request", {"requestId": "r", "callerTool": "t",
                                                 "messages": [{"role": "user", "content": "x"}],
                                                 "timestamp": "not a date"})


def test_origin_config_files(tmp_path: Path) -> None:
    """The origin's registry and providers formats load; bad files raise CallerConfigError."""
    reg = tmp_path / "client-registry.json"
    reg.write_text(json.dumps({"clients": [
        {"toolId": "tool", "token": "tok", "allowedMethods": ["chat", "models"]}]}))
    client = load_client_registry(reg).lookup("tok")
    assert client is not None and client.tool_id == "tool" and client.may("models")
    assert not client.may("embed") and "tok" not in client.token_hash
    prov = tmp_path / "providers.json"
    prov.write_text(json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                "providers": {"lm": {
                                    "baseUrl": "http://127.0.0.1:1234/v1", "defaultModel": "m",
                                    "capabilities": ["chat"], "notes": "GPU"},
                                    "here": {"kind": "local"}}}))
    assert list(load_providers(prov)) == ["lm", "here"]
    bad = tmp_path / "bad.json"
    for content in ("{", json.dumps({"clients": [{"toolId": "t", "token": "x",
                                                  "allowedMethods": ["listModels"]}]})):
        bad.write_text(content)
        with pytest.raises(CallerConfigError):
            load_client_registry(bad)
    with pytest.raises(CallerConfigError, match="baseUrl"):
        parse_providers({"providers": {"x": {"capabilities": ["chat"]}}})
    with pytest.raises(CallerConfigError):
        load_providers(tmp_path / "missing.json")


def test_options_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The origin's LLM_CALLER_* variables are the command's defaults; flags win; a variable
    that is not a number is a usage error (exit 2), as a bad flag is."""
    from voice_server.cli import build_parser

    monkeypatch.setenv("LLM_CALLER_RATE_LIMIT_MAX", "7")
    monkeypatch.setenv("LLM_CALLER_PORT", "5000")
    args = build_parser().parse_args(["sidecar", "caller", "--port", "6000"])
    assert (args.rate_limit_max, args.port, args.retry_attempts) == (7, 6000, 2)
    monkeypatch.setenv("LLM_CALLER_RETRY_ATTEMPTS", "x")
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["sidecar", "caller"])
    assert exited.value.code == 2


@pytest.mark.parametrize(("host", "ok"), [
    ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("127.0.0.2", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("", False), (None, False),
    ("localhost", False),
])
def test_is_loopback(host: str | None, ok: bool) -> None:
    """Loopback peers only (IPv4, IPv6 and IPv4-mapped)."""
    assert is_loopback(host) is ok


def test_public_names() -> None:
    """The package's public facade is what we mean it to be."""
    assert set(caller_pkg.__all__) == {
        "CallerConfigError", "CallerError", "CallerHTTPServer", "CallerOptions",
        "CallerService", "ClientEntry", "ClientRegistry", "ProviderEntry", "ProviderError",
        "ProviderRuntime", "build_app", "build_mcp_server", "build_runtimes",
        "load_client_registry", "load_providers"}
    assert all(hasattr(caller_pkg, name) for name in caller_pkg.__all__)


@pytest.mark.parametrize(("stamp", "ok"), [
    ("2026-11-22T08:30:00Z", True), ("2026-11-22T08:30:00.123+02:00", True),
    ("2026-11-22 08:30:00Z", False), ("2026-11-22T08:30:00", False), ("yesterday", False),
    ("2026-13-22T08:30:00Z", False),
])
def test_timestamp_format(stamp: str, ok: bool) -> None:
    """The envelope timestamp must be an RFC 3339 date-time."""
    body = {"requestId": "r", "callerTool": "t", "inputs": ["x"], "timestamp": stamp}
    assert SchemaSet().is_valid("embed_request", body) is ok
