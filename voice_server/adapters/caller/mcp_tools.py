"""The five caller methods as real MCP tools (official ``mcp`` SDK, low-level ``Server``).

Spec: specs/sidecar-llm-caller-mcp.md, "Interface decision summary" (MCP, JSON-RPC over
loopback) and "Method catalog"; how to expose it: tools ``chat``, ``chatStream``,
``embed``, ``listModels``, ``getHealth``; ``inputSchema`` is the published request schema minus
``callerTool`` (it comes from the client token); results carry ``structuredContent`` and the
same JSON as text; taxonomy errors are tool errors (``isError``) whose text is the HTTP error
body; an unknown tool is JSON-RPC ``-32602``. MCP results do not stream, so ``chatStream``
sends each delta as a ``notifications/progress`` (when the client asked for progress) and
returns every event.

Identity: over HTTP the ``x-llm-caller-token`` (or ``Authorization: Bearer``) header of the
request; over stdio the token given at start (``--token`` / ``LLM_CALLER_TOKEN``), or, with no
registry at all, a local client allowed everything (only the parent process can reach stdio).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from .config import METHODS, ClientEntry
from .errors import CallerError, internal
from .schemas import mcp_input_schema
from .service import CallerService

__all__ = ["TOOLS", "build_mcp_server", "request_token"]

log = logging.getLogger(__name__)

# tool name -> (registry permission, input schema name, description)
TOOLS: dict[str, tuple[str, str, str]] = {
    "chat": ("chat", "chat_request", "Chat completion routed by capability; returns the "
             "assistant message, usage, providerInfo (with routing) and traceId."),
    "chatStream": ("chatStream", "chat_request", "Streamed chat: deltas arrive as progress "
                   "notifications; the result lists every sanitized event."),
    "embed": ("embed", "embed_request", "Embedding vectors for each input string."),
    "listModels": ("models", "models_request", "Models of a provider (default: the first), "
                   "with capability defaults and scores."),
    "getHealth": ("getHealth", "health_request", "Aggregated health with per-provider "
                  "capability coverage."),
}


def request_token(headers: Any) -> str | None:
    """The client token of an HTTP request: ``x-llm-caller-token``, else a Bearer token."""
    token = headers.get("x-llm-caller-token")
    if token:
        return token
    auth = headers.get("authorization") or ""
    scheme, _, value = auth.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _result(payload: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=None if error else payload, is_error=error)


def _progress_token(ctx: Any) -> str | int | None:
    meta = getattr(ctx, "meta", None)
    if not meta:
        return None
    getter = meta.get if isinstance(meta, dict) else lambda k: getattr(meta, k, None)
    return getter("progress_token") or getter("progressToken")


def build_mcp_server(service: CallerService, *, stdio_token: str | None = None,
                     name: str = "voice-server-llm-caller") -> Server[Any]:
    """An MCP ``Server`` whose tools call ``service`` (serve it over stdio or HTTP)."""

    def identify(ctx: Any, permission: str) -> ClientEntry:
        request = getattr(ctx, "request", None)
        if request is not None and hasattr(request, "headers"):
            return service.authorize(request_token(request.headers), permission)
        if stdio_token is None and len(service.registry) == 0:
            return ClientEntry("stdio", "stdio", frozenset(METHODS))
        return service.authorize(stdio_token, permission)

    tools = [types.Tool(name=tool, description=desc, input_schema=mcp_input_schema(schema))
             for tool, (_, schema, desc) in TOOLS.items()]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOLS:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        permission, _, _ = TOOLS[params.name]
        args = dict(params.arguments or {})
        trace_id = args.get("requestId") if isinstance(args.get("requestId"), str) else None
        try:
            client = identify(ctx, permission)
            return _result(await _dispatch(service, ctx, params.name, args, client))
        except CallerError as exc:
            return _result(exc.body(trace_id or f"trace-{uuid.uuid4().hex}"), error=True)
        except Exception:
            log.exception("tool %s failed", params.name)
            body = internal(f"{params.name} failed").body(trace_id)
            return _result(body, error=True)

    return Server(name, version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def _dispatch(service: CallerService, ctx: Any, tool: str, args: dict[str, Any],
                    client: ClientEntry) -> dict[str, Any]:
    if tool in ("chat", "chatStream", "embed"):
        args.setdefault("callerTool", client.tool_id)
    if tool == "chat":
        return await service.chat(args, client)
    if tool == "embed":
        return await service.embed(args, client)
    if tool == "listModels":
        service.schemas.validate("models_request", args)
        return await service.list_models(args.get("provider"))
    if tool == "getHealth":
        service.schemas.validate("health_request", args)
        return await service.health()
    events: list[dict[str, Any]] = []
    token = _progress_token(ctx)
    # a provider error mid-stream propagates: the whole call becomes a tool error
    async for event in service.open_stream(args, client):
        events.append(event)
        if token is not None and event["type"] == "delta":
            await ctx.session.send_progress_notification(
                token, float(len(events)), message=event["delta"]["content"],
                related_request_id=getattr(ctx, "request_id", None))
    return {"traceId": args.get("requestId"), "events": events}
