"""Property tests: random and mutated HTTP bodies at the real HTTP edges of the three sidecars
that speak HTTP (LLM caller, prompt service's Connect JSON, broker proxy), over loopback sockets.

Whatever the body, the answer is a status under 500 unless the spec makes that exact case a 5xx,
an error is the adapter's spec shape with a spec code, no text carries a traceback, and after
the examples the server still answers a valid request correctly. The upstream always answers
a short text: provider failures are covered by the adapters' own tests, not fuzzed here.

Each server starts once per module, on pytest-asyncio's session loop; the ``@given`` checks are
synchronous and drive one exchange at a time on that loop (it is idle while a sync test runs).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapters.caller.conftest import TOKEN, Running, catalog, run_caller
from tests.adapters.prompt.conftest import API_KEY
from tests.support.fake_openai import FakeOpenAI
from tests.support.sse import SSEDecoder
from voice_server.adapters.broker import BrokerProxy, BrokerService
from voice_server.adapters.prompt import (
    EnvFileVault,
    LLMFactory,
    PromptService,
    PromptSidecar,
    SQLiteToolStore,
    ToolConfig,
)
from voice_server.adapters.prompt.errors import CONNECT_HTTP_STATUS
from voice_server.llm import LLMRouter
from voice_server.llm.openai_compat import OpenAICompatProvider

ANSWER = "fuzz ok"  # the upstream's one and only reply
EXCHANGE_TIMEOUT_S = 15.0  # a request that takes longer is a hang
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12)


def _deep(depth: int, closed: bool = True) -> bytes:
    return b"[" * depth + (b"]" * depth if closed else b"")


# bodies a random generator rarely finds: nesting past the recursion limit, BOMs, NaN, numbers
# that overflow a double, escapes of lone surrogates, an empty body. Every test sends each of
# them (and its adapter's own list) to each route after the random examples.
EDGE_BODIES = [b"", b"{", b"null", b"[]", b"{}", b'"x"', b"1e999", b"NaN", b"\xef\xbb\xbf{}",
               b"\xff\xfe", _deep(100_000, closed=False), _deep(100_000), _deep(990),
               b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b'{"x": 1, "x": 2}']


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of every dict and list inside ``value`` (the root is ``()``)."""
    if isinstance(value, dict | list):
        yield path
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield from _nodes(child, (*path, key))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


@st.composite
def mutated(draw: st.DrawFn, templates: list[dict[str, Any]]) -> bytes:
    """A valid request body with 1-3 edits anywhere in its tree (a key or item dropped, a value
    replaced by a random JSON value, a junk key or item added), serialized, maybe truncated."""
    doc = copy.deepcopy(draw(st.sampled_from(templates)))
    for _ in range(draw(st.integers(1, 3))):
        node = _at(doc, draw(st.sampled_from(list(_nodes(doc)))))
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        op = draw(st.sampled_from(["drop", "replace", "junk"]))
        if op != "junk" and keys:
            key = draw(st.sampled_from(keys))
            if op == "drop":
                del node[key]
            else:
                node[key] = draw(json_values)
        elif isinstance(node, dict):
            node[draw(st.text(max_size=10))] = draw(json_values)
        else:
            node.append(draw(json_values))
    raw = json.dumps(doc).encode()
    if draw(st.integers(0, 4)) == 0:  # one in five is cut short
        raw = raw[:draw(st.integers(0, len(raw) - 1))]
    return raw


class Body(bytes):
    """A request body whose repr stays short in hypothesis' reports."""

    def __repr__(self) -> str:
        head = bytes(self[:200])
        return repr(head) if len(self) <= 200 else f"{head!r}...<{len(self)} bytes>"


def bodies(templates: list[dict[str, Any]]) -> st.SearchStrategy[Body]:
    """Random bytes, random JSON values, and mutations of ``templates``."""
    return (st.binary(max_size=300)
            | json_values.map(lambda v: json.dumps(v).encode())
            | mutated(templates)).map(Body)


def sweep(edges: list[bytes], send_and_check: Any) -> None:
    """``send_and_check(body)`` for every edge body; a failure names the body."""
    for body in EDGE_BODIES + edges:
        try:
            send_and_check(Body(body))
        except AssertionError as exc:
            raise AssertionError(f"edge body {Body(body)!r}: {exc}") from exc


def _surrogate(template: dict[str, Any], key: str) -> bytes:
    """``template`` with ``key``'s string value replaced by the escape of a lone surrogate."""
    return json.dumps({**template, key: "@SURROGATE@"}).replace("@SURROGATE@", "\\ud800").encode()


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is Python's extension of JSON")


def _json(raw: bytes) -> Any:
    """``raw`` decoded as strict JSON (no ``NaN``/``Infinity``), else ``None``."""
    try:
        return json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return None


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and any("\ud800" <= ch <= "\udfff" for ch in item):
            return True
        if isinstance(item, dict):
            stack.extend([*item, *item.values()])
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _assert_no_traceback(raw: bytes) -> None:
    assert b"Traceback" not in raw and b'File "' not in raw, raw[:500]


# -- servers (one of each per module) ---------------------------------------------------------

@pytest.fixture(scope="module")
async def loop() -> asyncio.AbstractEventLoop:
    """The loop the module's servers run on; the sync ``@given`` checks drive it."""
    return asyncio.get_running_loop()


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[FakeOpenAI]:
    """An OpenAI-compatible upstream that always answers ``ANSWER``."""
    async with FakeOpenAI(model="fake-model", default_text=ANSWER) as fake:
        yield fake


def run(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    async def bounded() -> Any:
        try:
            async with asyncio.timeout(EXCHANGE_TIMEOUT_S):
                return await coro
        except TimeoutError:
            pytest.fail(f"no answer within {EXCHANGE_TIMEOUT_S} s (a hang)")

    return loop.run_until_complete(bounded())


async def exchange(http: aiohttp.ClientSession, url: str, body: bytes, content_type: str
                   ) -> tuple[int, Any, bytes]:
    async with http.post(url, data=body, headers={"Content-Type": content_type}) as resp:
        return resp.status, resp.headers, await resp.read()


# -- 1. LLM caller: POST /mcp/chat, /mcp/chatStream, /mcp/embed -------------------------------

CHAT = {"requestId": "fuzz-chat", "callerTool": "fuzz", "timestamp": "2024-05-01T12:00:00Z",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "model": "fake-model", "provider": "fake", "temperature": 0.5, "maxTokens": 16}
CHAT_MINIMAL = {"requestId": "fuzz-min", "callerTool": "fuzz",
                "messages": [{"role": "user", "content": "hi"}]}
EMBED = {"requestId": "fuzz-embed", "callerTool": "fuzz", "timestamp": "2024-05-01T12:00:00Z",
         "inputs": ["hello", "two words"], "model": "text-embedding-3-small", "dimensions": 8}
CALLER_ROUTES = {"/mcp/chat": ("chat_request", [CHAT, CHAT_MINIMAL]),
                 "/mcp/chatStream": ("chat_request", [CHAT, CHAT_MINIMAL]),
                 "/mcp/embed": ("embed_request", [EMBED])}
CALLER_EDGES = [_surrogate(CHAT, "requestId"), _surrogate(EMBED, "requestId"),
                json.dumps({**CHAT_MINIMAL, "requestId": "line\r\nx-injected: 1"}).encode(),
                json.dumps({**CHAT_MINIMAL, "requestId": " padded "}).encode(),
                json.dumps({**CHAT_MINIMAL, "requestId": "ünïcødé ☃"}).encode(),
                json.dumps({**CHAT_MINIMAL, "messages": [{"role": "user", "content": "@"}]})
                .replace("@", "\\udfff").encode(),
                json.dumps({**EMBED, "inputs": [json.loads(_deep(900))]}).encode(),
                json.dumps({**CHAT, "temperature": float("nan")}).encode(),
                json.dumps({**CHAT, "temperature": float("-inf")}).encode(),
                json.dumps({**CHAT, "maxTokens": 10**40}).encode(),
                json.dumps({**CHAT_MINIMAL, "messages": [json.loads(_deep(900))]}).encode()]
CALLER_CODES = {400: "BAD_REQUEST", 500: "INTERNAL_ERROR"}
CALLER_400 = ("Request body is not valid JSON", "Request body too large")


@pytest.fixture(scope="module")
async def caller(upstream: FakeOpenAI) -> AsyncIterator[Running]:
    async with run_caller(catalog(upstream), upstream) as running:
        yield running


@pytest.fixture(scope="module")
async def caller_http(caller: Running) -> AsyncIterator[aiohttp.ClientSession]:
    async with caller.session(TOKEN) as http:
        yield http


def _unknown_provider(request: Any, caller: Running) -> bool:
    return isinstance(request, dict) and isinstance(request.get("provider"), str) \
        and request["provider"] not in caller.service.entries


def check_caller(caller: Running, path: str, body: bytes, status: int, headers: Any,
                 raw: bytes) -> None:
    """The caller's contract for one answer (spec "Transport status & retry semantics")."""
    _assert_no_traceback(raw)
    schema, _ = CALLER_ROUTES[path]
    request = _json(body)
    # UTF-8 cannot carry a lone surrogate: I-JSON (RFC 7493) rejects them, so does the caller
    valid = request is not None and not _has_lone_surrogate(request) \
        and caller.service.schemas.is_valid(schema, request)
    assert headers.get("x-trace-id"), "every answer carries x-trace-id"
    if status >= 400:
        answer = json.loads(raw)
        assert set(answer) <= {"error", "message", "retryAfterMs", "traceId"}, answer
        assert answer["error"] == CALLER_CODES.get(status), (status, answer)
        assert isinstance(answer["message"], str) and answer["message"]
        assert unquote(headers["x-trace-id"]) == answer["traceId"]  # header-safe, same id
        if isinstance(request, dict) and isinstance(request.get("requestId"), str) \
                and request["requestId"] and answer["message"] not in CALLER_400:
            assert answer["traceId"] == request["requestId"]  # "the original traceId"
        assert status == 400, answer  # no 5xx: every error here is the client's
        if valid:  # the one error a valid body can earn: an unknown provider override
            assert _unknown_provider(request, caller), answer
            assert answer["message"].startswith("Unknown provider "), answer
        else:  # schema violations
            assert answer["message"] in CALLER_400 \
                or answer["message"].startswith("Schema validation failed: "), answer
        return
    assert status == 200 and valid and not _unknown_provider(request, caller), (status, raw)
    if path == "/mcp/chatStream":
        data = SSEDecoder().feed(raw)
        assert data[-1] == "[DONE]", raw
        events = [json.loads(d) for d in data[:-1]]
        assert all(e.get("type") == "delta" for e in events[:-1]), events
        assert events[-1]["type"] == "completion", events
        assert events[-1]["payload"]["message"]["content"] == ANSWER
        assert {e["traceId"] for e in events} == {request["requestId"]}
        return
    answer = json.loads(raw)
    assert answer["requestId"] == request["requestId"]
    if path == "/mcp/chat":
        assert answer["message"] == {"role": "assistant", "content": ANSWER}
    else:
        assert len(answer["vectors"]) == len(request["inputs"])


def test_caller_http_edge_survives_fuzzed_bodies(caller: Running,
                                                 caller_http: aiohttp.ClientSession,
                                                 loop: asyncio.AbstractEventLoop) -> None:
    def send_and_check(path: str, body: bytes) -> None:
        status, headers, raw = run(loop, exchange(caller_http, path, body, "application/json"))
        check_caller(caller, path, body, status, headers, raw)

    @given(data=st.data())
    @FUZZ
    def check(data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(sorted(CALLER_ROUTES)), label="path")
        send_and_check(path, data.draw(bodies(CALLER_ROUTES[path][1]), label="body"))

    check()
    for path in CALLER_ROUTES:
        sweep(CALLER_EDGES, lambda body, path=path: send_and_check(path, body))
    for path, (_, templates) in CALLER_ROUTES.items():  # still serving, correctly
        body = json.dumps(templates[0]).encode()
        status, headers, raw = run(loop, exchange(caller_http, path, body, "application/json"))
        assert status == 200, raw
        check_caller(caller, path, body, status, headers, raw)


# -- 2. prompt service: Connect JSON POST /prompt.v1.PromptService/Run ------------------------

RUN = "/prompt.v1.PromptService/Run"
STANDARD, COMPAT = "application/json", "application/connect+json"
PROMPT = {"tool_name": "echo", "input": "hi", "model": "fake-model", "temperature": 0.5,
          "max_output_tokens": 16,
          "tools": [{"type": "function", "function": {
              "name": "get_weather", "description": "weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}
PROMPT_CAMEL = {"toolName": "echo", "maxOutputTokens": 8,
                "input": [{"type": "text", "text": "a"}, {"content": "b"}, "c", {"x": 1}]}
PROMPT_EDGES = [_surrogate(PROMPT, "tool_name"), _surrogate(PROMPT, "input"),
                _surrogate(PROMPT, "model"),
                json.dumps({**PROMPT, "tool_name": "ec\x00ho"}).encode(),
                json.dumps({**PROMPT, "input": json.loads(_deep(900))}).encode(),
                json.dumps({**PROMPT, "max_output_tokens": 2**31}).encode(),
                json.dumps({**PROMPT, "temperature": 1e308}).encode(),
                json.dumps({**PROMPT, "temperature": float("nan")}).encode(),
                json.dumps({**PROMPT, "tools": [{"function": {"name": "f", "parameters": {
                    "x": float("inf")}}}]}).encode(),
                json.dumps({**PROMPT, "input": {"n": 1e300}}).replace("1e+300", "1e999").encode(),
                json.dumps({**PROMPT, "tools": [{"function": {"name": "f",
                                                              "parameters": []}}]}).encode()]
PROMPT_ERROR_CODES = {"invalid_argument", "not_found"}  # a client's body can earn no other


@pytest.fixture(scope="module")
async def prompt_http(upstream: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
                      ) -> AsyncIterator[aiohttp.ClientSession]:
    """The Connect HTTP server with one ``echo`` tool on the upstream (key from the vault)."""
    path = tmp_path_factory.mktemp("prompt-fuzz") / "tools.sqlite3"
    async with SQLiteToolStore(path) as store:
        await store.put(ToolConfig(name="echo", provider="openai", model="fake-model",
                                   base_url=upstream.base_url, api_key_secret="fake-key",
                                   temperature=0.7, max_output_tokens=32))
        factory = LLMFactory(timeout_s=10.0)
        service = PromptService(store, EnvFileVault(environ={"FAKE_KEY": API_KEY}), factory)
        try:
            async with PromptSidecar(service, port=0, grpc_port=None) as sidecar, \
                    aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.port}") as http:
                yield http
        finally:
            await factory.aclose()


def check_prompt(mode: str, status: int, headers: Any, raw: bytes) -> None:
    """Connect unary: standard mode answers the code's HTTP status and ``{code, message}``;
    the origin's mode (``application/connect+json``) answers 200 ``{"error": {...}}`` with
    ``Connect-Error-Code`` (spec "Error Surfaces": "JSON error envelope with Connect headers")."""
    _assert_no_traceback(raw)
    assert status < 500, (status, raw)
    answer = json.loads(raw)
    if mode == STANDARD and status != 200:
        assert set(answer) == {"code", "message"}, answer
        assert answer["code"] in PROMPT_ERROR_CODES and answer["message"], answer
        assert CONNECT_HTTP_STATUS[answer["code"]] == status, (status, answer)
        return
    assert status == 200, (status, raw)
    if "Connect-Error-Code" in headers:
        assert mode == COMPAT
        code = headers["Connect-Error-Code"]
        assert answer == {"error": {"code": code, "message": answer["error"]["message"],
                                    "details": []}}, answer
        assert code in PROMPT_ERROR_CODES and answer["error"]["message"], answer
        return
    assert headers["Content-Type"] == mode
    assert answer["object"] == "response" and answer["output"] == [
        {"type": "output_text", "text": ANSWER}], answer  # the spec's canonical response
    assert set(answer["usage"]) == {"input_tokens", "output_tokens", "total_tokens"}


def test_prompt_connect_edge_survives_fuzzed_bodies(prompt_http: aiohttp.ClientSession,
                                                    loop: asyncio.AbstractEventLoop) -> None:
    def send_and_check(mode: str, body: bytes) -> None:
        status, headers, raw = run(loop, exchange(prompt_http, RUN, body, mode))
        check_prompt(mode, status, headers, raw)

    @given(mode=st.sampled_from([STANDARD, COMPAT]), body=bodies([PROMPT, PROMPT_CAMEL]))
    @FUZZ
    def check(mode: str, body: bytes) -> None:
        send_and_check(mode, body)

    check()
    for mode in (STANDARD, COMPAT):
        sweep(PROMPT_EDGES, lambda body, mode=mode: send_and_check(mode, body))
    for mode in (STANDARD, COMPAT):  # still serving, correctly
        status, headers, raw = run(loop, exchange(prompt_http, RUN,
                                                  json.dumps(PROMPT).encode(), mode))
        assert (status, "Connect-Error-Code" in headers) == (200, False), raw
        check_prompt(mode, status, headers, raw)
        assert json.loads(raw)["model"] == "fake-model"


# -- 3. broker: the HTTP proxy's POST /llm_query and /llm_query_batched -----------------------

SINGLE = {"prompt": "hi", "model": "fake-model", "correlation_id": "fuzz-1", "depth": 1}
SINGLE_MESSAGES = {"prompt": [{"role": "system", "content": "be brief"},
                              {"role": "user", "content": "hi"}], "correlation_id": "fuzz-2"}
BATCHED = {"prompts": ["a", {"role": "user", "content": "b"}, [{"role": "user", "content": "c"}]],
           "model": "fake-model", "correlation_id": "fuzz-3"}
BROKER_ROUTES = {"/llm_query": [SINGLE, SINGLE_MESSAGES], "/llm_query_batched": [BATCHED]}
BROKER_EDGES = [_surrogate(SINGLE, "prompt"), _surrogate(SINGLE, "correlation_id"),
                json.dumps({**SINGLE, "prompt": {"deep": json.loads(_deep(900))}}).encode(),
                json.dumps({**BATCHED, "prompts": [[{"role": "user", "content": 5}]]}).encode()]


@pytest.fixture(scope="module")
async def broker_http(upstream: FakeOpenAI) -> AsyncIterator[aiohttp.ClientSession]:
    provider = OpenAICompatProvider(name="fake", base_url=upstream.base_url,
                                    default_model="fake-model", timeout_s=10.0)
    router = LLMRouter({"fake": provider}, default="fake")
    try:
        async with BrokerProxy(BrokerService(router)) as proxy, \
                aiohttp.ClientSession(proxy.url) as http:
            yield http
    finally:
        await router.aclose()


def _plain(request: Any, path: str) -> bool:
    """A request the broker must simply answer: string prompt(s), the default model or none,
    a string correlation id or none (other keys are ignored by the proxy)."""
    if not isinstance(request, dict) or _has_lone_surrogate(request):
        return False
    prompts = [request.get("prompt")] if path == "/llm_query" else request.get("prompts")
    return isinstance(prompts, list) and bool(prompts) \
        and all(isinstance(p, str) for p in prompts) \
        and (request.get("model") is None or request["model"] == "fake-model"
             or (isinstance(request["model"], str) and not request["model"].strip())) \
        and (request.get("correlation_id") is None or isinstance(request["correlation_id"], str))


def check_broker(path: str, body: bytes, status: int, raw: bytes) -> None:
    """Transport problems are 400 ``{"error"}``, logical errors 200 ``{"error"}`` (the origin's
    ``LLMProxyHandler``, spec "Docker proxy expectations": errors surface deterministically)."""
    _assert_no_traceback(raw)
    answer = json.loads(raw)
    request = _json(body)
    if _plain(request, path):
        expected = {"response": ANSWER} if path == "/llm_query" else {
            "responses": [ANSWER] * len(request["prompts"])}
        assert (status, answer) == (200, expected)
        return
    if status != 200:
        assert status == 400 and list(answer) == ["error"], (status, answer)
        assert isinstance(answer["error"], str) and answer["error"], answer
        return
    assert len(answer) == 1, answer
    if "error" in answer:
        assert isinstance(answer["error"], str) and answer["error"], answer
    elif path == "/llm_query":
        assert answer == {"response": ANSWER}
    else:
        assert all(r == ANSWER or (isinstance(r, str) and r.startswith("Error: "))
                   for r in answer["responses"]), answer


def test_broker_proxy_survives_fuzzed_bodies(broker_http: aiohttp.ClientSession,
                                             loop: asyncio.AbstractEventLoop) -> None:
    def send_and_check(path: str, body: bytes) -> None:
        status, _, raw = run(loop, exchange(broker_http, path, body, "application/json"))
        check_broker(path, body, status, raw)

    @given(data=st.data())
    @FUZZ
    def check(data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(sorted(BROKER_ROUTES)), label="path")
        send_and_check(path, data.draw(bodies(BROKER_ROUTES[path]), label="body"))

    check()
    for path in BROKER_ROUTES:
        sweep(BROKER_EDGES, lambda body, path=path: send_and_check(path, body))
    for path, template, expected in (("/llm_query", SINGLE, {"response": ANSWER}),
                                     ("/llm_query_batched", BATCHED,
                                      {"responses": [ANSWER] * 3})):  # still serving
        status, _, raw = run(loop, exchange(broker_http, path, json.dumps(template).encode(),
                                            "application/json"))
        assert (status, json.loads(raw)) == (200, expected)
