"""After start, the embedded model computes every served playbook's stage prompts while no call
is live (``warm_playbooks``, server/warm.py), the playbook a setting names first; a connection
stops it, and it goes on after; a crash of the model's worker loses them, and they are computed
again. (The rest of the suite runs with it off: tests/conftest.py.) Three small playbooks of
two stages each: the bundled ones' 21 prompts cost the suite ~40 s more on the tiny model."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import textwrap
from pathlib import Path

import pytest
import websockets

from tests.conftest import scaled
from tests.integration.conftest import Client, ws_url
from voice_server.config import load_settings
from voice_server.playbook import PlaybookResponder
from voice_server.server.app import VoiceServer

pytestmark = pytest.mark.slow
PLAYBOOKS = ("charlie", "alpha", "bravo")  # the named one, then by id


def small_playbooks(folder: Path) -> Path:
    for pid in PLAYBOOKS:
        (folder / f"{pid}.yaml").write_text(textwrap.dedent(f"""\
            id: {pid}
            initial_stage: help
            stages:
              help: {{system_prompt: "You help callers of {pid}. Be brief.", tools: [lookup]}}
              done: {{system_prompt: Say goodbye.}}
            transitions:
              - {{from: help, to: done, when: {{tool_called: lookup}}}}
            tools:
              lookup:
                description: Look an order up
                parameters: {{type: object, properties: {{order: {{type: string}}}}}}
                handler: {{python: "json:dumps"}}
            """))
    return folder


class Lines(logging.Handler):
    """The server's "prompts computed ahead" lines; ``all_in`` is set when the first round
    is in, and at each line after it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.all_in = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "prompts computed ahead" in (line := record.getMessage()):
            self.lines.append(line)
            if len(self.lines) >= len(PLAYBOOKS):  # the first round, then each line after
                self.all_in.set()


async def test_every_served_playbook_is_computed_ahead_named_first(tmp_path: Path) -> None:
    lines = Lines()
    logger = logging.getLogger("voice_server.server.warm")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    settings = load_settings(port=0, warm_playbooks=True, default_playbook="charlie",
                             playbooks_dir=str(small_playbooks(tmp_path)))
    try:
        async with VoiceServer(settings) as server:
            async with websockets.connect(ws_url(server)) as ws:  # it waits for this call
                client = Client(ws)
                await client.recv()  # ready
                await client.send({"type": "user-text", "text": "Hello, my internet is down."})
                seen = await client.until("tts-complete", timeout=120)
                assert not [m for m in seen if m["type"] == "error"], seen
            await asyncio.wait_for(lines.all_in.wait(), scaled(180))
            every = sum(int(line.split(": ")[1].split()[0]) for line in lines.lines)
            assert (await server.health())["prompts_ahead"] == {"computed": every, "of": every}
            lines.all_in.clear()
            worker = server.router.providers["local"].worker
            os.kill(worker.pid, signal.SIGKILL)  # a native crash: its saved prompts are gone
            await asyncio.wait_for(lines.all_in.wait(), scaled(180))  # the first one again
            assert worker.restarts == 1
            async with asyncio.timeout(scaled(180)):  # counted again from 0, not on top
                while (ahead := (await server.health())["prompts_ahead"])["computed"] < every:
                    assert ahead["of"] == every, ahead
                    await asyncio.sleep(0.2)
            assert ahead == {"computed": every, "of": every}
            wanted = {}
            for pid in PLAYBOOKS:
                async with PlaybookResponder(server.responders.playbooks.get(pid),
                                             server.router) as pb:
                    wanted[pid] = len(pb.warm_requests())
    finally:
        logger.removeHandler(lines)
        logger.setLevel(logging.NOTSET)
    done = [(line.split("'")[1], int(line.split(": ")[1].split()[0])) for line in lines.lines]
    assert done[:len(PLAYBOOKS)] == list(wanted.items()), lines.lines
    # after the crash the named playbook comes first again, all its prompts (the rest follow
    # it by the same path)
    assert done[len(PLAYBOOKS):][:1] == [("charlie", wanted["charlie"])], lines.lines
