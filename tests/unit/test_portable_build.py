"""CI guard for issue 17: the installed llama.cpp is the portable build (never GGML_NATIVE /
-march=native, which crashed on CPUs with AVX-512 and AMX), and ``voice-server doctor`` checks
an install end to end and names what fails."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from voice_server.doctor import (
    build_record,
    changed_libraries,
    compiled_features,
    cpu_flags,
    llama_build_problems,
)
from voice_server.llm.llama_cpu import LlamaCpuBuild, choose_build, variants

llama_cpp = pytest.importorskip("llama_cpp")
VOICE_SERVER = str(Path(sys.executable).with_name("voice-server"))

# what the portable build may use, by architecture (scripts/install-llama-cpp.sh); anything
# from AVX-512, AVX-VNNI or AMX, or arm64 extensions beyond armv8, means a CPU-specific build
BASELINE = {"x86_64": {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2"},
            "aarch64": {"NEON", "ARM_FMA"}}
ISA = {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX_VNNI", "AVX512",
       "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "NEON", "ARM_FMA", "FP16_VA",
       "DOTPROD", "MATMUL_INT8", "SVE", "SME", "SVE_CNT"}


def test_the_installed_llama_cpp_uses_only_the_portable_baseline() -> None:
    """llama.cpp's own list of compiled CPU features stays within the baseline: a native
    build on a machine with AVX-512 or AMX fails here."""
    info = llama_cpp.llama_print_system_info().decode()
    used = compiled_features(info) & ISA
    assert used, info
    assert used <= BASELINE[platform.machine()], f"CPU-specific llama.cpp build: {info}"


def test_the_installed_llama_cpp_is_the_one_the_portable_script_built() -> None:
    """The build record says GGML_NATIVE=OFF and the libraries on disk are the ones built
    then: a native build from anywhere else (pip's cache, a plain pip install) fails here, on
    any CPU, even where its feature list looks portable."""
    record = build_record()
    assert record is not None, "llama-cpp-python was not installed by scripts/install-llama-cpp.sh"
    assert "-DGGML_NATIVE=OFF" in record["cmake_args"] and record["kind"].startswith("portable")
    assert record["libraries"] and changed_libraries(record) == []


def _disassembly(lib: Path) -> str:
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True,
                          text=True, check=True, timeout=120).stdout


def _objdump_on(machine: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(platform.machine() != machine or shutil.which("objdump") is None,
                              reason=f"{machine} instructions, read with binutils' objdump")


AMX = r"\t(tdp\w+|tileload\w*|tilestore\w*|ldtilecfg)\s|%tmm"
# AVX512-BF16 and AVX512-FP16 (half-precision arithmetic; F16C's vcvtps2ph is allowed)
BF16_FP16 = r"\t(vdpbf16ps|vcvtne2?ps2bf16|v(?!cvtps2ph)\w+(?:ph|sh))\s"
# arm64: the dot product, the int8 matrix multiply and SVE (its z and p registers)
SDOT, SMMLA, SVE = r"\tsdot\s", r"\t[su]mmla\s", r"\t\w+\s+z\d+\.[bhsd]"
# the variants' ggml feature names (llama_print_system_info) beyond the baseline
VARIANT_ISA = {"skylakex": {"AVX512"}, "icelake": {"AVX512", "AVX512_VBMI", "AVX512_VNNI"},
               "armv8.2_2": {"DOTPROD", "FP16_VA"},
               "armv8.6_1": {"DOTPROD", "FP16_VA", "SVE", "MATMUL_INT8"}}
VARIANT_NAMES = {("x86_64", "portable-avx2"): ["skylakex", "icelake"],
                 ("aarch64", "portable"): ["armv8.2_2", "armv8.6_1"]}


@_objdump_on("x86_64")
def test_the_cpu_kernels_hold_no_avx512_or_amx_instruction() -> None:
    """The machine code itself: no AVX-512 (zmm registers) and no AMX (tile) instruction in
    llama.cpp's CPU kernels, whatever CPU built them; AVX2 (ymm) is there."""
    code = _disassembly(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so")
    assert "ymm" in code
    found = re.findall(r"\t(\S+)\s.*(?:%zmm|%tmm)|\t(tdpb\w+|tileload\w*|ldtilecfg)", code)
    assert found == [], found[:5]


@_objdump_on("aarch64")
def test_the_arm64_kernels_hold_no_instruction_beyond_armv8() -> None:
    """On arm64 the baseline's kernels are plain armv8-a NEON: no dot product, int8 matrix
    multiply or SVE instruction (a Raspberry Pi 4's Cortex-A72 has none of them)."""
    code = _disassembly(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so")
    assert re.search(r"\tfmla\s+v\d+\.4s", code)
    for name, pattern in (("sdot", SDOT), ("smmla", SMMLA), ("SVE", SVE)):
        assert re.findall(pattern, code) == [], name


def _record_variants() -> list[LlamaCpuBuild]:
    record = build_record()
    if record and (platform.machine(), record["kind"]) in VARIANT_NAMES:
        assert [v.name for v in variants(record)] == VARIANT_NAMES[
            platform.machine(), record["kind"]]
    return variants(record)


def _assert_runs_with_its_features(build: LlamaCpuBuild) -> None:
    """On a CPU that runs the variant, llama.cpp names exactly the variant's features."""
    if set(build.requires) <= cpu_flags():
        info = subprocess.run(
            [sys.executable, "-c", "import llama_cpp; print(llama_cpp."
             "llama_print_system_info().decode())"], env={**os.environ, **build.env},
            capture_output=True, text=True, check=True, timeout=120).stdout
        assert compiled_features(info) & ISA == \
            BASELINE[platform.machine()] | VARIANT_ISA[build.name], info


@_objdump_on("x86_64")
def test_each_avx512_variant_holds_avx512_and_nothing_beyond_its_level() -> None:
    """The AVX-512 kernels use zmm registers (else they are pointless) and no AMX, BF16 or
    FP16 instruction (what crashed in the native build)."""
    for build in _record_variants():
        assert build.path is not None
        code = _disassembly(build.path / "libggml-cpu.so.0")
        assert "%zmm" in code, build.name
        assert re.findall(AMX, code) == [], build.name
        assert re.findall(BF16_FP16, code) == [], (build.name, re.findall(BF16_FP16, code)[:5])
        _assert_runs_with_its_features(build)


@_objdump_on("aarch64")
def test_each_arm64_variant_holds_the_instructions_of_its_level_alone() -> None:
    """armv8.2_2 uses the dot product and neither SVE nor the int8 matrix multiply (Neoverse
    N1 and Cortex-A76 have neither); armv8.6_1 uses all three."""
    for build in _record_variants():
        assert build.path is not None
        code = _disassembly(build.path / "libggml-cpu.so.0")
        assert re.search(SDOT, code), build.name
        later = build.name == "armv8.6_1"
        assert bool(re.search(SMMLA, code)) is later, build.name
        assert bool(re.search(SVE, code)) is later, build.name
        _assert_runs_with_its_features(build)


def test_a_build_this_cpu_cannot_run_is_named() -> None:
    """The doctor compares the build's instruction sets with the CPU's flags."""
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 |"
    assert llama_build_problems(info, {"pni", "avx", "avx2"}, "x86_64") == ["AMX_INT8", "AVX512"]
    assert llama_build_problems(info, {"pni", "avx", "avx2", "avx512f", "amx_int8"},
                                "x86_64") == []


@pytest.mark.slow
def test_doctor_passes_on_this_install() -> None:
    out = subprocess.run([VOICE_SERVER, "doctor", "--json"], capture_output=True, text=True,
                         timeout=300)
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    assert out.returncode == 0, out.stdout + out.stderr
    assert {"cpu", "llama.cpp", "llama.cpp build", "tts pass", "stt pass",
            "llm pass", "end-of-turn pass"} <= set(checks)
    assert all(c["ok"] for c in checks.values())
    assert "capital of france" in checks["stt pass"]["detail"].lower()
    assert "probability" in checks["end-of-turn pass"]["detail"]
    rate = re.search(r"(\d+) tokens/s", checks["llm pass"]["detail"])
    assert rate and int(rate.group(1)) > 0, checks["llm pass"]["detail"]  # was "0" at times


@pytest.mark.slow
def test_doctor_names_a_broken_model_and_the_fix(tmp_path: Path) -> None:
    """A voice file that is not a model: exit 1, the failing check named, a fix given, no
    traceback."""
    voice = tmp_path / "broken.onnx"
    voice.write_bytes(b"not a model")
    (tmp_path / "broken.onnx.json").write_text("{}")
    out = subprocess.run([VOICE_SERVER, "doctor", "--tts-voice", str(voice), "--host",
                          "not_an_address"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    line = next(x for x in out.stdout.splitlines() if "tts pass" in x)
    assert line.startswith("FAIL") and "the tts worker failed to start" in line
    assert "fix: check --tts-voice" in out.stdout
    # a --host that is no address: serve said it with a traceback, the doctor said "ok"
    line = next(x for x in out.stdout.splitlines() if "listen address" in x)
    assert line.startswith("FAIL") and "cannot listen on 'not_an_address'" in line
    assert "FAILED: listen address, tts pass" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.slow
async def test_the_model_worker_loads_the_best_kernels_this_cpu_runs() -> None:
    """The embedded model's worker runs the build ``auto`` chooses here (AVX-512 kernels on a
    CPU with AVX-512, the dot product on an arm64 CPU with it, the baseline elsewhere), and
    llama.cpp in it names its level's instruction sets and none this CPU lacks."""
    from voice_server.llm.local import LocalLlamaProvider

    build = choose_build("auto", build_record(), cpu_flags())
    provider = LocalLlamaProvider(profile="tiny", n_threads=1, slots=1, cpu_build=build)
    try:
        await provider.load()
        assert (await provider.health())["cpu_kernels"] == build.name
        info = provider.worker.info["system_info"]
        assert llama_build_problems(info, cpu_flags(), platform.machine()) == []
        assert compiled_features(info) & ISA == \
            BASELINE[platform.machine()] | VARIANT_ISA.get(build.name, set()), info
    finally:
        await provider.aclose()


@pytest.mark.slow
async def test_kernels_that_fail_to_load_give_way_to_the_baseline(tmp_path: Path) -> None:
    """A variant folder whose CPU kernels are broken: the model's worker fails to start on
    them, starts on the portable build instead, and answers."""
    from voice_server.llm.local import LocalLlamaProvider
    from voice_server.llm.types import ChatRequest

    lib = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libllama.so", "libllama.so.0", "libggml.so.0", "libggml-base.so.0"):
        shutil.copyfile(lib / name, tmp_path / name)
    (tmp_path / "libggml-cpu.so.0").write_bytes(b"\x7fELF truncated")
    provider = LocalLlamaProvider(profile="tiny", n_threads=1, slots=1,
                                  cpu_build=LlamaCpuBuild("broken", tmp_path))
    try:
        await provider.load()
        assert (await provider.health())["cpu_kernels"] == "portable"
        request = ChatRequest(messages=[{"role": "user", "content": "Say hi."}], max_tokens=8)
        assert [e.text async for e in provider.stream(request) if e.text]
    finally:
        await provider.aclose()
