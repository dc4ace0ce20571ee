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
# The built wheel is cached under $VOICE_SERVER_WHEEL_CACHE (default ~/.cache/voice_server/wheels)
# in a folder named by version, architecture and flags, never in pip's cache: pip keys its cache
# by the source archive only, and would hand a native wheel back to a portable install.
# What was built is written to the venv (voice_server-llama-build.json, with the sha256 of each
# shared library); `voice-server doctor` and tests/unit/test_portable_build.py check it.
set -euo pipefail

PY=${1:?usage: install-llama-cpp.sh VENV_PYTHON}
VERSION=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${VOICE_SERVER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/voice_server/wheels}
ARCH=$(uname -m)
COMMON="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
NO_AVX512="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
NO_AVX512="$NO_AVX512 -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

if [ "${NATIVE:-0}" = 1 ]; then
  FLAGS="$COMMON -DGGML_NATIVE=ON"
  # a native wheel is only good for CPUs with the same features: key it by them
  KIND="native-$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | md5sum | cut -c1-12)"
else
  case "$ARCH" in
    x86_64|amd64)
      if grep -qw avx2 /proc/cpuinfo; then
        FLAGS="$COMMON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON"
        FLAGS="$FLAGS -DGGML_FMA=ON -DGGML_F16C=ON $NO_AVX512"
        KIND=portable-avx2
      else  # an old CPU: a build it can run still runs on every newer one
        FLAGS="$COMMON -DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF"
        FLAGS="$FLAGS -DGGML_BMI2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF $NO_AVX512"
        KIND=portable-x86-64
      fi ;;
    *)  # arm64 and others: the compiler's baseline for the architecture (NEON on arm64)
      FLAGS="$COMMON -DGGML_NATIVE=OFF"
      KIND=portable ;;
  esac
fi

DIR="$CACHE/llama-cpp-python-$VERSION-$ARCH-$KIND"
if ! ls "$DIR"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $VERSION ($KIND; about 5-10 minutes on 2 cores, once)"
  rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp"
  CMAKE_ARGS="$FLAGS" "$PY" -m pip wheel --quiet --no-deps --no-cache-dir \
    --no-binary llama-cpp-python -w "$DIR.tmp" "llama-cpp-python==$VERSION"
  rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
fi
"$PY" -m pip install --quiet --force-reinstall --no-deps "$DIR"/llama_cpp_python-*.whl
# llama-cpp-python's own dependencies (installed apart so pip never rebuilds it)
"$PY" -m pip install --quiet "numpy>=1.20" "jinja2>=2.11.3" "diskcache>=5.6.1" \
  "typing-extensions>=4.5"
VERSION=$VERSION ARCH=$ARCH KIND=$KIND FLAGS=$FLAGS "$PY" - <<'EOF'
import hashlib, json, os, pathlib, sys
import llama_cpp
libs = sorted(p for p in pathlib.Path(llama_cpp.__file__).parent.joinpath("lib").glob("*.so*")
            if not p.is_symlink())
record = {k.lower(): os.environ[k] for k in ("VERSION", "ARCH", "KIND")}
record["cmake_args"] = os.environ["FLAGS"]
record["libraries"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in libs}
pathlib.Path(sys.prefix, "voice_server-llama-build.json").write_text(json.dumps(record, indent=1))
EOF
echo "llama-cpp-python $VERSION installed ($KIND)"
