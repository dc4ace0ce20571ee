"""A playbook the settings name (``default_playbook``, ``phone_playbook``) is served, or the
server does not start: a newcomer's ``--default-playbook nosuch`` started without a word, and
every connection would have got ``PLAYBOOK_ERROR``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import websockets

from tests.integration.conftest import Client, ws_url
from voice_server.config import ConfigError, load_settings
from voice_server.server.app import VoiceServer

ROOT = Path(__file__).resolve().parents[2]


async def test_the_default_playbook_serves_a_connection_that_names_none() -> None:
    settings = load_settings(port=0, preload_models=False, default_playbook="restaurant")
    async with VoiceServer(settings) as server, \
            websockets.connect(ws_url(server)) as ws:
        ready = await Client(ws).recv()
        session = await server.sessions.get(ready["id"])
        assert session.meta["playbook"] == "restaurant"


@pytest.mark.parametrize("option", ["default_playbook", "phone_playbook"])
async def test_a_named_playbook_that_is_not_served_stops_the_start(option: str) -> None:
    settings = load_settings(port=0, preload_models=False, **{option: "nosuch"})
    with pytest.raises(ConfigError) as caught:
        async with VoiceServer(settings):
            pass
    text = str(caught.value)
    assert text.startswith(f"{option} 'nosuch': no playbook 'nosuch' in "), text
    assert "served: appointments, restaurant, support)" in text, text


async def test_an_invalid_file_is_named_beside_the_served(tmp_path: Path) -> None:
    (tmp_path / "pizza.yaml").write_text("id: pizza\nstages: [\n")
    settings = load_settings(port=0, preload_models=False, playbooks_dir=str(tmp_path),
                             default_playbook="pizza")
    with pytest.raises(ConfigError, match=r"\(served: none; invalid, not served: pizza.yaml\)"):
        async with VoiceServer(settings):
            pass


def test_serve_says_it_in_one_line_and_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "voice_server.cli", "serve", "--port", "0",
                           "--default-playbook", "nosuch", "--log-level", "WARNING"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "voice-server: configuration error: default_playbook 'nosuch': no playbook " \
        "'nosuch' in " in proc.stderr, proc.stderr


async def test_an_edited_playbook_leaves_no_old_responder_and_its_webhooks_work(
        tmp_path: Path) -> None:
    """Every edit used to leave the old version's responder (and its webhook HTTP session)
    until shutdown. Now the versions share the server's session and only the current one is
    kept; a turn that began before an edit still reaches its webhook with the old version."""
    from aiohttp import web

    calls: list[dict] = []

    async def hook(request: web.Request) -> web.Response:
        calls.append(await request.json())
        return web.json_response({"n": len(calls)})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/hook"  # type: ignore

    def write(version: int) -> None:
        (tmp_path / "hook.yaml").write_text(
            f"id: hook\ndescription: version {version}\ninitial_stage: a\n"
            f"stages: {{a: {{tools: [ping]}}}}\n"
            f"tools: {{ping: {{handler: {{http: {{url: '{url}'}}}}}}}}\n")

    write(1)
    settings = load_settings(port=0, preload_models=False, playbooks_dir=str(tmp_path))
    try:
        async with VoiceServer(settings) as server:
            first = server.responders.playbook("hook")
            for version in (2, 3, 4):
                write(version)
                await server.responders.playbooks.reload()
                latest = server.responders.playbook("hook")
            assert latest is not first and latest.playbook.description == "version 4"
            responders = server.responders
            assert list(responders.by_version) == [("hook", responders.playbooks.version)]
            for responder in (first, latest):  # the old one, as a turn still holding it
                outcome = await responder._tools.run("ping", "{}", call_id="c")
                assert outcome.ok, outcome.error
            webhooks = server.responders.webhooks
        assert webhooks is not None and webhooks.closed  # closed once, by the server
        assert len(calls) == 2
    finally:
        await runner.cleanup()
