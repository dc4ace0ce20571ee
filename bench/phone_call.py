"""Benchmark: a phone call over Twilio Media Streams (issue 23), measured by the caller.

The real server (VAD, Smart Turn, Whisper, Piper; phone endpoints on) is called by the fake
Twilio of the tests (tests/support/fake_twilio.py), which sends the caller's audio as 20 ms
mu-law frames in real time and plays the agent's frames as a phone would. Per call:

- ``v2v_ms``: from the last voiced frame of the question to the first voiced frame of the
  answer the caller hears (the LLM is a scripted, instant OpenAI-compatible server, so this is
  the floor the server itself adds: end of turn, speech to text, speech synthesis, the line);
- ``barge_in_clear_ms``: from the first voiced frame of the caller talking over the agent to
  the ``clear`` that drops the agent's audio;
- ``barge_in_silent_ms``: from that onset to the last agent audio the caller hears.

Speech is espeak-ng at 8 kHz (``espeak-ng`` and ``sox`` must be installed). It re-runs itself
in a network namespace of its own (loopback only), as the tests do:

    python bench/phone_call.py --calls 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._netns import reexec_in_private_netns  # noqa: E402
from tests.support.fake_openai import FakeOpenAI  # noqa: E402
from tests.support.fake_twilio import FakeTwilio, wav_to_pcm8k  # noqa: E402
from voice_server.config import load_settings  # noqa: E402
from voice_server.server.app import VoiceServer  # noqa: E402

AUTH_TOKEN = "bench-token"
QUESTIONS = ["What is the capital of France?", "How far away is the moon?",
             "What time does the shop open tomorrow?", "Can you recommend a good book?",
             "How do I reset my password?"]
LONG = ("Paris is the capital of France. It sits on the river Seine and has been the "
        "country's capital for more than a thousand years. Its museums and bridges draw "
        "millions of visitors every year.")


def speech(text: str, folder: Path) -> bytes:
    raw, out = folder / "raw.wav", folder / f"{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True,
                   capture_output=True)
    subprocess.run(["sox", str(raw), "-r", "8000", "-c", "1", "-b", "16", str(out), "pad",
                    "0.3", "0"], check=True, capture_output=True)
    return out.read_bytes()


def pct(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    values = sorted(values)
    return {"p50": round(statistics.median(values)), "p95":
            round(values[min(len(values) - 1, int(0.95 * len(values)))]), "n": len(values)}


async def one_call(server: VoiceServer, llm: FakeOpenAI, question: bytes, interrupt: bytes
                   ) -> dict[str, float | None]:
    from twilio.request_validator import RequestValidator

    url = f"ws://127.0.0.1:{server.port}/twilio/media"
    sig = RequestValidator(AUTH_TOKEN).compute_signature(url, {})
    llm.script.clear()
    llm.add("Sure, here is the answer you asked for.", LONG, "Okay, stopping.")
    result: dict[str, float | None] = {}
    async with FakeTwilio(url, headers={"X-Twilio-Signature": sig}) as phone:
        await asyncio.sleep(0.3)
        phone.say(wav_to_pcm8k(question), then_silence_s=0.2)
        async with asyncio.timeout(30):
            while not phone.marks_echoed:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        assert phone.speech_ended is not None
        first = phone.played.first_voiced_after(phone.speech_ended)
        result["v2v_ms"] = (first - phone.speech_ended) * 1000 if first else None
        await asyncio.sleep(0.5)
        phone.say(wav_to_pcm8k(question), then_silence_s=0.2)  # the long answer
        async with asyncio.timeout(30):
            while not phone.played.first_voiced_after(phone.speech_ended or 0):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await asyncio.sleep(1.5)
        phone.say(wav_to_pcm8k(interrupt), then_silence_s=1.5)
        async with asyncio.timeout(15):
            while not phone.clears:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        onset = phone.speech_started
        assert onset is not None
        result["barge_in_clear_ms"] = (phone.clears[0] - onset) * 1000
        heard = [t for t in phone.played.voiced_times() if t >= onset]
        result["barge_in_silent_ms"] = ((max(heard) + 0.02 - onset) * 1000) if heard else 0.0
        await phone.until_said()
        await phone.stop()
    return result


async def main(calls: int) -> None:
    async with FakeOpenAI(default_text="Okay.") as llm:
        settings = load_settings(port=0, phone=True, twilio_auth_token=AUTH_TOKEN,
                                 llm_provider="openai_compat", llm_base_url=llm.base_url,
                                 llm_model="fake-model", log_level="WARNING")
        async with VoiceServer(settings) as server:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                questions = [speech(q, folder) for q in QUESTIONS]
                interrupt = speech("Wait, stop. Tell me about Berlin instead.", folder)
                runs = []
                started = time.monotonic()
                for i in range(calls):
                    runs.append(await one_call(server, llm, questions[i % len(questions)],
                                               interrupt))
    key = ("v2v_ms", "barge_in_clear_ms", "barge_in_silent_ms")
    print(json.dumps({
        "bench": "phone_call", "calls": calls, "llm": "scripted (instant)",
        **{k: pct([r[k] for r in runs if r.get(k) is not None]) for k in key},
        "targets": {"v2v_ms_max": 1500, "barge_in_clear_ms_max": 600},
        "seconds": round(time.monotonic() - started, 1)}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=10)
    calls = parser.parse_args().calls
    reexec_in_private_netns()
    asyncio.run(main(calls))
