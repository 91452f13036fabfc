"""How long calibration takes: one fit to every bundled row, and every source held out.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_validate.py
"""

from __future__ import annotations

import time

from phasewise.validate.measurements import load_bundled
from phasewise.validate.run import dataset, fit, leave_one_source_out


def main() -> None:
    start = time.perf_counter()
    scenarios = dataset(load_bundled()).scenarios
    print(f"bundled rows mapped to scenarios:        {time.perf_counter() - start:.1f} s "
          f"({len(scenarios)} rows)")
    start = time.perf_counter()
    result = fit(scenarios)
    print(f"one fit to every row:                    {time.perf_counter() - start:.1f} s "
          f"(objective {result.cost:.1f}, {result.iterations} iterations)")
    start = time.perf_counter()
    folds = []
    leave_one_source_out(scenarios, progress=lambda done, total, source: folds.append(source))
    print(f"every source held out in turn:           {time.perf_counter() - start:.1f} s "
          f"({len(folds)} folds)")


if __name__ == "__main__":
    main()
