"""Shared fixtures: test speech (espeak-ng + sox), servers on free loopback ports."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.serial import hold_test_lock, lock_dir
from voice_server.workers import OFFLINE_ENVIRONMENT

TIME_FACTOR = float(os.environ.get("VOICE_TEST_TIME_FACTOR", "1"))

# Tests of the machinery (turns, workers, transports, playbooks) run the 135M model: it is
# ~6x faster than the default 'medium' profile, which keeps the suite within 15 minutes on 2
# cores. Servers started by tests inherit this; the test of the default's answers
# (tests/integration/test_quality_bench.py) removes it.
os.environ.setdefault("VOICE_SERVER_LLM_PROFILE", "tiny")
# Nor do they have the model compute every bundled playbook's prompts after start (CPU the
# tests' own turns need); tests/integration/test_warm_playbooks.py turns it on.
os.environ.setdefault("VOICE_SERVER_WARM_PLAYBOOKS", "false")
# Tests that load the Piper voice or Smart Turn in their own process keep onnxruntime offline
# as the server's workers do (tests/integration/test_offline.py).
os.environ.update(OFFLINE_ENVIRONMENT)


def scaled(seconds: float) -> float:
    """Timeouts scale with VOICE_TEST_TIME_FACTOR on slow machines."""
    return seconds * TIME_FACTOR


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="session")
def make_speech(speech_dir: Path):
    """``make_speech(text, rate=16000, pad=(0.5, 0.5))`` -> WAV bytes of espeak-ng speech, the
    same in every run: sox does not dither (``-D``). With its dither each run's clip was other
    audio, and a test that passed 38 runs in 40 failed in the other two (the booking test's
    "My name is Peter."); how the server fares across renditions is the benchmarks' question
    (``bench/readings_pick.py --renditions``)."""
    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        pytest.skip("espeak-ng and sox are needed (make test installs them)")

    def make(text: str, *, rate: int = 16000, pad: tuple[float, float] = (0.5, 0.5),
             speed: int = 150) -> bytes:
        key = f"{abs(hash((text, rate, pad, speed)))}"
        raw, out = speech_dir / f"{key}-raw.wav", speech_dir / f"{key}.wav"
        if not out.exists():
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", str(speed), "-w", str(raw), text],
                           check=True, capture_output=True)
            subprocess.run(["sox", "-D", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out),
                            "pad", str(pad[0]), str(pad[1])], check=True, capture_output=True)
        return out.read_bytes()

    return make


@pytest.fixture(scope="session")
def piper_speech():
    """``piper_speech(text, rate=16000)`` -> int16 speech in our Piper voice: natural speech,
    with a natural voice's pauses (a comma's is 190-360 ms)."""
    import numpy as np

    from voice_server.pipeline.audio import resample
    from voice_server.pipeline.tts import PiperService, default_piper_voice

    piper = PiperService(voice=str(default_piper_voice()))
    cache: dict[tuple[str, int], np.ndarray] = {}

    def make(text: str, rate: int = 16000) -> np.ndarray:
        if (text, rate) not in cache:
            cache[text, rate] = resample(piper.synthesize(text, False), piper.sample_rate, rate)
        return cache[text, rate]

    return make


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test holds the run's lock from its setup to its teardown: shared, or exclusive
    when it is marked ``serial`` (tests/support/serial.py)."""
    with hold_test_lock(lock_dir(), serial=item.get_closest_marker("serial") is not None):
        return (yield)

