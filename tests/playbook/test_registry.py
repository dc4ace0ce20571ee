"""PlaybookRegistry: a folder by id, listing, and hot reload that survives invalid edits."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from voice_server.playbook import PlaybookNotFound, PlaybookRegistry

from .conftest import PLAYBOOKS, scaled


def playbook(pid: str, prompt: str = "Hi") -> str:
    return (f"id: {pid}\ndescription: {pid} agent\ninitial_stage: a\n"
            f"stages:\n  a: {{system_prompt: {prompt}}}\n")


def write(path: Path, text: str) -> None:
    path.write_text(text)


async def test_examples_folder() -> None:
    """The shipped folder loads the three examples (tests/ and tools/ are not scanned)."""
    async with PlaybookRegistry(PLAYBOOKS, poll_s=None) as registry:
        assert registry.ids() == ["appointments", "restaurant", "support"]
        assert registry.errors == {}
        listed = registry.list()
        assert [p["id"] for p in listed] == ["appointments", "restaurant", "support"]
        assert listed[1] == {"id": "restaurant", "description": "Books tables at Luigi's trattoria",
                             "stages": ["greeting", "booking", "confirmation"],
                             "initial_stage": "greeting", "file": "restaurant.yaml"}
        assert registry.get("support").id == "support"
        with pytest.raises(PlaybookNotFound, match="no playbook 'nope' \\(known: appointments"):
            registry.get("nope")


async def test_reload_keeps_previous_version_on_invalid_edit(tmp_path: Path) -> None:
    """Edits reload; an invalid edit is reported and the last good version keeps serving."""
    write(tmp_path / "one.yaml", playbook("one"))
    write(tmp_path / "notes.txt", "not a playbook")
    async with PlaybookRegistry(tmp_path, poll_s=None) as registry:
        assert registry.ids() == ["one"]
        first = registry.get("one")
        write(tmp_path / "one.yaml", playbook("one", "Hello again"))
        report = await registry.reload()
        assert report.loaded == ["one"] and registry.version == 2
        assert registry.get("one").stages["a"].system_prompt == "Hello again"
        assert registry.get("one") is not first
        write(tmp_path / "one.yaml", playbook("one") + "transitions: [{from: a, to: zz, "
                                                       "when: {keyword: x}}]\n")
        report = await registry.reload()
        assert report.loaded == []
        assert [str(i) for i in report.failed[str(tmp_path / "one.yaml")]] == [
            f"{tmp_path / 'one.yaml'}:6:29: transitions[0].to: unknown stage 'zz' "
            f"(expected one of: a)"]
        assert registry.get("one").stages["a"].system_prompt == "Hello again"
        assert str(tmp_path / "one.yaml") in registry.errors
        unchanged = await registry.reload()
        assert not unchanged.changed
        write(tmp_path / "one.yaml", playbook("one", "Fixed"))
        await registry.reload()
        assert registry.errors == {} and registry.get("one").stages["a"].system_prompt == "Fixed"


async def test_added_removed_renamed_and_duplicate(tmp_path: Path) -> None:
    """New files appear, deleted ones disappear, a renamed id replaces the old, duplicates fail."""
    write(tmp_path / "one.yaml", playbook("one"))
    async with PlaybookRegistry(tmp_path, poll_s=None) as registry:
        write(tmp_path / "two.yml", playbook("two"))
        write(tmp_path / "dup.yaml", playbook("one", "Other"))
        report = await registry.reload()
        assert report.loaded == ["two"]
        assert [i.message for i in report.failed[str(tmp_path / "dup.yaml")]] == [
            "playbook id 'one' is already used by one.yaml"]
        write(tmp_path / "two.yml", playbook("deux"))
        report = await registry.reload()
        assert (report.loaded, report.removed) == (["deux"], ["two"])
        (tmp_path / "one.yaml").unlink()
        report = await registry.reload()
        assert report.removed == ["one"]
        assert registry.ids() == ["deux"]


async def test_watcher_picks_up_changes(tmp_path: Path) -> None:
    """With polling on, an edit is loaded without calling reload(); close cancels the task."""
    write(tmp_path / "one.yaml", playbook("one"))
    registry = PlaybookRegistry(tmp_path, poll_s=0.02)
    async with registry:
        registry.changed.clear()
        write(tmp_path / "one.yaml", playbook("one", "Changed by an editor"))
        await asyncio.wait_for(registry.changed.wait(), scaled(5))
        assert registry.get("one").stages["a"].system_prompt == "Changed by an editor"
        task = registry._task
    assert task is not None and task.cancelled()
    await registry.aclose()  # idempotent


async def test_missing_folder(tmp_path: Path) -> None:
    """A missing folder is empty, not an error; it is picked up once created."""
    folder = tmp_path / "later"
    async with PlaybookRegistry(folder, poll_s=None) as registry:
        assert registry.list() == []
        shutil.copytree(PLAYBOOKS / "tools", folder / "tools")
        shutil.copy(PLAYBOOKS / "restaurant.yaml", folder)
        await registry.reload()
        assert registry.ids() == ["restaurant"]


async def test_a_folder_that_serves_nothing_is_said(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A folder of dangling links serves no playbook: a warning says so (it said nothing); a
    folder with a playbook says nothing of the kind."""
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    async with PlaybookRegistry(tmp_path, poll_s=None) as registry:
        assert registry.list() == []
    assert any(f"no playbook in {tmp_path}" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)
    caplog.clear()
    async with PlaybookRegistry(PLAYBOOKS, poll_s=None):
        pass
    assert not any("no playbook in" in r.getMessage() for r in caplog.records)
