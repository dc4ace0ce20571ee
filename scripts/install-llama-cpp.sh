#!/usr/bin/env bash
# Build llama-cpp-python for any machine of this architecture (not only the build machine's CPU)
# and install it into a venv.
#
#   scripts/install-llama-cpp.sh VENV_PYTHON            portable build (the default)
#   NATIVE=1 scripts/install-llama-cpp.sh VENV_PYTHON   tuned for this CPU only (opt-in)
#
# Why: llama.cpp's own default (GGML_NATIVE=ON, -march=native) ties the library to the CPU it
# was compiled on, and a native build segfaulted on a Xeon with AVX-512 FP16/BF16 and AMX. The
# portable baseline is x86-64-v3 (AVX2, BMI2, FMA, F16C: every x86-64 CPU since 2013-2015;
# nothing from AVX-512, AVX-VNNI or AMX; a build machine without AVX2 gets a plain x86-64 build)
# and plain armv8 NEON on arm64. Runtime dispatch over all CPU variants (GGML_BACKEND_DL +
# GGML_CPU_ALL_VARIANTS) would be better, but llama-cpp-python 0.3 never loads those backends
# (it binds no ggml_backend_load_all), so a model then fails to load.
#
# CPU variants, beside the baseline: llama.cpp's CPU kernels alone (libggml-cpu, ~30 s to
# build each) compiled again, from the same source, for two levels of ggml's own variant list.
# On x86-64: skylakex (AVX-512 F/CD/VL/DQ/BW: Skylake-SP, Cascade Lake) and icelake (+ VBMI,
# VNNI: Ice Lake, Sapphire Rapids, Zen 4 and 5); nothing from AVX512-BF16/FP16 or AMX (ggml's
# sapphirerapids level died of SIGILL on a Xeon whose /proc/cpuinfo lists amx_tile and
# amx_int8, and its BF16 kernels alone were no faster: docs/performance.md). On arm64:
# armv8.2_2 (dot product and half-precision arithmetic: Cortex-A76 as in the Raspberry Pi 5,
# Neoverse N1 as in Graviton 2 and Ampere Altra, Apple M) and armv8.6_1 (+ SVE and int8 matrix
# multiply: Neoverse V1 and V2 as in Graviton 3 and 4, Grace, Axion), with the instructions of
# those levels that the quantised kernels use (sdot, smmla) and a plain armv8-a baseline lacks.
# Each goes to VENV/share/voice_server/llama-cpu/NAME beside copies of the baseline's other
# libraries. The server loads the best one whose instructions /proc/cpuinfo lists in the model's
# worker, and the baseline if that worker fails (voice_server/llm/llama_cpu.py). A variant that
# fails to build is skipped with a warning: the baseline runs everywhere.
#
# The source, wheel and kernels are cached under $VOICE_SERVER_WHEEL_CACHE (default
# ~/.cache/voice_server/wheels) in folders named by version, architecture and flags, never in
# pip's cache: pip keys its cache by the source archive only, and would hand a native wheel back
# to a portable install.
# What was built is written to the venv (voice_server-llama-build.json, with the sha256 of each
# shared library); `voice-server doctor` and tests/unit/test_portable_build.py check it.
set -euo pipefail

PY=${1:?usage: install-llama-cpp.sh VENV_PYTHON}
VERSION=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${VOICE_SERVER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/voice_server/wheels}
ARCH=$(uname -m)
COMMON="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
V3="$COMMON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
NO_EXTRA="-DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
NO_EXTRA="$NO_EXTRA -DGGML_AMX_BF16=OFF"
NO_AVX512="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF $NO_EXTRA"
VARIANTS=()  # NAME|cmake flags|the /proc/cpuinfo flags a CPU needs to run it

if [ "${NATIVE:-0}" = 1 ]; then
  FLAGS="$COMMON -DGGML_NATIVE=ON"
  # a native wheel is only good for CPUs with the same features: key it by them
  KIND="native-$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | md5sum | cut -c1-12)"
else
  case "$ARCH" in
    x86_64|amd64)
      if grep -qw avx2 /proc/cpuinfo; then
        FLAGS="$V3 $NO_AVX512"
        KIND=portable-avx2
        AVX512="avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512bw"
        VARIANTS=(
          "skylakex|$V3 -DGGML_AVX512=ON -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF $NO_EXTRA|$AVX512"
          "icelake|$V3 -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON $NO_EXTRA|$AVX512 avx512vbmi avx512_vnni"
        )
      else  # an old CPU: a build it can run still runs on every newer one
        FLAGS="$COMMON -DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF"
        FLAGS="$FLAGS -DGGML_BMI2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF $NO_AVX512"
        KIND=portable-x86-64
      fi ;;
    aarch64|arm64)  # the compiler's baseline, armv8-a with NEON, and two of ggml's levels
      FLAGS="$COMMON -DGGML_NATIVE=OFF"
      KIND=portable
      ARM="$FLAGS -DGGML_CPU_ARM_ARCH"
      VARIANTS=(
        "armv8.2_2|$ARM=armv8.2-a+dotprod+fp16|asimd asimddp asimdhp"
        "armv8.6_1|$ARM=armv8.6-a+dotprod+fp16+sve+i8mm|asimd asimddp asimdhp sve i8mm"
      ) ;;
    *)  # anything else: the compiler's baseline for the architecture
      FLAGS="$COMMON -DGGML_NATIVE=OFF"
      KIND=portable ;;
  esac
fi

SDIST="$CACHE/src/llama_cpp_python-$VERSION.tar.gz"
fetch_source() {  # the source archive, once: the wheel and every variant build from it
  [ -f "$SDIST" ] && return 0
  # source for llama-cpp-python alone: pip reads its metadata in a build environment, and
  # --no-binary :all: there compiled ninja (and cmake, where the system has none) from source
  mkdir -p "$CACHE/src"
  "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$CACHE/src" \
    "llama-cpp-python==$VERSION"
}

need_compilers() {  # a fresh Debian, Ubuntu or Fedora has none: say so before cmake fails
  { command -v cc && command -v c++; } >/dev/null 2>&1 && return 0
  { command -v gcc && command -v g++; } >/dev/null 2>&1 && return 0
  echo "llama-cpp-python is compiled here and needs a C and a C++ compiler; none was found." >&2
  echo "  Debian, Ubuntu: sudo apt-get install build-essential" >&2
  echo "  Fedora:         sudo dnf install gcc gcc-c++" >&2
  echo "  Arch:           sudo pacman -S base-devel" >&2
  exit 1
}

DIR="$CACHE/llama-cpp-python-$VERSION-$ARCH-$KIND"
if ! ls "$DIR"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  need_compilers
  echo "building llama-cpp-python $VERSION ($KIND; about 5-10 minutes on 2 cores, once)"
  fetch_source
  rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp"
  CMAKE_ARGS="$FLAGS" "$PY" -m pip wheel --quiet --no-deps --no-cache-dir -w "$DIR.tmp" "$SDIST"
  rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
fi
"$PY" -m pip install --quiet --force-reinstall --no-deps "$DIR"/llama_cpp_python-*.whl
# llama-cpp-python's own dependencies (installed apart so pip never rebuilds it)
"$PY" -m pip install --quiet "numpy>=1.20" "jinja2>=2.11.3" "diskcache>=5.6.1" \
  "typing-extensions>=4.5"

build_variant() {  # NAME FLAGS: $CACHE/...-cpu-NAME/libggml-cpu.so.0, the kernels alone
  local out="$CACHE/llama-cpp-python-$VERSION-$ARCH-cpu-$1" work cmake ok=0
  [ -f "$out/libggml-cpu.so.0" ] && return 0
  fetch_source || return 1
  cmake=(cmake)
  if ! command -v cmake >/dev/null; then  # what the wheel's build got from PyPI, kept apart
    [ -x "$CACHE/tools/bin/cmake" ] ||
      "$PY" -m pip install --quiet --target "$CACHE/tools" "cmake>=3.21,<5" || return 1
    cmake=(env "PYTHONPATH=$CACHE/tools" "$CACHE/tools/bin/cmake")
  fi
  echo "building llama.cpp's CPU kernels for $1 (about 30 s on 2 cores, once)"
  work=$(mktemp -d)
  # shellcheck disable=SC2086  # the flags are words
  if tar xzf "$SDIST" -C "$work" &&
     "${cmake[@]}" -S "$work/llama_cpp_python-$VERSION" -B "$work/build" \
       -DCMAKE_BUILD_TYPE=Release $2 >"$work/log" 2>&1 &&
     "${cmake[@]}" --build "$work/build" --target ggml-cpu --parallel "$(nproc)" \
       >>"$work/log" 2>&1; then
    mkdir -p "$out.tmp" &&
      cp "$(find "$work/build" -name 'libggml-cpu.so.*.*' -type f | head -1)" \
        "$out.tmp/libggml-cpu.so.0" && rm -rf "$out" && mv "$out.tmp" "$out" && ok=1
  fi
  [ "$ok" = 1 ] || tail -20 "$work/log" >&2 2>/dev/null || true
  rm -rf "$work"
  [ "$ok" = 1 ]
}

BUILT=""
for variant in "${VARIANTS[@]}"; do
  IFS='|' read -r name flags needs <<<"$variant"
  if build_variant "$name" "$flags"; then
    BUILT="$BUILT$name|$flags|$needs"$'\n'
  else
    echo "warning: llama.cpp's $name CPU kernels did not build; such CPUs use the baseline" >&2
  fi
done

VERSION=$VERSION ARCH=$ARCH KIND=$KIND FLAGS=$FLAGS BUILT=$BUILT \
  CACHED="$CACHE/llama-cpp-python-$VERSION-$ARCH-cpu-" "$PY" - <<'EOF'
import hashlib, json, os, pathlib, shutil, sys
import llama_cpp

def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.glob("*.so*")) if not p.is_symlink()}

lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
record = {k.lower(): os.environ[k] for k in ("VERSION", "ARCH", "KIND")}
record["cmake_args"] = os.environ["FLAGS"]
record["libraries"] = digests(lib)
record["variants"] = []
home = pathlib.Path(sys.prefix, "share", "voice_server", "llama-cpu")
shutil.rmtree(home, ignore_errors=True)
for line in filter(None, os.environ["BUILT"].splitlines()):
    name, flags, needs = line.split("|")
    # libllama finds the ggml libraries by soname in its own folder ($ORIGIN): copies, not links
    folder = home / name
    folder.mkdir(parents=True)
    for soname in ("libllama.so", "libllama.so.0", "libggml.so.0", "libggml-base.so.0"):
        shutil.copyfile(lib / soname, folder / soname)
    shutil.copyfile(os.environ["CACHED"] + name + "/libggml-cpu.so.0", folder / "libggml-cpu.so.0")
    record["variants"].append({"name": name, "cmake_args": flags, "requires": needs.split(),
                               "path": str(folder.relative_to(sys.prefix)),
                               "libraries": digests(folder)})
pathlib.Path(sys.prefix, "voice_server-llama-build.json").write_text(json.dumps(record, indent=1))
print(f"llama-cpp-python {record['version']} installed ({record['kind']}; CPU variants: "
      f"{', '.join(v['name'] for v in record['variants']) or 'none'})")
EOF
