"""Command-line flags for ``Settings`` fields, shared by every command that loads settings.

Flags are the last of the settings' sources (defaults < config file < env < flags); a flag left
out is ``None`` and does not override the others. The ``voice-server`` command, ``doctor``, the
playbook commands and the sidecars all build their flags here, so that one field has one flag.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable

from .config import Settings, config_file_from_env, load_settings, setting_variable

__all__ = ["add_settings_flags", "settings_from_args"]


def _flag_type(annotation: object):
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _flag_type(args[0])
    if origin is typing.Annotated:
        return _flag_type(args[0])
    if annotation in (int, float):
        return annotation
    if annotation is bool:
        return lambda v: v.lower() in ("1", "true", "yes", "on")
    return str


def add_settings_flags(parser: argparse.ArgumentParser,
                       fields: Iterable[str] | None = None) -> None:
    """``--config`` plus one ``--flag`` per Settings field (all of them, or ``fields``),
    documented with the field's description."""
    parser.add_argument("--config", metavar="FILE",
                        help="YAML, TOML or JSON file of settings (env VOICE_SERVER_CONFIG)")
    for name in Settings.model_fields if fields is None else fields:
        field = Settings.model_fields[name]
        default = field.get_default(call_default_factory=True)
        said = "" if "(default:" in (field.description or "") else f"default: {default!r}; "
        parser.add_argument(
            "--" + name.replace("_", "-"), dest=name, default=None,
            metavar="true|false" if field.annotation is bool else "VALUE",
            type=_flag_type(field.annotation),
            help=f"{field.description} ({said}env {setting_variable(name)})")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings with every flag that was given on top (``--config`` or its env variable
    names the file)."""
    flags = {name: getattr(args, name, None) for name in Settings.model_fields}
    return load_settings(getattr(args, "config", None) or config_file_from_env(), **flags)
