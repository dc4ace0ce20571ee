"""The seam with the voice pipeline: a real ``pipeline.turn.Turn`` driven by PlaybookResponder."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from tests.support.fake_openai import FakeOpenAI
from voice_server.llm import LLMRouter
from voice_server.metrics import TurnRecord
from voice_server.pipeline.speech import ChunkMessageOutput
from voice_server.pipeline.turn import Turn, TurnContext
from voice_server.playbook import PlaybookResponder, load_playbook
from voice_server.protocol import Message, encode

from .conftest import PLAYBOOKS, scaled


class SilentTTS:
    """Stands in for Piper: 10 ms of silence per sentence."""

    sample_rate = 16000

    async def synthesize(self, text: str, *, urgent: bool = False) -> np.ndarray:
        return np.zeros(160, dtype=np.int16)


async def test_turn_with_playbook_events_and_history(fake: FakeOpenAI, router: LLMRouter) -> None:
    """Wire events come in protocol order and the committed history holds the tool exchange."""
    sent: list[dict] = []

    async def emit(message: Message) -> None:
        sent.append(json.loads(encode(message)))

    fake.add('{"name": null, "time": null, "party_size": null}')
    pb = load_playbook(PLAYBOOKS / "restaurant.yaml")
    facts = {"name": "Mario Rossi", "party_size": 2, "time": "19:00"}
    state = {"playbook": "restaurant", "stage": "booking",  # every detail given, read back
             "facts": facts, "read_back": json.dumps(facts, sort_keys=True)}
    async with PlaybookResponder(pb, router) as responder:
        history = [{"role": "user", "content": "It's Mario Rossi"},  # the name, the caller's
                   {"role": "assistant", "content": "That's a table for 2 at 7 pm, under Mario "
                                                    "Rossi. Shall I book it?"}]
        ctx = TurnContext(history=history, user_message={"role": "user",
                                                         "content": "Yes, please."},
                          emit=emit, state=state)
        turn = Turn(ctx=ctx, responder=responder, tts=SilentTTS(),  # type: ignore[arg-type]
                    output=ChunkMessageOutput(emit), record=TurnRecord(session_id="s1"))
        turn.start()
        await asyncio.wait_for(turn.wait(), scaled(10))
    types = [m["type"] for m in sent]
    assert types[:3] == ["tool-call-start", "tool-call-end", "stage-change"]
    assert sent[2] == {"type": "stage-change", "from": "booking", "to": "confirmation",
                       "reason": "tool_result"}
    assert sent[0]["name"] == "book_table" and sent[0]["callId"] == sent[1]["callId"]
    assert sent[0]["arguments"] == {"name": "Mario Rossi", "time": "19:00", "party_size": 2}
    assert sent[1]["result"]["booked"] is True and sent[1]["durationMs"] >= 0
    assert "llm" in types and types[-1] == "tts-complete"
    roles = [m["role"] for m in turn.committed]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert turn.committed[1]["tool_calls"][0]["id"] == sent[0]["callId"]
    assert turn.committed[3]["content"] == \
        "All set! Your table for 2 at 7 pm is booked under Mario Rossi. See you then!"
    assert ctx.state["stage"] == "confirmation"
