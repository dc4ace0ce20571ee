"""``Turn.wait`` and cancellation (issue 21): a barge-in (``Turn.cancel``) ends the wait
normally, with what was said kept; a cancellation of the waiter itself propagates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from voice_server.metrics import TurnRecord
from voice_server.pipeline.speech import ChunkMessageOutput
from voice_server.pipeline.turn import Turn, TurnContext
from voice_server.protocol import Message


class SilentTTS:
    sample_rate = 16000

    async def synthesize(self, text: str, *, urgent: bool = False) -> np.ndarray:
        return np.zeros(160, dtype=np.int16)


class SlowResponder:
    """One sentence now, then one every 50 ms, for a long time."""

    def interruptible(self, state: dict[str, Any]) -> bool:
        return True

    def turn_taking(self, state: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def respond(self, ctx: TurnContext) -> AsyncIterator[str]:
        for i in range(200):
            yield f"Sentence number {i} is here. "
            await asyncio.sleep(0.05)


def _turn() -> Turn:
    async def emit(message: Message) -> None:
        pass

    ctx = TurnContext(history=[], user_message={"role": "user", "content": "talk"}, emit=emit)
    return Turn(ctx=ctx, responder=SlowResponder(), tts=SilentTTS(),  # type: ignore[arg-type]
                output=ChunkMessageOutput(emit), record=TurnRecord(session_id="s"))


async def test_a_barge_in_ends_the_wait_and_keeps_what_was_said() -> None:
    turn = _turn()
    turn.start()
    waiter = asyncio.create_task(turn.wait())
    await asyncio.sleep(0.3)
    await turn.cancel()
    await asyncio.wait_for(waiter, 2)  # returns, no CancelledError
    assert turn.record.interrupted
    said = [m for m in turn.committed if m["role"] == "assistant"]
    assert said and said[0]["content"].startswith("Sentence number 0")


async def test_cancelling_the_waiter_propagates_and_leaves_the_turn_running() -> None:
    turn = _turn()
    turn.start()
    waiter = asyncio.create_task(turn.wait())
    await asyncio.sleep(0.2)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not turn.done  # the turn is stopped by cancel(), not by a waiter going away
    await turn.cancel()

