"""The one provider registry (llm/registry.py): kinds, specs from Settings, nobody else builds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import voice_server
from voice_server.config import Settings
from voice_server.llm import LLMError
from voice_server.llm.openai_compat import OpenAICompatProvider
from voice_server.llm.registry import BUILT_IN_KINDS, ProviderRegistry, ProviderSpec

PACKAGE = Path(voice_server.__file__).resolve().parent
PROVIDER_CLASSES = {"OpenAICompatProvider", "LocalLlamaProvider", "MiniLMEmbeddingProvider"}


async def test_openai_compat_spec_becomes_a_provider():
    """An ``openai_compat`` spec builds the provider it describes, named by the spec."""
    registry = ProviderRegistry(Settings())
    provider = registry.build(ProviderSpec(kind="openai_compat", name="ollama", model="m",
                                           base_url="http://127.0.0.1:9/v1", timeout_s=5.0))
    try:
        assert isinstance(provider, OpenAICompatProvider)
        assert (provider.name, provider.default_model) == ("ollama", "m")
        assert str(provider._client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    finally:
        await provider.aclose()
    with pytest.raises(LLMError, match="'x' needs a base URL"):
        registry.build(ProviderSpec(kind="openai_compat", name="x"))


def test_unknown_kind_names_the_known_ones():
    """An unknown kind is an ``LLMError`` listing the kinds there are."""
    with pytest.raises(LLMError, match="unknown provider kind 'nope'; known: openai_compat, "
                                       "local, minilm$"):
        ProviderRegistry(Settings()).build(ProviderSpec(kind="nope"))
    assert tuple(BUILT_IN_KINDS) == ("openai_compat", "local", "minilm")


def test_plugged_kinds_get_the_spec_and_the_registry():
    """A kind added by the caller is built with the spec and the registry it was asked of."""
    seen = []
    registry = ProviderRegistry(Settings(), kinds={"fake": lambda spec, reg: seen.append(
        (spec, reg)) or "built"})
    spec = ProviderSpec(kind="fake", model="m")
    assert registry.build(spec) == "built"
    assert seen == [(spec, registry)]
    assert registry.kinds == ("openai_compat", "local", "minilm", "fake")


def test_settings_specs():
    """Settings name the default provider, and the other kind when it is configured too."""
    endpoint = Settings(llm_provider="openai_compat", llm_base_url="http://127.0.0.1:9/v1",
                        llm_model="m", llm_api_key="k", llm_vision=True, llm_timeout_s=7.0,
                        llm_model_path="/models/x.gguf")
    specs = ProviderRegistry(endpoint).configured_specs()
    assert specs == {
        "openai_compat": ProviderSpec(kind="openai_compat", base_url="http://127.0.0.1:9/v1",
                                      api_key="k", model="m", timeout_s=7.0,
                                      first_token_timeout_s=10.0, vision=True),
        "local": ProviderSpec(kind="local")}
    assert list(ProviderRegistry(Settings()).configured_specs()) == ["local"]


def test_no_module_but_the_registry_constructs_a_provider():
    """Provider classes are constructed in llm/registry.py only."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else \
                    func.attr if isinstance(func, ast.Attribute) else None
                if called in PROVIDER_CLASSES and name != "llm/registry.py":
                    found.append(f"{name}:{node.lineno}")
    assert found == []
