"""One exception root per package: every error class a sidecar (or the LLM layer) defines
derives from that package's root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

ROOTS = {
    "voice_server.adapters.broker": "BrokerError",
    "voice_server.adapters.caller": "CallerError",
    "voice_server.adapters.host": "HostError",
    "voice_server.adapters.prompt": "PromptError",
    "voice_server.llm": "LLMError",
}


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_error_derives_from_the_package_root(package: str):
    """Exception classes defined in the package's modules are all under its root."""
    root = getattr(importlib.import_module(package), ROOTS[package])
    strays = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) \
                    and value.__module__ == module.__name__ and not issubclass(value, root):
                strays.append(f"{module.__name__}.{name}")
    assert strays == []
