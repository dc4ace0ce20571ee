"""Sidecars started from config beside the voice server, and the adapters' public names."""

from __future__ import annotations

import aiohttp
import pytest

import voice_server.adapters.broker as broker
import voice_server.adapters.host as host
from voice_server.adapters.broker import request_completion
from voice_server.adapters.host import HostClient
from voice_server.adapters.launch import check_sidecars, launch_sidecars
from voice_server.adapters.prompt import ToolConfig, open_store
from voice_server.config import ConfigError, Settings
from voice_server.llm import ChatRequest, LLMError, LLMRouter
from voice_server.llm.openai_compat import OpenAICompatProvider
from voice_server.llm.registry import build_router

SETTINGS = Settings()


async def test_launch_both_sidecars_from_config(fake_router, tmp_path):
    """One config mapping starts the broker (with proxy) and the host on one shared router."""
    config = {"broker": {"http_port": 0, "options": {"max_tokens": 50}},
              "host": {"unix_path": str(tmp_path / "h.sock"),
                       "options": {"host_name": "beside"}}}
    async with launch_sidecars(fake_router, config, SETTINGS) as ready:
        assert set(ready) == {"broker", "host"} and ready["broker"]["http"]
        b_host, b_port = ready["broker"]["broker"].rsplit(":", 1)
        completion = await request_completion((b_host, int(b_port)), "to the broker")
        assert completion.response == "You said: to the broker"
        async with await HostClient.connect(unix_path=ready["host"]["unix"]) as client:
            assert client.server_info["host_name"] == "beside"
            assert await client.ask("to the host") == "You said: to the host"
    assert not (tmp_path / "h.sock").exists()


@pytest.mark.parametrize(("config", "message"), [
    ({"nope": {}}, "unknown sidecars \\['nope'\\]"),
    ({"broker": {"port": -1}}, "sidecar 'broker'"),
    ({"host": {"options": {"concurrency": 0}}}, "sidecar 'host'"),
    ({"caller": {"port": 0}}, "sidecar 'caller'.*needs client_registry .* or token"),
    ({"caller": {"port": 0, "client_registry": "/nonexistent/registry.json"}},
     "sidecar 'caller': cannot read client registry /nonexistent/registry.json"),
    ({"prompt": {"port": 0, "grpc_port": None, "db": "postgres://bad host/"}},
     "sidecar 'prompt': prompt tool store: "),
])
async def test_launch_rejects_bad_config(fake_router, config, message):
    """Unknown sidecars, invalid options and unreadable files are configuration errors."""
    with pytest.raises(ConfigError, match=message):
        async with launch_sidecars(fake_router, config, SETTINGS):
            pass


@pytest.mark.parametrize(("config", "message"), [
    ({"broker": {"port": 8787}}, "sidecar 'broker': port 8787 is the voice server's port too"),
    ({"broker": {"port": 9100}, "host": {"port": 9100}},
     "sidecar 'host': port 9100 is sidecar 'broker''s port too"),
    ({"broker": {"port": 9100, "http_port": 9100}},
     "sidecar 'broker': http_port 9100 is sidecar 'broker''s port too"),
    ({"prompt": {"host": "0.0.0.0", "port": 9101, "grpc_port": 8787}},
     "sidecar 'prompt': grpc_port 8787 is the voice server's port too"),
])
def test_no_port_is_taken_twice(config, message):
    """A sidecar on the server's port, or two on one, are told apart before anything binds
    (the bind error came after the models loaded, with the server's "--port" hint)."""
    with pytest.raises(ConfigError, match=message):
        check_sidecars(config, SETTINGS)


def test_ports_on_other_addresses_or_left_free_do_not_clash():
    config = {"broker": {"host": "10.1.2.3", "port": 8787}, "host": {"port": 0},
              "prompt": {"port": 0, "grpc_port": 0}}
    assert set(check_sidecars(config, SETTINGS)) == {"broker", "host", "prompt"}


@pytest.mark.parametrize("sidecars", ['{"callr": {}}', '{"caller": {"port": 0}}',
                                      '{"broker": {"prot": 1}}'])
def test_serve_refuses_bad_sidecars_before_loading_models(sidecars, capsys, monkeypatch):
    """One line and exit 2, and the server (whose models take seconds to load) never starts."""
    import voice_server.server.app as app
    from voice_server.cli import main

    started = []
    monkeypatch.setattr(app, "run_forever", lambda settings: started.append(settings))
    assert main(["serve", "--port", "0", "--sidecars", sidecars]) == 2
    err = capsys.readouterr().err
    assert err.startswith("voice-server: configuration error: ") and "sidecar" in err, err
    assert len(err.splitlines()) == 1 and not started


async def test_launch_caller_and_prompt_on_the_servers_model(fake_openai, tmp_path):
    """The caller's default ``local`` provider and the prompt service's ``local`` tools run on
    the model the router lends them (not a second copy), and leave it open when they stop."""
    model = OpenAICompatProvider(name="local", base_url=fake_openai.base_url,
                                 default_model="fake-model", timeout_s=10.0)
    router = LLMRouter({"local": model}, default="local")
    db = str(tmp_path / "tools.sqlite3")
    async with open_store(db) as store:
        await store.put(ToolConfig(name="here", provider="local"))
    config = {"caller": {"port": 0, "token": "t0ken"},
              "prompt": {"port": 0, "grpc_port": None, "db": db,
                         "secrets_file": str(tmp_path / "none.env")}}
    try:
        async with launch_sidecars(router, config, SETTINGS) as ready, \
                aiohttp.ClientSession() as http:
            assert set(ready) == {"caller", "prompt"} and "grpc" not in ready["prompt"]
            async with http.post(f"{ready['caller']['url']}/mcp/chat", json={
                    "requestId": "r1", "callerTool": "t", "maxTokens": 8,
                    "messages": [{"role": "user", "content": "to the caller"}]},
                    headers={"x-llm-caller-token": "t0ken"}) as resp:
                body = await resp.json()
            assert resp.status == 200, body
            assert body["message"]["content"] == "You said: to the caller"
            assert body["providerInfo"]["name"] == "local"
            async with http.post(f"{ready['prompt']['connect']}/prompt.v1.PromptService/Run",
                                 json={"tool_name": "here", "input": "to the prompt"}) as resp:
                body = await resp.json()
            assert body["output"] == [{"type": "output_text",
                                       "text": "You said: to the prompt"}], body
        result = await router.complete(ChatRequest(  # the lender's model outlives them
            messages=[{"role": "user", "content": "still open"}]))
        assert result.text == "You said: still open"
    finally:
        await router.aclose()


def test_router_factory_from_settings():
    """The factory builds one provider from Settings and refuses incomplete endpoints."""
    router = build_router(Settings(llm_provider="openai_compat", llm_base_url="http://127.0.0.1:9",
                                   llm_model="m"))
    assert (router.default, router.resolve(None)[1]) == ("openai_compat", "m")
    with pytest.raises(LLMError, match="needs llm_base_url"):
        build_router(Settings(llm_provider="openai_compat"))


def test_public_names():
    """The packages export what callers need, and nothing private."""
    assert {"BrokerServer", "BrokerService", "BrokerProxy", "BrokerError", "encode_frame",
            "FrameDecoder", "WireRequest", "WireResponse", "WireResult", "try_parse_request",
            "send_request", "request_completion", "request_completions_batched"} <= \
        set(broker.__all__)
    assert {"HostServer", "HostOptions", "HostClient", "HostError", "LineDecoder", "encode",
            "validate", "ErrorCode"} <= set(host.__all__)
    for module in (broker, host):
        assert all(not name.startswith("_") and hasattr(module, name) for name in module.__all__)


@pytest.mark.parametrize("argv", [
    ["broker", "--port", "70000"], ["host", "--concurrency", "0"],
    ["prompt", "--port", "70000"], ["caller", "--token", "t", "--port", "70000"]])
def test_a_sidecar_option_out_of_range_is_one_line(argv, capsys):
    """Every sidecar command answers an option out of range with exit 2 and one line naming
    it, before it loads a model or opens a port."""
    from voice_server.cli import main

    assert main(["sidecar", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("voice-server: configuration error: ") and len(err.splitlines()) == 1
    assert ("concurrency" if "host" in argv else "port: ") in err


async def test_a_sidecar_port_in_use_names_the_sidecar(fake_router):
    """A sidecar's port taken by another program is a configuration error naming the sidecar
    (not the voice server's "choose another --port" hint)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"sidecar 'host': .*{port}.*in use"):
            async with launch_sidecars(fake_router, {"host": {"port": port}}, SETTINGS):
                pass
