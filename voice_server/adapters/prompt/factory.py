"""LLM factory: a tool configuration (and its resolved API key) -> a provider of the ``llm/`` layer.

Spec: specs/sidecar-prompt-service.md "Key Components" (``LLMFactory``; openai, gemini, ollama)
plus ``local``, the embedded model. The hosted kinds all speak the OpenAI-compatible chat API
(Ollama's ``/v1`` and Gemini's ``/v1beta/openai/`` endpoints), so they share
``OpenAICompatProvider``; ``local`` is built by ``llm.factory.build_router``. Providers are cached
per (kind, base URL, key) so HTTP connections are reused; ``aclose()`` closes them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...llm.factory import build_router
from ...llm.types import LLMProvider
from .errors import ProviderConfigError
from .store import ToolConfig

if TYPE_CHECKING:
    from ...config import Settings

__all__ = ["DEFAULT_BASE_URLS", "PROVIDERS", "Builder", "LLMFactory"]

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "ollama": "http://127.0.0.1:11434/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/openai/",
}
PROVIDERS = ("openai", "ollama", "gemini", "local")

Builder = Callable[[ToolConfig, "str | None"], LLMProvider]


class LLMFactory:
    """``provider(config, api_key, model)`` -> a ready provider. ``builders`` adds or replaces
    kinds (tests and benchmarks plug an in-process model in this way)."""

    def __init__(self, settings: Settings | None = None, *,
                 builders: dict[str, Builder] | None = None,
                 timeout_s: float | None = None) -> None:
        self._settings = settings
        self._timeout_s = timeout_s if timeout_s is not None else (
            settings.llm_timeout_s if settings is not None else 60.0)
        self._builders: dict[str, Builder] = {
            "openai": self._hosted, "ollama": self._hosted, "gemini": self._hosted,
            "local": self._local, **(builders or {})}
        self._cache: dict[tuple[str, str, str], LLMProvider] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._builders)

    def provider(self, config: ToolConfig, api_key: str | None, model: str | None
                 ) -> LLMProvider:
        kind = config.provider
        builder = self._builders.get(kind)
        if builder is None:
            raise ProviderConfigError(f'llmfactory: unsupported provider "{kind}"')
        if not model and kind != "local":
            raise ProviderConfigError(f'llmfactory: missing model for provider "{kind}"')
        key_digest = hashlib.sha256((api_key or "").encode()).hexdigest()
        location = config.base_url or (model if kind == "local" and _is_gguf(model) else "")
        cache_key = (kind, location, key_digest)
        provider = self._cache.get(cache_key)
        if provider is None:
            provider = builder(config, api_key)
            self._cache[cache_key] = provider
        return provider

    def _hosted(self, config: ToolConfig, api_key: str | None) -> LLMProvider:
        from ...llm.openai_compat import OpenAICompatProvider

        kind = config.provider
        return OpenAICompatProvider(
            name=kind, base_url=(config.base_url or DEFAULT_BASE_URLS[kind]).rstrip("/"),
            api_key=api_key or kind, default_model=config.model or "default",
            timeout_s=self._timeout_s)

    def _local(self, config: ToolConfig, api_key: str | None) -> LLMProvider:
        from ...config import Settings

        settings = self._settings or Settings()
        path = config.base_url or (config.model if _is_gguf(config.model) else None)
        local = settings.model_copy(update={
            "llm_provider": "local", "llm_base_url": None,
            "llm_model_path": path or settings.llm_model_path})
        return build_router(local).providers["local"]

    async def aclose(self) -> None:
        cache, self._cache = self._cache, {}
        for provider in cache.values():
            await provider.aclose()


def _is_gguf(model: str | None) -> bool:
    return bool(model) and Path(model).suffix.lower() == ".gguf"
