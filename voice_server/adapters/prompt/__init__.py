"""The prompt service sidecar: ``prompt.v1.PromptService/Run`` over Connect JSON and gRPC-JSON,
a tool-configuration store (SQLite or PostgreSQL), a secrets vault, and the ``prompt`` CLI.

Spec: specs/sidecar-prompt-service.md. The original: the Go service it replaces.
"""

from .codec import RunRequest, build_response, normalize_input, parse_run_request
from .errors import (
    InvalidArgument,
    PromptError,
    ProviderConfigError,
    SecretNotFound,
    StoreError,
    ToolNotFound,
)
from .factory import LLMFactory
from .server import PromptSidecar
from .service import PromptService, open_service
from .store import PostgresToolStore, SQLiteToolStore, ToolConfig, ToolStore, open_store
from .vault import EnvFileVault, SecretVault

__all__ = [
    "EnvFileVault",
    "InvalidArgument",
    "LLMFactory",
    "PostgresToolStore",
    "PromptError",
    "PromptService",
    "PromptSidecar",
    "ProviderConfigError",
    "RunRequest",
    "SQLiteToolStore",
    "SecretNotFound",
    "SecretVault",
    "StoreError",
    "ToolConfig",
    "ToolNotFound",
    "ToolStore",
    "build_response",
    "normalize_input",
    "open_service",
    "open_store",
    "parse_run_request",
]
