"""A scripted OpenAI-compatible HTTP server for tests: the real chat-completions wire format.

Tests that need deterministic LLM behaviour start it on 127.0.0.1 and point the real ``openai``
client (through our ``llm/`` layer) at it. Each chat request gets the reply scripted for a
word of its question (``answer``), else pops the next scripted ``Reply`` (``add``); with an
empty script it answers ``default_text`` (or echoes the last user message).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeOpenAI", "Reply"]


@dataclass
class Reply:
    """One scripted answer. ``text`` is streamed in ``chunks`` pieces (split on spaces)."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "arguments"}]
    status: int = 200  # non-200: an OpenAI-style error body with this status
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the first byte
    chunk_delay_s: float = 0.0  # between streamed chunks
    stall_after_words: int = 0  # with ``stall_s``: stream this many words, then wait
    stall_s: float = 0.0
    error_message: str = "scripted failure"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # reported as OpenAI documents a prompt cache: usage.prompt_tokens_details.cached_tokens
    cached_tokens: int | None = None
    # a streamed call's arguments in this many chunks; the name in the first only (OpenAI's
    # documented stream), or in each of them as llama-cpp-python's server sends it
    call_chunks: int = 1
    name_in_each_chunk: bool = False
    cut_off: bool = False  # the stream ends after the text: no finish_reason, no [DONE]


class FakeOpenAI:
    """``async with FakeOpenAI() as fake: fake.base_url`` -> ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, *, model: str = "fake-model", default_text: str | None = None) -> None:
        self.model = model
        self.default_text = default_text
        self.default_delay_s = 0.0  # before the first byte of a ``default_text`` answer
        self.script: deque[Reply] = deque()
        # the reply to a request, from the request itself (None: the script and defaults):
        # for turns whose number of requests is not known (speculative answers in pauses)
        self.reply_for: Callable[[dict[str, Any]], Reply | None] | None = None
        # the reply to a question holding a word (see ``answer``), before the script
        self.answers: dict[str, Reply] = {}
        self.embed_script: deque[Reply] = deque()  # failures for /v1/embeddings (status != 200)
        self.models_status = 200  # answer /v1/models with this status (an error body if not 200)
        self.models_delay_s = 0.0  # wait this long before answering /v1/models (a hung endpoint)
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []  # HTTP headers, parallel to requests
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Reply | str) -> FakeOpenAI:
        for reply in replies:
            self.script.append(Reply(text=reply) if isinstance(reply, str) else reply)
        return self

    def answer(self, word: str, reply: Reply | str) -> FakeOpenAI:
        """Answer ``reply`` whenever the last user message holds ``word`` (any case; of
        several such words, the one said last), however many requests came before: a pause
        inside a spoken question may be answered speculatively (server/listening.py), and
        such a request would take a scripted reply meant for the real turn, or the next."""
        self.answers[word.lower()] = Reply(text=reply) if isinstance(reply, str) else reply
        return self

    def reset(self) -> None:
        """Forget every scripted reply (a test's leftovers would answer the next test)."""
        self.script.clear()
        self.answers.clear()
        self.reply_for = None

    def add_embed(self, *replies: Reply) -> FakeOpenAI:
        """Script /v1/embeddings answers; a 200 reply means "compute the vectors as usual"."""
        self.embed_script.extend(replies)
        return self

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _next(self, body: dict[str, Any]) -> Reply:
        if self.reply_for is not None and (reply := self.reply_for(body)) is not None:
            return reply
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1]["content"] if users else ""
        if isinstance(last, list):
            last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
        # the word said last: two questions heard as one turn get the second one's answer
        said = {str(last).lower().rfind(word): reply for word, reply in self.answers.items()}
        if max(said, default=-1) >= 0:
            return said[max(said)]
        if self.script:
            return self.script.popleft()
        if self.default_text is not None:
            return Reply(text=self.default_text, delay_s=self.default_delay_s)
        return Reply(text=f"You said: {last}")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        reply = self._next(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": reply.error_message, "type": "scripted", "code": None}},
                status=reply.status, headers=reply.headers)
        model = body.get("model") or self.model
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else sum(
            len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion_tokens = reply.completion_tokens if reply.completion_tokens is not None \
            else len(reply.text.split())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        calls = [{"id": f"call_{i}", "type": "function",
                  "function": {"name": c["name"], "arguments": c["arguments"]
                               if isinstance(c["arguments"], str) else json.dumps(c["arguments"])}}
                 for i, c in enumerate(reply.tool_calls)]
        finish = "tool_calls" if calls else "stop"
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if calls:
                message["tool_calls"] = calls
            return web.json_response({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": created,
                "model": model, "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> None:
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                     "created": created, "model": model, "choices": choices, **(extra or {})}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""},
                     "finish_reason": None}])
        words = reply.text.split(" ") if reply.text else []
        for i, word in enumerate(words):
            if reply.chunk_delay_s:
                await asyncio.sleep(reply.chunk_delay_s)
            if reply.stall_s and i == reply.stall_after_words:
                await asyncio.sleep(reply.stall_s)
            piece = word if i == 0 else " " + word
            await send([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
        if reply.cut_off:
            await resp.write_eof()
            return resp
        for i, call in enumerate(calls):
            args, n = call["function"]["arguments"], max(1, reply.call_chunks)
            size = -(-len(args) // n) or 1
            for k, start in enumerate(range(0, max(1, len(args)), size)):
                part: dict[str, Any] = {"index": i,
                                        "function": {"arguments": args[start:start + size]}}
                if k == 0:
                    part.update(id=call["id"], type="function")
                if k == 0 or reply.name_in_each_chunk:
                    part["function"]["name"] = call["function"]["name"]
                await send([{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}])
        await send([{"index": 0, "delta": {}, "finish_reason": finish}])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send([], {"usage": usage})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        reply = self.embed_script.popleft() if self.embed_script else None
        if reply is not None and reply.status != 200:
            return web.json_response(
                {"error": {"message": reply.error_message, "type": "scripted", "code": None}},
                status=reply.status, headers=reply.headers)
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        data = [{"object": "embedding", "index": i, "embedding": _hash_vector(text)}
                for i, text in enumerate(inputs)]
        return web.json_response({"object": "list", "data": data, "model": body.get("model"),
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    async def _models(self, request: web.Request) -> web.Response:
        if self.models_delay_s:
            await asyncio.sleep(self.models_delay_s)
        if self.models_status != 200:
            return web.json_response({"error": {"message": "scripted failure", "type": "scripted"}},
                                     status=self.models_status)
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]})


def _hash_vector(text: str, dims: int = 16) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    vec = [b / 255.0 - 0.5 for b in digest[:dims]]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]
