"""The NDJSON host over real TCP and Unix sockets."""

from __future__ import annotations

import asyncio

import pytest

from tests.adapters.fakes import ProgrammableProvider
from tests.adapters.host.peer import TIMEOUT, Peer
from tests.support.fake_openai import Reply
from voice_server.adapters.host import HostOptions, HostServer
from voice_server.adapters.host import messages as m
from voice_server.adapters.host.codec import encode
from voice_server.llm import LLMRouter
from voice_server.llm.openai_compat import OpenAICompatProvider

INFO = {"type": "server_info", "payload": {"host_name": "test-host", "model": "fake-model",
                                           "status": "ready"}}


@pytest.fixture
async def host(fake_router):
    async with HostServer(fake_router, HostOptions(host_name="test-host")) as server:
        yield server


@pytest.fixture
def gated():
    """A provider whose chunks after the first wait for ``provider.chunk_gate``."""
    provider = ProgrammableProvider(name="prog", default_model="prog-model")
    provider.chunk_gate = asyncio.Event()
    return provider


async def connect(server: HostServer) -> Peer:
    peer = await Peer.open(server.port)
    assert (await peer.recv())["type"] == "server_info"
    return peer


async def test_server_info_on_connect(host):
    """The first line is exactly server_info with host_name, model and status ready."""
    peer = await Peer.open(host.port)
    assert await peer.recv() == INFO
    peer.close()


async def test_full_lifecycle(host, fake_openai):
    """chat_start -> chat_chunk... -> chat_end{stop}, all with the request id."""
    fake_openai.add("Hello brave new world")
    peer = await connect(host)
    await peer.send(m.chat_start("r1", "Hello"))
    got = await peer.recv_until("chat_end")
    assert got == [m.chat_chunk("r1", "Hello"), m.chat_chunk("r1", " brave"),
                   m.chat_chunk("r1", " new"), m.chat_chunk("r1", " world"),
                   m.chat_end("r1", "stop")]
    assert fake_openai.requests[-1]["messages"] == [{"role": "user", "content": "Hello"}]
    assert fake_openai.requests[-1]["stream"] is True
    peer.close()


async def test_empty_generation_ends_with_no_chunks(host, fake_openai):
    """An empty answer gives chat_end alone (chunks only for non-empty text)."""
    fake_openai.add(Reply(text=""))
    peer = await connect(host)
    await peer.send(m.chat_start("e", "x"))
    assert await peer.recv() == m.chat_end("e", "stop")
    peer.close()


async def test_model_busy_and_busy_server_info(gated):
    """While r1 streams: r2 from another socket and r3 on the same get MODEL_BUSY; a new
    client sees status busy; r1 finishes unaffected and the gate is free after."""
    async with HostServer(LLMRouter({"prog": gated}, default="prog")) as server:
        a, b = await connect(server), await connect(server)
        await a.send(m.chat_start("r1", "one two three"))
        assert await a.recv() == m.chat_chunk("r1", "echo:")
        await b.send(m.chat_start("r2", "x"))
        assert await b.recv() == m.error("MODEL_BUSY", "Host is processing another request", "r2")
        await a.send(m.chat_start("r3", "x"))
        assert await a.recv() == m.error("MODEL_BUSY", "Host is processing another request", "r3")
        c = await Peer.open(server.port)
        assert (await c.recv())["payload"]["status"] == "busy"
        gated.chunk_gate.set()
        assert [x["payload"] for x in await a.recv_until("chat_end")] == [
            {"text": " one"}, {"text": " two"}, {"text": " three"}, {"finish_reason": "stop"}]
        await b.send(m.chat_start("r4", "again"))
        assert (await b.recv_until("chat_end"))[-1] == m.chat_end("r4", "stop")
        for peer in (a, b, c):
            peer.close()


async def test_concurrency_option_allows_parallel_generations(gated):
    """With concurrency 2 two clients stream at once; a third is busy."""
    options = HostOptions(concurrency=2)
    async with HostServer(LLMRouter({"prog": gated}, default="prog"), options) as server:
        peers = [await connect(server) for _ in range(3)]
        for i, peer in enumerate(peers[:2]):
            await peer.send(m.chat_start(f"r{i}", "a b"))
            assert (await peer.recv())["type"] == "chat_chunk"
        await peers[2].send(m.chat_start("r2", "x"))
        assert (await peers[2].recv())["payload"]["code"] == "MODEL_BUSY"
        gated.chunk_gate.set()
        for i, peer in enumerate(peers[:2]):
            assert (await peer.recv_until("chat_end"))[-1] == m.chat_end(f"r{i}")
            peer.close()
        peers[2].close()


async def test_abort_mid_stream(gated):
    """abort stops the generation (upstream cancelled), answers chat_end{abort}, frees the gate;
    an abort for an unknown id gets no reply."""
    async with HostServer(LLMRouter({"prog": gated}, default="prog")) as server:
        peer = await connect(server)
        await peer.send(m.chat_start("r1", "a b c d"))
        assert await peer.recv() == m.chat_chunk("r1", "echo:")
        await peer.send(m.abort("r1"))
        assert await peer.recv() == m.chat_end("r1", "abort")
        await asyncio.wait_for(gated.cancelled.wait(), TIMEOUT)
        assert not gated.finished.is_set() and not server.generations
        await peer.send(m.abort("nobody"))
        await peer.send(b'{"type":"nope"}\n')  # the next reply proves abort was silent
        assert (await peer.recv())["payload"]["message"] == "Invalid message envelope"
        gated.chunk_gate.set()
        await peer.send(m.chat_start("r2", "after"))
        assert [x["type"] for x in await peer.recv_until("chat_end")] == \
            ["chat_chunk", "chat_chunk", "chat_end"]
        peer.close()


async def test_abort_in_the_same_read_as_its_chat_start_frees_the_slot(gated):
    """chat_start and its abort in one write: the generation is cancelled before its first
    step; its slot must come back all the same (it did not: MODEL_BUSY to every client until
    a restart)."""
    async with HostServer(LLMRouter({"prog": gated}, default="prog")) as server:
        peer = await connect(server)
        await peer.send(encode(m.chat_start("r1", "a b")) + encode(m.abort("r1")))
        assert await peer.recv() == m.chat_end("r1", "abort")
        assert not server.busy and not server.generations
        gated.chunk_gate.set()
        other = await Peer.open(server.port)
        assert (await other.recv())["payload"]["status"] == "ready"
        await other.send(m.chat_start("r2", "again"))
        assert (await other.recv_until("chat_end"))[-1] == m.chat_end("r2", "stop")
        peer.close()
        other.close()


async def test_a_lone_surrogate_prompt_is_a_bad_message(host, fake_openai):
    """A JSON escape can spell a lone surrogate; no model can be sent it: BAD_MESSAGE, where
    the model's client failed with GENERATION_FAILED and a logged traceback."""
    peer = await connect(host)
    await peer.send(b'{"type":"chat_start","request_id":"s","payload":{"prompt":"\\udc00a"}}\n')
    assert await peer.recv() == m.error("BAD_MESSAGE", "Prompt is not valid Unicode (a lone "
                                        "surrogate)", "s")
    assert fake_openai.requests == []
    peer.close()


async def test_abort_of_another_sockets_request_is_ignored(gated):
    """Only the owning connection can abort its request."""
    async with HostServer(LLMRouter({"prog": gated}, default="prog")) as server:
        owner, other = await connect(server), await connect(server)
        await owner.send(m.chat_start("r1", "a b"))
        assert (await owner.recv())["type"] == "chat_chunk"
        await other.send(m.abort("r1"))
        await other.send(b"{}\n")
        assert (await other.recv())["payload"]["code"] == "BAD_MESSAGE"
        gated.chunk_gate.set()
        assert (await owner.recv_until("chat_end"))[-1] == m.chat_end("r1", "stop")
        owner.close()
        other.close()


@pytest.mark.parametrize(("prompt", "accepted"), [
    ("a" * 8192, True),
    ("€" * 2730, True),  # 8190 bytes
    ("a" * 8193, False),
    ("€" * 3000, False),  # 3000 characters, 9000 bytes
])
async def test_prompt_limit_counts_utf8_bytes(prompt, accepted):
    """8 KB is 8192 UTF-8 bytes; over it is BAD_MESSAGE with the request id."""
    provider = ProgrammableProvider(lambda request: asyncio.sleep(0, "ok"))
    async with HostServer(LLMRouter({"p": provider}, default="p")) as server:
        peer = await connect(server)
        await peer.send(m.chat_start("big", prompt))
        reply = await peer.recv()
        if accepted:
            assert reply == m.chat_chunk("big", "ok")
        else:
            assert reply == m.error("BAD_MESSAGE", "Prompt exceeds maximum size of 8 KB", "big")
            assert provider.calls == 0
        peer.close()


async def test_malformed_lines_keep_the_connection_open(host):
    """Bad lines get BAD_MESSAGE without request id (bad JSON: nothing); the socket stays."""
    peer = await connect(host)
    await peer.send(b'not json\n\n{"payload":{}}\n{"type":"unknown"}\n'
                    b'{"type":"abort","request_id":123}\n[1]\n'
                    b'{"type":"chat_start","payload":{"prompt":"x"}}\n{"type":"abort"}\n')
    replies = [await peer.recv() for _ in range(6)]
    assert [r["payload"]["message"] for r in replies] == [
        "Invalid message envelope"] * 4 + ["Invalid chat_start message", "Invalid abort message"]
    assert all(r["type"] == "error" and "request_id" not in r and
               r["payload"]["code"] == "BAD_MESSAGE" for r in replies)
    await peer.send(b'{"type":')
    await peer.send(b'"chat_start","request_id":"ok","payload":{"prompt":"still here"}}\n')
    assert (await peer.recv_until("chat_end"))[0] == m.chat_chunk("ok", "You")
    await peer.send(b'{"type":"server_info","payload":{"host_name":"h","model":"m",'
                    b'"status":"ready"}}\n{"type":"zzz"}\n')
    assert (await peer.recv())["payload"]["message"] == "Invalid message envelope"
    peer.close()


async def test_overlong_line_is_refused_and_closes(host):
    """70 KB without a newline gives BAD_MESSAGE, then the host closes the socket."""
    peer = await connect(host)
    await peer.send(b"x" * 70_000)
    assert await peer.recv() == m.error("BAD_MESSAGE",
                                        "Buffer exceeded 64 KB without finding newline")
    assert await peer.closed()


async def test_disconnect_mid_generation_cancels_it(gated):
    """A client that leaves mid-stream cancels its generation; nothing leaks; gate free."""
    async with HostServer(LLMRouter({"prog": gated}, default="prog")) as server:
        peer = await connect(server)
        await peer.send(m.chat_start("r1", "a b c"))
        assert (await peer.recv())["type"] == "chat_chunk"
        tasks = server.connection_tasks | server.generations
        peer.close()
        await asyncio.wait_for(gated.cancelled.wait(), TIMEOUT)
        assert not gated.finished.is_set()
        await asyncio.wait(tasks, timeout=TIMEOUT)
        assert not server.generations and not server.clients and not server.busy
        gated.chunk_gate.set()
        again = await connect(server)
        await again.send(m.chat_start("r2", "x"))
        assert (await again.recv_until("chat_end"))[-1] == m.chat_end("r2")
        again.close()


@pytest.mark.parametrize(("reply", "code", "message"), [
    (Reply(status=500), "GENERATION_FAILED",
     "Model server error: the LLM endpoint answered HTTP 500"),
    (Reply(status=400), "GENERATION_FAILED", "Invalid request: the LLM endpoint answered HTTP 400"),
    (Reply(status=404), "OLLAMA_MODEL_NOT_AVAILABLE",
     "Model not available: the LLM endpoint answered HTTP 404"),
    (Reply(text="late", delay_s=0.8), "TIMEOUT_NO_RESPONSE",
     "No response from model for 0.3 seconds"),
])
async def test_upstream_faults_are_errors_without_chat_end(fake_router, fake_openai, reply,
                                                           code, message):
    """Each upstream failure is one error with the request id, no chat_end; gate freed."""
    fake_openai.add(reply)
    async with HostServer(fake_router, HostOptions(no_chunk_timeout_s=0.3)) as server:
        peer = await connect(server)
        await peer.send(m.chat_start("f", "x"))
        assert await peer.recv() == m.error(code, message, "f")
        await peer.send(m.chat_start("g", "y"))
        assert (await peer.recv_until("chat_end"))[-1] == m.chat_end("g")
        peer.close()


async def test_unreachable_backend_is_ollama_not_found():
    """A backend that refuses connections maps to OLLAMA_NOT_FOUND."""
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    provider = OpenAICompatProvider(name="gone", base_url=f"http://127.0.0.1:{port}/v1",
                                    default_model="gone-model", timeout_s=5.0)
    router = LLMRouter({"gone": provider}, default="gone")
    async with HostServer(router) as server:
        peer = await connect(server)
        await peer.send(m.chat_start("n", "x"))
        assert await peer.recv() == m.error("OLLAMA_NOT_FOUND",
                                            "Cannot connect to the model (not running?)", "n")
        peer.close()
    await router.aclose()


async def test_sixth_client_is_refused(host):
    """The client limit (5) refuses the next connection with CONNECT_FAILED, then closes."""
    first_task = None
    peers = []
    for _ in range(5):
        peers.append(await connect(host))
        first_task = first_task or next(iter(host.connection_tasks))
    sixth = await Peer.open(host.port)
    assert await sixth.recv() == m.error("CONNECT_FAILED", "Max clients reached")
    assert await sixth.closed()
    peers[0].close()
    await asyncio.wait([first_task], timeout=TIMEOUT)
    assert host.clients == 4
    seventh = await Peer.open(host.port)
    assert (await seventh.recv())["type"] == "server_info"
    for peer in [*peers[1:], seventh]:
        peer.close()


async def test_unix_socket_transport(fake_router, tmp_path):
    """The same protocol over a Unix socket; the socket file is removed on close."""
    path = str(tmp_path / "host.sock")
    server = HostServer(fake_router, HostOptions(host_name="test-host"), port=None,
                        unix_path=path)
    async with server:
        peer = await Peer.open(unix_path=path)
        assert await peer.recv() == INFO
        await peer.send(m.chat_start("u", "over unix"))
        assert "".join(x["payload"].get("text", "") for x in await peer.recv_until("chat_end")) \
            == "You said: over unix"
        peer.close()
    assert not (tmp_path / "host.sock").exists()
    await server.close()


async def test_close_cancels_active_generations(gated):
    """Closing the host (twice) cancels a running generation and hangs up."""
    server = HostServer(LLMRouter({"prog": gated}, default="prog"))
    await server.start()
    peer = await connect(server)
    await peer.send(m.chat_start("r", "a b"))
    assert (await peer.recv())["type"] == "chat_chunk"
    await server.close()
    await server.close()
    assert gated.cancelled.is_set() and not server.generations and not server.clients
    assert await peer.closed()
