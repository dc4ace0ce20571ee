"""Sidecars started from config beside the voice server, and the adapters' public names."""

from __future__ import annotations

import pytest

import voice_server.adapters.broker as broker
import voice_server.adapters.host as host
from voice_server.adapters.broker import request_completion
from voice_server.adapters.host import HostClient
from voice_server.adapters.launch import launch_sidecars
from voice_server.config import ConfigError, Settings
from voice_server.llm import LLMError
from voice_server.llm.registry import build_router


async def test_launch_both_sidecars_from_config(fake_router, tmp_path):
    """One config mapping starts the broker (with proxy) and the host on one shared router."""
    config = {"broker": {"http_port": 0, "options": {"max_tokens": 50}},
              "host": {"unix_path": str(tmp_path / "h.sock"),
                       "options": {"host_name": "beside"}}}
    async with launch_sidecars(fake_router, config) as ready:
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
])
async def test_launch_rejects_bad_config(fake_router, config, message):
    """Unknown sidecars and invalid options are configuration errors, not tracebacks."""
    with pytest.raises(ConfigError, match=message):
        async with launch_sidecars(fake_router, config):
            pass


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
