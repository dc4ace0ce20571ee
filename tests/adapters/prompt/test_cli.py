"""``voice-server prompt ...`` and ``voice-server sidecar prompt`` (spec "CLI Flow")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import aiohttp
import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.cli import main


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "tools.sqlite3")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def acli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it runs its own event loop) while the fixtures' loop serves."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tools_add_list_remove(capsys, db):
    """add, list (table and JSON), remove, and remove of an unknown tool."""
    assert cli(capsys, "prompt", "tools", "add", "t1", "--provider", "ollama", "--model", "gemma",
               "--temperature", "0.3", "--setting", "top_p=0.9", "--setting", "note=hi",
               "--db", db) == (0, "tool t1 saved\n", "")
    assert cli(capsys, "prompt", "tools", "add", "t0", "--provider", "local", "--db", db)[0] == 0
    code, out, _ = cli(capsys, "prompt", "tools", "list", "--db", db)
    assert code == 0
    assert out.splitlines() == ["NAME  PROVIDER  MODEL  BASE URL  SECRET",
                                "t0    local     -      -         -",
                                "t1    ollama    gemma  -         -"]
    code, out, _ = cli(capsys, "prompt", "tools", "list", "--json", "--db", db)
    listed = json.loads(out)
    assert [t["name"] for t in listed] == ["t0", "t1"]
    assert (listed[1]["temperature"], listed[1]["settings"]) == (0.3, {"top_p": 0.9,
                                                                      "note": "hi"})
    assert cli(capsys, "prompt", "tools", "remove", "t1", "--db", db) == (
        0, "tool t1 removed\n", "")
    assert cli(capsys, "prompt", "tools", "remove", "t1", "--db", db) == (
        1, "", 'voice-server prompt: tool "t1" not found\n')


def test_tools_add_rejects_bad_values(capsys, db):
    """Validation errors are one line and exit 2; unknown providers are refused by argparse."""
    code, out, err = cli(capsys, "prompt", "tools", "add", "t", "--provider", "openai",
                         "--db", db)
    assert (code, err) == (2, "voice-server prompt: --model is required for provider openai\n")
    code, _, err = cli(capsys, "prompt", "tools", "add", "t", "--provider", "local",
                       "--temperature", "9", "--db", db)
    assert code == 2 and err.startswith("voice-server prompt: invalid tool temperature:")
    assert len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as info:
        main(["prompt", "tools", "add", "t", "--provider", "bogus", "--db", db])
    assert info.value.code == 2


async def test_prompt_run_text_and_json(capsys, db, tmp_path):
    """run prints the text, or with --json the whole response; flags reach the model."""
    async with FakeOpenAI(model="m") as fake:
        assert (await acli(capsys, "prompt", "tools", "add", "echo", "--provider", "openai",
                           "--model", "m", "--base-url", fake.base_url, "--api-key-secret",
                           "echo-key", "--db", db))[0] == 0
        secrets = tmp_path / "secrets.json"
        secrets.write_text('{"echo-key": "sk-from-file"}')
        fake.add(Reply(text="Hello!", prompt_tokens=5, completion_tokens=2))
        code, out, err = await acli(capsys, "prompt", "run", "--tool-name", "echo", "--input",
                                    "hi", "--temperature", "0.4", "--max-output-tokens", "9",
                                    "--db", db, "--secrets-file", str(secrets))
        assert (code, out, err) == (0, "Hello!\n", "")
        assert (fake.requests[-1]["temperature"], fake.requests[-1]["max_tokens"]) == (0.4, 9)
        assert fake.request_headers[-1]["Authorization"] == "Bearer sk-from-file"

        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps([{"type": "function", "function": {"name": "f"}}]))
        prompt = tmp_path / "prompt.json"
        prompt.write_text('[{"type": "text", "text": "from"}, "file"]')
        fake.add(Reply(text="", tool_calls=[{"name": "f", "arguments": {"a": 1}}]))
        code, out, _ = await acli(capsys, "prompt", "run", "--tool-name", "echo",
                                  "--input-file", str(prompt), "--tools", str(tools),
                                  "--json", "--db", db, "--secrets-file", str(secrets))
        assert code == 0
        response = json.loads(out)
        assert response["object"] == "response"
        assert response["output"] == [{"type": "tool_call", "tool_call": {
            "name": "f", "arguments": {"a": 1}}}]
        assert fake.requests[-1]["messages"][-1]["content"] == "from\nfile"
        assert fake.requests[-1]["tools"][0]["function"]["name"] == "f"

        fake.add(Reply(text="", tool_calls=[{"name": "f", "arguments": {"a": 1}}]))
        code, out, _ = await acli(capsys, "prompt", "run", "--tool-name", "echo", "--input",
                                  "x", "--db", db, "--secrets-file", str(secrets))
        assert (code, out) == (0, 'tool_call f {"a": 1}\n')


async def test_prompt_run_errors(capsys, db, tmp_path):
    """Unknown tool, provider failure, bad tools file: one line on stderr, non-zero exit."""
    code, out, err = await acli(capsys, "prompt", "run", "--tool-name", "nope", "--input", "x",
                                "--db", db)
    assert (code, out, err) == (1, "", 'voice-server prompt: tool "nope" not found\n')
    async with FakeOpenAI(model="m") as fake:
        await acli(capsys, "prompt", "tools", "add", "echo", "--provider", "openai", "--model",
                   "m", "--base-url", fake.base_url, "--db", db)
        fake.add(Reply(status=503, error_message="DRIVER-DETAIL"))
        code, out, err = await acli(capsys, "prompt", "run", "--tool-name", "echo", "--input",
                                    "x", "--db", db)
        assert (code, out, err) == (
            1, "", "voice-server prompt: unavailable: the model provider is unavailable\n")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = await acli(capsys, "prompt", "run", "--tool-name", "echo", "--input", "x",
                              "--tools", str(bad), "--db", db)
    assert (code, err) == (2, f"voice-server prompt: tools file {bad} is not valid JSON\n")
    code, _, err = await acli(capsys, "prompt", "run", "--tool-name", "echo", "--input-file",
                              str(tmp_path / "missing.txt"), "--db", db)
    assert code == 2 and "cannot read input file" in err and len(err.splitlines()) == 1


def test_prompt_run_needs_one_input(capsys, db):
    """--input and --input-file are mutually exclusive and one is required."""
    for argv in (["--tool-name", "t"], ["--tool-name", "t", "--input", "a", "--input-file", "b"]):
        with pytest.raises(SystemExit) as info:
            main(["prompt", "run", *argv, "--db", db])
        assert info.value.code == 2


async def test_sidecar_process(tmp_path, db, capsys):
    """`voice-server sidecar prompt` serves /health and Run, and stops cleanly on SIGTERM."""
    async with FakeOpenAI(model="m") as fake:
        await acli(capsys, "prompt", "tools", "add", "echo", "--provider", "openai", "--model",
                   "m", "--base-url", fake.base_url, "--db", db)
        fake.add(Reply(text="from the sidecar"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voice_server.cli", "sidecar", "prompt", "--port", "0",
            "--grpc-port", "0", "--db", db, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            assert set(ready) == {"connect", "grpc"}, ready
            base = ready["connect"]
            async with aiohttp.ClientSession(base) as http:
                async with http.get("/health") as resp:
                    assert await resp.json() == {"status": "ok"}
                async with http.post("/prompt.v1.PromptService/Run",
                                     json={"tool_name": "echo", "input": "x"}) as resp:
                    body = await resp.json()
            assert body["output"] == [{"type": "output_text", "text": "from the sidecar"}]
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == 0, (await proc.stderr.read()).decode()[-2000:]


async def test_prompt_run_remote(capsys, sidecar, fake):
    """--remote sends the request to a running sidecar over Connect; errors stay one line."""
    base = f"http://127.0.0.1:{sidecar.port}"
    fake.add(Reply(text="remote answer"))
    code, out, err = await acli(capsys, "prompt", "run", "--remote", base, "--tool-name",
                                "echo", "--input", "hi", "--max-output-tokens", "7")
    assert (code, out, err) == (0, "remote answer\n", "")
    assert fake.requests[-1]["max_tokens"] == 7
    code, out, err = await acli(capsys, "prompt", "run", "--remote", base, "--tool-name",
                                "nope", "--input", "hi")
    assert (code, out, err) == (1, "", "voice-server prompt: not_found: tool not found\n")
    code, _, err = await acli(capsys, "prompt", "run", "--remote", "http://127.0.0.1:9",
                              "--tool-name", "echo", "--input", "hi")
    assert code == 1 and err.startswith("voice-server prompt: cannot reach http://127.0.0.1:9")


async def test_default_secrets_file_in_data_dir(capsys, tmp_path, monkeypatch):
    """Without --secrets-file, DATA_DIR/secrets.env is the vault's file."""
    monkeypatch.setenv("VOICE_SERVER_DATA_DIR", str(tmp_path))
    (tmp_path / "secrets.env").write_text("k=sk-data-dir\n")
    async with FakeOpenAI(model="m") as fake:
        await acli(capsys, "prompt", "tools", "add", "t", "--provider", "openai", "--model",
                   "m", "--base-url", fake.base_url, "--api-key-secret", "k")
        code, out, _ = await acli(capsys, "prompt", "run", "--tool-name", "t", "--input", "x")
        assert (code, out) == (0, "You said: x\n")
        assert fake.request_headers[-1]["Authorization"] == "Bearer sk-data-dir"
    assert (tmp_path / "prompt-tools.sqlite3").is_file()
