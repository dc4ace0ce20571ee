"""Helpers shared by the playbook tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from voice_server.pipeline.turn import TurnContext
from voice_server.playbook import PlaybookResponder
from voice_server.protocol import Message


class Clock:
    """A settable wall clock for stage timeouts."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Conversation:
    """A session's history and state driven turn by turn through a responder."""

    responder: PlaybookResponder
    history: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    events: list[Message] = field(default_factory=list)

    def context(self, text: str) -> TurnContext:
        async def emit(message: Message) -> None:
            self.events.append(message)

        return TurnContext(history=self.history, user_message={"role": "user", "content": text},
                           emit=emit, state=self.state)

    async def turn(self, text: str) -> tuple[str, list[Message], TurnContext]:
        """Run one turn to the end; commit it to history like the pipeline does."""
        start = len(self.events)
        ctx = self.context(text)
        reply = "".join([d async for d in self.responder.respond(ctx)]).strip()
        if ctx.after is not None:  # as the server's Conversation does, after the turn
            await ctx.after()
        self.history.extend([ctx.user_message, *ctx.pending,
                             *([{"role": "assistant", "content": reply}] if reply else [])])
        return reply, self.events[start:], ctx
