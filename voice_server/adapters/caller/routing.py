"""Capability routing and per-client rate limiting (sans-I/O, no clocks of their own).

Spec: specs/sidecar-llm-caller-mcp.md, "Phase 3 capability-routing interface updates"
(``providerInfo.routing``: ``capability-default`` | ``caller-override`` | ``fallback``) and
"Response metadata" (optional per-client rate limiting -> 429 with ``Retry-After``). Scoring is
the original's: ``scores[cap]`` + 50 when ``defaults[cap]`` exists, ties go
to the earlier provider.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .config import ProviderEntry
from .errors import CallerError

__all__ = ["FixedWindowLimiter", "Selection", "UnknownProvider", "select_provider"]

DEFAULT_BONUS = 50


class UnknownProvider(CallerError):
    """The caller named a provider that is not configured, or none is (the service answers
    the first as the client's BAD_REQUEST, the second as INTERNAL_ERROR)."""

    def __init__(self, what: str) -> None:
        super().__init__(500, "INTERNAL_ERROR", what)


@dataclass(frozen=True, slots=True)
class Selection:
    provider: str
    model: str
    capability: str
    strategy: str

    def routing(self) -> dict[str, str]:
        return {"capability": self.capability, "strategy": self.strategy}


def _model_for(entry: ProviderEntry, capability: str, requested: str | None) -> str:
    return requested or entry.defaults.get(capability) or entry.defaultModel or ""


def select_provider(providers: Mapping[str, ProviderEntry], capability: str, *,
                    provider: str | None = None, model: str | None = None) -> Selection:
    """Pick the provider and model for one call."""
    if not providers:
        raise UnknownProvider("no providers configured")
    if provider is not None:
        entry = providers.get(provider)
        if entry is None:
            raise UnknownProvider(provider)
        return Selection(provider, _model_for(entry, capability, model), capability,
                         "caller-override")
    best: tuple[float, str] | None = None
    for key, entry in providers.items():
        if capability not in entry.capabilities:
            continue
        score = entry.scores.get(capability, 0) + (DEFAULT_BONUS if capability in entry.defaults
                                                  else 0)
        if best is None or score > best[0]:
            best = (score, key)
    if best is None:
        key = next(iter(providers))
        return Selection(key, _model_for(providers[key], capability, model), capability,
                         "fallback")
    entry = providers[best[1]]
    strategy = "capability-default" if capability in entry.defaults else "fallback"
    return Selection(best[1], _model_for(entry, capability, model), capability, strategy)


class FixedWindowLimiter:
    """``max_requests`` per ``interval_ms`` window per key; windows start at a key's first hit."""

    def __init__(self, max_requests: int, interval_ms: int) -> None:
        self.enabled = max_requests > 0 and interval_ms > 0
        self._max = max_requests
        self._interval = interval_ms / 1000.0
        self._windows: dict[str, tuple[float, int]] = {}

    def hit(self, key: str, now: float) -> int | None:
        """Count one request at ``now`` (seconds); return the wait in ms when over the limit."""
        if not self.enabled:
            return None
        start, count = self._windows.get(key, (now, 0))
        if now - start >= self._interval:
            start, count = now, 0
        if count >= self._max:
            return max(1, math.ceil((start + self._interval - now) * 1000))
        self._windows[key] = (start, count + 1)
        if len(self._windows) > 10_000:  # forget expired windows of idle clients
            self._windows = {k: v for k, v in self._windows.items()
                             if now - v[0] < self._interval}
        return None
