"""The public names of the prompt package are the ones we mean to export."""

from __future__ import annotations

import voice_server.adapters.prompt as prompt


def test_public_names():
    """__all__ lists exactly the intended public API, and every name resolves."""
    assert sorted(prompt.__all__) == sorted([
        "EnvFileVault", "InvalidArgument", "LLMFactory", "PostgresToolStore", "PromptError",
        "PromptService", "PromptSidecar", "ProviderConfigError", "RunRequest",
        "SQLiteToolStore", "SecretNotFound", "SecretVault", "StoreError", "ToolConfig",
        "ToolNotFound", "ToolStore", "build_response", "normalize_input", "open_service",
        "open_store", "parse_run_request"])
    assert all(hasattr(prompt, name) for name in prompt.__all__)
    assert all(issubclass(getattr(prompt, n), prompt.PromptError) for n in (
        "InvalidArgument", "ProviderConfigError", "SecretNotFound", "StoreError",
        "ToolNotFound"))
