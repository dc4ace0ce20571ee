"""``voice-server serve`` on a port it cannot listen on (one in use, a newcomer's second
``make serve``) says so in two lines and exits 1: no traceback, no worker left behind."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run_on_a_taken_port(*args: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``voice-server ARGS --port P`` while another socket listens on P."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "voice_server.cli", *args, "--port",
                               str(port), "--log-level", "WARNING"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              check=False)
    return port, proc


def test_a_port_in_use_is_a_clear_error() -> None:
    port, proc = _run_on_a_taken_port("serve", "--preload-models", "false")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"('127.0.0.1', {port}): address already in use\n" in proc.stderr  # no "[errno 98]"
    assert "choose another port with --port" in proc.stderr


def test_a_port_in_use_is_said_before_the_models_load(monkeypatch, capsys) -> None:
    """``serve`` asks the port before loading its models (seconds): the server never starts."""
    import voice_server.server.app as app
    from voice_server.cli import main

    started = []
    monkeypatch.setattr(app, "run_forever", lambda settings: started.append(settings))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"('127.0.0.1', {port}): address already in use\n" in err and not started


def test_a_sidecar_port_in_use_is_one_line() -> None:
    """The stream sidecars (here the broker) say it in one line too, without the "[Errno 98]"
    of ``str(OSError)`` (and the "[errno 98]" Python 3.13 puts inside asyncio's message)."""
    port, proc = _run_on_a_taken_port("sidecar", "broker")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("voice-server: error while attempting to bind on address "
                           f"('127.0.0.1', {port}): address already in use\n"), proc.stderr
