"""A voice server with the phone endpoints on (Twilio signatures checked) on its own port and
on ``phone_port``, real STT, TTS and turn-taking, a scripted LLM; the fake Twilio
(tests/support/fake_twilio.py) calls it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.fake_openai import FakeOpenAI
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer

AUTH_TOKEN = "test-twilio-auth-token"


@pytest_asyncio.fixture(scope="session")
async def phone_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(default_text="Okay.") as fake:
        yield fake


@pytest_asyncio.fixture(scope="session")
async def phone_server(phone_llm: FakeOpenAI) -> AsyncIterator[VoiceServer]:
    settings = load_settings(port=0, phone=True, phone_port=0, twilio_auth_token=AUTH_TOKEN,
                             llm_provider="openai_compat", llm_base_url=phone_llm.base_url,
                             llm_model="fake-model")
    async with VoiceServer(settings) as server:
        yield server


def signature(url: str, params: dict[str, str] | None = None) -> str:
    """``X-Twilio-Signature`` as Twilio computes it (its own SDK's validator)."""
    from twilio.request_validator import RequestValidator

    return RequestValidator(AUTH_TOKEN).compute_signature(url, params or {})


@pytest.fixture(scope="session")
def caller_speech(piper_speech):
    """``caller_speech(text)`` -> 8 kHz int16 speech in our Piper voice (natural speech; at
    8 kHz, espeak-ng is more than Whisper tiny.en can follow: "Peter" -> "the earth")."""
    import numpy as np

    def make(text: str, lead_s: float = 0.3) -> np.ndarray:
        return np.concatenate([np.zeros(int(lead_s * 8000), np.int16), piper_speech(text, 8000)])

    return make
