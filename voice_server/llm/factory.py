"""Build the LLM router from ``Settings`` (one place, shared by the server and the sidecars)."""

from __future__ import annotations

from concurrent.futures import Executor

from ..config import Settings
from .router import LLMRouter
from .types import LLMProvider

__all__ = ["build_provider", "build_router"]


def build_provider(settings: Settings, executor: Executor | None = None) -> LLMProvider:
    """The provider named by ``settings.llm_provider`` (``local`` or ``openai_compat``)."""
    if settings.llm_provider == "openai_compat":
        from .openai_compat import OpenAICompatProvider

        if not settings.llm_base_url or not settings.llm_model:
            from ..config import ConfigError

            raise ConfigError("llm_provider 'openai_compat' needs llm_base_url and llm_model")
        return OpenAICompatProvider(
            name="openai_compat", base_url=settings.llm_base_url, api_key=settings.llm_api_key,
            default_model=settings.llm_model, timeout_s=settings.llm_timeout_s,
            supports_vision=settings.llm_vision)
    from .local import LocalLlamaProvider

    return LocalLlamaProvider(model_path=settings.llm_model_path, name="local",
                              n_threads=settings.llm_threads, executor=executor)


def build_router(settings: Settings, executor: Executor | None = None) -> LLMRouter:
    """A router with the configured provider as its default."""
    provider = build_provider(settings, executor)
    return LLMRouter({provider.name: provider}, default=provider.name)
