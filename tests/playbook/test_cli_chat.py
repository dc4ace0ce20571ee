"""`voice-server playbook chat FILE`: a terminal conversation with the events printed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.support.fake_openai import FakeOpenAI, Reply

from .conftest import PLAYBOOKS, scaled

ROOT = Path(__file__).resolve().parents[2]


async def _chat_restaurant(fake: FakeOpenAI, typed: bytes) -> tuple[int | None, bytes, bytes]:
    """``voice-server playbook chat`` of the restaurant over ``fake``, ``typed`` piped in: its
    exit status, stdout and stderr (no VOICE_SERVER_* setting of the tests' own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICE_SERVER_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "playbook", "chat",
        str(PLAYBOOKS / "restaurant.yaml"), "--llm-provider", "openai_compat",
        "--llm-base-url", fake.base_url, "--llm-model", "fake-model",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
    out, err = await asyncio.wait_for(proc.communicate(typed), scaled(60))
    return proc.returncode, out, err


async def test_chat_over_a_scripted_endpoint(fake: FakeOpenAI) -> None:
    """Typed lines become turns; tool and stage events and the agent's words are printed."""
    fake.add(Reply(tool_calls=[{"name": "classify_intent", "arguments": {"intent": "none"}}]),
             "Welcome to Luigi's!",
             '{"time": "19:00", "party_size": 2, "name": null}',
             '{"time": null, "party_size": null, "name": "Ada Lovelace"}',
             '{"time": null, "party_size": null, "name": null}')
    returncode, out, err = await _chat_restaurant(
        fake, b"hello\n\nI want to book a table for two at 19:00\nAda Lovelace\nYes\n/quit\n"
              b"ignored\n")
    assert returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "playbook restaurant: stage greeting. Type a message (/quit to stop)."
    assert lines[1:] == [
        "agent> Good evening, Luigi's trattoria. How can I help you?",  # the greeting, first
        "you> hello",  # piped lines are shown
        "agent> Welcome to Luigi's!",
        "(stage: greeting)",
        "you> I want to book a table for two at 19:00",
        "[stage-change] greeting -> booking (keyword_match)",
        "agent> And what name shall I put the booking under?",
        "(stage: booking)",
        "you> Ada Lovelace",
        "agent> That's a table for 2 at 7 pm, under Ada Lovelace. Shall I book it?",
        "(stage: booking)",
        "you> Yes",
        '[tool-call-start] book_table {"name": "Ada Lovelace", "party_size": 2, "time": "19:00"}',
        lines[14],
        "[stage-change] booking -> confirmation (tool_result)",
        "agent> All set! Your table for 2 at 7 pm is booked under Ada Lovelace. See you then!",
        "(stage: confirmation)",
    ]
    assert lines[14].startswith("[tool-call-end] ")
    assert '"booked": true' in lines[14] and '"time": "19:00"' in lines[14]
    assert len(fake.requests) == 5  # the intent of "hello", the answer, three notes: the
    # read-back and the confirmation are the engine's and the tool's
    # answers are asked as the server asks them (the endpoint's own sampling applied before)
    answer = fake.requests[1]
    assert (answer["temperature"], answer["max_tokens"]) == (0.0, 160)


async def test_a_failed_turn_is_shown_and_the_chat_exits_1(fake: FakeOpenAI) -> None:
    """The chat goes on after an LLM error, and its exit status says one happened (it was 0,
    so a script piping lines in could not tell)."""
    none = Reply(tool_calls=[{"name": "classify_intent", "arguments": {"intent": "none"}}])
    fake.add(none, Reply(status=503, error_message="overloaded"), none, "We open at noon.")
    returncode, out, _ = await _chat_restaurant(fake, b"hello\nwhen do you open?\n")
    lines = out.decode().splitlines()
    assert returncode == 1
    assert "[error] the LLM endpoint answered HTTP 503" in lines
    assert "agent> We open at noon." in lines  # the next turn was answered


async def test_chat_refuses_an_invalid_file(tmp_path: Path) -> None:
    """An invalid playbook is reported with its location and exit code 1."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ninitial_stage: nowhere\nstages: {a: {}}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "playbook", "chat", str(bad),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=ROOT)
    _, err = await asyncio.wait_for(proc.communicate(), scaled(60))
    assert proc.returncode == 1
    assert err.decode() == (f"{bad}:2:16: initial_stage: unknown stage 'nowhere' "
                            f"(expected one of: a)\n")


def test_chat_offers_the_language_model_flags_only() -> None:
    """Its --help lists what a typed chat uses (the LLM's settings), not the ~100 of serve."""
    out = subprocess.run([sys.executable, "-m", "voice_server.cli", "playbook", "chat", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60, check=True).stdout
    flags = {word.rstrip(",") for word in out.split() if word.startswith("--")}
    assert {"--llm-provider", "--llm-base-url", "--llm-model", "--llm-profile", "--system-prompt",
            "--max-history-messages", "--config", "--log-level"} <= flags
    assert not flags & {"--port", "--stt-model", "--tts-voice", "--phone", "--warm-playbooks"}


def test_playbook_test_runs_the_bundled_scenarios_over_a_scripted_model() -> None:
    """`playbook test FOLDER`: every bundled scenario passes in process, as through the wire
    (test_scenarios.py), and the tools keep their files in a fresh folder of their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICE_SERVER_")}
    env["VOICE_SERVER_DATA_DIR"] = "/nonexistent/not-for-scenarios"  # given its own instead
    done = subprocess.run([sys.executable, "-m", "voice_server.cli", "playbook", "test",
                           str(PLAYBOOKS / "tests")], capture_output=True, text=True, cwd=ROOT,
                          timeout=scaled(120), env=env)
    scenarios = sorted((PLAYBOOKS / "tests").glob("*.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{p}: ok" for p in scenarios] + [
        f"{len(scenarios)} of {len(scenarios)} scenarios passed"]


def test_playbook_test_says_which_turn_failed_and_why(tmp_path: Path) -> None:
    """A builder's own folder: the playbook found by its id, a failing expectation and a
    malformed scenario each named with the turn, exit 1."""
    (tmp_path / "shop.yaml").write_text(
        "id: hello\ninitial_stage: chat\nstages: {chat: {system_prompt: Be brief.}}\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "a_reply.yaml").write_text(
        "playbook: hello\nturns:\n  - user: Hi\n    llm: [Hello there!]\n"
        "    expect: {stage: chat, reply: Hello there!}\n"
        "  - user: Bye\n    llm: [See you.]\n    expect: {reply: Goodbye., stage: chat}\n")
    (tests / "b_typo.yaml").write_text(
        "playbook: hello\nturns:\n  - user: Hi\n    expct: {reply: x}\n")
    (tests / "c_nobody.yaml").write_text("playbook: nobody\nturns: []\n")
    (tests / "d_short.yaml").write_text(
        "playbook: hello\nturns:\n  - user: Hi\n    expect: {reply: Hello there!}\n")
    (tests / "e_stage.yaml").write_text(
        "playbook: hello\nturns:\n  - user: Hi\n    llm: [Hi.]\n    expect: {stage: chats}\n")
    (tests / "f_error.yaml").write_text(
        "playbook: hello\nturns:\n  - user: Hi\n    llm: [{status: 503, error_message: down}]\n")
    # from inside the scenarios' folder, as "test ." (the playbook is in the folder above)
    done = subprocess.run([sys.executable, "-m", "voice_server.cli", "playbook", "test", "."],
                          capture_output=True, text=True, cwd=tests, timeout=scaled(60))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "a_reply.yaml: FAILED",
        "  a_reply.yaml turn 2 ('Bye'): reply: wanted 'Goodbye.', got 'See you.'",
        "b_typo.yaml: FAILED",
        "  b_typo.yaml turn 1: unknown turn keys ['expct']; known: ['after_s', 'expect', "
        "'llm', 'user']",
        "c_nobody.yaml: FAILED",
        f"  c_nobody.yaml: no playbook with id 'nobody' in {tests} or {tmp_path} (give "
        "--playbooks-dir)",
        "d_short.yaml: FAILED",  # the cause, not the reply that followed from it
        "  d_short.yaml turn 1 ('Hi'): 0 replies scripted, but the turn made 1 request "
        "(answer): script one reply per request, in that order",
        "e_stage.yaml: FAILED",
        "  e_stage.yaml turn 1: no stage 'chats' in playbook 'hello' (its stages: chat)",
        "f_error.yaml: FAILED",  # the endpoint's error, which the turn did not get over
        "  f_error.yaml turn 1 ('Hi'): the turn failed: down",
        "0 of 6 scenarios passed"]
