"""Build the one ``LLMRouter`` from ``Settings``: the voice server and every sidecar share it."""

from __future__ import annotations

from concurrent.futures import Executor

from ..config import ConfigError, Settings
from .router import LLMRouter
from .types import LLMProvider

__all__ = ["build_router"]


def build_router(settings: Settings, executor: Executor | None = None) -> LLMRouter:
    """A router with one provider chosen by ``settings.llm_provider`` (its name is the default).

    ``local`` loads nothing yet (the model loads on first use or ``provider.load()``);
    ``openai_compat`` needs ``llm_base_url`` and ``llm_model``.
    """
    provider: LLMProvider
    if settings.llm_provider == "openai_compat":
        if not settings.llm_base_url or not settings.llm_model:
            raise ConfigError("llm_provider 'openai_compat' needs llm_base_url and llm_model")
        from .openai_compat import OpenAICompatProvider

        provider = OpenAICompatProvider(
            base_url=settings.llm_base_url, api_key=settings.llm_api_key,
            default_model=settings.llm_model, timeout_s=settings.llm_timeout_s,
            supports_vision=settings.llm_vision)
    else:
        from .local import LocalLlamaProvider

        provider = LocalLlamaProvider(model_path=settings.llm_model_path,
                                      n_threads=settings.llm_threads, executor=executor)
    return LLMRouter({provider.name: provider}, default=provider.name)
