"""``PlaybookRegistry``: the playbooks of one folder by id, hot-reloaded.

Every ``*.yaml``/``*.yml`` file directly in the folder is one playbook (sub-folders such as
``tests/`` and ``tools/`` are not scanned). ``async with PlaybookRegistry(folder) as reg`` loads
them all and, when ``poll_s`` is set, checks the folder for changes every ``poll_s`` seconds in a
named task (cancelled on exit). A file that becomes invalid is reported (``errors``, a log
warning) and the previous version of its playbook keeps serving; a deleted file removes its
playbook. ``reload()`` does one check now (tests call it instead of waiting for the poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import Issue, PlaybookError, PlaybookLoadError
from .loader import load_playbook
from .schema import Playbook

__all__ = ["PlaybookNotFound", "PlaybookRegistry", "ReloadReport", "playbook_files"]

log = logging.getLogger(__name__)


def playbook_files(folder: Path) -> list[Path]:
    """The playbooks a folder serves: its ``*.yaml`` and ``*.yml`` files, sorted."""
    return sorted(p for p in folder.glob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


class PlaybookNotFound(PlaybookError, KeyError):
    """No playbook with that id is loaded."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "playbook not found"


@dataclass
class ReloadReport:
    loaded: list[str] = field(default_factory=list)  # ids (re)loaded
    removed: list[str] = field(default_factory=list)  # ids whose file went away
    failed: dict[str, list[Issue]] = field(default_factory=dict)  # file -> issues

    @property
    def changed(self) -> bool:
        return bool(self.loaded or self.removed or self.failed)


@dataclass
class _Entry:
    playbook: Playbook
    file: Path


class PlaybookRegistry:
    """Playbooks by id. ``get(id)`` returns the current version (call it per connection; a
    responder keeps the version it was built with). ``list()`` describes them for a picker
    (``GET /playbooks``). ``version`` increases on every change; ``changed`` is set then."""

    def __init__(self, folder: str | Path, *, poll_s: float | None = 2.0,
                 check_handlers: bool = True) -> None:
        self.folder = Path(folder)
        self._poll_s = poll_s
        self._check_handlers = check_handlers
        self._entries: dict[str, _Entry] = {}
        self._stamps: dict[Path, tuple[int, int]] = {}
        self.errors: dict[str, list[Issue]] = {}
        self.version = 0
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PlaybookRegistry:
        await self.reload()
        if not self._entries and not self.errors:  # (invalid files were named by reload)
            log.warning("no playbook in %s (no readable *.yaml or *.yml file): connections "
                        "get the plain assistant until one is added", self.folder)
        if self._poll_s:
            self._task = asyncio.create_task(self._watch(), name=f"playbooks-watch:{self.folder}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def get(self, playbook_id: str) -> Playbook:
        entry = self._entries.get(playbook_id)
        if entry is None:
            raise PlaybookNotFound(f"no playbook {playbook_id!r} (known: "
                                   f"{', '.join(sorted(self._entries)) or 'none'})")
        return entry.playbook

    def __contains__(self, playbook_id: object) -> bool:
        return playbook_id in self._entries

    def ids(self) -> list[str]:
        return sorted(self._entries)

    def why_absent(self, playbook_id: str) -> str | None:
        """Why ``playbook_id`` is not served, for a setting that names it (None: it is)."""
        if playbook_id in self._entries:
            return None
        served = ", ".join(self.ids()) or "none"
        invalid = ", ".join(sorted(Path(file).name for file in self.errors))
        return (f"no playbook {playbook_id!r} in {self.folder} (served: {served}"
                + (f"; invalid, not served: {invalid}" if invalid else "") + ")")

    def list(self) -> list[dict[str, Any]]:
        """``[{id, description, stages, initial_stage, file}]`` sorted by id, JSON-ready."""
        return [{"id": pid, "description": e.playbook.description,
                 "stages": list(e.playbook.stages), "initial_stage": e.playbook.initial_stage,
                 "file": e.file.name}
                for pid, e in sorted(self._entries.items())]

    async def reload(self) -> ReloadReport:
        """Check the folder once: load new and changed files, drop deleted ones."""
        report = await asyncio.to_thread(self._scan)
        if report.changed:
            self.version += 1
            self.changed.set()
        if report.loaded or report.removed:
            log.info("playbooks in %s: %s", self.folder, ", ".join(
                [*(f"{pid} loaded" for pid in report.loaded),
                 *(f"{pid} removed" for pid in report.removed)]))
        for file, issues in report.failed.items():
            log.warning("playbook %s is invalid; the previous version (if any) keeps serving:"
                        "\n%s", file, "\n".join(str(i) for i in issues))
        return report

    def _scan(self) -> ReloadReport:
        report = ReloadReport()
        files = playbook_files(self.folder)  # none when the folder is missing
        for gone in set(self._stamps) - set(files):
            del self._stamps[gone]
            self.errors.pop(str(gone), None)
            for pid in [pid for pid, e in self._entries.items() if e.file == gone]:
                del self._entries[pid]
                report.removed.append(pid)
        for file in files:
            try:
                stat = file.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._stamps.get(file) == stamp:
                continue
            self._stamps[file] = stamp
            try:
                playbook = load_playbook(file, check_handlers=self._check_handlers)
            except PlaybookLoadError as exc:
                report.failed[str(file)] = self.errors[str(file)] = exc.issues
                continue
            owner = self._entries.get(playbook.id)
            if owner is not None and owner.file != file:
                issue = Issue(str(file), 1, 1, "id", f"playbook id {playbook.id!r} is already "
                              f"used by {owner.file.name}")
                report.failed[str(file)] = self.errors[str(file)] = [issue]
                continue
            for pid in [pid for pid, e in self._entries.items()
                        if e.file == file and pid != playbook.id]:
                del self._entries[pid]  # the file's id was renamed
                report.removed.append(pid)
            self._entries[playbook.id] = _Entry(playbook, file)
            self.errors.pop(str(file), None)
            report.loaded.append(playbook.id)
        return report

    async def _watch(self) -> None:
        assert self._poll_s
        while True:
            await asyncio.sleep(self._poll_s)  # polling interval (no OS watcher dependency)
            try:
                await self.reload()
            except OSError as exc:  # the folder vanished for a moment: try again later
                log.warning("playbook folder scan failed: %s", exc)
