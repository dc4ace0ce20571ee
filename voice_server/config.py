"""One typed Settings object: defaults < config file (YAML/TOML/JSON) < VOICE_SERVER_* env < flags.

Every default works offline on 2 cores with the bundled models. This module is the only one of
the package that reads the process environment: ``Settings`` reads the ``VOICE_SERVER_*``
variables, and the functions at the end read the rest (the config file's variable, the data
directory, the sidecars' own variables and names a configuration chooses, such as the variable
holding an API key). A test keeps it so (tests/unit/test_environment_reads.py).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict

from .compute import usable_cpus
from .settings_groups import (
    DEFAULT_APOLOGY,
    DEFAULT_FALLBACK,
    EdgeSettings,
    ModelSettings,
    ServiceSettings,
    VoiceSettings,
)

__all__ = [
    "DEFAULT_APOLOGY",
    "DEFAULT_FALLBACK",
    "ConfigError",
    "Settings",
    "config_file_from_env",
    "data_dir_from_env",
    "data_dir_set",
    "env_value",
    "load_settings",
    "read_config_file",
    "setting_variable",
    "validation_text",
]

class ConfigError(Exception):
    """The configuration file or values are invalid; the message says where and why."""


# Bases in reverse: pydantic lists the fields of the last base first, so --help keeps the
# order edge, voice, model, service.
class Settings(ServiceSettings, ModelSettings, VoiceSettings, EdgeSettings, BaseSettings):
    """Every option of the server (the fields: settings_groups.py). Field descriptions become
    the ``--help`` text."""

    model_config = SettingsConfigDict(env_prefix="VOICE_SERVER_", extra="forbid",
                                      validate_default=True, allow_inf_nan=False)

    @field_validator("ice_servers", "sidecars", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        """Flags and files may give these as JSON text."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else None
            except ValueError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
        return value

    @model_validator(mode="after")
    def _ports_differ(self) -> Settings:
        if self.phone_port and self.phone_port == self.port:
            raise ValueError(f"phone_port {self.phone_port} is the voice server's port too: "
                             "leave phone_port unset to serve phone calls on that port, or "
                             "choose another")
        return self

    @model_validator(mode="after")
    def _size_threads(self) -> Settings:
        """Thread counts 0: 2 (what we measure on our 2-core machines), fewer on a machine or
        container with one CPU (2 threads on one CPU made a WebSocket turn's first audio ~100
        ms later at p50; bench/turn_ws.py under taskset -c 0). More CPUs are not used by
        default: not measured here."""
        unset = [name for name in ("stt_threads", "llm_threads", "compute_workers")
                 if getattr(self, name) == 0]
        if unset:  # the /proc and /sys reads only when a count is left to them
            cpus = min(2, usable_cpus())
            for name in unset:
                setattr(self, name, cpus)
        return self

def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML, TOML or JSON config file into a dict of settings."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text: {exc.reason} at byte "
                          f"{exc.start}") from exc
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            stream = io.StringIO(text)
            stream.name = str(path)  # the YAML error's "in ..." (else "<unicode string>")
            data = yaml.safe_load(stream)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return data


def load_settings(config_file: str | Path | None = None, **flags: Any) -> Settings:
    """Build the settings; ``flags`` (CLI) beat env, env beats the file, the file beats defaults."""
    file_values = read_config_file(config_file) if config_file else {}
    flags = {k: v for k, v in flags.items() if v is not None}

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                       dotenv_settings, file_secret_settings):
            return (init_settings, env_settings,
                    InitSettingsSource(settings_cls, init_kwargs=file_values))

    try:
        layered = _Layered(**flags)
    except ValidationError as exc:
        raise ConfigError(_settings_error(exc, flags, file_values, config_file)) from None
    except ValueError as exc:  # a VOICE_SERVER_* variable pydantic-settings cannot parse
        field = re.search(r'field "(\w+)"', str(exc))
        where = setting_variable(field[1]) if field else str(exc)
        raise ConfigError(f"{where}: {exc.__cause__ or exc}") from None
    return Settings.model_construct(**layered.model_dump())


def validation_text(exc: ValidationError) -> str:
    """The first problem of a validation error as one line: ``where: what``."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    what = err["msg"].removeprefix("Value error, ")  # a validator's own ValueError
    return f"{where}: {what}" if where else what


def setting_variable(name: str) -> str:
    """The environment variable of setting ``name`` (``VOICE_SERVER_PORT``)."""
    return Settings.model_config["env_prefix"] + name.upper()


def _settings_error(exc: ValidationError, flags: dict[str, Any], file_values: dict[str, Any],
                    config_file: str | Path | None) -> str:
    """The first problem as one line naming where the value came from: the flag, the
    ``VOICE_SERVER_*`` variable or the config file (pydantic's own text named our internal
    class and took four lines)."""
    err = exc.errors()[0]
    name = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(name, Settings.model_fields, n=1)
        return f"unknown setting {name!r}" + (f" in {config_file}" if config_file else "") + \
            (f" (did you mean {near[0]!r}?)" if near else "")
    variable = setting_variable(name)
    source = (f"--{name.replace('_', '-')}" if name in flags
              else variable if os.environ.get(variable) is not None
              else str(config_file) if name in file_values else "")
    return validation_text(exc) + (f" (from {source})" if source else "")


# ---- the process environment (besides Settings' VOICE_SERVER_* variables) -------------------

def env_value(name: str) -> str | None:
    """The process environment's variable ``name`` (None when unset), read when called: the
    sidecars' own variables (``LLM_CALLER_*``, ``VOICE_SERVER_PROMPT_*``) and variables a
    configuration names (a provider's ``apiKeyEnv``, a prompt tool's secret)."""
    return os.environ.get(name)


def config_file_from_env() -> str | None:
    """``VOICE_SERVER_CONFIG``: the settings file of every command given no ``--config``."""
    return os.environ.get("VOICE_SERVER_CONFIG")


def data_dir_from_env() -> Path:
    """Where commands keep their files: ``$VOICE_SERVER_DATA_DIR``, else
    ``$XDG_DATA_HOME/voice-server``, else ``~/.local/share/voice-server``."""
    if os.environ.get("VOICE_SERVER_DATA_DIR"):
        return Path(os.environ["VOICE_SERVER_DATA_DIR"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "voice-server"


@contextlib.contextmanager
def data_dir_set(path: Path) -> Iterator[None]:
    """``$VOICE_SERVER_DATA_DIR`` is ``path`` inside the block, for the tool handlers that keep
    their files there (``playbook test`` gives each scenario an empty one)."""
    before = os.environ.get("VOICE_SERVER_DATA_DIR")
    os.environ["VOICE_SERVER_DATA_DIR"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("VOICE_SERVER_DATA_DIR", None)
        else:
            os.environ["VOICE_SERVER_DATA_DIR"] = before
