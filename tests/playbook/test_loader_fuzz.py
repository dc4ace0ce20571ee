"""Property tests: no input makes the loader fail with anything but PlaybookLoadError."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voice_server.playbook import Playbook, PlaybookLoadError, load_playbook_text

from .test_loader import GOOD

BASE = yaml.safe_load(GOOD)
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True) | \
    st.text(max_size=8) | st.sampled_from(["*", "start", "end", "lookup", "json:dumps"])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6) | st.sampled_from(
                          ["to", "from", "when", "keyword", "tools", "type", "python"]),
                          inner, max_size=3), max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(BASE) if p]


def _replace(node, path, value):
    if len(path) == 1:
        node[path[0]] = value
        return
    _replace(node[path[0]], path[1:], value)


def _load(text: str) -> None:
    try:
        assert isinstance(load_playbook_text(text), Playbook)
    except PlaybookLoadError as exc:
        assert exc.issues and all(i.line >= 1 and i.column >= 1 and i.message
                                  for i in exc.issues)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), values)
def test_mutated_documents(path: tuple, value: object) -> None:
    """Any value anywhere in a good playbook loads or gives located issues."""
    data = yaml.safe_load(GOOD)
    _replace(data, path, value)
    _load(yaml.safe_dump(data, allow_unicode=True))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text: str) -> None:
    """Arbitrary text loads or gives located issues."""
    _load(text)
