"""LLM factory: a tool configuration (and its resolved API key) -> a provider of the ``llm/`` layer.

Spec: specs/sidecar-prompt-service.md "Key Components" (``LLMFactory``; openai, gemini, ollama)
plus ``local``, the embedded model. The hosted kinds all speak the OpenAI-compatible chat API
(Ollama's ``/v1`` and Gemini's ``/v1beta/openai/`` endpoints), so a tool of any of them becomes
an ``openai_compat`` spec of the one ``llm.registry.ProviderRegistry``, and a ``local`` tool a
``local`` spec. Providers are cached per (kind, base URL, key) so HTTP connections are reused;
``aclose()`` closes them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ...llm.registry import ProviderBuilder, ProviderRegistry, ProviderSpec
from ...llm.types import LLMProvider
from .errors import ProviderConfigError
from .store import ToolConfig

if TYPE_CHECKING:
    from ...config import Settings

__all__ = ["DEFAULT_BASE_URLS", "PROVIDERS", "LLMFactory"]

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "ollama": "http://127.0.0.1:11434/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/openai/",
}
PROVIDERS = ("openai", "ollama", "gemini", "local")


class LLMFactory:
    """``provider(config, api_key, model)`` -> a ready provider. ``kinds`` adds or replaces
    tool provider kinds with registry builders, which get the tool's model, base URL and key
    in their ``ProviderSpec`` (tests and benchmarks plug an in-process model in this way).
    ``local``: the embedded model lent by its owner (the voice server's router), served to
    ``local`` tools that name no GGUF file of their own instead of loading it a second time."""

    def __init__(self, settings: Settings | None = None, *,
                 kinds: Mapping[str, ProviderBuilder] | None = None,
                 timeout_s: float | None = None, local: LLMProvider | None = None) -> None:
        self._registry = ProviderRegistry(settings, kinds=kinds)
        self._local = local
        self._plugged = tuple(kinds or ())
        self._timeout_s = timeout_s if timeout_s is not None else (
            settings.llm_timeout_s if settings is not None else 60.0)
        self._cache: dict[tuple[str, str, str], LLMProvider] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*PROVIDERS, *self._plugged)))

    def provider(self, config: ToolConfig, api_key: str | None, model: str | None
                 ) -> LLMProvider:
        kind = config.provider
        if kind not in self.kinds:
            raise ProviderConfigError(f'llmfactory: unsupported provider "{kind}"')
        if not model and kind != "local":
            raise ProviderConfigError(f'llmfactory: missing model for provider "{kind}"')
        location = config.base_url or (model if kind == "local" and _is_gguf(model) else "")
        if kind == "local" and not location and self._local is not None \
                and kind not in self._plugged:
            return self._local
        key_digest = hashlib.sha256((api_key or "").encode()).hexdigest()
        cache_key = (kind, location, key_digest)
        provider = self._cache.get(cache_key)
        if provider is None:
            provider = self._registry.build(self._spec(config, api_key))
            self._cache[cache_key] = provider
        return provider

    def _spec(self, config: ToolConfig, api_key: str | None) -> ProviderSpec:
        """The registry's description of the tool's provider."""
        kind = config.provider
        if kind in self._plugged:
            return ProviderSpec(kind=kind, model=config.model, base_url=config.base_url,
                                api_key=api_key, timeout_s=self._timeout_s)
        if kind == "local":
            return ProviderSpec(kind="local", model_path=config.base_url or (
                config.model if _is_gguf(config.model) else None))
        return ProviderSpec(
            kind="openai_compat", name=kind, model=config.model, api_key=api_key or kind,
            base_url=(config.base_url or DEFAULT_BASE_URLS[kind]).rstrip("/"),
            timeout_s=self._timeout_s)

    async def aclose(self) -> None:
        cache, self._cache = self._cache, {}
        for provider in cache.values():
            await provider.aclose()


def _is_gguf(model: str | None) -> bool:
    return bool(model) and Path(model).suffix.lower() == ".gguf"
