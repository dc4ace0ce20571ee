"""The adapters' wire JSON: compact encoding, and strict decoding of HTTP bodies.

``compact_json`` writes what ``JSON.stringify`` and the original broker write: no spaces,
non-ASCII kept raw; text holding lone surrogates (legal in JSON escapes, not in UTF-8) is
written escaped.

``loads_strict`` accepts what RFC 8259 and I-JSON (RFC 7493) call JSON, and nothing Python's
``json`` module accepts beyond it. Refused (``ValueError``): ``NaN`` / ``Infinity`` (Python
extensions, RFC 8259 section 6), numbers that overflow a double (``1e999``; protojson refuses
them too), strings holding a lone surrogate (``"\\ud800"``: JSON escapes can spell one, UTF-8
cannot carry it to a store or a provider; I-JSON 2.1), and nesting deep enough to exhaust the
recursion limit.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["compact_json", "has_lone_surrogate", "loads_strict"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def compact_json(value: Any) -> bytes:
    """Compact UTF-8 JSON (see the module doc)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def has_lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in decoded JSON holds a lone surrogate."""
    stack = [value]
    while stack:  # iterative: decoded JSON may nest close to the recursion limit
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads_strict(raw: str | bytes) -> Any:
    """``json.loads`` that raises ``ValueError`` for everything listed in the module doc
    (``UnicodeDecodeError`` is one too)."""
    try:
        value = json.loads(raw, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if has_lone_surrogate(value):
        raise ValueError("a string holds a lone surrogate")
    return value
