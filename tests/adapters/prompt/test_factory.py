"""LLM factory: kinds, default endpoints, provider reuse, configuration errors."""

from __future__ import annotations

import pytest

from voice_server.adapters.prompt.errors import ProviderConfigError
from voice_server.adapters.prompt.factory import DEFAULT_BASE_URLS, LLMFactory
from voice_server.adapters.prompt.store import ToolConfig
from voice_server.llm.openai_compat import OpenAICompatProvider


async def test_hosted_kinds_use_their_openai_compatible_endpoints():
    """openai, ollama and gemini build OpenAI-compatible providers at their default URLs."""
    factory = LLMFactory()
    try:
        for kind in ("openai", "ollama", "gemini"):
            provider = factory.provider(ToolConfig(name="t", provider=kind, model="m"), "k", "m")
            assert isinstance(provider, OpenAICompatProvider)
            assert provider.name == kind
            assert str(provider._client.base_url).rstrip("/") == \
                DEFAULT_BASE_URLS[kind].rstrip("/")
    finally:
        await factory.aclose()


async def test_providers_are_reused_per_endpoint_and_key():
    """Same kind, URL and key -> the same provider; another key -> another provider."""
    factory = LLMFactory()
    try:
        cfg = ToolConfig(name="t", provider="openai", model="m", base_url="http://127.0.0.1:1/v1")
        first = factory.provider(cfg, "k1", "m")
        assert factory.provider(cfg.model_copy(update={"name": "u"}), "k1", "other") is first
        assert factory.provider(cfg, "k2", "m") is not first
    finally:
        await factory.aclose()


def test_configuration_errors():
    """Unsupported provider and missing model use the origin's messages (check 10)."""
    factory = LLMFactory()
    with pytest.raises(ProviderConfigError, match='^llmfactory: unsupported provider "x"$'):
        factory.provider(ToolConfig(name="t", provider="x", model="m"), None, "m")
    with pytest.raises(ProviderConfigError,
                       match='^llmfactory: missing model for provider "gemini"$'):
        factory.provider(ToolConfig(name="t", provider="gemini"), None, None)
    assert factory.kinds == ("openai", "ollama", "gemini", "local")
