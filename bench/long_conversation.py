"""Benchmark: the embedded model's first token over a long conversation, as the history sent
to it outgrows its window (``pipeline/turn.HistoryWindow``).

Asks ``--turns`` short typed questions in one conversation through the server's LLM layer
(the embedded default model, its prompt cache across turns) twice in the same run: with the
server's window, and with the baseline that drops the oldest turn each turn once the window
is full (the rule before 2026-11-28, which changed the second message of every prompt). Prints
JSON: per rule the first-token times of the turns before and after the window filled (p50,
max) and the ratio of the two rules' p50 after it.

    python bench/long_conversation.py [--turns 34] [--llm-profile medium] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = [
    "What is the capital of France?", "How many legs does a spider have?", "What do bees make?",
    "What color is the sky?", "Which planet do we live on?", "What is two plus three?",
    "Who wrote Romeo and Juliet?", "What is frozen water called?",
]


def one_turn_at_a_time(history: list[dict[str, Any]], window: Any) -> list[dict[str, Any]]:
    """The baseline: the newest messages that fit, the oldest turn dropped each turn."""
    items = history[-window.messages:]
    while items and sum(len(m["content"]) for m in items) > window.chars:
        items = items[1:]
    return [{"role": m["role"], "content": m["content"]} for m in items]


async def conversation(router: Any, system: str, turns: int, sent: Any, tag: str
                       ) -> list[float]:
    """First-token times of each turn; ``tag`` marks the questions so that no conversation
    reads another's prompt from the cache."""
    from voice_server.llm import ChatRequest

    history: list[dict[str, Any]] = []
    first_ms: list[float] = []
    for i in range(turns):
        question = {"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} ({tag}{i})"}
        messages = [{"role": "system", "content": system}, *sent(history), question]
        started, first, answer = time.monotonic(), None, ""
        async for event in router.stream(ChatRequest(messages=messages, max_tokens=40,
                                                     temperature=0.0)):
            if event.text and first is None:
                first = time.monotonic() - started
            answer += event.text or ""
        first_ms.append(round(1000 * (first or 0.0)))
        history += [question, {"role": "assistant", "content": answer}]
    return first_ms


def summary(first_ms: list[float], full_at: int) -> dict[str, Any]:
    before, after = first_ms[1:full_at], first_ms[full_at:]  # the first turn reads the prompt
    return {"first_token_ms": first_ms,
            "before_full": {"p50": statistics.median(before), "max": max(before)},
            "after_full": {"p50": statistics.median(after), "max": max(after)}}


async def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=34)
    parser.add_argument("--llm-profile", default="medium")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON here")
    args = parser.parse_args()

    from voice_server.config import load_settings
    from voice_server.llm.registry import build_router
    from voice_server.pipeline.turn import HistoryWindow, llm_messages

    settings = load_settings(None).model_copy(update={"llm_profile": args.llm_profile})
    window = HistoryWindow.from_settings(settings)
    full_at = window.messages // 2 + 1  # the first turn (from 0) whose history does not fit
    if args.turns <= full_at + 2:
        parser.error(f"--turns must be over {full_at + 2} (the window holds "
                     f"{window.messages} messages)")
    router = build_router(settings)
    try:
        ours = await conversation(router, settings.system_prompt, args.turns,
                                  lambda h: llm_messages(h, window), "a")
        baseline = await conversation(router, settings.system_prompt, args.turns,
                                      lambda h: one_turn_at_a_time(h, window), "b")
    finally:
        await router.aclose()
    result = {"turns": args.turns, "llm_profile": args.llm_profile,
              "window_messages": window.messages, "first_turn_over_window": full_at + 1,
              "ours": summary(ours, full_at), "baseline": summary(baseline, full_at)}
    result["after_full_p50_ratio"] = round(
        result["baseline"]["after_full"]["p50"] / max(1, result["ours"]["after_full"]["p50"]), 2)
    result["json_file"] = args.json
    return result


if __name__ == "__main__":
    figures = asyncio.run(main())
    to_file = figures.pop("json_file")
    text = json.dumps(figures, indent=2)
    print(text)
    if to_file:
        Path(to_file).write_text(text + "\n")
