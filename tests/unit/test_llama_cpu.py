"""Which llama.cpp CPU kernels the embedded model loads (voice_server/llm/llama_cpu.py): the
best installed variant whose instructions the CPU has, never one it lacks."""

from __future__ import annotations

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
