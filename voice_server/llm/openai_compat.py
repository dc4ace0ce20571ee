"""Provider for any OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp).

Errors of the ``openai`` client are mapped to ``voice_server.llm.errors`` at this boundary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import InitVar, dataclass, field
from typing import Any

import openai

from . import errors
from .errors import LLMError
from .types import ChatRequest, ChatResult, StreamEvent, ToolCall, Usage

__all__ = ["OpenAICompatProvider", "map_openai_error"]

log = logging.getLogger(__name__)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def map_openai_error(exc: Exception, provider: str) -> LLMError:
    """Turn an ``openai`` exception into our taxonomy (the message never carries secrets)."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return errors.LLMTimeout("the LLM endpoint timed out", provider=provider)
    if isinstance(exc, openai.APIConnectionError):
        return errors.LLMUnavailable("the LLM endpoint cannot be reached", provider=provider)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = f"the LLM endpoint answered HTTP {status}"
        if status == 429:
            return errors.LLMRateLimited(detail, retry_after=_retry_after(exc),
                                         provider=provider, status=status)
        if status in (401, 403):
            return errors.LLMAuthError(detail, provider=provider, status=status)
        if status == 404:
            return errors.ModelNotFound(detail, provider=provider, status=status)
        if status in (400, 413, 422):
            return errors.LLMBadRequest(detail, provider=provider, status=status)
        if status >= 500:
            return errors.LLMUnavailable(detail, provider=provider, status=status)
        return LLMError(detail, provider=provider, status=status)
    return LLMError(f"LLM call failed: {type(exc).__name__}", provider=provider)


@dataclass(eq=False, kw_only=True)
class OpenAICompatProvider:
    """Chat, stream, embed and list models against one OpenAI-compatible base URL."""

    base_url: InitVar[str]
    api_key: InitVar[str | None] = None
    timeout_s: InitVar[float | None] = 60.0
    name: str = "openai_compat"
    default_model: str
    supports_vision: bool = False
    embedding_model: str | None = None
    stream_usage: bool = True
    first_token_timeout_s: float | None = None
    # the endpoint refused a json_schema response_format: structured output is asked as a
    # forced call of a tool whose parameters are the schema (``_complete_as_call``)
    schema_refused: bool = field(default=False, init=False)

    def __post_init__(self, base_url: str, api_key: str | None, timeout_s: float | None) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
        )

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model or self.default_model,
            "messages": request.messages,
        }
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_tokens is not None:
            params["max_tokens"] = request.max_tokens
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
        if request.stop:
            params["stop"] = request.stop
        if request.response_format is not None:
            params["response_format"] = request.response_format
        if request.timeout_s is not None:
            params["timeout"] = request.timeout_s
        return params

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage: Usage | None = None
        try:
            stream, first = await self._open(params)
            async with stream:
                async for chunk in _chain(first, stream):
                    if chunk.usage is not None:
                        usage = _usage(chunk.usage)
                    for choice in chunk.choices:
                        delta = choice.delta
                        if choice.finish_reason:
                            finish = choice.finish_reason
                        for tc in (delta.tool_calls or []) if delta else []:
                            slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                            if tc.id:
                                slot["id"] = tc.id
                            if tc.function and tc.function.name:
                                slot["name"] = _grown(slot["name"], tc.function.name)
                            if tc.function and tc.function.arguments:
                                slot["args"] += tc.function.arguments
                        if delta and delta.content:
                            yield StreamEvent(text=delta.content)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        if finish is None:  # every answer ends with one (OpenAI's stream): this one broke off
            raise errors.LLMUnavailable("the LLM endpoint's stream ended before its answer "
                                        "did (no finish_reason)", provider=self.name)
        tool_calls = tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["args"] or "{}")
            for i, c in sorted(calls.items())
        )
        yield StreamEvent(done=True, finish_reason=finish or "stop", tool_calls=tool_calls,
                          usage=usage)

    async def _open(self, params: dict[str, Any]) -> tuple[Any, Any]:
        """Send the request and wait for the first chunk, within the first-token timeout: an
        endpoint that accepts and never answers fails fast, not after the whole timeout."""
        try:
            async with asyncio.timeout(self.first_token_timeout_s):
                stream = await self._client.chat.completions.create(stream=True, **params)
                try:
                    first = await anext(aiter(stream))
                except StopAsyncIteration:
                    first = None
                except BaseException:
                    await stream.close()
                    raise
        except TimeoutError:
            raise errors.LLMTimeout(
                f"the LLM endpoint sent nothing for {self.first_token_timeout_s:g} s "
                "(llm_first_token_timeout_s; a slow endpoint's first prompt may need more)",
                provider=self.name) from None
        return stream, first

    async def complete(self, request: ChatRequest) -> ChatResult:
        structured = _schema_of(request.response_format)
        if structured and self.schema_refused:
            return await self._complete_as_call(request, *structured)
        try:
            resp = await self._client.chat.completions.create(**self._params(request))
        except openai.APIStatusError as exc:
            if structured and _refuses_schema(exc):
                self.schema_refused = True
                log.warning("LLM endpoint %s refused structured output (response_format "
                            "json_schema: HTTP %d %s); asking for it as a forced tool call from "
                            "now on", self.name, exc.status_code, _said(exc))
                return await self._complete_as_call(request, *structured)
            raise map_openai_error(exc, self.name) from exc
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        if not resp.choices:
            raise LLMError("the LLM endpoint returned no choices", provider=self.name)
        choice = resp.choices[0]
        calls = [
            ToolCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "{}")
            for tc in (choice.message.tool_calls or [])
            if getattr(tc, "function", None) is not None
        ]
        usage = _usage(resp.usage) if resp.usage else Usage()
        return ChatResult(text=choice.message.content or "", model=resp.model or
                          self._params(request)["model"], finish_reason=choice.finish_reason
                          or "stop", tool_calls=calls, usage=usage, id=resp.id or "")

    async def _complete_as_call(self, request: ChatRequest, name: str,
                                schema: dict[str, Any]) -> ChatResult:
        """Structured output from an endpoint without ``json_schema`` (llama-cpp-python's
        server answers HTTP 500): one tool whose parameters are the schema, its call forced;
        the call's arguments are the answer's text. Without it a playbook's ``collect``
        stages noted nothing through such an endpoint, and no booking was made. The schema
        goes without its ``pattern``s: that server's grammar could not take a date's
        (``failed to parse grammar``, and the server process died); the caller checks the
        values against the full schema anyway (playbook/collect.py)."""
        tool = {"type": "function", "function": {"name": name, "parameters": _unpatterned(schema)}}
        result = await self.complete(dataclasses.replace(
            request, response_format=None, tools=[tool],
            tool_choice={"type": "function", "function": {"name": name}}))
        call = next((c for c in result.tool_calls if c.name == name), None)
        if call is None:
            return result
        return dataclasses.replace(result, text=call.arguments, tool_calls=[],
                                   finish_reason="stop")

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        try:
            resp = await self._client.embeddings.create(
                model=model or self.embedding_model or self.default_model, input=texts)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        return [list(item.embedding) for item in sorted(resp.data, key=lambda d: d.index)]

    async def list_models(self) -> list[str]:
        try:
            page = await self._client.models.list()
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        return [m.id async for m in page]

    async def problem(self, model: str | None, timeout_s: float = 3.0) -> str | None:
        """What keeps this endpoint from answering ``model``'s turns, said at start, or None:
        it cannot be reached, or does not list the model (Ollama's "llama3.2" is its
        "llama3.2:latest"). A llama.cpp server (llama-server, llama-cpp-python's) lists its
        one model by its ``.gguf`` file and answers any name with it: that is no problem (the
        latency benchmark's server was said to fail every turn, and answered them all). Asks
        for its models only, no answer."""
        try:
            async with asyncio.timeout(timeout_s):
                models = await self.list_models()
        except TimeoutError:
            return f"the LLM endpoint sent no list of models in {timeout_s:g} s"
        except LLMError as exc:
            return str(exc)
        if len(models) == 1 and models[0].lower().endswith(".gguf"):
            return None
        if model and models and not any(m == model or m.startswith(f"{model}:")
                                         for m in models):
            listed = ", ".join(models[:8]) + (", ..." if len(models) > 8 else "")
            return f"the LLM endpoint has no model {model!r} (it lists {listed})"
        return None

    async def health(self) -> dict[str, Any]:
        try:
            models = await self.list_models()
        except LLMError as exc:
            return {"status": "failed", "provider": self.name, "error": str(exc)}
        return {"status": "ok", "provider": self.name, "models": len(models)}

    async def aclose(self) -> None:
        await self._client.close()



def _schema_of(response_format: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """The name and schema of a ``json_schema`` response format, else None."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    return (spec.get("name") or "answer"), spec.get("schema") or {"type": "object"}


def _unpatterned(schema: Any) -> Any:
    """``schema`` without ``pattern`` keywords, at any depth (a property may be named so)."""
    if isinstance(schema, list):
        return [_unpatterned(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _unpatterned(v) for k, v in schema.items() if k not in ("pattern", "properties")}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _unpatterned(v) for k, v in schema["properties"].items()}
    return out


def _said(exc: openai.APIStatusError) -> str:
    """What the endpoint said in its error body, shortened (for the log, not the client)."""
    body = exc.body  # the client gives the body's "error" object when it has one
    if isinstance(body, dict):
        inner = body.get("error")
        body = body.get("message") or (inner.get("message") if isinstance(inner, dict)
                                       else inner) or body.get("detail") or body
    text = " ".join(str(body).split())
    return f"'{text[:200]}...'" if len(text) > 200 else f"'{text}'"


def _refuses_schema(exc: openai.APIStatusError) -> bool:
    """An endpoint's refusal of ``response_format`` json_schema: an error that names it
    (OpenAI and vLLM answer 400, llama-cpp-python's server 500 with its validation error)."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422, 500, 501) and (
        "response_format" in text or "json_schema" in text)


def _grown(name: str, piece: str) -> str:
    """A streamed call's name with the next ``piece``: OpenAI sends it once (or in parts to
    join); llama-cpp-python's server sends the whole name again with every chunk, which
    joined gave ``find_appointmentsfind_appointments...`` and an unknown tool."""
    return piece if piece.startswith(name) else name + piece


async def _chain(first: Any, rest: Any) -> AsyncIterator[Any]:
    if first is not None:
        yield first
    async for item in rest:
        yield item


def _usage(usage: Any) -> Usage:
    """An OpenAI ``usage`` object; ``prompt_tokens_details.cached_tokens`` where the endpoint
    reports its prompt cache (read with getattr: an older openai client, which our pin
    allows, may have no such field)."""
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0,
                 getattr(details, "cached_tokens", None) or 0)
