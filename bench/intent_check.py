"""Benchmark: a playbook's intent check on the embedded model, right and how soon.

The support playbook's two stages that ask the model (``triage``: outage or billing, for lines
without the keywords that settle it; ``advice``: a ticket or done), with lines a caller says
and the intent each means ("none": neither). Each line is asked twice (the second from the
saved prompt as the first). Prints JSON: right of total, milliseconds per check (p50, mean),
the tokens read after the saved prompt, and every miss.

    python bench/intent_check.py [--profile medium]
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

from voice_server.llm import LLMRouter  # noqa: E402
from voice_server.llm.local import LocalLlamaProvider  # noqa: E402
from voice_server.playbook import PlaybookResponder, load_playbook  # noqa: E402

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "support.yaml"
LINES = {
    "triage": {
        "outage": ["Nothing loads on my laptop.", "I can't watch anything, it keeps buffering.",
                   "The lights on the box are red.", "Web pages take forever to open.",
                   "My video calls keep freezing."],
        "billing": ["Why is this month so expensive?", "You took money from my account twice.",
                    "How much do I pay each month?",
                    "I never ordered the sports package but I pay for it.",
                    "Can I get my money back?"],
        "none": ["Hello there.", "I'd like to change my address."],
    },
    "advice": {
        "ticket": ["I restarted the router and it is still slow.",
                   "It still drops every few minutes.", "Can you open a ticket?",
                   "I want an engineer to come out.", "That didn't help, it's still down.",
                   "I want a refund for this.", "I'd like to dispute the charge.",
                   "Restarting did not fix it.", "I was charged twice, I want to dispute it.",
                   "It's still not working."],
        "done": ["Okay, thank you, that's all.", "Thanks, bye.", "Great, it works now.",
                 "That's it, goodbye.", "Perfect, the internet is back.",
                 "Alright, thanks for your help.", "No, that's everything.",
                 "Okay. Thank you. That's all."],
        "none": ["How long will the repair take?", "What does that mean?",
                 "Is my neighbour affected too?"],
    },
}


async def main(profile: str) -> dict[str, object]:
    router = LLMRouter({"local": LocalLlamaProvider(profile=profile)}, default="local")
    ms: list[float] = []
    read: list[int] = []
    misses: list[dict[str, str | None]] = []
    total = 0
    try:
        async with PlaybookResponder(load_playbook(PLAYBOOK), router) as pb:
            for request in pb.warm_requests():  # as the server does before a call
                await router.warm(request)
            now = time.time()
            for stage, lines in LINES.items():
                st = pb.engine.restore({"playbook": "support", "stage": stage}, now)
                intents = pb.engine.needs_intent(st, "", now) or []
                for _ in range(2):
                    for want, said in ((w, s) for w, texts in lines.items() for s in texts):
                        started = time.perf_counter()
                        result = await router.complete(pb.requests.intent(st, said, intents))
                        ms.append((time.perf_counter() - started) * 1000)
                        read.append(result.usage.input_tokens - result.usage.cached_tokens)
                        got = json.loads(result.text or "{}").get("intent")
                        total += 1
                        if got != want:
                            misses.append({"stage": stage, "said": said, "want": want,
                                           "got": got})
    finally:
        await router.aclose()
    return {"profile": profile, "right": total - len(misses), "total": total,
            "ms": {"p50": round(statistics.median(ms)), "mean": round(statistics.mean(ms))},
            "read_tokens_p50": statistics.median(read), "misses": misses}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="medium", help="embedded model profile")
    print(json.dumps(asyncio.run(main(parser.parse_args().profile)), indent=1))
