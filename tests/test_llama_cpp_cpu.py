"""llama.cpp on a CPU: ggml's CPU backend runs every matmul as vector dot products
(engines.toml's [llama.cpp.backend.cpu]), a portable build at AVX2's width, and a CPU sheet
without a 16-bit figure prices 16-bit matmuls at its fp32 rate. Expectations are worked
by hand from the formulas in cost/calibrated.py's docstring."""

from __future__ import annotations

import pytest
from tests.test_calibrated import ROUND

from phasewise.catalog import load_hardware, load_model
from phasewise.cost.calibrated import op_features, priced_parts
from phasewise.cost.calibration import Constants, resolve_engine, traits_for
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger
from phasewise.measure.micro import ceiling_formats
from phasewise.specs import HardwareSpec, Precision

FP32 = 1e11  # FLOP/s: one AVX-512 core's fp32 GEMM, as profile --micro measures it
# Llama 3 8B's mlp.up (gate and up): 4096 x 2 x 14336 weights a layer, 32 layers
UP_WEIGHTS = 4096 * 28672 * 32


def _cpu(vector_bits: int = 512, **peaks: float) -> HardwareSpec:
    return HardwareSpec("core", "one core", "cpu", peaks or {"fp32": FP32}, 24e9, 20e9,
                        vector_bits=vector_bits)


def _up(tokens: int, weights: str = "Q4_K_M", prefill: bool = True):
    step = Step.prefill(tokens) if prefill else Step.decode(tokens, 10)
    ledger = build_ledger(load_model("llama-3-8b"), step, Precision(weights, "fp16", "fp16"))
    return next(op for op in ledger.ops if op.name == "mlp.up")


def _compute_s(op, device: HardwareSpec, engine: str) -> float:
    traits = traits_for(resolve_engine(engine), device)
    f = op_features(op, device, "fp16", traits)
    assert f.matvec == 1.0, engine
    return priced_parts(f, Constants(**ROUND)).compute_s


def test_every_cpu_matmul_runs_vector_dot_products_unpacking_per_token():
    """A 64-token prompt's mlp.up in Q4_K_M: 2 FLOPs a weight and token at 4 operations per
    FLOP, none shared between tokens (vec_dot takes one row and one column), at the fp32
    vector rate: 2 x UP_WEIGHTS x 64 x 4 / 1e11 s, about 0.6 s. The same per token at one
    token (decode) and at a 512-token micro-batch: no kernel switch by batch size."""
    device = _cpu()
    for tokens, prefill in ((64, True), (512, True), (1, False)):
        expected = 2.0 * UP_WEIGHTS * tokens * 4.0 / FP32
        assert _compute_s(_up(tokens, prefill=prefill), device, "llama.cpp") == \
            pytest.approx(expected, rel=1e-9), tokens


def test_a_portable_build_runs_at_half_an_avx512_sheet_s_vector_rate():
    """GGML_NATIVE=OFF compiles AVX2 (256-bit) kernels: on a sheet measured at 512 bits
    they take twice as long; on a 256-bit sheet, or one that does not say, as long."""
    op = _up(64)
    native = _compute_s(op, _cpu(512), "llama.cpp")
    assert _compute_s(op, _cpu(512), "llama.cpp+portable") == pytest.approx(2 * native)
    assert _compute_s(op, _cpu(256), "llama.cpp+portable") == pytest.approx(native)
    assert _compute_s(op, _cpu(0), "llama.cpp+portable") == pytest.approx(native)
    # 16-bit weights: one operation per FLOP, at the build's share of the width too
    f16 = _up(64, "fp16")
    assert _compute_s(f16, _cpu(512), "llama.cpp+portable") == \
        pytest.approx(2.0 * UP_WEIGHTS * 64 / (FP32 * 0.5), rel=1e-9)


def test_gpus_keep_their_own_kernel_dispatch():
    """The CPU table is the CPU backend's: an A100 still runs MMQ over 8 tokens."""
    a100 = load_hardware("a100-80gb-sxm")
    traits = traits_for(resolve_engine("llama.cpp"), a100)
    assert traits.kernels.matvec_max_tokens == 8 and traits.kernels.vector_share == 1.0
    assert op_features(_up(64), a100, "fp16", traits).matvec == 0.0


def test_a_cpu_sheet_without_a_16_bit_figure_prices_16_bit_matmuls_at_fp32():
    cpu = _cpu()
    assert cpu.peak_flops("fp16") == cpu.peak_flops("bf16") == FP32
    assert cpu.supports("bf16") and not cpu.supports("fp8")
    gpu = HardwareSpec("g", "a GPU", "datacenter_gpu", {"fp32": FP32}, 80e9, 2e12)
    with pytest.raises(InputError, match="has no fp16 math"):
        gpu.peak_flops("fp16")
    # a sheet's own 16-bit figure wins
    assert _cpu(bf16=4 * FP32, fp32=FP32).peak_flops("fp16") == 4 * FP32


def test_a_16_bit_gemm_slower_than_fp32_is_no_ceiling():
    """torch without 16-bit instructions converts element by element: 0.3 GFLOP/s bf16
    beside 100 GFLOP/s fp32 is left out; AMX's 1 TFLOP/s is kept."""
    kept, slow = ceiling_formats({"fp32": 1e11, "bf16": 3e8})
    assert kept == {"fp32": 1e11} and slow == {"bf16": 3e8}
    kept, slow = ceiling_formats({"fp32": 1e11, "bf16": 1e12})
    assert kept == {"fp32": 1e11, "bf16": 1e12} and not slow


def test_a_sheet_reads_its_vector_width(tmp_path):
    sheet = tmp_path / "core.toml"
    sheet.write_text('name = "core"\ndevice_class = "cpu"\n[compute]\nfp32_tflops = 0.1\n'
                     '[memory]\ncapacity_gb = 24\nbandwidth_gb_per_s = 20\n'
                     '[architecture]\nvector_bits = 512\n')
    assert load_hardware(str(sheet)).vector_bits == 512
