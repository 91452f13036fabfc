"""Fakes at the simulator's seams: a cost model whose every step takes the same time, and
a small device on which the KV cache holds a few thousand tokens."""

from __future__ import annotations

import dataclasses

import numpy as np

from phasewise.catalog import load_hardware
from phasewise.cost import StepTiming, Timing
from phasewise.serving import Requests


class FixedStep:
    """Every engine step takes ``step_s``, whatever it computes: queueing results can then
    be worked out by hand."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.name = "fixed"

    def op_time(self, op, hardware, math_format):  # noqa: ANN001, ANN201
        raise AssertionError("the simulator prices whole steps")

    def step_time(self, ledger, hardware) -> StepTiming:  # noqa: ANN001
        t = self.step_s
        return StepTiming(Timing(t, 0.0, 0.0, 0.0, t, "overhead", 0.0, 0.0, 0.0), ())


def small_h100(memory_gb: float = 19.0):  # noqa: ANN201
    """An H100 with less memory: Llama-3.1-8B's 16 GB of weights leave about 7,000 tokens
    of KV cache at 19 GB."""
    return dataclasses.replace(load_hardware("h100-sxm"), name=f"h100-{memory_gb:g}gb",
                               memory_bytes=memory_gb * 1e9)


def trace(*rows: tuple[float, int, int]) -> Requests:
    """Requests from (arrival_s, input_tokens, output_tokens) rows."""
    arrival, isl, osl = zip(*rows, strict=False)
    return Requests(np.array(isl), np.array(osl), np.array(arrival, dtype=float))


def test_fixed_step_prices_any_step_at_its_time() -> None:
    from phasewise.catalog import load_model
    from phasewise.ledger import Step, build_ledger

    model = load_model("llama-3.1-8b")
    fake = FixedStep(0.01)
    for step in (Step.prefill(4096, batch=8), Step.decode(1, 10)):
        assert fake.step_time(build_ledger(model, step), small_h100()).total.time_s == 0.01


def test_small_h100_leaves_a_few_thousand_tokens_of_kv_for_llama_8b() -> None:
    from phasewise.catalog import load_model
    from phasewise.serving.kv_cache import kv_capacity
    from phasewise.specs import Parallelism, Precision

    cap = kv_capacity(load_model("llama-3.1-8b"), small_h100(), Precision(), Parallelism(),
                      max_batched_tokens=2048, max_seqs=256)
    # 19 GB − 16.06 GB weights − 1.9 GB reserve − activations ≈ 0.9 GB at 128 KiB a token.
    assert 4_000 < cap.tokens < 8_000
