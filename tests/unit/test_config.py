"""Settings precedence (defaults < file < env < flags), parsing, and the CLI's --help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from voice_server.cli import build_parser
from voice_server.config import ConfigError, Settings, load_settings


def test_precedence_file_env_flags(tmp_path, monkeypatch):
    """A flag beats env, env beats the file, the file beats the default."""
    cfg = tmp_path / "voice.yaml"
    cfg.write_text("port: 9001\nidle_timeout_s: 12\nsystem_prompt: from file\n")
    monkeypatch.setenv("VOICE_SERVER_IDLE_TIMEOUT_S", "13")
    monkeypatch.setenv("VOICE_SERVER_PORT", "9002")
    s = load_settings(cfg, port=9003)
    assert s.port == 9003 and s.idle_timeout_s == 13 and s.system_prompt == "from file"
    assert s.session_ttl_s == Settings.model_fields["session_ttl_s"].default


@pytest.mark.parametrize("suffix,text", [(".toml", 'port = 9100\nice_host_addresses = '
                                                   '["127.0.0.1"]\n'),
                                         (".json", '{"port": 9100, "ice_host_addresses": '
                                                   '["127.0.0.1"]}')])
def test_toml_and_json_files(tmp_path, suffix, text):
    """TOML and JSON config files work like YAML."""
    cfg = tmp_path / f"voice{suffix}"
    cfg.write_text(text)
    s = load_settings(cfg)
    assert s.port == 9100 and s.ice_host_addresses == ["127.0.0.1"]


def test_comma_lists_and_json_values(monkeypatch):
    """Address lists take commas; ICE servers and sidecars take JSON text."""
    monkeypatch.setenv("VOICE_SERVER_ICE_HOST_ADDRESSES", "127.0.0.1, 10.0.0.5")
    s = load_settings(ice_servers='[{"urls": "stun:127.0.0.1:3478"}]',
                      sidecars='{"host": {"port": 0}}')
    assert s.ice_host_addresses == ["127.0.0.1", "10.0.0.5"]
    assert s.ice_servers == [{"urls": "stun:127.0.0.1:3478"}]
    assert s.sidecars == {"host": {"port": 0}}


@pytest.mark.parametrize("kwargs", [{"port": 70000}, {"llm_provider": "magic"},
                                    {"ice_servers": "[not json"}, {"no_such_option": 1},
                                    {"log_level": "LOUD"}, {"port": 8787, "phone_port": 8787},
                                    {"idle_timeout_s": float("inf")},
                                    {"llm_temperature": float("nan")}])
def test_invalid_values_are_config_errors(kwargs):
    """Bad values raise ConfigError naming the field."""
    with pytest.raises(ConfigError):
        load_settings(**kwargs)


def test_a_bad_value_is_one_line_naming_where_it_came_from(tmp_path, monkeypatch):
    """The flag, the variable or the file that gave it (pydantic's own text named our
    internal class and took four lines); a misspelt key in the file gets a suggestion."""
    def message(*args, **kwargs) -> str:
        with pytest.raises(ConfigError) as caught:
            load_settings(*args, **kwargs)
        assert "\n" not in str(caught.value) and "_Layered" not in str(caught.value)
        return str(caught.value)

    assert message(llm_profile="huge") == \
        "llm_profile: Input should be 'tiny', 'small' or 'medium' (from --llm-profile)"
    cfg = tmp_path / "voice.yaml"
    cfg.write_text("port: abc\n")
    assert message(cfg).startswith("port: ") and message(cfg).endswith(f"(from {cfg})")
    cfg.write_text("sidcars: {}\n")
    assert message(cfg) == f"unknown setting 'sidcars' in {cfg} (did you mean 'sidecars'?)"
    monkeypatch.setenv("VOICE_SERVER_PORT", "xyz")
    assert message().endswith("(from VOICE_SERVER_PORT)")
    monkeypatch.delenv("VOICE_SERVER_PORT")
    monkeypatch.setenv("VOICE_SERVER_SIDECARS", "{bad")  # JSON the settings library parses
    assert message().startswith("VOICE_SERVER_SIDECARS: Expecting property name")


def test_bad_config_file_is_a_clear_error(tmp_path):
    """A broken or non-mapping file says which file and why."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml") as caught:
        load_settings(bad)
    assert f'in "{bad}", line 1, column 7' in str(caught.value)  # not "<unicode string>"
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00bin")  # was a UnicodeDecodeError
    with pytest.raises(ConfigError, match=r"binary.yaml is not UTF-8 text: invalid start byte"):
        load_settings(tmp_path / "binary.yaml")


def test_a_usage_error_is_two_lines(capsys):
    """What is wrong and where help is; not the ~80 lines of ``serve``'s usage first."""
    from voice_server.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["serve", "--port", "abc"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "voice-server serve: error: argument --port: invalid int value: 'abc'",
        "voice-server serve: see voice-server serve --help"]


def test_serve_help_documents_every_option():
    """`voice-server serve --help` lists one flag per setting."""
    out = subprocess.run([sys.executable, "-m", "voice_server.cli", "serve", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in out
    assert "--phone true|false" in out and out.count("(default:") == sum(
        1 for f in Settings.model_fields.values())  # once each, the description's or ours


def test_cli_config_error_exits_2(tmp_path, capsys):
    """A configuration error is one line on stderr and exit code 2, no traceback."""
    from voice_server.cli import main

    assert main(["serve", "--port", "99999"]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and "Traceback" not in err
    assert build_parser().prog == "voice-server"


@pytest.mark.parametrize(("flags", "said"), [
    (["--host", "not_an_address"], "cannot listen on 'not_an_address'"),
    (["--playbooks-dir", "/nonexistent/playbooks"],
     "configuration error: playbooks_dir /nonexistent/playbooks is not a folder"),
    (["--end-of-turn-model", "/nonexistent/turn.onnx", "--preload-models", "true"],
     "configuration error: end_of_turn_model '/nonexistent/turn.onnx': "),
])
@pytest.mark.timeout(120)
def test_serve_refuses_a_bad_place_in_one_line(flags, said, capsys):
    """A --host that is no address (a traceback before), a --playbooks-dir that is no folder
    (the server served no playbook and said nothing), an end-of-turn model file that is not
    there (a warning, and the server went on without it): refused in one line."""
    from voice_server.cli import main

    code = main(["serve", "--port", "0", "--preload-models", "false", "--llm-provider",
                 "openai_compat", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "x",
                 *flags])
    err = capsys.readouterr().err
    assert code in (1, 2) and said in err and "Traceback" not in err, err


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_threads_fit_a_machine_with_one_cpu():
    """Two threads on one CPU (a small VPS, ``docker run --cpus=1``, taskset) made every stage
    slower: the thread defaults take the CPUs this process may use, at most 2; a value given
    wins."""
    probe = ("from voice_server.compute import usable_cpus; "
             "from voice_server.config import load_settings; s = load_settings(); "
             "print(usable_cpus(), s.llm_threads, s.stt_threads, s.compute_workers)")

    def figures(*prefix: str, env: dict | None = None) -> list[int]:
        out = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True,
                             text=True, check=True, timeout=60,
                             env={**os.environ, **(env or {})})
        return [int(x) for x in out.stdout.split()]

    one = str(sorted(os.sched_getaffinity(0))[0])
    assert figures("taskset", "-c", one) == [1, 1, 1, 1]
    assert figures("taskset", "-c", one, env={"VOICE_SERVER_LLM_THREADS": "3"})[1] == 3
    cpus = figures()[0]
    assert figures()[1:] == [min(2, cpus)] * 3
