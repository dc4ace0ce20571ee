"""The caller's orchestrator: authorization, validation, routing, retries, normalized payloads.

Transport-agnostic: the HTTP routes and the MCP tools both call ``CallerService``; it talks to
providers only through the ``voice_server.llm`` layer (chat through an ``LLMRouter`` keyed by
provider, embeddings through each provider's ``embed``).

Spec: specs/sidecar-llm-caller-mcp.md ("Method catalog", "Phase 3 capability-routing interface
updates", "Response metadata", "Transport status & retry semantics"). Decision against the
original: when chat retries run out, the last provider error keeps its retry hint,
because the spec says the hint is surfaced whenever a provider requests backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from voice_server.llm import ChatRequest, LLMError, LLMProvider, LLMRouter, LLMUnavailable

from ..kit import AsyncService
from .config import CAPABILITIES, CallerOptions, ClientEntry, ClientRegistry, ProviderEntry
from .errors import (
    CallerError,
    ProviderError,
    bad_request,
    classify,
    forbidden,
    internal,
    unauthorized,
)
from .routing import FixedWindowLimiter, Selection, UnknownProvider, select_provider
from .schemas import SchemaSet
from .stream import sanitize_event

__all__ = ["CallerService", "ProviderRuntime", "now_iso"]

log = logging.getLogger(__name__)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class ProviderRuntime:
    """One catalog entry with the LLM-layer objects that serve it (``None``: not available)."""

    key: str
    entry: ProviderEntry
    chat: LLMProvider | None = None
    embedder: LLMProvider | None = None
    problem: str | None = None  # why ``chat`` is missing (configuration), for health details
    lent_chat: bool = False  # ``chat`` belongs to someone else, who closes it


class CallerService(AsyncService):
    """``async with CallerService(runtimes, registry=..., options=...) as service: ...``"""

    def __init__(self, runtimes: dict[str, ProviderRuntime], *, registry: ClientRegistry,
                 options: CallerOptions | None = None) -> None:
        if not runtimes:
            raise ValueError("at least one provider is needed")
        self.runtimes = runtimes
        self.entries = {key: rt.entry for key, rt in runtimes.items()}
        self.registry = registry
        self.options = options or CallerOptions()
        self.schemas = SchemaSet()
        self._limiter = FixedWindowLimiter(self.options.rate_limit_max,
                                           self.options.rate_limit_interval_ms)
        chat_providers = {key: rt.chat for key, rt in runtimes.items() if rt.chat is not None}
        self.router = LLMRouter(chat_providers, default=next(iter(chat_providers))) \
            if chat_providers else None

    async def aclose(self) -> None:
        runtimes = self.runtimes.values()
        owned = (p for rt in runtimes for p in (None if rt.lent_chat else rt.chat, rt.embedder))
        for provider in _distinct(owned):
            await provider.aclose()

    # -- access control (401: missing token; 403: unknown token or method) ---------

    def authorize(self, token: str | None, method: str) -> ClientEntry:
        if not token:
            raise unauthorized("Missing client token")
        client = self.registry.lookup(token)
        if client is None:
            raise forbidden("Unknown client token")
        if not client.may(method):
            raise forbidden(f"Client not permitted to call {method}")
        return client

    def _admit(self, client: ClientEntry) -> None:
        wait = self._limiter.hit(client.token_hash, time.monotonic())
        if wait is not None:
            raise CallerError(429, "RATE_LIMIT", "Too many requests; slow down.",
                              retry_after_ms=wait)

    def _prepare(self, schema: str, body: Any, client: ClientEntry) -> dict[str, Any]:
        self.schemas.validate(schema, body)
        body = {**body, "callerTool": client.tool_id}  # the token decides who is calling
        self._admit(client)  # after validation, before dispatch (the original's order)
        return body

    def _select(self, capability: str, body: dict[str, Any], what: str) -> Selection:
        try:
            return select_provider(self.entries, capability, provider=body.get("provider"),
                                   model=body.get("model"))
        except UnknownProvider as exc:
            if self.entries:  # the client named one we do not have (the original: a 500)
                raise self._unknown_provider(body.get("provider")) from exc
            raise internal(f"{what} dispatch failed") from exc

    def _unknown_provider(self, name: Any) -> CallerError:
        """The client named a provider we do not have: theirs to fix, so a BAD_REQUEST naming
        the ones we have (the original answered 500 INTERNAL_ERROR)."""
        return bad_request(f"Unknown provider {name!r}; configured: {sorted(self.entries)}")

    def _provider_info(self, selection: Selection, model: str | None = None) -> dict[str, Any]:
        return {"name": selection.provider, "model": model or selection.model,
                "routing": selection.routing()}

    def _chat_request(self, body: dict[str, Any], selection: Selection) -> ChatRequest:
        rt = self.runtimes[selection.provider]
        if rt.chat is None:
            raise ProviderError("CONFIG")
        model = selection.model or rt.chat.default_model
        return ChatRequest(
            messages=[{"role": m["role"], "content": m["content"]} for m in body["messages"]],
            model=f"{selection.provider}/{model}", temperature=body.get("temperature"),
            max_tokens=body.get("maxTokens"))

    # -- chat (retried for TEMPORARY and RATE_LIMIT) ---------------------------------------

    async def chat(self, body: Any, client: ClientEntry) -> dict[str, Any]:
        body = self._prepare("chat_request", body, client)
        selection = self._select("chat", body, "Chat")
        request = self._chat_request(body, selection)
        assert self.router is not None
        attempts = self.options.retry_attempts
        for attempt in range(1, attempts + 1):
            try:
                result = await self.router.complete(request)
                break
            except LLMError as exc:
                error = classify(exc)
                log.info("chat via %s failed (attempt %d/%d): %s", selection.provider, attempt,
                         attempts, exc)
                if not error.retryable or attempt == attempts:
                    raise error from exc
                hint = error.retry_after_ms / 1000 if error.retry_after_ms else 0.0
                await asyncio.sleep(min(max(hint, self.options.retry_backoff_s * attempt), 1.0))
        return {
            "requestId": body["requestId"],
            "message": {"role": "assistant", "content": result.text},
            "usage": _usage(result.usage.input_tokens, result.usage.output_tokens),
            "providerInfo": self._provider_info(selection, result.model),
            "traceId": result.id or body["requestId"],
        }

    # -- chatStream (never retried; errors end the stream) ---------------------------------

    def open_stream(self, body: Any, client: ClientEntry) -> AsyncIterator[dict[str, Any]]:
        """Validate, admit and route now (errors raise before any byte is sent), then return
        the sanitized event iterator; provider failures raise ``ProviderError`` from it."""
        body = self._prepare("chat_request", body, client)
        selection = self._select("chatStream", body, "Chat")
        request = self._chat_request(body, selection)
        return self._events(body["requestId"], selection, request)

    async def _events(self, trace_id: str, selection: Selection,
                      request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        assert self.router is not None
        parts: list[str] = []
        usage = _usage(0, 0)
        async with contextlib.aclosing(self.router.stream(request)) as stream:
            try:
                async for event in stream:
                    if event.text:
                        parts.append(event.text)
                        delta = sanitize_event({"type": "delta",
                                                "delta": {"content": event.text},
                                                "traceId": trace_id})
                        if delta is not None:
                            yield delta
                    if event.done and event.usage is not None:
                        usage = _usage(event.usage.input_tokens, event.usage.output_tokens)
            except LLMError as exc:
                raise classify(exc) from exc
        completion = sanitize_event({
            "type": "completion",
            "payload": {"message": {"role": "assistant", "content": "".join(parts)},
                        "usage": usage, "providerInfo": self._provider_info(selection)},
            "traceId": trace_id})
        if completion is not None:
            yield completion

    # -- embed ------------------------------------------------------------------------------

    async def embed(self, body: Any, client: ClientEntry) -> dict[str, Any]:
        body = self._prepare("embed_request", body, client)
        selection = self._select("embed", body, "Embed")
        embedder = self.runtimes[selection.provider].embedder
        if embedder is None:
            raise ProviderError("PERMANENT")
        inputs: list[str] = body["inputs"]
        try:
            if hasattr(embedder, "embed_with_usage"):
                vectors, tokens = await embedder.embed_with_usage(inputs, model=selection.model)
            else:
                vectors = await embedder.embed(inputs, model=selection.model)
                tokens = sum(len(text.split()) for text in inputs)
        except LLMError as exc:
            raise classify(exc) from exc
        if "dimensions" in body:
            vectors = [_shorten(v, body["dimensions"]) for v in vectors]
        return {
            "requestId": body["requestId"],
            "vectors": vectors,
            "usage": {"inputTokens": tokens, "totalTokens": tokens},
            "providerInfo": self._provider_info(selection),
            "traceId": body["requestId"],
        }

    # -- listModels -------------------------------------------------------------------------

    async def list_models(self, provider: str | None = None) -> dict[str, Any]:
        key = provider or next(iter(self.runtimes))
        rt = self.runtimes.get(key)
        if rt is None:  # the original answered 500 INTERNAL_ERROR: the mistake is the client's
            raise self._unknown_provider(key)
        ids: list[str] = []
        try:
            for source in _distinct((rt.chat, rt.embedder)):  # one discovery call per provider
                ids.extend(m for m in await source.list_models() if m not in ids)
        except LLMError as exc:
            raise internal("Model discovery failed") from exc
        models = []
        for model_id in ids:
            item: dict[str, Any] = {"id": model_id, "ready": True}
            defaults = [cap for cap, m in rt.entry.defaults.items() if m == model_id]
            if defaults:
                item["defaults"] = defaults
            if rt.entry.scores:
                item["scores"] = dict(rt.entry.scores)
            models.append(item)
        return {"provider": key, "models": models}

    # -- getHealth --------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        stamp = now_iso()
        components = [{"name": "transport", "status": "ok", "timestamp": stamp},
                      {"name": "orchestrator", "status": "ok", "timestamp": stamp}]
        probes = await asyncio.gather(*(self._probe(rt) for rt in self.runtimes.values()))
        components.extend(probes)
        statuses = {c["status"] for c in components}
        overall = "failed" if "failed" in statuses else "degraded" if "degraded" in statuses \
            else "ok"
        return {"status": overall, "timestamp": stamp, "components": components}

    async def _probe(self, rt: ProviderRuntime) -> dict[str, Any]:
        try:
            status, details, per_cap = await asyncio.wait_for(
                self._probe_status(rt), self.options.health_timeout_s)
        except TimeoutError:
            status, details, per_cap = "failed", "Health probe timed out", {}
        except Exception:  # a probe must never break the health answer
            log.exception("health probe of %s failed", rt.key)
            status, details, per_cap = "failed", "Health probe failed", {}
        component: dict[str, Any] = {"name": f"provider:{rt.key}", "status": status,
                                     "timestamp": now_iso()}
        if details:
            component["details"] = details
        component["capabilityCoverage"] = [
            {"capability": cap, "status": per_cap.get(cap, status)}
            for cap in rt.entry.capabilities]
        return component

    async def _probe_status(self, rt: ProviderRuntime,
                            ) -> tuple[str, str | None, dict[str, str]]:
        if rt.entry.kind == "local":
            per_cap = {cap: "ok" for cap in CAPABILITIES}
            details = None
            if rt.chat is None:
                per_cap["chat"] = per_cap["chatStream"] = "failed"
                details = rt.problem or "chat model unavailable"
            if rt.embedder is None or (await rt.embedder.health()).get("status") != "ok":
                per_cap["embed"] = "failed"
                details = details or "embedding model unavailable"
            declared = [per_cap.get(c, "ok") for c in rt.entry.capabilities]
            status = "ok" if all(s == "ok" for s in declared) else \
                "failed" if all(s == "failed" for s in declared) else "degraded"
            return status, details, per_cap
        assert rt.chat is not None
        try:
            models = await rt.chat.list_models()
        except LLMUnavailable as exc:
            if exc.status is not None and exc.status >= 500:
                return "degraded", f"Model discovery returned HTTP {exc.status}", {}
            return "failed", "Provider unreachable", {}
        except LLMError as exc:
            return "failed", classify(exc).message, {}
        if not models:
            return "degraded", "Provider reported zero models", {}
        return "ok", None, {}


def _distinct(providers: Iterable[LLMProvider | None]) -> list[LLMProvider]:
    """The providers, each once (a provider may serve both chat and embeddings)."""
    return list({id(p): p for p in providers if p is not None}.values())


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"inputTokens": input_tokens, "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens}


def _shorten(vector: list[float], dims: int) -> list[float]:
    """Keep the first ``dims`` components and re-normalize (a no-op when already shorter)."""
    if dims >= len(vector):
        return vector
    head = vector[:dims]
    norm = math.sqrt(sum(v * v for v in head)) or 1.0
    return [v / norm for v in head]
