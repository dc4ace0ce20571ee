"""The public names of voice_server.playbook are the ones we mean to offer."""

from __future__ import annotations

import voice_server.playbook as playbook


def test_public_names() -> None:
    """__all__ lists exactly the supported API, and every name resolves."""
    assert sorted(playbook.__all__) == sorted([
        "TRANSITION_TOOL", "Decision", "Engine", "HandlerImportError", "Issue", "Playbook",
        "PlaybookError", "PlaybookLoadError", "PlaybookNotFound", "PlaybookRegistry",
        "PlaybookResponder", "PlaybookState", "ReloadReport", "StagePlan", "ToolContext",
        "ToolError", "ToolEvent", "ToolOutcome", "ToolRunner", "lint", "load_playbook",
        "load_playbook_text", "playbook_json_schema", "spoken_date", "spoken_day", "spoken_time"])
    for name in playbook.__all__:
        assert getattr(playbook, name) is not None


def test_one_exception_root() -> None:
    """Every error of the package derives from PlaybookError."""
    for exc in (playbook.PlaybookLoadError, playbook.ToolError, playbook.HandlerImportError,
                playbook.PlaybookNotFound):
        assert issubclass(exc, playbook.PlaybookError)
