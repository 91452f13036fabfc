"""How fast the report and the web app answer: one HTML page in process and as a whole
command, and one web view's round trip.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_report.py
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import phasewise


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child_cpu_seconds(command: list[str], repeats: int) -> float:
    """Median CPU time (user + system) of a whole command: on a shared machine the wall
    time mostly measures the neighbours."""
    times = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def main() -> None:
    from fastapi.testclient import TestClient

    from phasewise.report.html_report import html_report
    from phasewise.web.app import create_app

    doc = phasewise.estimate(detail=True).model_dump(mode="json")
    page = html_report(doc)
    in_process = median_seconds(lambda: html_report(doc), 5)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "r.html"
        command = [sys.executable, "-m", "phasewise", "report", "estimate", "-o", str(out)]
        whole = median_seconds(lambda: subprocess.run(command, check=True, capture_output=True), 3)
        report_cpu = child_cpu_seconds(command, 3)
        estimate_cpu = child_cpu_seconds([sys.executable, "-m", "phasewise", "estimate",
                                          "--detail", "--format", "json"], 3)
    client = TestClient(create_app())
    form = {"model": "llama-3.1-8b", "hardware": "h100-sxm"}
    client.post("/api/view/estimate", json=form)  # catalogs loaded once
    view = median_seconds(lambda: client.post("/api/view/estimate", json=form), 10)
    print(f"report page, estimate document: {len(page.encode()) / 1e6:.2f} MB")
    print(f"html_report in process (median of 5): {in_process:.3f} s")
    print(f"`phasewise report estimate` whole process (median of 3): {whole:.2f} s wall, "
          f"{report_cpu:.2f} s CPU (`phasewise estimate --detail --format json`: "
          f"{estimate_cpu:.2f} s CPU)")
    print(f"web estimate view round trip, in-process client (median of 10): {view:.3f} s")


if __name__ == "__main__":
    main()
