"""Playbooks: multi-stage tool-calling agents defined in YAML.

- ``schema``: the file format (pydantic; published as ``playbooks/schema.json``);
- ``loader``: YAML -> checked ``Playbook``, errors located by file, line and column;
- ``engine``: pure stage/transition logic (state in, decisions out);
- ``lint``: graph warnings (unreachable stages, unused tools and intents);
- ``tools``: argument validation and the Python / HTTP webhook runners; ``spoken_time``,
  ``spoken_date`` and ``spoken_day`` for the sentences tool handlers write;
- ``responder``: ``PlaybookResponder``, the turn pipeline's responder for a playbook;
- ``registry``: ``PlaybookRegistry``, a hot-reloaded folder of playbooks.
"""

from .engine import TRANSITION_TOOL, Decision, Engine, PlaybookState, StagePlan, ToolEvent
from .errors import Issue, PlaybookError, PlaybookLoadError, ToolError
from .lint import lint
from .loader import load_playbook, load_playbook_text
from .registry import PlaybookNotFound, PlaybookRegistry, ReloadReport
from .responder import PlaybookResponder
from .schema import Playbook, playbook_json_schema
from .tools import (
    HandlerImportError,
    ToolContext,
    ToolOutcome,
    ToolRunner,
    spoken_date,
    spoken_day,
    spoken_time,
)

__all__ = [
    "TRANSITION_TOOL",
    "Decision",
    "Engine",
    "HandlerImportError",
    "Issue",
    "Playbook",
    "PlaybookError",
    "PlaybookLoadError",
    "PlaybookNotFound",
    "PlaybookRegistry",
    "PlaybookResponder",
    "PlaybookState",
    "ReloadReport",
    "StagePlan",
    "ToolContext",
    "ToolError",
    "ToolEvent",
    "ToolOutcome",
    "ToolRunner",
    "lint",
    "load_playbook",
    "load_playbook_text",
    "playbook_json_schema",
    "spoken_date",
    "spoken_day",
    "spoken_time",
]
