"""Fixtures for the prompt sidecar: a scripted OpenAI upstream, stores, the service, the servers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.postgres import PostgresUnavailable, postgres_cluster
from voice_server.adapters.prompt import (
    EnvFileVault,
    LLMFactory,
    PromptService,
    PromptSidecar,
    SQLiteToolStore,
    ToolConfig,
    ToolStore,
)

API_KEY = "sk-test-0123"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A real PostgreSQL server on 127.0.0.1 for the whole session."""
    try:
        with postgres_cluster() as dsn:
            yield dsn
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(model="fake-model") as upstream:
        yield upstream


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[ToolStore]:
    async with SQLiteToolStore(tmp_path / "tools.sqlite3") as opened:
        yield opened


@pytest.fixture
async def service(store: ToolStore, fake: FakeOpenAI) -> AsyncIterator[PromptService]:
    """A service whose ``echo`` tool talks to the fake upstream with a vault-held key."""
    await store.put(ToolConfig(name="echo", provider="openai", model="fake-model",
                               base_url=fake.base_url, api_key_secret="fake-key",
                               temperature=0.7, max_output_tokens=32))
    factory = LLMFactory(timeout_s=10.0)
    try:
        yield PromptService(store, EnvFileVault(environ={"FAKE_KEY": API_KEY}), factory)
    finally:
        await factory.aclose()


@pytest.fixture
async def sidecar(service: PromptService) -> AsyncIterator[PromptSidecar]:
    async with PromptSidecar(service, port=0, grpc_port=0) as running:
        yield running
