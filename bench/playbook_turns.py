"""Benchmark: what a playbook adds to a turn, against an instant scripted LLM server.

Prints one JSON object with p50/p95 milliseconds of:
- ``chat_turn``: the plain ``ChatResponder`` answering one turn (baseline);
- ``playbook_turn``: ``PlaybookResponder`` (restaurant example) answering a turn without tools;
- ``playbook_tool_turn``: a turn with one tool round (LLM -> Python tool -> LLM), first text delta
  and end of turn;
- ``engine_start_turn_us``: one pure engine decision (keyword transitions), in microseconds.

    python bench/playbook_turns.py --turns 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_openai import FakeOpenAI, Reply  # noqa: E402
from voice_server.llm import LLMRouter  # noqa: E402
from voice_server.llm.openai_compat import OpenAICompatProvider  # noqa: E402
from voice_server.pipeline.turn import ChatResponder, TurnContext  # noqa: E402
from voice_server.playbook import Engine, PlaybookResponder, load_playbook  # noqa: E402

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def pct(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50": round(statistics.median(values), 2),
            "p95": round(values[min(len(values) - 1, int(0.95 * len(values)))], 2)}


async def turn(responder, state: dict, text: str) -> tuple[float, float]:
    async def emit(message) -> None:
        return None

    ctx = TurnContext(history=[], user_message={"role": "user", "content": text}, emit=emit,
                      state=state)
    start = time.perf_counter()
    first = None
    async for _ in responder.respond(ctx):
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    if ctx.after is not None:
        await ctx.after()
    return ((first or end) - start) * 1000, (end - start) * 1000


async def main(turns: int) -> dict:
    pb = load_playbook(PLAYBOOKS / "restaurant.yaml")
    async with FakeOpenAI(default_text="Hello there, how can I help?") as fake:
        router = LLMRouter({"fake": OpenAICompatProvider(base_url=fake.base_url,
                                                         default_model="m")}, default="fake")
        chat = ChatResponder(router, system_prompt="Be brief.")
        results: dict[str, object] = {"turns": turns}
        for _ in range(10):  # warm up the HTTP connection pool and code paths
            await turn(chat, {}, "hi")
        results["chat_turn"] = pct([(await turn(chat, {}, "hi"))[1] for _ in range(turns)])
        async with PlaybookResponder(pb, router) as responder:
            results["playbook_turn"] = pct(
                [(await turn(responder, {}, "hi"))[1] for _ in range(turns)])
            firsts, totals = [], []
            for _ in range(turns):
                fake.add(Reply(tool_calls=[{"name": "check_availability",
                                            "arguments": {"time": "19:00", "party_size": 2}}]),
                         "A table is free at seven.")
                first, total = await turn(responder, {}, "a table at 19:00 for two?")
                firsts.append(first)
                totals.append(total)
            results["playbook_tool_turn"] = {"first_text": pct(firsts), "total": pct(totals)}
        await router.aclose()
    engine = Engine(pb)
    samples = []
    for _ in range(2000):
        state = engine.initial_state(0.0)
        t0 = time.perf_counter()
        engine.start_turn(state, "I would like to reserve a table please", 1.0)
        samples.append((time.perf_counter() - t0) * 1e6)
    results["engine_start_turn_us"] = pct(samples)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    print(json.dumps(asyncio.run(main(parser.parse_args().turns))))
