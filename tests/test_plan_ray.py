"""The planner on a real local Ray instance gives the same report, in the same order, as
the local process pool and a serial run (slow: starts Ray; `make test-ray`)."""

from __future__ import annotations

import pytest

from phasewise.catalog import load_hardware
from phasewise.plan import (
    Load,
    LocalPool,
    Problem,
    RayExecutor,
    RequestClass,
    SearchSpace,
    Serial,
    Study,
    Target,
    Traffic,
    plan,
)

pytestmark = pytest.mark.slow


def _studies() -> list[Study]:
    """Two models on one candidate set: the sweep a cluster is for."""
    space = SearchSpace(hardware=(load_hardware("h100-sxm"), load_hardware("a100-80gb-sxm")),
                        tp=(1, 2), pp=(1,), kv_dtypes=("bf16",), max_seqs=(64, 256),
                        chunk_tokens=(8192,), speculation=(False,), extra_replicas=1)
    traffic = Traffic((RequestClass(1024, 128, 1.0),), 1152, isl="1024", osl="128")
    problem = Problem(traffic, Load("rate", 6.0), (Target("ttft", 1.0), Target("tpot", 0.05)),
                      space)
    return [Study(m, problem, verify=6, requests=200) for m in ("llama-3.1-8b", "qwen2.5-7b")]


def _documents(executor) -> list[dict]:  # noqa: ANN001
    try:
        return [r.model_dump(mode="json") for r in plan(*_studies(), executor=executor)]
    finally:
        executor.close()


def test_ray_matches_the_local_pool_and_a_serial_run():
    pytest.importorskip("ray")
    serial = _documents(Serial())
    local = _documents(LocalPool(2))
    on_ray = _documents(RayExecutor(num_cpus=2))
    assert on_ray == local == serial
    assert [r["index"] for r in on_ray[0]["verified"]] == [r["index"] for r in local[0]["verified"]]
    assert on_ray[0]["candidates_verified"] == 6
