"""The default secrets vault: secrets file (JSON or NAME=VALUE) first, then the environment."""

from __future__ import annotations

import os

import pytest

from voice_server.adapters.prompt.errors import SecretNotFound, StoreError
from voice_server.adapters.prompt.vault import EnvFileVault


async def test_env_lookup_exact_then_normalized():
    """The name as it is, then upper-cased with _ for other characters."""
    vault = EnvFileVault(environ={"rbctest-key": "exact", "OTHER_KEY": "normalized"})
    assert await vault.resolve("rbctest-key") == "exact"
    assert await vault.resolve("other.key") == "normalized"
    with pytest.raises(SecretNotFound, match="^secret not found$"):
        await vault.resolve("absent")


async def test_dotenv_file_wins_and_reloads(tmp_path):
    """NAME=VALUE lines (comments, export, quotes) beat the environment; edits are seen."""
    path = tmp_path / "secrets.env"
    path.write_text('# keys\nexport openai-key="sk-1"\nplain = two \n\nnoequals\n')
    vault = EnvFileVault(path, environ={"OPENAI_KEY": "from-env"})
    assert (await vault.resolve("openai-key"), await vault.resolve("plain")) == ("sk-1", "two")
    path.write_text("openai-key=sk-2\n")
    os.utime(path, (1, 1))  # a distinct mtime even within one clock tick
    assert await vault.resolve("openai-key") == "sk-2"


async def test_json_file_and_missing_file(tmp_path):
    """A JSON object works; a missing file is simply empty; a broken one is a StoreError."""
    path = tmp_path / "s.json"
    path.write_text('{"k": "v", "n": 5}')
    assert await EnvFileVault(path, environ={}).resolve("n") == "5"
    assert await EnvFileVault(tmp_path / "none.json", environ={"K": "env"}).resolve("k") == "env"
    path.write_text('{"k": ')
    with pytest.raises(StoreError):
        await EnvFileVault(path, environ={}).resolve("k")
