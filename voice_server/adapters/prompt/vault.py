"""Secrets vault: resolves a tool's ``api_key_secret`` reference to the key itself.

Spec: specs/sidecar-prompt-service.md "Key Components" (``VaultDAO``). The default vault reads a
secrets file (a JSON object, or ``NAME=VALUE`` lines) and then the environment: the name as it is,
then upper-cased with every other character turned into ``_`` (``rbctest-key`` ->
``RBCTEST_KEY``). Any other back end implements ``SecretVault``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from ...config import env_value
from .errors import SecretNotFound, StoreError

__all__ = ["EnvFileVault", "SecretVault", "read_secrets_file"]


class SecretVault(Protocol):
    async def resolve(self, name: str) -> str:
        """The secret's value; ``SecretNotFound`` when the vault does not hold it."""
        ...


def read_secrets_file(path: Path) -> dict[str, str]:
    """Parse a secrets file: a JSON object of strings, or ``NAME=VALUE`` lines (``#`` comments,
    optional ``export`` and quotes)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StoreError(f"secrets file {path.name} is not valid JSON") from exc
        if not isinstance(data, dict):
            raise StoreError(f"secrets file {path.name} must hold an object")
        return {str(k): str(v) for k, v in data.items() if isinstance(v, str | int | float)}
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


class EnvFileVault:
    """Secrets file first (re-read when it changes), then environment variables (``environ``:
    these instead of the process environment)."""

    def __init__(self, secrets_file: str | Path | None = None, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.secrets_file = Path(secrets_file) if secrets_file else None
        self._lookup: Callable[[str], str | None] = env_value if environ is None \
            else environ.get
        self._cache: tuple[float, dict[str, str]] | None = None

    def _file_secrets(self) -> dict[str, str]:
        if self.secrets_file is None:
            return {}
        try:
            mtime = self.secrets_file.stat().st_mtime
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError("the secrets file cannot be read") from exc
        if self._cache is None or self._cache[0] != mtime:
            try:
                self._cache = (mtime, read_secrets_file(self.secrets_file))
            except OSError as exc:
                raise StoreError("the secrets file cannot be read") from exc
        return self._cache[1]

    async def resolve(self, name: str) -> str:
        secrets = self._file_secrets()
        if name in secrets:
            return secrets[name]
        for key in (name, re.sub(r"[^A-Za-z0-9]", "_", name).upper()):
            value = self._lookup(key)
            if value:
                return value
        raise SecretNotFound()
