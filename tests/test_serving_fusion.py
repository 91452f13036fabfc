"""TensorRT-LLM's all-reduce + residual + RMSNorm fusion (lower.fusion). Expectations come
from the engine's code, counted by hand: in modeling_llama.py a Llama decoder layer with
hidden size above 4,096 under TP > 1 runs its post-attention norm inside the attention
all-reduce and the next layer's input norm (the final norm after the last layer) inside the
MLP all-reduce, the model's final norm inside the last layer's: of a step of L layers, L
post-attention norms, L − 1 input norms (the first layer's follows the embedding) and the
final norm launch nothing of their own, 2·L launches fewer."""

from __future__ import annotations

import pytest

from phasewise.catalog import load_hardware, load_model
from phasewise.cost.calibrated import Calibrated
from phasewise.ledger import Step, build_ledger
from phasewise.lower.fusion import AllreduceNormFusion, fuse_allreduce_norms
from phasewise.serving.presets import engine_settings
from phasewise.serving.pricing import StepPricer
from phasewise.specs import Parallelism, Precision
from phasewise.specs.compute import precision_on

H200 = load_hardware("h200-sxm")
LLAMA_70B = load_model("llama-3.1-70b")  # 80 layers, hidden 8192
LLAMA_8B = load_model("llama-3.1-8b")  # hidden 4096: not fused
QWEN3_32B = load_model("qwen3-32b")  # hidden 5120, but not a Llama decoder layer
RULE = engine_settings("trtllm", H200, tp=4, ranks=4).allreduce_norm_fusion
KERNEL_S = 5e-6


def _ledger(model, tp: int, step=None):  # noqa: ANN001, ANN202
    precision = precision_on(Precision().for_model(model), H200).precision
    return build_ledger(model, step or Step.decode(8, 1024), precision, Parallelism(tp=tp))


def _launches(ledger, cost) -> float:  # noqa: ANN001
    return sum(cost.kernel(op, H200, "bf16").launches for op in ledger.ops)


def test_the_trtllm_preset_states_the_rule_and_the_others_do_not() -> None:
    assert RULE == AllreduceNormFusion(("llama",), 4096, RULE.source)
    assert "modeling_llama.py" in RULE.source
    for engine in ("vllm", "sglang"):
        assert engine_settings(engine, H200, tp=4, ranks=4).allreduce_norm_fusion is None


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_fused_step_launches_two_norms_a_layer_fewer(tp: int) -> None:
    cost = Calibrated.for_device(H200, engine="trtllm")
    plain = _ledger(LLAMA_70B, tp)
    fused = fuse_allreduce_norms(plain, LLAMA_70B, Parallelism(tp=tp), RULE)
    assert _launches(plain, cost) - _launches(fused, cost) == 2 * 80
    assert RULE.launches_saved(LLAMA_70B) == 2 * 80
    # the norms' work and bytes still move, inside the all-reduce kernel
    assert fused.memory_bytes == pytest.approx(plain.memory_bytes)
    assert fused.flops == pytest.approx(plain.flops)
    # one input norm is left standing: the first layer's, after the embedding
    standing = [op for op in fused.ops if op.name == "attn.norm" and not op.fused]
    assert [op.calls for op in standing] == [1]


@pytest.mark.parametrize(("model", "tp"), [(LLAMA_70B, 1), (LLAMA_8B, 4), (QWEN3_32B, 4)])
def test_no_fusion_without_tp_below_the_size_or_outside_llama(model, tp: int) -> None:  # noqa: ANN001
    plain = _ledger(model, tp)
    assert fuse_allreduce_norms(plain, model, Parallelism(tp=tp), RULE) is plain


def test_a_served_decode_step_saves_the_launches_at_the_fitted_kernel_time() -> None:
    # priced by the step pricer as a served step: 160 launches fewer at KERNEL_S each
    cost = Calibrated.for_device(H200, engine="trtllm").with_kernel_overhead(KERNEL_S)
    precision = precision_on(Precision().for_model(LLAMA_70B), H200).precision
    args = (LLAMA_70B, H200, precision, Parallelism(tp=4), cost)
    plain = StepPricer(*args).step_s(8, 8 * 1024)
    fused = StepPricer(*args, fusion=RULE).step_s(8, 8 * 1024)
    assert plain - fused == pytest.approx(160 * KERNEL_S, rel=1e-6)


@pytest.mark.parametrize(("engine", "tp", "fused"), [("trtllm", 4, True), ("trtllm", 1, False),
                                                     ("vllm", 4, False)])
def test_simulate_says_when_the_fusion_priced_its_steps(engine: str, tp: int, fused: bool,
                                                        capsys) -> None:  # noqa: ANN001
    import json

    from phasewise.cli import main

    with pytest.raises(SystemExit) as done:
        main(["simulate", "-m", "llama-3.1-70b", "-H", "h200-sxm", "--tp", str(tp),
              "--weight-dtype", "fp8", "--engine", engine, "--clients", "2", "-n", "4", "-f", "json"])
    assert done.value.code in (0, None)
    fusion = json.loads(capsys.readouterr().out)["inputs"]["fusion"]
    if fused:
        assert "160 launches" in fusion and "modeling_llama.py" in fusion
    else:
        assert fusion is None
