"""The broker as a command, and once against the embedded local model."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from voice_server.adapters.broker import (
    BrokerOptions,
    BrokerServer,
    BrokerService,
    request_completion,
    request_completions_batched,
)
from voice_server.cli import build_parser
from voice_server.llm import LLMRouter

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 20.0


def test_sidecar_group_parses_broker_flags():
    """`voice-server sidecar broker` takes its own flags and the shared LLM flags."""
    args = build_parser().parse_args(
        ["sidecar", "broker", "--port", "9000", "--http-port", "9001", "--model", "small=local",
         "--llm-provider", "openai_compat"])
    assert (args.sidecar, args.port, args.http_port, args.models, args.llm_provider) == \
        ("broker", 9000, 9001, [("small", "local")], "openai_compat")


async def test_command_serves_tcp_and_http_until_sigterm(fake_openai):
    """The command prints its addresses, serves both transports and exits 0 on SIGTERM."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "sidecar", "broker", "--port", "0",
        "--http-port", "0", "--llm-provider", "openai_compat", "--llm-base-url",
        fake_openai.base_url, "--llm-model", "fake-model", "--log-level", "WARNING",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(TIMEOUT):
            ready = json.loads(await proc.stdout.readline())
        host, port = ready["broker"].rsplit(":", 1)
        completion = await request_completion((host, int(port)), "from the CLI")
        assert completion.response == "You said: from the CLI"
        assert ready["http"].startswith("http://127.0.0.1:")
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT):
            stderr = await proc.stderr.read()
            assert await proc.wait() == 0, stderr.decode()


@pytest.mark.slow
async def test_embedded_local_model(local_model_available):
    """The broker answers from the bundled SmolLM2 model, with token usage."""
    from voice_server.llm.local import LocalLlamaProvider

    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    try:
        service = BrokerService(router, BrokerOptions(max_tokens=12, temperature=0.0))
        async with BrokerServer(service) as server:
            address = ("127.0.0.1", server.port)
            completion = await request_completion(address, "Say hello.", timeout_s=120)
            items = await request_completions_batched(address, ["Hi", "Bye"], timeout_s=120)
    finally:
        await router.aclose()
    assert completion.root_model == provider.default_model
    assert completion.response.strip() and completion.completion_tokens > 0
    assert all(item.completion and item.completion.response.strip() for item in items)
