"""Benchmark: does a turn end, and does nothing start one, with noise behind the speaker?

Questions of bench/quality.py in our Piper voice, each with 3 s before it and 3 s after it,
mixed with a noise that runs throughout: white, pink and brown noise (a fan, a road, a hum:
what a browser's noise suppression mostly removes, and a phone line does not) and babble (two
other Piper voices talking: a television, a café; no noise suppression removes it), at a
signal-to-noise ratio of the question's voiced frames to the noise. Each mix is fed to the
server's voice activity detection (``StreamingVAD`` with the default settings) as a call
would feed it, and to Silero VAD v5 (the model Pipecat and LiveKit use, run here from
Pipecat's wheel: speech at a probability of 0.5, silence below 0.35) as the reference.

``ours`` is the server as it runs (webrtcvad, and Silero once the room is noisy: pipeline/vad.py;
the model's view of each 32 ms told once that audio is in, as soon as the listener can),
``ours_webrtcvad_alone`` as it ran before 2026-11-30.

Per condition, for each: ``ended``, the questions after which silence was found within 1 s of
the voice's end (the server's end-of-turn judges start there: its ``pause`` event); ``after_ms``
the median time from the voice's end to it; ``noise_started``, the questions whose noise alone
confirmed speech in the 1.5 s before them, the noise having run 1.5 s already (200 ms of it: an
utterance, or a barge-in on the agent); ``pauses_inside``, the server's pauses while the
question was still being said (each starts speculative speech to text; Silero's are not
counted); ``noise_speaking``, the questions begun while an utterance the noise alone started,
at any time, was still going on (their turn cannot end alone: the noise carries it on). Prints
JSON.

    python bench/noise_vad.py [--questions 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from voice_server.workers import OFFLINE_ENVIRONMENT  # noqa: E402

os.environ.update(OFFLINE_ENVIRONMENT)  # onnxruntime reads it when imported

from bench.quality import QUESTIONS  # noqa: E402

RATE = 16000
# silero_vad.onnx as pipecat-ai 1.14.0 ships it (the Makefile installs that wheel for Smart Turn)
SILERO_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
LEAD_S, TAIL_S = 3.0, 3.0
SETTLED_S = 1.5  # noise this long before a start that counts (the room is known noisy by then)
KINDS = ("white", "pink", "brown", "babble")
SNRS_DB = (30, 20, 10, 5)
BABBLE = ["I think we should go to the market later today.",
          "She told me the train was late again this morning.",
          "Do you want another cup of coffee or some tea?",
          "The weather has been really strange this week, hasn't it?"]


def _frame_rms(x: np.ndarray, frame: int = 320) -> np.ndarray:
    usable = len(x) - len(x) % frame
    return np.sqrt(np.mean(x[:usable].reshape(-1, frame) ** 2, axis=1))


def _voiced_span(speech: np.ndarray) -> tuple[int, int, float]:
    """First and last sample of the voice (frames within 30 dB of the loudest) and its level."""
    levels = _frame_rms(speech)
    loud = np.flatnonzero(levels >= levels.max() * 10 ** (-30 / 20))
    return loud[0] * 320, (loud[-1] + 1) * 320, float(np.sqrt(np.mean(levels[loud] ** 2)))


def _noise(kind: str, n: int, rng: np.random.Generator, babble: np.ndarray) -> np.ndarray:
    if kind == "babble":  # two talkers, the same recordings a third apart
        talk = np.tile(babble, n // len(babble) + 2)
        offset = rng.integers(len(babble))
        return talk[offset:offset + n] + np.roll(talk, len(babble) // 3)[offset:offset + n]
    white = rng.standard_normal(n)
    if kind == "white":
        return white
    spectrum = np.fft.rfft(white)
    f = np.arange(len(spectrum), dtype=np.float64)
    f[0] = 1.0
    return np.fft.irfft(spectrum / (np.sqrt(f) if kind == "pink" else f), n)


def _ours(settings: object, mix: np.ndarray, onset: int, end: int,
          speech: object | None = None) -> tuple[bool, float | None, int, bool]:
    """The server's VAD (``settings``: its ``VADSettings``) on ``mix`` fed 32 ms at a time,
    each chunk followed by what the speech model (``speech``: a ``SileroVAD``; None: none,
    webrtcvad alone) heard in it, as the server's listener tells it once the model's worker
    answers (~0.5 ms later when idle)."""
    from voice_server.pipeline.speech_model import CHUNK
    from voice_server.pipeline.vad import StreamingVAD

    vad = StreamingVAD(settings)  # type: ignore[arg-type]
    state = None
    started_by_noise, after, inside, speaking_at_onset = False, None, 0, False
    for i in range(0, len(mix) - CHUNK + 1, CHUNK):
        chunk = mix[i:i + CHUNK]
        if i <= onset < i + CHUNK:
            speaking_at_onset = vad.speaking
        events = vad.feed(chunk)
        if speech is not None:  # its view of a chunk comes once the chunk is in
            probabilities, state = speech.speech(chunk, state)  # type: ignore[attr-defined]
            vad.model_heard(float(probabilities[0]))
        for event in events:
            at = event.at_s * RATE
            if event.kind == "start" and SETTLED_S * RATE <= at < onset:
                started_by_noise = True
            if event.kind in ("pause", "end") and after is None and at > end - 0.3 * RATE:
                after = event.at_s - end / RATE
            inside += int(event.kind == "pause" and onset < at < end - 0.3 * RATE)
    return started_by_noise, after, inside, speaking_at_onset


class _Silero:
    """Silero VAD v5 on 512-sample chunks (its ONNX interface: 64 samples of context, a state)."""

    def __init__(self) -> None:
        import hashlib
        import importlib.util

        import onnxruntime

        spec = importlib.util.find_spec("pipecat")  # installed without its dependencies
        assert spec is not None and spec.submodule_search_locations, "pipecat-ai is missing"
        path = Path(spec.submodule_search_locations[0], "audio/vad/data/silero_vad.onnx")
        if hashlib.sha256(path.read_bytes()).hexdigest() != SILERO_SHA256:
            raise SystemExit(f"{path} is not the Silero VAD file this benchmark was made with")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options,
                                                    providers=["CPUExecutionProvider"])

    def probabilities(self, pcm: np.ndarray) -> np.ndarray:
        audio = pcm.astype(np.float32) / 32768
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, 64), np.float32)
        out = []
        for i in range(0, len(audio) - 511, 512):
            chunk = np.concatenate([context, audio[None, i:i + 512]], axis=1)
            p, state = self.session.run(None, {"input": chunk, "state": state,
                                               "sr": np.array(RATE, np.int64)})
            context = chunk[:, -64:]
            out.append(float(p[0, 0]))
        return np.asarray(out)

    def judge(self, mix: np.ndarray, onset: int, end: int
              ) -> tuple[bool, float | None, int, bool]:
        p = self.probabilities(mix)
        chunk_s = 512 / RATE
        lead = p[int(SETTLED_S * RATE) // 512:onset // 512]
        run = longest = 0
        for value in lead:
            run = run + 1 if value >= 0.5 else 0
            longest = max(longest, run)
        started_by_noise = longest * chunk_s >= 0.2
        speaking = False  # before the question: 0.2 s at 0.5 starts speech, 64 ms below 0.35
        run = quiet = 0  # ends it
        for value in p[:onset // 512]:
            run = run + 1 if value >= 0.5 else 0
            quiet = quiet + 1 if value < 0.35 else 0
            speaking = (speaking or run * chunk_s >= 0.2) and quiet < 2
        first = max(0, int((end / RATE - 0.3) / chunk_s))
        quiet = 0
        for i in range(first, len(p)):  # two chunks (64 ms) below 0.35: silence found
            quiet = quiet + 1 if p[i] < 0.35 else 0
            if quiet == 2:
                return started_by_noise, (i + 1) * chunk_s - end / RATE, 0, speaking
        return started_by_noise, None, 0, speaking


def main() -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10)
    args = parser.parse_args()

    from voice_server.pipeline.audio import resample
    from voice_server.pipeline.tts import PiperService, default_piper_voice

    piper = PiperService(voice=str(default_piper_voice()))

    def speak(text: str) -> np.ndarray:
        return resample(piper.synthesize(text, False), piper.sample_rate,
                        RATE).astype(np.float64)

    rng = np.random.default_rng(7)
    questions = [speak(q[0]) for q in QUESTIONS[:args.questions]]
    babble = np.concatenate([speak(text) for text in BABBLE])
    silero = _Silero()
    from voice_server.config import load_settings
    from voice_server.pipeline.speech_model import SileroVAD, default_speech_model
    from voice_server.pipeline.vad import VADSettings

    model = SileroVAD(default_speech_model())
    vad_settings = VADSettings.from_settings(load_settings())  # the server's, from its defaults
    results: list[dict[str, object]] = []
    for kind in ("none", *KINDS):
        for snr in (None,) if kind == "none" else SNRS_DB:
            tally: dict[str, dict[str, list]] = {"ours": {}, "ours_webrtcvad_alone": {},
                                                 "silero": {}}
            for name in tally:
                tally[name] = {"started": [], "after": [], "inside": [], "speaking": []}
            for speech in questions:
                first, last, level = _voiced_span(speech)
                mix = np.concatenate([np.zeros(int(LEAD_S * RATE)), speech,
                                      np.zeros(int(TAIL_S * RATE))])
                if snr is not None:
                    noise = _noise(kind, len(mix), rng, babble)
                    mix += noise / np.sqrt(np.mean(noise ** 2)) * level / 10 ** (snr / 20)
                pcm = np.clip(mix, -32768, 32767).astype(np.int16)
                onset, end = int(LEAD_S * RATE) + first, int(LEAD_S * RATE) + last
                judges = (("ours", lambda *a: _ours(vad_settings, *a, speech=model)),
                          ("ours_webrtcvad_alone", lambda *a: _ours(vad_settings, *a)),
                          ("silero", silero.judge))
                for name, judge in judges:
                    started, after, inside, speaking = judge(pcm, onset, end)
                    tally[name]["started"].append(started)
                    tally[name]["speaking"].append(speaking)
                    tally[name]["after"].append(after)
                    tally[name]["inside"].append(inside)
            row: dict[str, object] = {"noise": kind, "snr_db": snr}
            for name, t in tally.items():
                found = [a for a in t["after"] if a is not None and a <= 1.0]
                row[name] = {"ended": len(found), "after_ms": round(float(np.median(found)) *
                                                                    1000) if found else None,
                             "noise_started": sum(t["started"]),
                             "noise_speaking": sum(t["speaking"]),
                             "pauses_inside": int(sum(t["inside"]))}
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    return {"questions": len(questions), "conditions": results}


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
