"""Turn the provider catalog into LLM-layer objects (``ProviderRuntime`` per key).

Spec: specs/sidecar-llm-caller-mcp.md, "Dependencies and contracts" (provider catalog). Each
entry becomes ``ProviderSpec``s built by the one ``llm.registry.ProviderRegistry``. With no
catalog the caller serves one provider ``local``: the server's configured chat provider
(``llm_provider`` of the settings; beside the voice server, the server's own) plus the offline
all-MiniLM-L6-v2 embedder.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor

from voice_server.config import Settings, env_value
from voice_server.llm import LLMError
from voice_server.llm.embeddings import MODEL_NAME as EMBED_MODEL
from voice_server.llm.registry import ProviderRegistry, ProviderSpec
from voice_server.llm.types import LLMProvider

from .config import CAPABILITIES, ProviderEntry
from .service import ProviderRuntime

__all__ = ["build_runtimes", "default_entries"]

log = logging.getLogger(__name__)


def default_entries() -> dict[str, ProviderEntry]:
    """The catalog used without ``--providers``: one local provider for every capability."""
    return {"local": ProviderEntry(kind="local", capabilities=list(CAPABILITIES),
                                   defaults={"embed": EMBED_MODEL})}


def build_runtimes(entries: dict[str, ProviderEntry] | None, settings: Settings, *,
                   executor: Executor | None = None, chat: LLMProvider | None = None
                   ) -> dict[str, ProviderRuntime]:
    """One runtime per entry, in catalog order. ``chat``: the configured chat provider, lent
    by its owner (the voice server's or the sidecar command's router; built from the settings
    when not given) and used by the local entries without a ``modelPath``. A local chat model
    that cannot be found leaves ``chat`` empty (CONFIG at dispatch, ``failed`` coverage in
    health) instead of failing."""
    registry = ProviderRegistry(settings, executor=executor)
    configured = chat
    runtimes: dict[str, ProviderRuntime] = {}
    for key, entry in (entries or default_entries()).items():
        if entry.kind == "openai":
            provider = registry.build(ProviderSpec(
                kind="openai_compat", name=key, base_url=entry.baseUrl,
                api_key=env_value(entry.apiKeyEnv) if entry.apiKeyEnv else None,
                model=entry.defaultModel, embedding_model=entry.defaults.get("embed"),
                timeout_s=settings.llm_timeout_s))
            runtimes[key] = ProviderRuntime(key, entry, chat=provider, embedder=provider)
            continue
        entry = entry.model_copy(update={"defaults": {"embed": EMBED_MODEL, **entry.defaults}})
        runtime = ProviderRuntime(key, entry, embedder=registry.build(
            ProviderSpec(kind="minilm", name=key)))
        try:
            if entry.modelPath:
                runtime.chat = registry.build(ProviderSpec(kind="local",
                                                           model_path=entry.modelPath))
            else:
                configured = configured or registry.configured_provider()
                runtime.chat, runtime.lent_chat = configured, chat is not None
        except LLMError as exc:
            log.warning("provider %s: no chat model: %s", key, exc)
            runtime.problem = "Chat model unavailable"
        if runtime.chat is not None:
            model = entry.defaultModel or runtime.chat.default_model
            defaults = {"chat": model, "chatStream": model, "embed": EMBED_MODEL,
                        **entry.defaults}
            runtime.entry = entry.model_copy(update={"defaultModel": model,
                                                     "defaults": defaults})
        runtimes[key] = runtime
    return runtimes
