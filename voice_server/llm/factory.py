"""Build the one ``LLMRouter`` from Settings: the voice pipeline and every sidecar call this."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import LLMError
from .router import LLMRouter
from .types import LLMProvider

if TYPE_CHECKING:
    from ..config import Settings
    from .local_engine import OtherWork

__all__ = ["build_router"]


def build_router(settings: Settings, *, others: OtherWork | None = None,
                 on_worker_restart: Callable[[str], None] | None = None) -> LLMRouter:
    """``llm_provider=local`` (default): the embedded GGUF model; ``openai_compat``: the endpoint
    at ``llm_base_url`` with ``llm_model``. The other kind is added too when it is configured
    (a base URL, or an explicit GGUF path), so callers can route to it by name. ``others``: the
    voice server's compute pool's shared counts, which the embedded model gives way to
    (llm/local_engine.py); ``on_worker_restart``: called when the embedded model's worker died."""
    providers: dict[str, LLMProvider] = {}
    if settings.llm_provider == "openai_compat" or settings.llm_base_url:
        if not settings.llm_base_url:
            raise LLMError("llm_provider=openai_compat needs llm_base_url")
        from .openai_compat import OpenAICompatProvider

        providers["openai_compat"] = OpenAICompatProvider(
            base_url=settings.llm_base_url, api_key=settings.llm_api_key,
            default_model=settings.llm_model or "default", timeout_s=settings.llm_timeout_s,
            first_token_timeout_s=settings.llm_first_token_timeout_s,
            supports_vision=settings.llm_vision)
    if settings.llm_provider == "local" or settings.llm_model_path:
        from .local import LocalLlamaProvider

        providers["local"] = LocalLlamaProvider(model_path=settings.llm_model_path,
                                                profile=settings.llm_profile,
                                                n_threads=settings.llm_threads,
                                                slots=settings.llm_slots,
                                                n_ctx=settings.llm_context_tokens,
                                                others=others, on_restart=on_worker_restart)
    return LLMRouter(providers, default=settings.llm_provider)
