"""Fixtures for the playbook tests: a scripted OpenAI-compatible server and a router on it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI
from voice_server.llm import LLMRouter
from voice_server.llm.openai_compat import OpenAICompatProvider

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
TIME_FACTOR = float(os.environ.get("VOICE_TEST_TIME_FACTOR", "1"))


def scaled(seconds: float) -> float:
    return seconds * TIME_FACTOR


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(default_text="(unscripted)") as server:
        yield server


@pytest.fixture
async def router(fake: FakeOpenAI) -> AsyncIterator[LLMRouter]:
    provider = OpenAICompatProvider(name="fake", base_url=fake.base_url,
                                    default_model="fake-model", timeout_s=scaled(10))
    router = LLMRouter({"fake": provider}, default="fake")
    yield router
    await router.aclose()
