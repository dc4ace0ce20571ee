"""serving.Site: the bound port, stop accepting while open connections go on, idempotent close."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from voice_server.serving import Site


def _app(started: asyncio.Event, release: asyncio.Event) -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def slow(request: web.Request) -> web.Response:
        started.set()
        await release.wait()
        return web.Response(text="finished")

    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/slow", slow)
    return app


async def test_port_zero_reports_the_bound_port_and_close_is_idempotent() -> None:
    """Port 0 binds a free port, ``port`` names it; closing twice is harmless."""
    site = Site(_app(asyncio.Event(), asyncio.Event()), "127.0.0.1", 0)
    async with site:
        assert site.port > 0 and site.listening
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{site.port}/") as answer:
            assert answer.status == 200 and await answer.text() == "hello"
    assert not site.listening
    await site.aclose()


async def test_stop_accepting_refuses_new_connections_and_finishes_open_requests() -> None:
    """After ``stop_accepting`` a new connection is refused while a request already running
    completes with its answer."""
    started, release = asyncio.Event(), asyncio.Event()
    async with Site(_app(started, release), "127.0.0.1", 0) as site:
        port = site.port
        async with aiohttp.ClientSession() as http:
            running = asyncio.create_task(
                http.get(f"http://127.0.0.1:{port}/slow").__aenter__(), name="slow-request")
            await asyncio.wait_for(started.wait(), 5)
            await site.stop_accepting()
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", port)
            release.set()
            answer = await asyncio.wait_for(running, 5)
            assert await answer.text() == "finished"
            answer.release()


@pytest.mark.parametrize("request_line", [b"GET /" + b"a" * 9000 + b" HTTP/1.1", b"GET * HTTP/1.1"])
async def test_a_malformed_request_is_one_line_in_the_log(caplog: pytest.LogCaptureFixture,
                                                          request_line: bytes) -> None:
    """aiohttp logs each request it cannot parse as an ERROR with a traceback (a fuzzing run,
    2026-11-30: any client could flood the log): the client still gets its 400, the log one
    INFO line; a handler that fails still logs its traceback."""
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug of ours")

    app = _app(asyncio.Event(), asyncio.Event())
    app.router.add_get("/broken", broken)
    caplog.set_level("INFO")
    async with Site(app, "127.0.0.1", 0) as site:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(request_line + b"\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.split()[1] == b"400", answer[:200]
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{site.port}/broken") as response:
            assert response.status == 500
    refused = [r for r in caplog.records if "malformed HTTP request" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelname == "INFO" and not refused[0].exc_info
    assert len(refused[0].getMessage()) < 250
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info[0] is RuntimeError  # the handler's bug
