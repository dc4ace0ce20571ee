"""The one provider registry: every LLM provider of the package is built here, by kind.

Whoever needs a provider describes it as a ``ProviderSpec`` and asks a ``ProviderRegistry``:
the voice server, ``doctor``, ``playbook chat`` and the broker and host sidecars through
``build_router`` (from Settings), the caller sidecar from its provider catalog
(adapters/caller/providers.py) and the prompt sidecar from a tool's configuration
(adapters/prompt/factory.py). Nothing else constructs a provider class. The registry's Settings
give what a kind needs beyond its spec: the embedded model's profile, threads, slots and context.

A new provider: a class implementing ``types.LLMProvider`` and a builder in ``BUILT_IN_KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from .errors import LLMError
from .router import LLMRouter
from .types import LLMProvider

if TYPE_CHECKING:
    from ..config import Settings
    from .local_requests import OtherWork

__all__ = ["BUILT_IN_KINDS", "ProviderBuilder", "ProviderRegistry", "ProviderSpec",
           "build_router"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSpec:
    """One provider to build: ``kind`` picks the builder, which reads the fields it uses."""

    kind: str
    name: str | None = None  # what routers and answers call it (default: the kind)
    model: str | None = None  # an endpoint's default model
    base_url: str | None = None
    api_key: str | None = None
    embedding_model: str | None = None
    model_path: str | None = None  # the embedded model's GGUF (default: the settings')
    timeout_s: float | None = 60.0
    first_token_timeout_s: float | None = None
    vision: bool = False

    @property
    def provider_name(self) -> str:
        return self.name or self.kind


class ProviderBuilder(Protocol):
    def __call__(self, spec: ProviderSpec, registry: ProviderRegistry) -> LLMProvider: ...


def _openai_compat(spec: ProviderSpec, registry: ProviderRegistry) -> LLMProvider:
    """Any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp server, Gemini's)."""
    from .openai_compat import OpenAICompatProvider

    if not spec.base_url:
        raise LLMError(f"provider {spec.provider_name!r} needs a base URL")
    return OpenAICompatProvider(
        name=spec.provider_name, base_url=spec.base_url, api_key=spec.api_key,
        default_model=spec.model or "default", timeout_s=spec.timeout_s,
        first_token_timeout_s=spec.first_token_timeout_s, supports_vision=spec.vision,
        embedding_model=spec.embedding_model)


def _local(spec: ProviderSpec, registry: ProviderRegistry) -> LLMProvider:
    """The embedded GGUF model in its worker process (llm/local.py)."""
    from .llama_cpu import build_record, choose_build, cpu_flags
    from .local import LocalLlamaProvider

    settings = registry.settings
    try:
        build = choose_build(settings.llm_cpu_kernels, build_record(), cpu_flags())
    except ValueError as exc:
        raise LLMError(str(exc), provider=spec.provider_name) from None
    return LocalLlamaProvider(
        name=spec.provider_name, model_path=spec.model_path or settings.llm_model_path,
        profile=settings.llm_profile, n_threads=settings.llm_threads, slots=settings.llm_slots,
        n_ctx=settings.llm_context_tokens, others=registry.others,
        on_restart=registry.on_worker_restart, cpu_build=build)


def _minilm(spec: ProviderSpec, registry: ProviderRegistry) -> LLMProvider:
    """Offline sentence embeddings only (llm/embeddings.py)."""
    from .embeddings import MiniLMEmbeddingProvider

    return MiniLMEmbeddingProvider(name=spec.provider_name, executor=registry.executor)


BUILT_IN_KINDS: Mapping[str, ProviderBuilder] = MappingProxyType({
    "openai_compat": _openai_compat,
    "local": _local,
    "minilm": _minilm,
})


class ProviderRegistry:
    """Builds providers by kind.

    ``settings``: the embedded model's options and the router's providers (default: read
    when first needed, from the defaults and the ``VOICE_SERVER_*`` variables); ``kinds`` adds
    or replaces kinds (tests and benchmarks plug an in-process model in this way);
    ``others`` and ``on_worker_restart``: the voice server's compute pool's shared counts, which
    the embedded model gives way to (llm/local_engine.py), and what to call when its worker
    died; ``executor``: where embedded embeddings are computed.
    """

    def __init__(self, settings: Settings | None = None, *,
                 kinds: Mapping[str, ProviderBuilder] | None = None,
                 others: OtherWork | None = None,
                 on_worker_restart: Callable[[str], None] | None = None,
                 executor: Executor | None = None) -> None:
        self._settings = settings
        self._kinds = {**BUILT_IN_KINDS, **(kinds or {})}
        self.others = others
        self.on_worker_restart = on_worker_restart
        self.executor = executor

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from ..config import Settings

            self._settings = Settings()
        return self._settings

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._kinds)

    def build(self, spec: ProviderSpec) -> LLMProvider:
        builder = self._kinds.get(spec.kind)
        if builder is None:
            raise LLMError(f"unknown provider kind {spec.kind!r}; known: "
                           f"{', '.join(self._kinds)}")
        return builder(spec, self)

    def configured_specs(self) -> dict[str, ProviderSpec]:
        """The settings' providers by name: ``llm_provider``'s, and the other kind too when it
        is configured (a base URL, or an explicit GGUF path), so callers can route to it."""
        settings = self.settings
        specs: dict[str, ProviderSpec] = {}
        if settings.llm_provider == "openai_compat" or settings.llm_base_url:
            if not settings.llm_base_url:
                raise LLMError("llm_provider=openai_compat needs llm_base_url")
            specs["openai_compat"] = ProviderSpec(
                kind="openai_compat", base_url=settings.llm_base_url,
                api_key=settings.llm_api_key, model=settings.llm_model,
                timeout_s=settings.llm_timeout_s,
                first_token_timeout_s=settings.llm_first_token_timeout_s,
                vision=settings.llm_vision)
        if settings.llm_provider == "local" or settings.llm_model_path:
            specs["local"] = ProviderSpec(kind="local")
        return specs

    def router(self) -> LLMRouter:
        """A router over the settings' providers, ``llm_provider`` the default."""
        providers = {name: self.build(spec) for name, spec in self.configured_specs().items()}
        return LLMRouter(providers, default=self.settings.llm_provider)

    def configured_provider(self) -> LLMProvider:
        """The settings' ``llm_provider`` alone."""
        return self.build(self.configured_specs()[self.settings.llm_provider])


def build_router(settings: Settings, *, others: OtherWork | None = None,
                 on_worker_restart: Callable[[str], None] | None = None) -> LLMRouter:
    """``llm_provider=local`` (default): the embedded GGUF model; ``openai_compat``: the endpoint
    at ``llm_base_url`` with ``llm_model`` (see ``ProviderRegistry.configured_specs``)."""
    return ProviderRegistry(settings, others=others,
                            on_worker_restart=on_worker_restart).router()
