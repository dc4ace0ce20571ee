"""``voice-server doctor``: check an install end to end, as the server would use it.

It prints the CPU's features, how llama.cpp was built (and whether this CPU can run that build),
each model's file, and one timed pass through STT, the LLM and TTS, each in its own worker
process as the server runs them (so a model that crashes is reported, not fatal here). Exit 1,
with what failed and how to fix it, if anything did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .compute import usable_cpus
from .config import Settings
from .llm.llama_cpu import PORTABLE, build_record, choose_build, cpu_flags, variants
from .settings_flags import add_settings_flags, settings_from_args

__all__ = ["Check", "build_record", "changed_libraries", "compiled_features", "cpu_flags",
           "llama_build_problems", "register", "run_checks"]

# llama.cpp's names for the CPU features it was compiled with -> /proc/cpuinfo's flags
_X86_FEATURES = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
    "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
}
_ARM_FEATURES = {"NEON": "asimd", "ARM_FMA": "asimd", "FP16_VA": "asimdhp", "DOTPROD": "asimddp",
                 "MATMUL_INT8": "i8mm", "SVE": "sve", "SME": "sme"}
_SHOWN_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd",
                "asimdhp", "asimddp", "i8mm", "sve")
REBUILD = ("rebuild the portable llama.cpp: rm -rf .venv && make serve (no NATIVE=1), or "
           "scripts/install-llama-cpp.sh YOUR_VENV/bin/python")
# a voice speaks ~150 words a minute, ~3.3 tokens a second: an LLM slower than this makes
# the voice wait between its pieces
SPOKEN_TOKENS_PER_S = 4


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    seconds: float | None = None


def compiled_features(system_info: str) -> set[str]:
    """``"CPU : SSE3 = 1 | AVX = 1 | ..."`` -> the names set to 1."""
    names = set()
    for part in system_info.replace("CPU :", "|").split("|"):
        name, _, value = part.partition("=")
        if value.strip() == "1":
            names.add(name.strip())
    return names


def llama_build_problems(system_info: str, flags: set[str], machine: str) -> list[str]:
    """Instruction sets the llama.cpp build uses that this CPU lacks (each a crash waiting)."""
    table = _ARM_FEATURES if machine in ("aarch64", "arm64") else _X86_FEATURES
    return sorted(name for name in compiled_features(system_info)
                  if name in table and table[name] not in flags)


def changed_libraries(record: dict[str, Any]) -> list[str]:
    """The installed llama.cpp libraries (the baseline's and each CPU variant's) whose
    sha256 is not the one recorded at the build (another install replaced them: perhaps a
    native wheel from pip's cache); paths relative to the environment."""
    import hashlib

    import llama_cpp

    expected = {Path(llama_cpp.__file__).parent / "lib" / name: digest
                for name, digest in record.get("libraries", {}).items()}
    for variant in record.get("variants", []):
        expected.update({Path(sys.prefix, variant["path"], name): digest
                         for name, digest in variant["libraries"].items()})
    return sorted(str(path.relative_to(sys.prefix)) for path, digest in expected.items()
                  if not path.is_file()
                  or hashlib.sha256(path.read_bytes()).hexdigest() != digest)


def _check_cpu(flags: set[str], settings: Settings) -> Check:
    shown = [f for f in _SHOWN_FLAGS if f in flags]
    return Check("cpu", True, f"{platform.machine()} {platform.processor() or ''} "
                 f"features: {' '.join(shown) or 'unknown'}; usable CPUs {usable_cpus()}; "
                 f"threads: LLM {settings.llm_threads}, speech to text {settings.stt_threads}; "
                 f"jobs at once {settings.compute_workers}".replace("  ", " "))


def _check_host(host: str) -> Check:
    """The address to listen on is one (a port in use is no install problem: the server may
    be running)."""
    from .serving import check_listen

    try:
        check_listen(host, 0)
    except OSError as exc:
        return Check("listen address", False, exc.strerror or str(exc), "check --host")
    return Check("listen address", True, host)


def _check_kernels(wanted: str, record: dict[str, Any] | None, flags: set[str]) -> Check:
    built = ", ".join([PORTABLE, *(v.name for v in variants(record))])
    try:
        build = choose_build(wanted, record, flags)
    except ValueError as exc:
        return Check("llama.cpp kernels", False, str(exc), "--llm-cpu-kernels auto")
    why = "the best this CPU runs" if wanted == "auto" else "as configured"
    return Check("llama.cpp kernels", True, f"{build.name}, {why} (installed: {built})")


def _check_llama_build(flags: set[str], settings: Settings) -> list[Check]:
    try:
        from .llm.local_model import llama_system_info

        info = llama_system_info()  # reads compile-time flags; runs no kernel
    except ImportError as exc:
        return [Check("llama.cpp", False, f"llama-cpp-python does not import: {exc}", REBUILD)]
    checks = [Check("llama.cpp", True, info)]
    missing = llama_build_problems(info, flags, platform.machine())
    if missing:
        checks.append(Check("llama.cpp fits cpu", False, "built with " + ", ".join(missing)
                            + ", which this CPU lacks: the model would crash", REBUILD))
    record = build_record()
    if record is None:
        checks.append(Check("llama.cpp build", False, "not built by scripts/install-llama-cpp."
                            "sh: it may be a -march=native build from pip", REBUILD))
    elif changed := changed_libraries(record):
        checks.append(Check("llama.cpp build", False, "the installed libraries are not the ones "
                            f"scripts/install-llama-cpp.sh built ({', '.join(changed)} changed)",
                            REBUILD))
    elif "GGML_NATIVE=ON" in record.get("cmake_args", ""):
        checks.append(Check("llama.cpp build", True, f"{record['kind']}: built for this CPU "
                            "only (NATIVE=1); it may crash on another machine"))
    else:
        checks.append(Check("llama.cpp build", True, f"{record['kind']}: {record['cmake_args']}"))
    checks.append(_check_kernels(settings.llm_cpu_kernels, record, flags))
    return checks


def _file(path: str | Path) -> str:
    p = Path(path)
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else \
        p.stat().st_size if p.exists() else 0
    return f"{p} ({size / 1e6:.0f} MB)"


async def _timed(name: str, work: Callable[[], Awaitable[str]], fix: str) -> Check:
    started = time.monotonic()
    try:
        detail = await work()
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix,
                     round(time.monotonic() - started, 2))
    return Check(name, True, detail, seconds=round(time.monotonic() - started, 2))


async def _model_checks(settings: Settings) -> list[Check]:
    from .compute import ComputePool
    from .llm import ChatRequest
    from .llm.local import LocalLlamaProvider
    from .llm.registry import build_router
    from .llm.types import LoadsModel
    from .pipeline.audio import resample
    from .pipeline.stt import WhisperSTT
    from .pipeline.tts import PiperTTS
    from .pipeline.turn_model import SmartTurn

    checks: list[Check] = []
    pool = ComputePool(settings.compute_workers)
    stt = WhisperSTT.from_settings(pool, settings)  # as the server hears
    tts = PiperTTS(pool, voice=settings.tts_voice, threads=settings.tts_threads)
    router = build_router(settings, others=pool.shared)
    turn: SmartTurn | None = None
    speech: dict[str, Any] = {}
    try:
        async def speak() -> str:
            await tts.load()
            started = time.monotonic()
            speech["pcm"] = await tts.synthesize("What is the capital of France?", urgent=True)
            seconds = len(speech["pcm"]) / tts.sample_rate
            return (f"{_file(tts.voice_path)}; 'What is the capital of France?' -> "
                    f"{seconds:.1f} s of audio in {time.monotonic() - started:.2f} s")

        async def hear() -> str:
            await stt.load()
            if "pcm" not in speech:
                return f"{_file(stt.model_ref)}; loaded (no speech to transcribe: TTS failed)"
            started = time.monotonic()
            text = await stt.transcribe(resample(speech["pcm"], tts.sample_rate, 16000))
            if "france" not in text.lower():
                raise RuntimeError(f"heard {text!r} for 'What is the capital of France?'")
            return f"{_file(stt.model_ref)}; heard {text!r} in {time.monotonic() - started:.2f} s"

        async def think() -> str:
            provider = router.default_provider
            if isinstance(provider, LoadsModel):
                await provider.load()
            request = ChatRequest(messages=[{"role": "user", "content": "Say hello."}],
                                  max_tokens=16, temperature=0.0)
            started = time.monotonic()
            first, parts, tokens = None, [], 0
            async for event in router.stream(request):
                if event.text:
                    first = first or time.monotonic()
                    parts.append(event.text)
                if event.usage is not None:
                    tokens = event.usage.output_tokens
            if not parts:
                raise RuntimeError("the model answered nothing")
            # tokens after the first, over the time after it (text pieces, counted before,
            # said "0 tokens/s" for a short answer in few pieces)
            after_first = time.monotonic() - (first or started)
            counted = max(0, (tokens or len(parts)) - 1)
            rate = counted / max(1e-3, after_first)
            where = f"{settings.llm_base_url} ({settings.llm_model})"
            if isinstance(provider, LocalLlamaProvider):
                running = (await provider.health())["cpu_kernels"]
                where = f"{_file(provider.model_path)} on llama.cpp's {running} kernels"
                if running != provider.cpu_build.name:
                    raise RuntimeError(f"the {provider.cpu_build.name} kernels failed on this "
                                       f"CPU and the {running} ones answered: {where}")
            slow = (f"; SLOW: under {SPOKEN_TOKENS_PER_S} tokens/s the voice waits for the "
                    "words (another program using the CPU? try --llm-threads 1, or a smaller "
                    "--llm-profile)" if rate < SPOKEN_TOKENS_PER_S and counted >= 3 else "")
            return (f"{where}; first token {(first or started) - started:.2f} s, "
                    f"{rate:.0f} tokens/s: {''.join(parts).strip()[:60]!r}{slow}")

        async def judge() -> str:
            nonlocal turn
            turn = SmartTurn(pool, model=None if settings.end_of_turn_model == "smart-turn"
                             else settings.end_of_turn_model)
            await turn.load()
            if "pcm" not in speech:
                return f"{_file(turn.model_ref)}; loaded (no speech to judge: TTS failed)"
            started = time.monotonic()
            done = await turn.complete(resample(speech["pcm"], tts.sample_rate, 16000))
            return (f"{_file(turn.model_ref)}; 'What is the capital of France?' finished with "
                    f"probability {done:.2f} in {time.monotonic() - started:.2f} s")

        checks.append(await _timed("tts pass", speak, "check --tts-voice (a Piper .onnx with its "
                                   ".onnx.json) or reinstall: make install"))
        checks.append(await _timed("stt pass", hear, "check --stt-model (a CTranslate2 Whisper "
                                   "folder) or reinstall: make install"))
        checks.append(await _timed("llm pass", think, "check --llm-model-path / --llm-base-url; "
                                   "for the embedded model: --llm-cpu-kernels portable, or "
                                   + REBUILD))
        if settings.end_of_turn_model != "off":
            checks.append(await _timed("end-of-turn pass", judge, "check --end-of-turn-model "
                                       "(smart-turn, an ONNX path or off) or reinstall: "
                                       "make install"))
    finally:
        await asyncio.gather(stt.aclose(), tts.aclose(), router.aclose(),
                             *([turn.aclose()] if turn is not None else []))
        pool.close()
    return checks


def run_checks(settings: Settings) -> list[Check]:
    flags = cpu_flags()
    checks = [Check("python", True, f"{sys.version.split()[0]} on {platform.platform()}"),
              _check_cpu(flags, settings), _check_host(settings.host)]
    if settings.llm_provider == "local" or settings.llm_model_path:
        checks += _check_llama_build(flags, settings)
    checks += asyncio.run(_model_checks(settings))
    return checks


def _doctor(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)
    checks = run_checks(settings_from_args(args))
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=1))
    else:
        for c in checks:
            took = f" [{c.seconds:.2f} s]" if c.seconds is not None else ""
            print(f"{'ok  ' if c.ok else 'FAIL'}  {c.name:<18} {c.detail}{took}")
            if c.fix:
                print(f"{'':6}{'':<18} fix: {c.fix}")
    failed = [c.name for c in checks if not c.ok]
    verdict = f"FAILED: {', '.join(failed)}" if failed else "all checks passed"
    print(f"\nvoice-server doctor: {verdict}", file=sys.stderr)
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser("doctor", help="check this install: CPU, llama.cpp build, "
                                   "and one timed pass through each model (exit 1 on a problem)")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    add_settings_flags(doctor)
    doctor.set_defaults(func=_doctor)
