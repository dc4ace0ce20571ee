"""``ResponsesService``: one ``Run`` from a decoded request to the canonical response.

Spec: specs/sidecar-prompt-service.md "CLI Flow" steps 3-7 and "gRPC (JSON) Flow" steps 2-5:
look the tool up, resolve its secret, build the LLM, merge request over tool defaults, call the
model (non-streaming), normalize the output. Shared by Connect, gRPC-JSON and the CLI.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ulid import ULID

from ...config import data_dir_from_env
from ...llm.errors import LLMError
from ...llm.registry import ProviderBuilder
from ...llm.types import ChatRequest, LLMProvider
from .codec import RunRequest, build_response, normalize_input
from .errors import PromptError, from_llm_error
from .factory import LLMFactory
from .store import ToolConfig, ToolStore, open_store
from .vault import EnvFileVault, SecretVault

if TYPE_CHECKING:
    from ...config import Settings

__all__ = ["DEFAULT_SECRETS_FILE", "PromptService", "open_service"]

DEFAULT_SECRETS_FILE = "secrets.env"

log = logging.getLogger(__name__)


class PromptService:
    """Stateless orchestration over a store, a vault and an LLM factory."""

    def __init__(self, store: ToolStore, vault: SecretVault, factory: LLMFactory) -> None:
        self.store = store
        self.vault = vault
        self.factory = factory

    def chat_request(self, config: ToolConfig, request: RunRequest) -> ChatRequest:
        """Request values win over the tool's defaults (spec "CLI Flow" 6)."""
        settings = config.settings
        messages: list[dict[str, Any]] = []
        system = settings.get("system_prompt")
        if isinstance(system, str) and system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": normalize_input(request.input)})
        model = request.model or config.model
        if config.provider == "local":
            model = None  # the embedded model serves one model, named by the provider
        temperature = request.temperature if request.temperature is not None \
            else config.temperature
        max_tokens = request.max_output_tokens or config.max_output_tokens
        return ChatRequest(messages=messages, model=model, temperature=temperature,
                           max_tokens=max_tokens, tools=request.tools or None)

    async def run(self, request: RunRequest) -> dict[str, Any]:
        """The canonical response, or a ``PromptError`` safe to show to the client."""
        config = await self.store.get(request.tool_name)
        api_key = await self.vault.resolve(config.api_key_secret) \
            if config.api_key_secret else None
        final_model = request.model or config.model
        provider = self.factory.provider(config, api_key, final_model)
        chat = self.chat_request(config, request)
        try:
            result = await provider.complete(chat)
        except LLMError as exc:
            log.info("tool %r: provider %s failed: %s: %s", config.name, config.provider,
                     type(exc).__name__, exc)
            raise from_llm_error(exc) from exc
        except PromptError:
            raise
        except Exception as exc:
            log.exception("tool %r: provider %s crashed", config.name, config.provider)
            raise PromptError("the model call failed") from exc
        return build_response(
            id=str(ULID()), model=final_model or provider.default_model,
            created=int(time.time()), text=result.text,
            tool_calls=[(c.name, c.arguments) for c in result.tool_calls],
            input_tokens=result.usage.input_tokens, output_tokens=result.usage.output_tokens)


@asynccontextmanager
async def open_service(*, db: str | None = None, data_dir: str | Path | None = None,
                       secrets_file: str | Path | None = None, settings: Settings | None = None,
                       kinds: Mapping[str, ProviderBuilder] | None = None,
                       local: LLMProvider | None = None) -> AsyncIterator[PromptService]:
    """Open the store, the default vault and the factory (``local``: an embedded model lent
    to it, see ``LLMFactory``); close them all on exit. The secrets file defaults to
    ``secrets.env`` in the data directory (used only if it exists)."""
    if secrets_file is None:
        secrets_file = Path(data_dir or data_dir_from_env()) / DEFAULT_SECRETS_FILE
    async with open_store(db, data_dir=data_dir) as store:
        factory = LLMFactory(settings, kinds=kinds, local=local)
        try:
            yield PromptService(store, EnvFileVault(secrets_file), factory)
        finally:
            await factory.aclose()
