"""Where the reference transformer's time goes in hybrid models, layer group by layer group,
against the speed of light on this machine's measured roofs.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_profile_hybrid.py [--out FILE.json]

Two models of 119M and 189M parameters shaped like current hybrids (defined below, random
weights, fp32, one thread): Nemotron-H's layout (Mamba-2, relu² MLP and attention layers,
"M-M-M*-") and Qwen3-Next's (three Gated DeltaNet layers to one gated attention layer, all
MoE). Prefill of 128 tokens, decode of 1 and 8 sequences at 512 cached tokens. Mamba-2 and
the delta rule run their recurrence token by token in the reference (measure/recurrent.py),
so their prefill is where it stands furthest from its speed of light.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from phasewise.measure import ProfilePlan, measure_ceilings
from phasewise.measure.calibrate import spec_to_document
from phasewise.measure.profile import prepare_model, profile_points
from phasewise.measure.types import Profile
from phasewise.specs import ModelSpec
from phasewise.specs.model import Attention, DenseMLP, Layer, LinearAttention, Mamba2, MoE

MAMBA = Layer(Mamba2(heads=32, head_dim=64, state_size=128, groups=8, conv_kernel=4), None)
RELU2_MLP = Layer(None, DenseMLP(4096, gated=False))
ATTENTION = Layer(Attention(8, 2, 128), None)
NEMOTRON_H_SHAPED = ModelSpec(
    name="nemotron-h-shaped-119m", hidden_size=1024, num_layers=7, num_heads=8, num_kv_heads=2,
    head_dim=128, intermediate_size=4096, vocab_size=32000, hidden_act="relu2",
    gated_mlp=False, model_type="nemotron_h",
    layer_specs=(MAMBA, RELU2_MLP, MAMBA, RELU2_MLP, MAMBA, ATTENTION, RELU2_MLP))
EXPERTS = MoE(16, 2, 512, shared_width=512)
DELTANET = Layer(LinearAttention(8, 16, 64, 64, 4), EXPERTS)
GATED_ATTENTION = Layer(Attention(8, 2, 128, gated=True), EXPERTS)
QWEN3_NEXT_SHAPED = ModelSpec(
    name="qwen3-next-shaped-189m", hidden_size=1024, num_layers=4, num_heads=8, num_kv_heads=2,
    head_dim=128, intermediate_size=512, vocab_size=32000, model_type="qwen3_next",
    layer_specs=(DELTANET, DELTANET, DELTANET, GATED_ATTENTION))
PLAN = ProfilePlan(prompt_lengths=(128,), batch_sizes=(1, 8), contexts=(512,), warmup=1,
                   repeats=3)


def profile(spec: ModelSpec, ceilings) -> Profile:
    model = prepare_model(spec, PLAN, dtype="fp32", device="cpu")
    points = list(profile_points(model, spec, ceilings, PLAN, dtype="fp32", device="cpu"))
    return Profile(tool_version="bench", model=spec.name, model_spec=spec_to_document(spec),
                   weights="random (seed 0)", dtype="fp32", device="cpu", ceilings=ceilings,
                   points=points, complete=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write every measured point as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    ceilings = measure_ceilings("cpu")
    print(f"{ceilings.device_name}, torch {torch.__version__}: GEMM fp32 "
          f"{ceilings.gemm_flops_per_s['fp32'] / 1e9:.1f} GFLOP/s; copy "
          f"{ceilings.copy_bytes_per_s / 1e9:.1f} GB/s")
    profiles = {spec.name: profile(spec, ceilings)
                for spec in (NEMOTRON_H_SHAPED, QWEN3_NEXT_SHAPED)}
    print("\n| model | step | layers | measured | share | measured ÷ SoL |\n|---|---|---|---|---|---|")
    for name, document in profiles.items():
        for p in document.points:
            print(f"| {name} | {p.label} | all | {p.time_s * 1e3:,.1f} ms | 100% | "
                  f"{p.time_s / p.sol_time_s:.2f}× |")
            for row in p.layers:
                print(f"| | | {row.layers} | {row.time_s * 1e3:,.2f} ms | "
                      f"{row.time_s / p.time_s:.0%} | {row.time_s / row.sol_time_s:.2f}× |")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({name: d.model_dump(mode="json") for name, d in profiles.items()}, handle)
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
