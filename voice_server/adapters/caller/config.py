"""Configuration of the caller in the original's file formats, plus its own options.

Spec: specs/sidecar-llm-caller-mcp.md, "Dependencies and contracts" (client registry, provider
catalog). File formats: ``{"clients": [{"toolId", "token", "allowedMethods"}]}``
and ``{"providers": {KEY: {"baseUrl", "defaultModel", "capabilities", "defaults", "scores",
"notes"}}}``. Our additions to a provider entry: ``"kind": "local"`` (the embedded chat model and
the offline embedding model; no ``baseUrl``), ``apiKeyEnv`` (the variable holding the key) and
``modelPath`` (a GGUF file for ``kind: local``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..kit import StrictModel, validation_text
from .errors import CallerError

__all__ = [
    "CAPABILITIES",
    "METHODS",
    "CallerConfigError",
    "CallerOptions",
    "ClientEntry",
    "ClientRegistry",
    "ProviderEntry",
    "load_client_registry",
    "load_providers",
]

METHODS = ("chat", "chatStream", "embed", "getHealth", "models")
CAPABILITIES = ("chat", "chatStream", "embed")


class CallerConfigError(CallerError):
    """A registry or providers file is unreadable or invalid (raised at start-up)."""

    def __init__(self, message: str) -> None:
        super().__init__(500, "CONFIG", message)


class _ClientModel(StrictModel):
    toolId: str = Field(min_length=1)  # noqa: N815 - the original's file format
    token: str = Field(min_length=1)
    allowedMethods: list[Literal["chat", "chatStream", "embed", "getHealth", "models"]] = Field(  # noqa: N815
        min_length=1)


class _FileModel(StrictModel):
    """What the original's config files have besides their content."""

    model_config = ConfigDict(populate_by_name=True)
    schema_: str | None = Field(None, alias="$schema")
    description: str | None = None


class _RegistryModel(_FileModel):
    clients: list[_ClientModel]


class ProviderEntry(StrictModel):
    """One provider of the catalog: the original's fields plus ``kind``, ``apiKeyEnv`` and
    ``modelPath``."""

    kind: Literal["openai", "local"] = "openai"
    baseUrl: str | None = Field(None, min_length=1)  # noqa: N815
    defaultModel: str | None = Field(None, min_length=1)  # noqa: N815
    capabilities: list[str] = Field(default_factory=lambda: list(CAPABILITIES), min_length=1)
    defaults: dict[str, str] = Field(default_factory=dict)
    scores: dict[str, float] = Field(default_factory=dict)
    notes: str | None = None
    apiKeyEnv: str | None = None  # noqa: N815
    modelPath: str | None = None  # noqa: N815

    @model_validator(mode="after")
    def _check(self) -> ProviderEntry:
        if self.kind == "openai" and (not self.baseUrl or not self.defaultModel):
            raise ValueError("a provider needs baseUrl and defaultModel (or \"kind\": \"local\")")
        if len(set(self.capabilities)) != len(self.capabilities):
            raise ValueError("capabilities must be unique")
        return self


class _ProvidersModel(_FileModel):
    providers: dict[str, ProviderEntry] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class ClientEntry:
    """An authenticated caller: its tool id and the methods it may call."""

    tool_id: str
    token_hash: str
    allowed_methods: frozenset[str]

    def may(self, method: str) -> bool:
        return method in self.allowed_methods


def _hash(token: str) -> str:
    # surrogatepass: a header's non-UTF-8 byte comes as a lone surrogate (a 500 before)
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class ClientRegistry:
    """Token -> client. Tokens are kept only as SHA-256 digests."""

    def __init__(self, clients: list[tuple[str, str, list[str]]]) -> None:
        self._by_hash: dict[str, ClientEntry] = {}
        for tool_id, token, methods in clients:
            digest = _hash(token)
            self._by_hash[digest] = ClientEntry(tool_id, digest, frozenset(methods))

    @classmethod
    def single(cls, token: str, tool_id: str = "default") -> ClientRegistry:
        """One client allowed every method (``--token`` / ``LLM_CALLER_TOKEN``)."""
        return cls([(tool_id, token, list(METHODS))])

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, token: str | None) -> ClientEntry | None:
        return self._by_hash.get(_hash(token)) if token else None


def _read_json(path: str | Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CallerConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CallerConfigError(f"{what} {path} is not JSON: {exc}") from exc


def load_client_registry(path: str | Path) -> ClientRegistry:
    """Read the original's ``client-registry.json``."""
    try:
        doc = _RegistryModel.model_validate(_read_json(path, "client registry"))
    except ValidationError as exc:
        raise CallerConfigError(f"client registry {path}: {validation_text(exc)}") from exc
    return ClientRegistry([(c.toolId, c.token, list(c.allowedMethods)) for c in doc.clients])


def parse_providers(data: Any, source: str = "providers") -> dict[str, ProviderEntry]:
    try:
        return dict(_ProvidersModel.model_validate(data).providers)
    except ValidationError as exc:
        raise CallerConfigError(f"{source}: {validation_text(exc)}") from exc


def load_providers(path: str | Path) -> dict[str, ProviderEntry]:
    """Read the original's ``providers.json`` (provider order is kept: it breaks routing ties)."""
    return parse_providers(_read_json(path, "providers file"), str(path))


class CallerOptions(StrictModel):
    """The caller's limits (from flags or the original's ``LLM_CALLER_*`` variables, or the
    ``caller`` entry of the server's ``sidecars`` setting)."""

    rate_limit_max: int = Field(0, ge=0, description="requests per window per client; 0: off")
    rate_limit_interval_ms: int = Field(60_000, ge=1)
    retry_attempts: int = Field(2, ge=1, description="chat attempts for TEMPORARY/RATE_LIMIT "
                                                     "errors, the first one included")
    retry_backoff_s: float = Field(0.1, ge=0)
    health_timeout_s: float = Field(3.0, gt=0)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
