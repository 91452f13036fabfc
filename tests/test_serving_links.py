"""A served step's collectives that NCCL carries (messages of 8 MiB and up: vLLM's custom
all-reduce serves smaller ones) at the link's measured bus bandwidth. Expectations are
hand sums: a tensor-parallel all-reduce of m bytes moves 2(p - 1)/p · m bytes per device
(NCCL's ring), and each byte costs 1 / (bandwidth · efficiency), the efficiency NCCL's
maintainer gives for NVLink (370 GB/s of bus bandwidth over a 450 GB/s line rate,
NVIDIA/nccl-tests#212)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from phasewise.catalog import load_hardware, load_model
from phasewise.cost.base import measured_link_efficiency
from phasewise.cost.calibrated import Calibrated
from phasewise.ledger import Step, build_ledger
from phasewise.serving import ClosedLoop, Pool, Requests, Server, request_metrics, simulate
from phasewise.serving.presets import HostTime, engine_settings
from phasewise.specs import Parallelism, Precision
from phasewise.specs.compute import precision_on

H100 = load_hardware("h100-sxm")
DENSE = load_model("llama-3.1-8b")  # hidden 4096, 32 layers: two all-reduces a layer
NVLINK = 370.0 / 450.0
PROMPT = 2048  # a 16 MiB hidden-state message (2048 x 4096 x 2 bytes): NCCL's
SHORT = 512  # 4 MiB: the custom all-reduce's


def _allreduce_bytes(tokens: int, tp: int) -> float:
    """Bytes each device moves for the step's all-reduces: 2 a layer, each of the hidden
    state (tokens x 4096 in bf16), 2(p - 1)/p of it per device."""
    return 32 * 2 * tokens * 4096 * 2 * 2 * (tp - 1) / tp


def test_nvlink_devices_take_the_measured_share_and_others_none() -> None:
    assert measured_link_efficiency(H100) == pytest.approx(0.8222, abs=1e-4)
    assert measured_link_efficiency(load_hardware("b200")) == pytest.approx(NVLINK)
    pcie = dataclasses.replace(H100, interconnect=dataclasses.replace(H100.interconnect,
                                                                      kind="pcie"))
    assert measured_link_efficiency(pcie) is None
    assert measured_link_efficiency(dataclasses.replace(H100, interconnect=None,
                                                        host_link=None)) is None


def test_the_link_efficiency_reprices_only_the_collectives() -> None:
    cost = Calibrated.for_device(H100, engine="vllm")
    precision = precision_on(Precision().for_model(DENSE), H100).precision
    ledger = build_ledger(DENSE, Step.prefill(PROMPT), precision, Parallelism(tp=2))
    fitted = cost.constants.link_efficiency
    assert fitted < 0.5  # the static-batch fit's share, far under the measured one
    plain = cost.step_time(ledger, H100).total.time_s
    measured = cost.with_link_efficiency(NVLINK).step_time(ledger, H100).total.time_s
    # bytes / bandwidth x (1/fitted - 1/measured); the last token's logits gather is a
    # kB-sized message, left to the fitted share
    expected = _allreduce_bytes(PROMPT, 2) / 450e9 * (1 / fitted - 1 / NVLINK)
    assert plain - measured == pytest.approx(expected, rel=1e-6)
    assert cost.with_link_efficiency(NVLINK) is cost.with_link_efficiency(NVLINK)


def test_messages_the_custom_all_reduce_serves_keep_the_fitted_share() -> None:
    cost = Calibrated.for_device(H100, engine="vllm")
    precision = precision_on(Precision().for_model(DENSE), H100).precision
    for step in (Step.prefill(SHORT), Step.decode(64, 1024)):
        ledger = build_ledger(DENSE, step, precision, Parallelism(tp=2))
        assert cost.with_link_efficiency(NVLINK).step_time(ledger, H100).total.time_s == \
            cost.step_time(ledger, H100).total.time_s


def _ttft_s(device) -> float:  # noqa: ANN001
    base = dataclasses.replace(engine_settings("vllm", device, tp=2), cuda_graph_sizes=(),
                               host=HostTime())
    server = Server(model="llama-3.1-8b", pool=Pool(device, Parallelism(tp=2)),
                    scheduler=base.scheduler, preset=base)
    m = request_metrics(simulate(server, Requests(np.array([PROMPT]), np.array([2])),
                                 closed_loop=ClosedLoop(1), bucket_tokens=1))
    return float(m.ttft_s[0])


def test_a_served_prefill_moves_its_all_reduces_at_nvlinks_measured_share() -> None:
    # the same sheet with its NVLink relabelled as a link kind no measurement covers: the
    # served prefill then pays the fitted share, and the TTFTs differ by the hand sum
    other = dataclasses.replace(H100, interconnect=dataclasses.replace(H100.interconnect,
                                                                       kind="other"))
    fitted = Calibrated.for_device(H100, engine="vllm").constants.link_efficiency
    expected = _allreduce_bytes(PROMPT, 2) / 450e9 * (1 / fitted - 1 / NVLINK)
    assert _ttft_s(other) - _ttft_s(H100) == pytest.approx(expected, rel=5e-3)


def test_collectives_move_the_format_a_precision_names() -> None:
    # an fp8 step's all-reduce moves 1 byte an element in the activations' format, 2 in
    # the 16-bit format the engines all-reduce: _allreduce_bytes (16-bit) x element / 2
    fp8 = Precision(weights="fp8", activations="fp8")
    for precision, element in ((fp8, 1), (dataclasses.replace(fp8, collectives="bf16"), 2)):
        ledger = build_ledger(DENSE, Step.prefill(SHORT), precision, Parallelism(tp=2))
        network = sum(op.network for op in ledger.ops if op.name == "tp.allreduce")
        assert network == pytest.approx(_allreduce_bytes(SHORT, 2) * element / 2)
        assert {op.message for op in ledger.ops if op.name == "tp.allreduce"} == \
            {SHORT * 4096 * element}


def test_a_served_step_prices_its_collectives_in_16_bits() -> None:
    from phasewise.serving.pricing import StepPricer

    cost = Calibrated.for_device(H100, engine="vllm")
    fp8 = Precision(weights="fp8", activations="fp8")
    served = StepPricer(DENSE, H100, fp8, Parallelism(tp=2), cost, host=HostTime())
    alone = StepPricer(DENSE, H100, fp8, Parallelism(tp=2), cost)
    assert served.precision.collectives == "bf16"
    assert alone.precision.collectives == ""
    # a 16-bit checkpoint's collectives are 16-bit already: nothing to set
    assert StepPricer(DENSE, H100, Precision(), Parallelism(tp=2), cost,
                      host=HostTime()).precision.collectives == ""
