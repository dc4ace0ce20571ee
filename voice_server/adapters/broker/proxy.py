"""The broker's HTTP proxy for code running in sandboxes (spec "Docker proxy expectations").

``POST /llm_query`` ``{prompt, model?, correlation_id?, depth?}`` -> ``{"response": text}`` and
``POST /llm_query_batched`` ``{prompts, ...}`` -> ``{"responses": [text | "Error: ...", ...]}``.
Status codes follow the original broker's ``LLMProxyHandler``: transport problems are 400,
other paths 404, and every logical error is **200** ``{"error": "..."}``. Calls go straight to
the in-process ``BrokerService`` and are recorded per ``correlation_id``; the additive
``GET /llm_calls/{correlation_id}`` returns them as ``ChatCompletion`` dicts.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ..kit import HTTPPort
from ..wire_json import has_lone_surrogate
from .messages import WireRequest, is_prompt, safe_error_message
from .service import BrokerService

__all__ = ["BrokerProxy"]


def _error(message: str, status: int = 200) -> web.Response:
    return web.json_response({"error": message}, status=status)


class BrokerProxy(HTTPPort):
    """``async with BrokerProxy(service, host="127.0.0.1", port=0) as proxy: proxy.url``."""

    name = "broker HTTP proxy"

    def __init__(self, service: BrokerService, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.service = service

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.service.options.max_message_bytes)
        app.router.add_post("/llm_query", self._single)
        app.router.add_post("/llm_query_batched", self._batched)
        app.router.add_get("/llm_calls/{correlation_id}", self._calls)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error("Not found", 404)

    async def _calls(self, request: web.Request) -> web.Response:
        calls = self.service.log.get(request.match_info["correlation_id"])
        return web.json_response({"calls": [c.to_dict() for c in calls]})

    async def _query(self, request: web.Request, key: str
                     ) -> tuple[Any, str | None, str | None] | web.Response:
        """``(body[key], model, correlation_id)`` of a query, or the answer refusing it."""
        length = request.headers.get("Content-Length")
        if length is None:
            return _error("Missing Content-Length", 400)
        try:
            size = int(length)
        except ValueError:
            return _error("Invalid Content-Length", 400)
        if size <= 0:
            return _error("Missing request body", 400)
        try:
            raw = await request.read()
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return _error("Invalid JSON payload", 400)
        except web.HTTPException:
            raise
        except Exception as exc:
            return _error(safe_error_message(exc), 400)
        if not isinstance(body, dict):
            return _error("Request body must be a JSON object", 400)
        if has_lone_surrogate(body):
            return _error("Invalid JSON payload: a string holds a lone surrogate", 400)
        value = body.get(key)
        if not (is_prompt(value) if key == "prompt" else
                isinstance(value, list) and all(is_prompt(p) for p in value)):
            return _error(f"Invalid {key}")
        model, cid = body.get("model"), body.get("correlation_id")
        if model is not None and not isinstance(model, str):
            return _error("Invalid model")
        if cid is not None and not isinstance(cid, str):
            return _error("Invalid correlation_id")
        return value, model, cid

    async def _single(self, request: web.Request) -> web.Response:
        query = await self._query(request, "prompt")
        if isinstance(query, web.Response):
            return query
        prompt, model, cid = query
        response = await self.service.handle(WireRequest(prompt=prompt, model=model,
                                                         correlation_id=cid))
        if response.error is not None:
            return _error(response.error)
        result = (response.results or [])[0]
        if result.error is not None:
            return _error(result.error)
        return web.json_response({"response": (result.chat_completion or {})["response"]})

    async def _batched(self, request: web.Request) -> web.Response:
        query = await self._query(request, "prompts")
        if isinstance(query, web.Response):
            return query
        prompts, model, cid = query
        if not prompts:
            return web.json_response({"responses": []})
        response = await self.service.handle(WireRequest(prompts=prompts, model=model,
                                                         correlation_id=cid))
        if response.error is not None:
            return _error(response.error)
        return web.json_response({"responses": [
            f"Error: {r.error}" if r.error is not None else (r.chat_completion or {})["response"]
            for r in response.results or []]})
