"""One exception tree for the playbook package."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Issue", "PlaybookError", "PlaybookLoadError", "ToolError"]


class PlaybookError(Exception):
    """Root of every error raised by ``voice_server.playbook``."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in a playbook file, located by 1-based line and column."""

    file: str
    line: int
    column: int
    path: str  # dotted location inside the document, e.g. ``stages.booking.tools[0]``
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}:{self.column}: {where}{self.message}"


class PlaybookLoadError(PlaybookError):
    """The playbook file is not valid; ``issues`` lists every problem found, in file order."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.file, i.line, i.column))
        super().__init__("\n".join(str(i) for i in self.issues))


class ToolError(PlaybookError):
    """A tool handler failed (raised, timed out, answered an error); the text goes to the model."""
