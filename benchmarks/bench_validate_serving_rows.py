"""The scored share of a typical published set, and the held-out error of its serving rows.

The set: the bundled public_measurements.csv (single-stream llama-bench rows, phase
profiles, static-batch throughputs, device ceilings) plus the published serving runs in the
measurement layout (TensorRT-LLM's max-throughput tables, dstack's MI300X/H200 concurrency
sweeps). Scored: every row `phasewise validate` predicts; the rest are excluded by their
file or skipped with a reason. Serving rows are replayed through the simulator and never
fitted, so their errors are held out; the phase rows are scored with the bundled
calibration, which was fitted to them (in-sample), and their errors are not printed here
(`phasewise validate --leave-one-source-out` gives those held out).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_validate_serving_rows.py
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from phasewise.validate.measurements import MEASUREMENTS_DIR, load_measurements
from phasewise.validate.outcome import grouped_problems, run_validation
from phasewise.validate.run import short_source

FILES = ("public_measurements.csv", "trtllm_perf_overview_v1.csv",
         "trtllm_perf_overview_per_gpu.csv", "dstack_deepseek_r1_serving.csv")


def main() -> None:
    files = [load_measurements(MEASUREMENTS_DIR / name) for name in FILES]
    rows = sum(len(f.rows) + len(f.problems) for f in files)
    start = time.perf_counter()
    outcome = run_validation(files)
    wall_s = time.perf_counter() - start
    scored = len(outcome.predictions)
    marked = len(outcome.excluded)
    print(f"rows {rows}: scored {scored} ({scored / rows:.1%}); excluded {marked}, "
          f"skipped {len(outcome.skipped)}; scored of the rows not excluded by their file or "
          f"the ledger: {scored / (rows - marked):.1%}; wall {wall_s:.0f} s")
    by_source: dict[str, list] = defaultdict(list)
    for p in outcome.predictions:
        if p.phase == "serving":
            by_source[short_source(p.source)].append(p)
            by_source[f"{short_source(p.source)} / {p.hardware}"].append(p)
    print("serving rows, held out (never fitted): median |error| (p90), median bias")
    for source, preds in sorted(by_source.items()):
        errors = np.array([p.error for p in preds])
        floor = np.array([p.floor_error for p in preds])
        print(f"  {source:45s} n={len(preds):3d}  {np.median(np.abs(errors)):6.1%} "
              f"({np.percentile(np.abs(errors), 90):6.1%})  {np.median(errors):+7.1%}   "
              f"SOL {np.median(np.abs(floor)):6.1%}")
    print("skipped:")
    for line in grouped_problems(outcome.skipped):
        print(line)


if __name__ == "__main__":
    main()
