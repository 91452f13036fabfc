"""`phasewise plan` on the command line: JSON, CSV, the Pareto plots, a mix with its trace,
and the local pool giving what a serial run gives."""

from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stdout

import pytest

from phasewise.catalog import load_hardware
from phasewise.cli import main
from phasewise.plan import (
    Load,
    LocalPool,
    Problem,
    RequestClass,
    SearchSpace,
    Serial,
    Study,
    Target,
    Traffic,
    plan,
)

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm,a100-80gb-sxm", "--tp", "1",
         "--kv-dtype", "bf16", "--max-num-seqs", "64,256", "--max-num-batched-tokens", "8192",
         "--speculation", "off", "--verify", "3", "--num-requests", "200",
         "--executor", "serial"]


def _run(argv: list[str]) -> str:
    """The CLI in process: a successful run returns (or exits 0)."""
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            main(["plan", *argv])
    except SystemExit as done:
        assert done.code in (0, None)
    return out.getvalue()


def test_json_document_carries_the_answer_and_its_command():
    doc = json.loads(_run(SMALL + ["--rate", "4", "--ttft", "1s", "--tpot", "50ms",
                                   "--format", "json"]))
    assert doc["schema_version"] == 1 and doc["model"] == "llama-3.1-8b"
    assert doc["candidates_verified"] == 3
    chosen = doc["chosen"]
    assert chosen["meets_slos"] and chosen["simulate_command"].startswith("phasewise simulate")
    assert {f["name"] for f in doc["fronts"]} == {"throughput", "cost-latency"}
    prices = {d["name"]: d["usd_per_hour"] for d in doc["inputs"]["hardware"]}
    assert chosen["usd_per_hour"] == pytest.approx(
        sum(prices[p["hardware"]] * p["replicas"] * p["devices_per_replica"]
            for p in chosen["pools"]))


def test_csv_rows_and_plots(tmp_path):
    text = _run(SMALL + ["--rate", "4", "--ttft", "1s", "--tpot", "50ms", "--format", "csv",
                         "--plot", str(tmp_path)])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and sum(r["chosen"] == "True" for r in rows) == 1
    for name in ("throughput", "cost-latency"):
        assert (tmp_path / f"plan-llama-3.1-8b-{name}.png").stat().st_size > 0
        page = (tmp_path / f"plan-llama-3.1-8b-{name}.html").read_text()
        assert "<svg" in page and "http" not in page.split("<svg", 1)[0]


def test_a_mix_writes_the_trace_its_commands_replay(tmp_path):
    trace = tmp_path / "mix.csv"
    doc = json.loads(_run(SMALL + ["--mix", "2048:64:0.5,256:256:0.5", "--rate", "3",
                                   "--ttft", "2s", "--e2e", "20s", "--trace-out", str(trace),
                                   "--format", "json"]))
    lines = trace.read_text().splitlines()
    assert lines[0] == "arrival_s,input_tokens,output_tokens" and len(lines) == 201
    assert {tuple(line.split(",")[1:]) for line in lines[1:]} == {("2048", "64"), ("256", "256")}
    assert f"--trace {trace}" in doc["chosen"]["simulate_command"]


def test_the_local_pool_gives_what_a_serial_run_gives():
    space = SearchSpace(hardware=(load_hardware("h100-sxm"), load_hardware("l40s")), tp=(1, 2),
                        pp=(1,), kv_dtypes=("bf16",), max_seqs=(64,), chunk_tokens=(8192,),
                        speculation=(False,), extra_replicas=1)
    traffic = Traffic((RequestClass(1024, 64, 1.0),), 1088, isl="1024", osl="64")
    study = Study("llama-3.1-8b", Problem(traffic, Load("rate", 5.0),
                                          (Target("ttft", 1.0), Target("tpot", 0.05)), space),
                  verify=4, requests=150)
    pool = LocalPool(2)
    try:
        pooled = plan(study, executor=pool)[0].model_dump(mode="json")
    finally:
        pool.close()
    assert pooled == plan(study, executor=Serial())[0].model_dump(mode="json")


def test_an_engine_profile_reaches_the_reproducing_command():
    doc = json.loads(_run(SMALL + ["--hardware", "h100-sxm", "--engine", "vllm", "--rate", "4",
                                   "--ttft", "1s", "--tpot", "50ms", "--format", "json"]))
    assert doc["chosen"]["pools"][0]["engine"] == "vllm"
    assert "--engine vllm" in doc["chosen"]["simulate_command"]


def test_concurrent_users_plan_both_layouts_as_a_closed_loop():
    doc = json.loads(_run(SMALL + ["--hardware", "h100-sxm", "--isl", "2048", "--osl", "128",
                                   "--users", "16", "--ttft", "2s", "--tpot", "15ms",
                                   "--verify", "4", "--format", "json"]))
    layouts = {r["layout"] for r in doc["verified"]}
    assert layouts == {"aggregated", "disaggregated"}
    assert all("--clients 16" in r["simulate_command"] for r in doc["verified"])


def test_a_trace_sets_the_lengths_and_the_load(tmp_path):
    trace = tmp_path / "day.csv"
    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{0.25 * i:.2f},{512 + 256 * (i % 3)},{64 + 32 * (i % 2)}" for i in range(120)]
    trace.write_text("\n".join(rows) + "\n")
    doc = json.loads(_run(SMALL + ["--trace", str(trace), "--ttft", "1s", "--tpot", "50ms",
                                   "--format", "json"]))
    load = doc["inputs"]["load"]
    assert load["kind"] == "rate" and load["value"] == pytest.approx(119 / (0.25 * 119))
    assert doc["inputs"]["traffic"]["longest_tokens"] == 1024 + 96
    assert doc["chosen"]["simulate_command"].endswith(
        f"--trace {trace} --ttft 1000ms --tpot 50ms --slo-percentile 90")
