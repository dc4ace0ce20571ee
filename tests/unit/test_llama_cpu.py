"""Which llama.cpp CPU kernels the embedded model loads (voice_server/llm/llama_cpu.py): the
best installed variant whose instructions the CPU has, never one it lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voice_server.llm.llama_cpu import LlamaCpuBuild, choose_build

V3 = ["avx2", "fma", "f16c", "bmi2"]
SKYLAKEX = [*V3, "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"]
RECORD = {"kind": "portable-avx2", "variants": [
    {"name": "skylakex", "requires": SKYLAKEX, "path": "share/voice_server/llama-cpu/skylakex"},
    {"name": "icelake", "requires": [*SKYLAKEX, "avx512vbmi", "avx512_vnni"],
     "path": "share/voice_server/llama-cpu/icelake"}]}


@pytest.mark.parametrize(("flags", "expected"), [
    ({"sse4_2"}, "portable"),                                      # an old CPU
    ({*V3, "avx_vnni"}, "portable"),                               # Haswell .. Alder Lake
    ({*SKYLAKEX}, "skylakex"),                                     # Skylake-SP
    ({*SKYLAKEX, "avx512_vnni"}, "skylakex"),                      # Cascade Lake: no VBMI
    ({*SKYLAKEX, "avx512vbmi", "avx512_vnni", "amx_int8", "avx512_fp16"}, "icelake"),  # SPR
])
def test_auto_picks_the_best_build_the_cpu_runs(flags: set[str], expected: str) -> None:
    assert choose_build("auto", RECORD, flags, prefix="/venv").name == expected


def test_a_variant_runs_from_its_folder_through_the_library_path() -> None:
    build = choose_build("auto", RECORD, set(SKYLAKEX), prefix="/venv")
    assert build.path == Path("/venv/share/voice_server/llama-cpu/skylakex")
    assert build.env == {"LLAMA_CPP_LIB_PATH": "/venv/share/voice_server/llama-cpu/skylakex"}
    assert LlamaCpuBuild().env == {}  # the baseline: the package's own libraries


def test_no_record_or_portable_means_the_baseline() -> None:
    everything = {*SKYLAKEX, "avx512vbmi", "avx512_vnni"}
    assert choose_build("auto", None, everything).name == "portable"
    assert choose_build("auto", {"kind": "native-x"}, everything).name == "portable"
    assert choose_build("portable", RECORD, everything).name == "portable"


def test_a_named_build_must_be_installed_and_fit_the_cpu() -> None:
    assert choose_build("skylakex", RECORD, {*SKYLAKEX, "avx512vbmi", "avx512_vnni"}).name \
        == "skylakex"
    with pytest.raises(ValueError, match=r"'zen4' is not installed \(installed: portable, "
                                         r"skylakex, icelake\)"):
        choose_build("zen4", RECORD, set(SKYLAKEX))
    with pytest.raises(ValueError, match="cannot run llama.cpp's icelake build "
                                         r"\(it lacks avx512_vnni avx512vbmi\)"):
        choose_build("icelake", RECORD, set(SKYLAKEX))


def _arm64_record() -> dict:
    """The arm64 variants as scripts/install-llama-cpp.sh builds them: name, flags needed."""
    script = (Path(__file__).parents[2] / "scripts" / "install-llama-cpp.sh").read_text()
    block = script[script.index("aarch64|arm64)"):]
    block = block[:block.index(";;")]
    return {"kind": "portable", "variants": [
        {"name": name, "requires": needs.split(), "path": f"share/voice_server/llama-cpu/{name}"}
        for name, needs in re.findall(r'"([\w.]+)\|[^|"]*\|([^"]*)"', block)]}


# the Features line of /proc/cpuinfo on arm64 machines people run servers and demos on
V8_2 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc " \
       "dcpop asimddp"


@pytest.mark.parametrize(("features", "expected"), [
    ("fp asimd evtstrm crc32 cpuid", "portable"),                   # Raspberry Pi 4 (A72)
    (V8_2, "armv8.2_2"),                                            # Raspberry Pi 5 (A76)
    (f"{V8_2} ssbs", "armv8.2_2"),                                  # Graviton 2 (N1)
    (f"{V8_2} jscvt fcma sha3 sha512 asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg "
     "dcpodp flagm2 frint i8mm bf16 bti ecv", "armv8.2_2"),          # Apple M2: no SVE
    (f"{V8_2} jscvt fcma sha3 sm3 sm4 sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca "
     "pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng", "armv8.6_1"),  # Graviton 3 (V1)
])
def test_auto_picks_the_arm64_build_of_the_install_script(features: str, expected: str) -> None:
    record = _arm64_record()
    assert [v["name"] for v in record["variants"]] == ["armv8.2_2", "armv8.6_1"]
    assert choose_build("auto", record, set(features.split())).name == expected
