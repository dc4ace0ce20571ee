"""LLM caller sidecar: the original's HTTP + SSE interface and real MCP tools on one service.

Spec: specs/sidecar-llm-caller-mcp.md. ``voice-server sidecar caller`` runs it. The original: the
service it replaces, whose configuration files work unchanged too.
"""

from .config import (
    CallerConfigError,
    CallerOptions,
    ClientEntry,
    ClientRegistry,
    ProviderEntry,
    load_client_registry,
    load_providers,
)
from .errors import CallerError, ProviderError
from .http import CallerHTTPServer, build_app
from .mcp_tools import build_mcp_server
from .providers import build_runtimes
from .service import CallerService, ProviderRuntime

__all__ = [
    "CallerConfigError",
    "CallerError",
    "CallerHTTPServer",
    "CallerOptions",
    "CallerService",
    "ClientEntry",
    "ClientRegistry",
    "ProviderEntry",
    "ProviderError",
    "ProviderRuntime",
    "build_app",
    "build_mcp_server",
    "build_runtimes",
    "load_client_registry",
    "load_providers",
]
