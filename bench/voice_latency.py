"""Benchmark: voice-to-voice and barge-in latency over WebRTC, voice_server against Pipecat.

Both systems run as subprocesses with the same models (Whisper tiny.en, Piper joe, SmolLM2 via
one shared llama-cpp-python OpenAI-compatible server) inside a private network namespace;
scripted aiortc peers speak espeak-ng (or, with ``--voice piper``, the bundled Piper voice) and
time the audio they get back. Phases, each run
for voice_server then Pipecat, interleaved:

1. local LLM: voice-to-voice at 1, 2 and 4 concurrent sessions (p50/p95/max), CPU and RSS of
   the server process (psutil), the server's own turn records and event-loop lag (ours);
2. sequential connections: RSS after each of N connections (one turn each); then, with
   ``--embedded``, the turn-taking cases' paused sentences answered by the embedded default
   model (``paused-embedded``: false ends, turns taken back);
3. scripted LLM (instant, from ``tests/support/fake_openai.py``): the pipeline's floor (after a
   turn not counted) and barge-in reaction (onset of interrupting speech -> agent audio
   silent) on a long answer;
4. turn-taking (``bench/_turn_taking.py``, same scripted LLM): false ends of turn on 0.8 s
   pauses mid-sentence, false barge-ins on acknowledgements and noises over the agent;
5. echo (``bench/_echo.py``, same scripted LLM): a client without echo cancellation, its
   speaker's sound back in its microphone: self-interruptions, and the user interrupting
   through the echo (reaction, the question heard clean), against the same without echo.

Prints JSON with the ratios Pipecat/voice_server of p50 and p95, and writes a PNG timeline.

    python bench/voice_latency.py --pipecat-python /work/venv-pipecat/bin/python \\
        --chart docs/latency.png
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from voice_server.workers import OFFLINE_ENVIRONMENT  # noqa: E402

# onnxruntime (the Piper voice, Smart Turn, Pipecat's models) reads it when imported
os.environ.update(OFFLINE_ENVIRONMENT)
from bench._netns import reexec_in_private_netns  # noqa: E402
from bench._systems import System, build_systems, start_llama, wait_http  # noqa: E402

QUESTIONS = ["What is the capital of France?", "How far away is the moon?",
             "Name a fruit that is yellow.", "Why is the sky blue?",
             "What do cats like to eat?", "What is two plus two?"]
SHORT = "Paris is the capital of France."
LONG = ("Let me tell you a long story about the sea. The waves roll in slowly every morning. "
        "Fishermen go out before the sun rises. They bring back fish for the market. Children "
        "play on the warm sand all day. In the evening the lighthouse shines across the water.")


def speech48k(text: str, folder: Path, pad=(1.0, 1.0), voice: str = "espeak") -> np.ndarray:
    """48 kHz speech of ``text`` with exactly ``pad`` seconds of silence around it (the
    synthesizer's own leading and trailing silence cut first: espeak-ng adds ~0.2 s at each
    end, which made a "0.8 s" pause between two halves 1.2 s of silence), in espeak-ng's robotic
    voice or in the bundled Piper voice (natural intonation, as a person asks)."""
    from voice_server.pipeline.audio import (
        decode_wav,
        resample,
        trim_leading_silence,
        trim_trailing_silence,
    )

    if voice == "piper":
        pcm = resample(_piper().synthesize(text, False), _piper().sample_rate, 48000)
    else:
        raw, out = folder / "raw.wav", folder / f"{abs(hash(text))}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text],
                       check=True)
        subprocess.run(["sox", str(raw), "-r", "48000", "-c", "1", "-b", "16", str(out)],
                       check=True)
        pcm = decode_wav(out.read_bytes(), max_seconds=60, to_rate=48000)
    pcm = trim_trailing_silence(trim_leading_silence(pcm, 48000, keep_ms=0), 48000, keep_ms=0)
    return np.concatenate([np.zeros(int(48000 * pad[0]), np.int16), pcm,
                           np.zeros(int(48000 * pad[1]), np.int16)])


def _speech_in(folder: Path, voice: str, text: str, pad: tuple[float, float]) -> np.ndarray:
    """``speech48k`` as the turn-taking and echo phases call it: ``speech(text, pad)``."""
    return speech48k(text, folder, pad, voice)


@functools.cache
def _piper() -> Any:
    from voice_server.pipeline.tts import PiperService, default_piper_voice

    return PiperService(voice=str(default_piper_voice()))


def stats(values: list[float | None]) -> dict[str, Any]:
    v = sorted(x for x in values if x is not None)
    missing = sum(1 for x in values if x is None)
    if not v:
        return {"n": 0, "missing": missing}
    return {"n": len(v), "p50": round(float(np.percentile(v, 50)), 1),
            "p95": round(float(np.percentile(v, 95)), 1), "max": round(max(v), 1),
            "missing": missing}


async def session(system: System, wavs: list[np.ndarray], turns: int, offset: int
                  ) -> list[dict[str, Any]]:
    from bench._peers import turn

    out = []
    async with system.client() as client:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(client.negotiate(), 120)
        except TimeoutError:
            print(f"#   {system.name} session {offset}: no connection", file=sys.stderr)
            return [{"v2v_ms": None, "connect_ms": None, "no_connection": True}]
        print(f"#   {system.name} session {offset} connected", file=sys.stderr, flush=True)
        connect_ms = round((time.monotonic() - t0) * 1000, 1)
        await asyncio.sleep(0.5)
        for i in range(turns):
            try:
                result = await turn(client, wavs[(offset + i) % len(wavs)])
            except TimeoutError:  # the connection died: count it, do not hang the run
                print(f"#   {system.name} session {offset}: connection lost", file=sys.stderr)
                out.append({"v2v_ms": None, "connect_ms": connect_ms, "lost": True})
                break
            print(f"#   {system.name} session {offset} turn {i}: {result['v2v_ms']} ms",
                  file=sys.stderr, flush=True)
            result["connect_ms"] = connect_ms
            out.append(result)
            await asyncio.sleep(0.3)
    return out


async def concurrency_phase(systems: list[System], wavs, levels: list[int], turns: int
                            ) -> dict[str, Any]:
    result: dict[str, Any] = {s.name: {} for s in systems}
    for n in levels:
        for system in systems:  # interleaved: each level runs on both before the next
            assert system.sampler is not None
            with system.sampler:
                runs = await asyncio.gather(*(session(system, wavs, turns, k)
                                              for k in range(n)))
            flat = [r for run in runs for r in run]
            dump = await system.dump()
            entry = {"voice_to_voice_ms": stats([r["v2v_ms"] for r in flat]),
                     "connect_ms": stats([r["connect_ms"] for r in runs[0][:1]]),
                     "no_reply": sum(1 for r in flat if r["v2v_ms"] is None),
                     **system.sampler.summary()}
            if dump:
                recs = [t for t in dump["turns"] if not t["interrupted"]]
                entry["server"] = {k: stats([t[k] for t in recs]) for k in (
                    "stt_ms", "llm_ttft_ms", "tts_first_audio_ms", "first_audio_ms",
                    "overhead_ms", "longest_gap_ms")}
                # a gap: the answer's next piece was not ready when the previous one ended
                entry["server"]["turns_with_gap_over_100ms"] = sum(
                    t["longest_gap_ms"] > 100 for t in recs)
                # pieces cut at a word so the speech would not run dry (pipeline/pacing.py)
                entry["server"]["early_cuts"] = sum(t.get("early_cuts", 0) for t in recs)
                # prompt tokens each answer read once asked (the rest was read ahead: the
                # history's, and the user's words while they spoke: llm_prefill)
                entry["server"]["prompt_read"] = stats([t.get("prompt_read") for t in recs])
                entry["server"]["speculative_stt_used"] = sum(t["speculative_stt"]
                                                              for t in recs)
                # nobody interrupts on purpose here: a cut answer means the client heard
                # QUIET_S (1.5 s) of silence inside it, took it for the end, and spoke again
                entry["server"]["answers_cut_by_next_question"] = len(dump["turns"]) - len(recs)
                lag = dump["loop_lag_ms"]
                entry["loop_lag_ms"] = stats(lag)
                entry["audio_behind"] = dump.get("audio_behind")  # frames and late ones
                entry["_records"] = dump["turns"]  # every turn's, in order (the chart's)
            entry["_turns"] = flat
            result[system.name][f"sessions_{n}"] = entry
            print(f"# {system.name} x{n}: {entry['voice_to_voice_ms']}", file=sys.stderr)
    return result


async def connections_phase(systems: list[System], wavs, count: int) -> dict[str, Any]:
    from bench._peers import turn

    out = {}
    for system in systems:
        assert system.sampler is not None
        rss = []
        failure = None
        for i in range(count):
            try:
                async with system.client() as client:
                    await client.negotiate()
                    await turn(client, wavs[i % len(wavs)])
            except (TimeoutError, OSError) as exc:  # a system that stops answering is a result
                failure = f"connection {i + 1}: {type(exc).__name__} {exc}".strip()
                break
            await asyncio.sleep(0.5)
            rss.append(system.sampler.rss_mb())
        out[system.name] = {"connections": len(rss), "failure": failure,
                            "rss_mb_after_first": rss[0] if rss else None,
                            "rss_mb_after_last": rss[-1] if rss else None,
                            "growth_pct": round((rss[-1] / rss[0] - 1) * 100, 1) if rss else None,
                            "rss_mb": rss}
        print(f"# {system.name} connections: {out[system.name]}", file=sys.stderr)
    return out


async def scripted_phase(systems: list[System], fake, wavs, story, interrupt, turns: int,
                         barge_ins: int) -> dict[str, Any]:
    from bench._peers import barge_in, turn
    from bench._turn_taking import end_of_turn_reasons

    out: dict[str, Any] = {}
    for system in systems:
        fake.default_text = SHORT
        async with system.client() as client:
            await client.negotiate()
            await asyncio.sleep(0.5)
            # a turn not counted first: a system's first transcription is slower than the rest
            # (866 ms against ~220 with Pipecat starting beside it), so it is no floor
            await turn(client, wavs[-1])
            floor = [await turn(client, wavs[i % len(wavs)]) for i in range(turns)]
            reactions = []
            for _ in range(barge_ins):
                fake.default_text = LONG
                reactions.append(await barge_in(
                    client, story, interrupt, on_answer=lambda: setattr(fake, "default_text",
                                                                        SHORT)))
        dump = await system.dump()
        entry = {"voice_to_voice_ms": stats([r["v2v_ms"] for r in floor]),
                 "barge_in_reaction_ms": stats([r["reaction_ms"] for r in reactions
                                                if r["talking_at_onset"]]),
                 "barge_in_invalid": sum(1 for r in reactions if not r["talking_at_onset"]),
                 "barge_in_no_answer": sum(1 for r in reactions if r["no_answer"])}
        if dump:
            cut = [t for t in dump["turns"] if t["interrupted"]]
            entry["server_cancel_ms"] = stats([t["barge_in_ms"] for t in cut])
            entry["end_of_turn_ms"] = stats([t["end_of_turn_ms"] for t in dump["turns"]])
            entry["end_of_turn_reasons"] = end_of_turn_reasons(dump["turns"])
            entry["_turns"] = dump["turns"]
        out[system.name] = entry
        print(f"# {system.name} scripted: {entry}", file=sys.stderr)
    return out


def ratio(result: dict[str, Any], key: str) -> float | None:
    ours = result.get("ours", {}).get("voice_to_voice_ms", {}).get(key)
    theirs = result.get("pipecat", {}).get("voice_to_voice_ms", {}).get(key)
    return round(theirs / ours, 2) if ours and theirs else None


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6, help="turns per session and level")
    parser.add_argument("--sessions", default="1,2,4", help="concurrency levels")
    parser.add_argument("--connections", type=int, default=20,
                        help="sequential connections for the RSS check (0: skip)")
    parser.add_argument("--barge-ins", type=int, default=4)
    parser.add_argument("--turn-cases", type=int, default=20, help="cases of each turn-taking "
                        "kind (0.8 s pauses mid-sentence; sounds over the agent)")
    parser.add_argument("--turn-llm-delay-ms", type=int, default=0,
                        help="the scripted LLM's first-token delay in the paused sentences "
                        "(e.g. 600, as the embedded 1.5B model on 2 cores; default 0: instant)")
    parser.add_argument("--echo-cases", type=int, default=6, help="cases of each echo kind "
                        "(the story with its echo; interrupted through it), with and without")
    parser.add_argument("--echo-gain-db", type=float, default=-10.0,
                        help="level of the echo against the agent's voice (default -10 dB)")
    parser.add_argument("--pipecat-python", help="python of a venv with pipecat-ai (skip if "
                        "not given)")
    parser.add_argument("--llama-python", help="python with llama-cpp-python[server] (default: "
                        "--pipecat-python, else this one)")
    parser.add_argument("--ours-settings", default="{}", help="JSON Settings overrides")
    parser.add_argument("--llm-threads", type=int, default=2,
                        help="threads of the shared llama.cpp server (voice_server's embedded "
                        "default is 2 too)")
    parser.add_argument("--embedded", action="store_true",
                        help="also run voice_server with its embedded LLM (in the load and "
                        "connections phases)")
    parser.add_argument("--voice", choices=("espeak", "piper"), default="espeak",
                        help="who asks: espeak-ng's robotic voice, or the bundled Piper voice "
                        "(natural intonation; the turn models of both systems read it better)")
    parser.add_argument("--chart", help="write the timeline PNG here")
    parser.add_argument("--json", help="also write the full result (per-turn data) here")
    parser.add_argument("--only", default="", help="comma list of systems to run (ours, "
                        "ours_embedded, pipecat; default: all that are configured)")
    parser.add_argument("--skip", default="", help="comma list of phases to skip: "
                        "load,connections,paused-embedded,scripted,turn-taking,echo")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    from tests.support.fake_openai import FakeOpenAI

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wavs = [speech48k(q, folder, voice=args.voice) for q in QUESTIONS]
        story = speech48k("Tell me a long story about the sea.", folder, voice=args.voice)
        interrupt = speech48k("Stop please, I have a question.", folder, pad=(0.0, 1.0),
                              voice=args.voice)
    result: dict[str, Any] = {"bench": "voice_latency", "voice": args.voice,
                              "cpu_count": os.cpu_count(),
                              "load_avg_start": os.getloadavg()}
    # the shared llama.cpp server serves the load and connections phases only
    llama, llama_url = start_llama(args) if "load" not in skip or "connections" not in skip \
        else (None, "")
    try:
        if llama is not None:
            await wait_http(f"{llama_url}/models")
            systems = build_systems(args, llama_url, "smollm2", embedded=args.embedded)
            async with contextlib.AsyncExitStack() as stack:
                for system in systems:
                    await stack.enter_async_context(system)
                if "load" not in skip:
                    levels = [int(x) for x in args.sessions.split(",")]
                    result["local_llm"] = await concurrency_phase(systems, wavs, levels,
                                                                  args.turns)
                    save(args.json, result)
                if "connections" not in skip and args.connections:
                    result["sequential_connections"] = await connections_phase(
                        systems, wavs, args.connections)
                    save(args.json, result)
                embedded = [s for s in systems if s.name == "ours_embedded"]
                if "paused-embedded" not in skip and embedded and args.turn_cases:
                    from bench._turn_taking import paused_phase

                    with tempfile.TemporaryDirectory() as tmp:
                        result["paused_embedded"] = await paused_phase(
                            embedded[0], functools.partial(_speech_in, Path(tmp), args.voice),
                            args.turn_cases)
                    save(args.json, result)
        if {"scripted", "turn-taking", "echo"} - skip:
            async with FakeOpenAI(default_text=SHORT) as fake:
                systems = build_systems(args, fake.base_url, "fake-model")
                async with contextlib.AsyncExitStack() as stack:
                    for system in systems:
                        await stack.enter_async_context(system)
                    if "scripted" not in skip:
                        result["scripted_llm"] = await scripted_phase(
                            systems, fake, wavs, story, interrupt, max(2, args.turns // 2),
                            args.barge_ins)
                        save(args.json, result)
                    tmp = stack.enter_context(tempfile.TemporaryDirectory())
                    speech = functools.partial(_speech_in, Path(tmp), args.voice)
                    if "turn-taking" not in skip and args.turn_cases:
                        from bench._turn_taking import turn_taking_phase

                        result["turn_taking"] = await turn_taking_phase(
                            systems, fake, speech, story, SHORT, LONG, args.turn_cases,
                            args.turn_llm_delay_ms / 1000)
                        save(args.json, result)
                    if "echo" not in skip and args.echo_cases:
                        from bench._echo import echo_phase

                        result["echo"] = await echo_phase(systems, fake, speech, story, SHORT,
                                                          LONG, args.echo_cases,
                                                          args.echo_gain_db)
    finally:
        if llama is not None:
            llama.terminate()
            llama.wait(10)
    result["ratios_pipecat_over_ours"] = ratios(result)
    result["load_avg_end"] = os.getloadavg()
    save(args.json, result)  # first: a chart that fails must not lose a 20-minute run
    if args.chart and "local_llm" in result:
        from bench._chart import timeline_chart

        timeline_chart(result, args.chart)
    print(json.dumps(strip_private(result), indent=2))


def save(path: str | None, result: dict[str, Any]) -> None:
    """Write what is measured so far (after each phase: a later failure loses nothing)."""
    if path:
        Path(path).write_text(json.dumps(result, indent=1, default=str))


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for phase in ("local_llm",):
        for level, entry in result.get(phase, {}).get("ours", {}).items():
            pair = {"ours": entry, "pipecat": result[phase].get("pipecat", {}).get(level, {})}
            out[f"{phase}_{level}"] = {"p50": ratio(pair, "p50"), "p95": ratio(pair, "p95")}
    if "scripted_llm" in result:
        out["scripted_llm"] = {"p50": ratio(result["scripted_llm"], "p50"),
                               "p95": ratio(result["scripted_llm"], "p95")}
    echo = result.get("echo", {})
    if "ours" in echo and "pipecat" in echo:  # the user interrupting through the echo
        ours, theirs = (echo[name]["echo"]["summary"] for name in ("ours", "pipecat"))
        out["echo"] = {
            "reaction_p50": round(theirs["reaction_ms_p50"] / ours["reaction_ms_p50"], 2)
            if ours["reaction_ms_p50"] and theirs["reaction_ms_p50"] else None,
            # the agent still talking when the user spoke: the reaction's sample size
            "interruptions": {"ours": ours["interruptions"], "pipecat": theirs["interruptions"]},
            "self_interruptions": {"ours": ours["self_interruptions"],
                                   "pipecat": theirs["self_interruptions"]}}
    return out


def strip_private(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    return value


if __name__ == "__main__":
    reexec_in_private_netns()
    asyncio.run(main())
