"""The serving engines' kernels: the routed experts' fused-MoE chain, and a served step's
launches repriced at a fitted time per kernel. Expectations come from the engines' code
(the kernels each fused-MoE path launches, counted by hand) and from the cost formula's
own terms, summed independently of the step pricer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from phasewise.catalog import load_hardware, load_model
from phasewise.cost.calibrated import Calibrated
from phasewise.ledger import Step, build_ledger
from phasewise.serving import ClosedLoop, Pool, Requests, Server, request_metrics, simulate
from phasewise.serving.presets import HostTime, engine_settings
from phasewise.specs import Parallelism, Precision
from phasewise.specs.compute import precision_on

H100 = load_hardware("h100-sxm")
MOE = load_model("qwen3-30b-a3b")  # 48 layers, 128 experts, top-8
DENSE = load_model("llama-3.1-8b")


def _ops(model, engine: str, tp: int = 1):  # noqa: ANN001, ANN202
    cost = Calibrated.for_device(H100, engine=engine)
    precision = precision_on(Precision().for_model(model), H100).precision
    ledger = build_ledger(model, Step.decode(8, 1024), precision, Parallelism(tp=tp))
    return cost, ledger, [(op, cost.kernel(op, H100, "bf16")) for op in ledger.ops]


def _named(ops, name: str):  # noqa: ANN001, ANN202
    return next((op, kernel) for op, kernel in ops if op.name == name)


# The fused-MoE chain of each engine, beyond the router GEMM, counted in its code:
# vLLM (fused_moe.py): topk_softmax, moe_align_block_size, the input quantized, w1 GEMM,
# silu_and_mul, the intermediate quantized, w2 GEMM, moe_sum = 8. SGLang's Triton path
# (adapted from vLLM's) the same 8. TensorRT-LLM (moe_kernels.cu, runMoe): top-k, the
# fused expert-map sort, expandInputRows, gemm1, doActivation, gemm2, finalizeMoeRouting = 7.
@pytest.mark.parametrize(("engine", "chain"), [("vllm", 8), ("sglang", 8), ("trtllm", 7),
                                               ("generic", 1)])
def test_routed_experts_launch_the_engines_fused_moe_chain(engine: str, chain: int) -> None:
    _, _, ops = _ops(MOE, engine)
    op, kernel = _named(ops, "moe.experts")
    assert op.calls == 48
    assert kernel.launches == 48 * chain
    # the chain moves no work: FLOPs and bytes are the generic lowering's
    _, _, generic = _ops(MOE, "generic")
    assert kernel.flops == _named(generic, "moe.experts")[1].flops
    assert kernel.memory_bytes == _named(generic, "moe.experts")[1].memory_bytes
    # the router and every dense operator launch once a layer
    router, router_kernel = _named(ops, "moe.router")
    assert router_kernel.launches == router.calls


def test_dense_models_launch_as_the_ledger_counts() -> None:
    _, _, ops = _ops(DENSE, "vllm")
    for op, kernel in ops:
        if op.kind != "communication":
            assert kernel.launches == op.calls, op.name


def test_a_fitted_time_per_kernel_reprices_every_launch_of_a_step() -> None:
    # the step's launches, summed over its kernels (collectives' too: TP 2), times the cost
    # model's time per kernel, is what a time per kernel of 0 takes away; 2k adds as much
    cost, ledger, ops = _ops(MOE, "vllm", tp=2)
    k = cost.constants.kernel_overhead_s
    launches = sum(kernel.launches for _, kernel in ops)
    assert launches > 48 * 8  # the chain, the router, attention, norms and all-reduces

    def step_s(kernel_s: float) -> float:
        return cost.with_kernel_overhead(kernel_s).step_time(ledger, H100).total.time_s

    plain = cost.step_time(ledger, H100).total.time_s
    assert plain - step_s(0.0) == pytest.approx(launches * k, rel=1e-9)
    assert step_s(2 * k) - plain == pytest.approx(launches * k, rel=1e-9)
    assert cost.with_kernel_overhead(k) is cost


def test_a_served_decode_step_costs_the_presets_time_per_kernel() -> None:
    # one client decoding Llama-3.1-8B without CUDA-graph padding: every decode step runs
    # the same launches, so TPOT moves by launches × (k − 0) between the cost model's own
    # time per kernel k and a preset whose fitted time per kernel is 0
    _, _, ops = _ops(DENSE, "vllm")
    cost = Calibrated.for_device(H100, engine="vllm")
    launches = sum(kernel.launches for _, kernel in ops)
    base = dataclasses.replace(engine_settings("vllm", H100), cuda_graph_sizes=())

    def tpot_s(kernel_s: float | None) -> float:
        preset = dataclasses.replace(base, host=HostTime(kernel_s=kernel_s))
        server = Server(model="llama-3.1-8b", pool=Pool(H100, Parallelism()),
                        scheduler=preset.scheduler, preset=preset)
        m = request_metrics(simulate(server, Requests(np.array([512]), np.array([33])),
                                     closed_loop=ClosedLoop(1), bucket_tokens=1))
        return float(m.tpot_s[0])

    assert tpot_s(None) - tpot_s(0.0) == pytest.approx(
        launches * cost.constants.kernel_overhead_s, rel=1e-6)
