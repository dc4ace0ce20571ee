"""A user's Piper voice (--tts-voice) that is incomplete or wrong is named with the file at
fault, where the server said "not found: X (+ .json)" for either file, or a bare
"JSONDecodeError: Expecting value" or "KeyError: 'num_symbols'" (a run of operator inputs,
2026-11-30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_server.pipeline.tts import PiperService, TTSError, default_piper_voice


@pytest.fixture
def voice(tmp_path: Path) -> Path:
    """The bundled voice's model under another name, without its config yet."""
    path = tmp_path / "mine.onnx"
    path.symlink_to(default_piper_voice())
    return path


def test_a_missing_config_is_named(voice: Path) -> None:
    with pytest.raises(TTSError, match=rf"no file {voice}\.json \(a voice is NAME\.onnx and "):
        PiperService(voice=str(voice))


@pytest.mark.parametrize(("config", "said"), [
    ("not json", "JSONDecodeError"), ('{"audio": {}}', "KeyError"), ("[1]", "")])
def test_a_config_that_is_not_a_voice_s_is_named(voice: Path, config: str, said: str) -> None:
    Path(f"{voice}.json").write_text(config)
    with pytest.raises(TTSError, match=rf"Piper voice config {voice}\.json is not a Piper "
                                       rf"voice's config: {said}"):
        PiperService(voice=str(voice))
