"""Benchmark: a collecting stage's note of the caller's facts on the embedded model, with the
values their words settle given to it (read with the JSON's keys) against written by the model.

The appointments playbook's answer to "Which day would suit you?": "On Monday at 10 in the
morning, please." and two more. The day is given either way; ``given`` gives the time too
(``heard.time_named``), ``written`` leaves it to the model. The two alternate in one process, so
a slow minute falls on both. Prints JSON: milliseconds per note (p50, mean) and the ratio.

    python bench/note_facts.py --rounds 4 [--profile medium]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voice_server.llm import LLMRouter  # noqa: E402
from voice_server.llm.local import LocalLlamaProvider  # noqa: E402
from voice_server.playbook import PlaybookResponder, load_playbook  # noqa: E402

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "appointments.yaml"
SAID = ("On Monday at 10 in the morning, please.",
        "On Tuesday at half past 2 in the afternoon, please.",
        "On Wednesday at 930 in the morning, please.")


async def main(rounds: int, profile: str) -> dict[str, object]:
    router = LLMRouter({"local": LocalLlamaProvider(profile=profile)}, default="local")
    ms: dict[str, list[float]] = {"given": [], "written": []}
    notes: dict[str, set[str]] = {"given": set(), "written": set()}
    try:
        async with PlaybookResponder(load_playbook(PLAYBOOK), router) as pb:
            for request in pb.warm_requests():  # as the server does before a call
                await router.warm(request)
            now = time.time()
            st = pb.engine.restore({"stage": "scheduling"}, now)
            sheet = pb.engine.sheets["scheduling"]
            asked = sheet.collect.ask["date"]
            for n in range(rounds):
                for said in SAID:
                    for kind in ("given", "written")[::1 if n % 2 == 0 else -1]:
                        request = pb.requests.note(st, sheet, asked, said, now)
                        if kind == "written":
                            given = sheet.given(said, pb.requests.today(now))
                            given.pop("time", None)
                            request = dataclasses.replace(
                                request, response_format=sheet.note_format(given))
                        start = time.perf_counter()
                        result = await router.complete(request)
                        ms[kind].append((time.perf_counter() - start) * 1000)
                        notes[kind].add(result.text)
    finally:
        await router.aclose()
    out: dict[str, object] = {
        kind: {"p50": round(statistics.median(v), 1), "mean": round(statistics.mean(v), 1),
               "n": len(v)} for kind, v in ms.items()}
    out["written_over_given_p50"] = round(statistics.median(ms["written"]) /
                                          statistics.median(ms["given"]), 2)
    out["same_notes"] = notes["given"] == notes["written"]
    out["profile"] = profile
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--profile", default="medium")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.rounds, args.profile))))
