"""How close the reference transformer comes to this machine's measured roofs, and how well
a calibration on one model predicts another.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_profile.py [--out FILE.json]

Figures (fp32, one thread): the GEMM ceiling and copy bandwidth; prefill MFU at 512 and
2048 prompt tokens; batch-1 decode MBU at 128 and 512 cached tokens; for two models of about
100M parameters: a Llama-shaped one of hidden size 1024 and SmolLM2-135M (hidden size 576).
Then `phasewise calibrate`'s fit on SmolLM2-135M prices the other model's prefill and decode,
and the held-out error is printed.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from phasewise.catalog import load_model
from phasewise.ledger import Step, build_ledger
from phasewise.measure import ProfilePlan, measure_ceilings, prepare_model, profile_points
from phasewise.measure.calibrate import (
    calibrated_model,
    fit_calibration,
    spec_from_document,
    spec_to_document,
)
from phasewise.measure.profile import precision_for
from phasewise.measure.types import Profile
from phasewise.specs import ModelSpec

# A Llama-shaped model of 111M parameters (tied 32k vocabulary, GQA 16/4): the shape of a
# small Llama, wide enough that its matrix-vector products stream like larger models'.
LLAMA_SHAPED_111M = ModelSpec(name="llama-shaped-111m", hidden_size=1024, num_layers=7,
                              num_heads=16, num_kv_heads=4, head_dim=64, intermediate_size=2816,
                              vocab_size=32000, tie_word_embeddings=True, model_type="llama")
PLAN = ProfilePlan(prompt_lengths=(512, 2048), batch_sizes=(1, 64), contexts=(128, 512),
                   warmup=1, repeats=5, layer_passes=0)
CALIBRATION_PLAN = ProfilePlan(prompt_lengths=(128, 256, 512, 1024), batch_sizes=(1,),
                               contexts=(128, 1024),
                               warmup=1, repeats=5, layer_passes=0)
TARGET_MFU, TARGET_MBU = 0.80, 0.60  # prefill vs GEMM ceiling; batch-1 decode vs copy bandwidth


def profile(spec: ModelSpec, plan: ProfilePlan, ceilings) -> Profile:
    model = prepare_model(spec, plan, dtype="fp32", device="cpu")
    points = list(profile_points(model, spec, ceilings, plan, dtype="fp32", device="cpu"))
    return Profile(tool_version="bench", model=spec.name, model_spec=spec_to_document(spec),
                   weights="random (seed 0)", dtype="fp32", device="cpu", ceilings=ceilings,
                   points=points, complete=True)


def held_out_errors(calibrated_on: Profile, held_out: Profile) -> dict[str, float]:
    """(predicted − measured) / measured for each prefill and batch-1 decode point."""
    result, hardware = fit_calibration([calibrated_on])
    cost = calibrated_model(result, hardware)
    spec = spec_from_document(held_out)
    errors = {}
    for point in held_out.points:
        if point.phase == "decode" and point.batch_size != 1:
            continue
        step = (Step.prefill(point.new_tokens) if point.phase == "prefill"
                else Step.decode(1, point.context_tokens))
        predicted = cost.step_time(build_ledger(spec, step, precision_for("fp32")),
                                   hardware).total.time_s
        errors[point.label] = predicted / point.time_s - 1.0
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write every measured point as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    ceilings = measure_ceilings("cpu")
    print(f"{ceilings.device_name}, {ceilings.threads} thread, torch {torch.__version__}: "
          f"GEMM fp32 {ceilings.gemm_flops_per_s['fp32'] / 1e9:.1f} GFLOP/s, bf16 "
          f"{ceilings.gemm_flops_per_s['bf16'] / 1e9:.1f} GFLOP/s; copy "
          f"{ceilings.copy_bytes_per_s / 1e9:.1f} GB/s, read {ceilings.read_bytes_per_s / 1e9:.1f}"
          " GB/s")
    profiles = {spec.name: profile(spec, PLAN, ceilings)
                for spec in (LLAMA_SHAPED_111M, load_model("smollm2-135m"))}
    print("\n| model | step | time | MFU | MBU | target |\n|---|---|---|---|---|---|")
    for name, document in profiles.items():
        for p in document.points:
            target = (f"MFU ≥ {TARGET_MFU:.0%}" if p.phase == "prefill" else
                      f"MBU ≥ {TARGET_MBU:.0%}" if p.batch_size == 1 else "")
            print(f"| {name} | {p.label} | {p.time_s * 1e3:,.1f} ms | {p.mfu:.1%} | {p.mbu:.1%} "
                  f"| {target} |")
    profiles["calibration"] = profile(load_model("smollm2-135m"), CALIBRATION_PLAN, ceilings)
    if args.out:  # the measurements first: the fit below reads them, it does not make them
        with open(args.out, "w") as handle:
            json.dump({name: d.model_dump(mode="json") for name, d in profiles.items()}, handle)
    errors = held_out_errors(profiles["calibration"], profiles[LLAMA_SHAPED_111M.name])
    print("\nheld out (calibrated on smollm2-135m, predicting llama-shaped-111m): " +
          ", ".join(f"{label} {error:+.1%}" for label, error in errors.items()))
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
