"""Async client helpers for the broker (spec "Error handling", client side).

- ``send_request`` raises ``BrokerError`` on transport/protocol failures and request-level errors.
- ``request_completion`` returns one ``ChatCompletion`` or raises (an item error included).
- ``request_completions_batched`` returns per-item ``BatchItem``s, so callers choose whether to
  raise or to turn errors into ``"Error: ..."`` strings; an empty batch sends nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..kit import close_stream
from .codec import DEFAULT_MAX_MESSAGE_BYTES, FrameDecoder, decode_payload, encode_frame
from .errors import BrokerError, FrameError, FrameTruncated, WireValidationError
from .messages import (
    ChatCompletion,
    Prompt,
    WireRequest,
    WireResponse,
    WireResult,
    safe_error_message,
)

__all__ = [
    "BatchItem",
    "request_completion",
    "request_completions_batched",
    "send_request",
]

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One batched result: a completion xor an error message."""

    completion: ChatCompletion | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """The response text, or the legacy ``"Error: <msg>"`` string."""
        return self.completion.response if self.completion else f"Error: {self.error}"


def _batch_item(result: WireResult) -> BatchItem:
    """A result's completion, or its error (an unreadable completion is one too)."""
    if result.error is not None:
        return BatchItem(error=result.error)
    try:
        return BatchItem(completion=ChatCompletion.from_dict(result.chat_completion))
    except WireValidationError as exc:
        return BatchItem(error=f"Invalid broker response: {exc}")


async def _exchange(address: Address, frame: bytes, max_bytes: int) -> bytes:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(frame)
        await writer.drain()
        decoder = FrameDecoder(max_bytes=max_bytes)
        while True:
            data = await reader.read(65536)
            if not data:
                if decoder.pending:
                    decoder.eof()  # raises FrameTruncated
                raise FrameTruncated("Connection closed before response frame")
            frames = decoder.feed(data)
            if frames:
                return frames[0]
    finally:
        await close_stream(writer)


async def send_request(address: Address, request: WireRequest, *,
                       timeout_s: float | None = 300.0,
                       max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> WireResponse:
    """Send one request on a new connection and return its response (no request-level error)."""
    try:
        async with asyncio.timeout(timeout_s):
            frame = encode_frame(request.to_dict(), max_bytes=max_bytes)
            payload = await _exchange(address, frame, max_bytes)
        response = WireResponse.from_dict(decode_payload(payload))
    except FrameTruncated as exc:
        raise BrokerError(str(exc)) from exc
    except (FrameError, WireValidationError) as exc:
        raise BrokerError(f"Invalid broker response: {exc}") from exc
    except Exception as exc:
        raise BrokerError(safe_error_message(exc)) from exc
    if response.error is not None:
        raise BrokerError(response.error)
    return response


async def request_completion(address: Address, prompt: Prompt, *, model: str | None = None,
                             correlation_id: str | None = None,
                             timeout_s: float | None = 300.0) -> ChatCompletion:
    """One prompt; ``BrokerError`` for any failure, the item's own error included."""
    response = await send_request(address, WireRequest(prompt=prompt, model=model,
                                                       correlation_id=correlation_id),
                                  timeout_s=timeout_s)
    if response.results is None or len(response.results) != 1:
        got = "none" if response.results is None else len(response.results)
        raise BrokerError(f"Invalid broker response: expected exactly 1 result, got {got}")
    item = _batch_item(response.results[0])
    if item.completion is None:
        raise BrokerError(item.error)
    return item.completion


async def request_completions_batched(address: Address, prompts: list[Prompt], *,
                                      model: str | None = None,
                                      correlation_id: str | None = None,
                                      timeout_s: float | None = 300.0) -> list[BatchItem]:
    """Many prompts in one request; per-item results in request order."""
    if not prompts:
        return []
    response = await send_request(address, WireRequest(prompts=list(prompts), model=model,
                                                       correlation_id=correlation_id),
                                  timeout_s=timeout_s)
    if response.results is None:
        raise BrokerError("Invalid broker response: missing results")
    if len(response.results) != len(prompts):
        raise BrokerError(f"Invalid broker response: expected {len(prompts)} results, "
                          f"got {len(response.results)}")
    return [_batch_item(result) for result in response.results]
