"""Bad input across every verb, as a careless or hostile user would give it.

Each case runs `phasewise` in a child process under resource limits and must end in one
of two ways: exit code 2 with one line on stderr (``error: ...``) and nothing on stdout,
or a correct run (exit 0, no traceback, no NaN, infinite or negative figure, valid JSON
where JSON was asked for). A case marked ``refuse`` holds input that has no sensible
meaning (NaN, a negative count, a file of the wrong kind), so exit 0 counts against it.

Measured per case: exit code, CPU seconds (user + system of the child: the "hang"
criterion, since on a shared machine wall time follows the neighbours' load), wall
seconds, and peak resident memory (``wait4``'s ``ru_maxrss``).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/fuzz_cli.py [-j 2]
        [--only SUBSTRING] [--list] [--json PATH]

Prints one line per failing case and a summary table; exit code 1 when any case fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "src" / "phasewise" / "catalog"
PHASEWISE = [sys.executable, "-m", "phasewise.cli"]

CPU_LIMIT_S = 10  # a case that computes longer than this is a hang
WALL_LIMIT_S = 90  # a safety net only: wall time follows the machine's load
MEMORY_LIMIT_BYTES = 6 * 2**30  # address space; a blow-up dies here, not in the kernel's OOM
REFUSED_RSS_LIMIT_KIB = 2**20  # 1 GiB peak for any refused input

# Tokens that mean a figure is not a number; a negative time or count in a table.
NONSENSE = re.compile(r"(?<![\w.])(nan|-?inf(inity)?)(?![\w])", re.IGNORECASE)
NEGATIVE_TIME = re.compile(r"(?<![\w.−-])-\d[\d,.]*\s?(ns|µs|us|ms|s|min|h|tok/s|tokens)\b")
# JSON keys whose values are times, counts or rates: never negative.
NON_NEGATIVE_KEY = re.compile(r"(_s|_ms|_bytes|_tokens|_per_s|tokens|requests|devices)$")


@dataclass
class Case:
    name: str
    args: list[str]
    expect: str = "either"  # "refuse": exit 2 is the only right answer
    env: dict[str, str] = field(default_factory=dict)
    json_out: bool = False


@dataclass
class Outcome:
    case: Case
    rc: int
    cpu_s: float
    wall_s: float
    rss_kib: int
    stdout: str
    stderr: str
    problems: list[str]


# ---------------------------------------------------------------- fixture files

def _config() -> dict:
    return json.loads((CATALOG / "models" / "llama-3.1-8b.json").read_text())


def _sheet() -> str:
    return (CATALOG / "hardware" / "h100-sxm.toml").read_text()


def write_fixtures(folder: Path) -> None:
    """Every bad file the cases name, written once into ``folder``."""
    def put(name: str, data: str | bytes) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    put("binary.json", b"\xfe\xff\x00b\x00a\x00d")
    put("binary.bin", bytes(range(256)) * 4)
    config = json.dumps(_config())
    put("utf16.json", config.encode("utf-16"))
    put("utf8bom.json", b"\xef\xbb\xbf" + config.encode())
    put("deep.json", "[" * 200_000 + "]" * 200_000)
    put("deep_dict.json", '{"a":' * 100_000 + "1" + "}" * 100_000)
    put("empty.json", "")
    put("list.json", "[1, 2, 3]")
    put("notjson.json", "{hidden_size: 4096")
    with open(folder / "huge.json", "wb") as handle:  # sparse: no disk, 3 GB to a reader
        handle.truncate(3 * 2**30)
    (folder / "a_dir").mkdir(exist_ok=True)
    put("plain_file", "x")
    for key, bad in _config_mutations():
        doc = _config()
        if key is None:
            doc = bad
        else:
            doc[key] = bad
        put(f"cfg/{_slug(key)}_{_slug(bad)}/config.json", json.dumps(doc, allow_nan=True))
    for name, text in _sheet_mutations():
        put(f"hw/{name}.toml", text)
    put("calib/hardware_as_calibration.toml", _sheet())
    default = (CATALOG / "calibration" / "default.toml").read_text()
    put("calib/unknown_section.toml", default + '\n[globel]\ngemm_fraction = 0.5\n')
    put("calib/typo_constant.toml", "[global]\ngemm_fracton = 0.5\n")
    put("calib/nan_value.toml", "[global]\ngemm_fraction = nan\n")
    put("calib/negative_value.toml", "[global]\ngemm_fraction = -0.5\n")
    put("calib/string_value.toml", '[global]\ngemm_fraction = "high"\n')
    put("calib/empty.toml", "")
    put("calib/utf16.toml", default.encode("utf-16"))
    put("calib/not_toml.toml", "[global\n")
    put("calib/huge_value.toml", "[global]\nstep_overhead_s = 1e300\n")
    for name, text in _trace_mutations():
        put(f"trace/{name}", text)
    with open(folder / "trace/three_million.csv", "w") as handle:
        handle.write("arrival_s,input_tokens,output_tokens\n")
        handle.writelines(f"{i * 0.001:.3f},128,16\n" for i in range(3_000_000))
    for name, text in _measurement_mutations():
        put(f"meas/{name}", text)
    for name, text in _profile_mutations():
        put(f"prof/{name}", text)
    for name, text in (("zero.txt", "0\n"), ("negative.txt", "-5\n"), ("nan.txt", "nan\n"),
                       ("huge.txt", "100000000000000000000\n"), ("empty.txt", ""),
                       ("words.txt", "many\n"), ("utf16.txt", "128\n".encode("utf-16"))):
        put(f"len/{name}", text)


def _slug(value: object) -> str:
    """A folder name per value, its type first ("4096" and [4096] are two cases)."""
    text = re.sub(r"[^a-z0-9]+", "-", repr(value).lower()).strip("-")[:24] or "x"
    return f"{type(value).__name__}-{text}"


def _config_mutations() -> list[tuple[str | None, object]]:
    fields = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim")
    bad = ("4096", [4096], 0, -8, float("nan"), float("inf"), 1e300, None, True, 4096.5, 2**62)
    out: list[tuple[str | None, object]] = [(f, b) for f in fields for b in bad]
    out += [(None, []), (None, {}), (None, "llama"), ("architectures", 5),
            ("rope_theta", "nan"), ("tie_word_embeddings", "yes"), ("torch_dtype", 16),
            ("quantization_config", "fp8"), ("quantization_config", {"quant_method": 7}),
            ("num_local_experts", -1), ("sliding_window", -4096), ("rope_scaling", [1])]
    return out


def _sheet_mutations() -> list[tuple[str, str]]:
    base = _sheet()

    def swap(old: str, new: str) -> str:
        assert old in base, old
        return base.replace(old, new, 1)

    return [
        ("negative_latency", swap("latency_us = 3.0", "latency_us = -3.0")),
        ("nan_bandwidth", swap("bandwidth_gb_per_s = 3350", "bandwidth_gb_per_s = nan")),
        ("inf_bandwidth", swap("bandwidth_gb_per_s = 3350", "bandwidth_gb_per_s = inf")),
        ("inf_peak", swap("bf16_tflops = 989.4", "bf16_tflops = inf")),
        ("nan_peak", swap("bf16_tflops = 989.4", "bf16_tflops = nan")),
        ("negative_peak", swap("fp32_tflops = 67.0", "fp32_tflops = -67.0")),
        ("huge_capacity", swap("capacity_gb = 80", "capacity_gb = 1e300")),
        ("negative_price", swap("usd_per_hour = 2.99", "usd_per_hour = -2.99")),
        ("nan_price", swap("usd_per_hour = 2.99", "usd_per_hour = nan")),
        ("negative_tdp", swap("tdp_w = 700", "tdp_w = -700")),
        ("string_tdp", swap("tdp_w = 700", 'tdp_w = "700 W"')),
        ("string_capacity", swap("capacity_gb = 80", 'capacity_gb = "80"')),
        ("typo_key", swap("capacity_gb = 80", "capacty_gb = 80\ncapacity_gb = 80")),
        ("unknown_section", base + "\n[memroy]\ncapacity_gb = 80\n"),
        ("zero_max_devices", swap("max_devices = 8", "max_devices = 0")),
        ("huge_max_devices", swap("max_devices = 8", "max_devices = 1000000000")),
        ("float_max_devices", swap("max_devices = 8", "max_devices = 8.5")),
        ("bad_class", swap('device_class = "datacenter_gpu"', 'device_class = "gpu"')),
        ("aliases_string", swap('aliases = ["H100 SXM"', 'aliasez = ["H100 SXM"')),
        ("name_number", swap('name = "h100-sxm"', "name = 5")),
        ("no_compute", re.sub(r"\[compute\][^\[]*", "", base)),
        ("compute_string", swap("bf16_tflops = 989.4", 'bf16_tflops = "fast"')),
        ("empty", ""),
        ("not_toml", "[compute\n"),
        ("calibration_as_hardware",
         (CATALOG / "calibration" / "default.toml").read_text()),
        ("long_name", swap('name = "h100-sxm"', f'name = "{"h" * 100_000}"')),
    ]


def _trace_mutations() -> list[tuple[str, str | bytes]]:
    head = "arrival_s,input_tokens,output_tokens\n"
    return [
        ("nan.csv", head + "nan,128,16\n"),
        ("negative.csv", head + "0,-128,16\n"),
        ("huge_tokens.csv", head + "0,1e30,16\n"),
        ("huge_tokens_int.csv", head + "0,1000000000000,16\n"),
        ("unsorted.csv", head + "1,128,16\n0,128,16\n"),
        ("no_header.csv", "0,128,16\n"),
        ("missing_column.csv", "arrival_s,input_tokens\n0,128\n"),
        ("empty.csv", ""),
        ("header_only.csv", head),
        ("short_row.csv", head + "0,128\n"),
        ("inf_time.csv", head + "inf,128,16\n"),
        ("utf16.csv", (head + "0,128,16\n").encode("utf-16")),
        ("big_field.csv", head + "0," + "1" * 200_000 + ",16\n"),
        ("bad.jsonl", '{"arrival_s": 0, "input_tokens": 128}\n'),
        ("nan.jsonl", '{"arrival_s": NaN, "input_tokens": 128, "output_tokens": 16}\n'),
        ("list.jsonl", "[0, 128, 16]\n"),
        ("deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"),
        ("string_tokens.jsonl", '{"arrival_s": 0, "input_tokens": "many", "output_tokens": 1}\n'),
        ("bool_tokens.jsonl", '{"arrival_s": 0, "input_tokens": true, "output_tokens": 1}\n'),
    ]


def _measurement_rows() -> tuple[str, list[str]]:
    lines = (CATALOG / "measurements" / "github_llama_bench_posts.csv").read_text().splitlines()
    return lines[0], lines[1:4]


def _measurement_mutations() -> list[tuple[str, str | bytes]]:
    header, rows = _measurement_rows()
    columns = header.split(",")

    def edit(row: str, column: str, value: str) -> str:
        import csv
        import io

        fields = next(csv.reader([row]))
        fields[columns.index(column)] = value
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(fields)
        return out.getvalue()

    good = "\n".join([header, *rows]) + "\n"
    return [
        ("good.csv", good),
        ("header_only.csv", header + "\n"),
        ("empty.csv", ""),
        ("duplicate_ids.csv", "\n".join([header, rows[0], rows[0]]) + "\n"),
        ("unknown_phase.csv", "\n".join([header, edit(rows[0], "phase", "warmup")]) + "\n"),
        ("zero_accelerators.csv",
         "\n".join([header, edit(rows[0], "num_accelerators", "0")]) + "\n"),
        ("nan_value.csv", "\n".join([header, edit(rows[0], "value", "nan")]) + "\n"),
        ("big_field.csv", "\n".join([header, edit(rows[0], "notes", "x" * 200_000)]) + "\n"),
        ("long_model.csv", "\n".join([header, edit(rows[0], "model", "m" * 100_000)]) + "\n"),
        ("unpriceable.csv", "\n".join([header, edit(rows[0], "weight_dtype", "fp4"),
                                       rows[1]]) + "\n"),
        ("utf16.csv", good.encode("utf-16")),
        ("no_header.csv", "\n".join(rows) + "\n"),
        ("huge_batch.csv",
         "\n".join([header, edit(rows[0], "batch_or_concurrency", "1e12")]) + "\n"),
        ("huge_input.csv", "\n".join([header, edit(rows[0], "input_len", "1e12")]) + "\n"),
    ]


def _profile_mutations() -> list[tuple[str, str | bytes]]:
    return [
        ("unknown_schema.json", json.dumps({"schema_version": "99", "points": []})),
        ("list.json", "[]"),
        ("empty.json", ""),
        ("nan.json", '{"schema_version": NaN}'),
        ("utf16.json", json.dumps({"schema_version": "1"}).encode("utf-16")),
        ("deep.json", "[" * 200_000 + "]" * 200_000),
    ]


# ---------------------------------------------------------------- cases

# Values for a flag that takes a positive whole number: none of them is one.
BAD_COUNTS = ("0", "-5", "inf", "nan", "1e23", "abc", "0.5")
# Values for a flag that takes a finite number in some range: each is outside every range
# a flag of this tool takes (a fraction, a rate, a price, a latency).
BAD_NUMBERS = ("inf", "nan", "-1", "abc", "1e309")


def _flag_cases() -> list[Case]:
    """Every numeric flag of every verb, with values no flag can mean."""
    small_sim = ["simulate", "-n", "20", "--rate", "1", "--no-progress"]
    verbs = {
        "estimate": (["estimate"],
                     ["--isl", "--osl", "--batch-size", "--tp", "--pp", "--ep"],
                     ["--kv-keep", "--price"]),
        "estimate-spec": (["estimate", "--draft-head", "0.1"], ["--spec-tokens"],
                          ["--spec-accept"]),
        "estimate-spec-frac": (["estimate"], [], ["--draft-head"]),
        "estimate-disagg": (["estimate", "--prefill-hardware", "h100-sxm"],
                            ["--prefill-pool", "--decode-pool", "--prefill-tp", "--decode-tp"],
                            ["--link-bandwidth"]),
        "estimate-disagg-lat": (["estimate", "--prefill-hardware", "h100-sxm",
                                 "--link-bandwidth", "50"], [], ["--link-latency"]),
        "explain": (["explain"], ["--isl", "--osl", "--batch-size", "--tp", "--pp", "--ep",
                                  "--batches"], ["--kv-keep"]),
        "compare": (["compare", "-H", "h100-sxm,h200-sxm"],
                    ["--isl", "--osl", "--batch-size", "--tp", "--pp", "--ep"],
                    ["--kv-keep", "--price"]),
        "simulate": (small_sim,
                     ["--tp", "--pp", "--ep", "--replicas", "--max-num-seqs",
                      "--max-num-batched-tokens", "--block-size", "-n", "--clients",
                      "--bucket-tokens", "--isl", "--osl"],
                     ["--rate", "--cv", "--prefix-hit-rate", "--memory-budget", "--ttft",
                      "--tpot", "--slo-percentile", "--think-time", "--seed"]),
        "simulate-spec": (small_sim + ["--draft-head", "0.1"], ["--spec-tokens"],
                          ["--spec-accept"]),
        "simulate-disagg": (small_sim + ["--scheduler", "disaggregated"],
                            ["--prefill-replicas", "--decode-replicas", "--prefill-tp",
                             "--decode-tp"], []),
        "profile": (["profile", "--device", "cpu"],
                    ["--repeats", "--gemm-size", "--buffer-mib", "--threads",
                     "--prompt-lengths", "--batch-size", "--context"], ["--warmup", "--seed"]),
        "calibrate": (["calibrate", "--device", "cpu"],
                      ["--repeats", "--prompt-lengths", "--batch-size", "--context"], []),
    }
    cases = []
    for label, (base, counts, numbers) in verbs.items():
        for flag in counts:
            for value in BAD_COUNTS:
                # A clients flag or a second load flag would change what the base asks.
                args = [a for a in base if not (flag == "--clients" and a in ("--rate", "1"))]
                cases.append(Case(f"{label} {flag} {value!r}", [*args, flag, value], "refuse"))
        for flag in numbers:
            for value in BAD_NUMBERS:
                cases.append(Case(f"{label} {flag} {value!r}", [*base, flag, value], "refuse"))
    return cases


def _length_cases() -> list[Case]:
    sim = ["simulate", "-n", "20", "--rate", "1", "--no-progress"]
    specs = ["uniform:1:1e30", "normal:1e30:1", "normal:1024:1e30", "lognormal:1e30:1",
             "lognormal:1024:1e3", "uniform:5:1", "uniform:nan:5", "normal:inf:1", "fixed:0",
             "weibull:1:2", "uniform:1", "uniform:1:2:3", ":", "file:", "file:len/zero.txt",
             "file:len/negative.txt", "file:len/nan.txt", "file:len/huge.txt",
             "file:len/empty.txt", "file:len/words.txt", "file:len/utf16.txt", "file:a_dir",
             "file:/dev/zero", "file:huge.json", "file:binary.bin", "1e30", "-5", "1e8"]
    return [Case(f"simulate {flag} {s}", [*sim, flag, s], "refuse")
            for flag in ("--isl", "--osl") for s in specs]


def _file_cases() -> list[Case]:
    bad_files = ["binary.json", "utf16.json", "deep.json", "deep_dict.json", "empty.json",
                 "list.json", "notjson.json", "huge.json", "/dev/zero", "a_dir", "missing.json",
                 "plain_file/config.json", "binary.bin"]
    cases = [Case(f"estimate --model {f}", ["estimate", "--model", f], "refuse")
             for f in bad_files]
    cases.append(Case("estimate --model utf8bom.json", ["estimate", "--model", "utf8bom.json"]))
    for key, bad in _config_mutations():
        path = f"cfg/{_slug(key)}_{_slug(bad)}"
        # A float of whole value (4096.0) or a bool in a count is still not a count.
        cases.append(Case(f"config.json {key}={bad!r}", ["estimate", "--model", path,
                                                         "--format", "json"], "either",
                          json_out=True))
    cases.append(Case("model 100 kB name", ["estimate", "--model", "m" * 100_000], "refuse"))
    for name, _ in _sheet_mutations():
        expect = "either" if name in ("huge_max_devices",) else "refuse"
        cases.append(Case(f"hardware {name}", ["estimate", "-H", f"hw/{name}.toml",
                                               "--format", "json"], expect, json_out=True))
        cases.append(Case(f"compare hardware {name}", ["compare", "-H",
                                                       f"hw/{name}.toml,h100-sxm"], expect))
    for f in ["binary.json", "utf16.json", "huge.json", "/dev/zero", "a_dir", "missing.toml"]:
        cases.append(Case(f"estimate -H {f}", ["estimate", "-H", f], "refuse"))
        cases.append(Case(f"estimate --calibration {f}", ["estimate", "--calibration", f],
                          "refuse"))
    for name in ("hardware_as_calibration", "unknown_section", "typo_constant", "nan_value",
                 "negative_value", "string_value", "utf16", "not_toml", "huge_value"):
        for verb in (["estimate"], ["simulate", "-n", "5", "--rate", "1", "--no-progress"],
                     ["validate", "--measurements", "meas/good.csv"]):
            cases.append(Case(f"{verb[0]} --calibration {name}",
                              [*verb, "--calibration", f"calib/{name}.toml"], "refuse"))
    sim = ["simulate", "--no-progress", "--trace"]
    for name, _ in _trace_mutations():
        cases.append(Case(f"trace {name}", [*sim, f"trace/{name}"], "refuse"))
    cases.append(Case("trace three million rows", [*sim, "trace/three_million.csv"], "either"))
    for f in ["binary.json", "/dev/zero", "huge.json", "a_dir", "missing.csv"]:
        cases.append(Case(f"trace {f}", [*sim, f], "refuse"))
    for name, _ in _measurement_mutations():
        expect = "either" if name in ("good.csv", "unpriceable.csv", "duplicate_ids.csv",
                                      "zero_accelerators.csv", "unknown_phase.csv",
                                      "nan_value.csv", "big_field.csv", "long_model.csv",
                                      "huge_batch.csv", "huge_input.csv") else "refuse"
        cases.append(Case(f"validate {name}", ["validate", "--measurements", f"meas/{name}"],
                          expect))
    for f in ["binary.json", "/dev/zero", "huge.json", "a_dir", "missing.csv"]:
        cases.append(Case(f"validate --measurements {f}", ["validate", "--measurements", f],
                          "refuse"))
    for name, _ in _profile_mutations():
        cases.append(Case(f"calibrate --from {name}", ["calibrate", "--from", f"prof/{name}",
                                                       "--out-dir", "out-calib"], "refuse"))
        cases.append(Case(f"profile --ceilings {name}", ["profile", "--ceilings",
                                                         f"prof/{name}", "--device", "cpu"],
                          "refuse"))
    for f in ["/dev/zero", "huge.json", "a_dir", "missing.json", "binary.json"]:
        cases.append(Case(f"calibrate --from {f}", ["calibrate", "--from", f], "refuse"))
    return cases


def _output_cases() -> list[Case]:
    """Output paths that cannot be written: each must be refused before the work."""
    places = {"missing dir": "no/such/dir/{}", "a directory": "a_dir",
              "under a file": "plain_file/{}", "read-only fs": "/proc/self/{}"}
    flags = [
        (["simulate", "-n", "5", "--rate", "1", "--no-progress", "--requests-out"], "r.jsonl"),
        (["simulate", "-n", "5", "--rate", "1", "--no-progress", "--trace-out"], "t.json"),
        (["simulate", "-n", "5", "--rate", "1", "--no-progress", "--plot"], "plots"),
        (["explain", "--batch-sweep", "--plot"], "sweep"),
        (["validate", "--measurements", "meas/good.csv", "--write-calibration"], "c.toml"),
        (["validate", "--measurements", "meas/good.csv", "--plot"], "plots"),
        (["profile", "--device", "cpu", "--micro", "--out"], "p.json"),
        (["calibrate", "--from", "prof/list.json", "--out-dir"], "calib"),
    ]
    cases = []
    for args, leaf in flags:
        for where, pattern in places.items():
            target = pattern.format(leaf) if "{}" in pattern else pattern
            if where == "a directory" and args[-1] in ("--plot", "--out-dir"):
                continue  # a folder is what these take
            cases.append(Case(f"{args[0]} {args[-1]} in {where}", [*args, target], "refuse"))
    return cases


def _dead_flag_cases() -> list[Case]:
    """Flags that would do nothing in the run asked for."""
    sim = ["simulate", "-n", "5", "--rate", "1", "--no-progress"]
    return [
        Case("simulate --prefill-replicas without disaggregated",
             [*sim, "--prefill-replicas", "2"], "refuse"),
        Case("simulate --decode-hardware without disaggregated",
             [*sim, "--decode-hardware", "h200-sxm"], "refuse"),
        Case("simulate --decode-tp without disaggregated", [*sim, "--decode-tp", "2"], "refuse"),
        Case("simulate --prefill-replicas 0", [*sim, "--scheduler", "disaggregated",
                                               "--prefill-replicas", "0"], "refuse"),
        Case("simulate --spec-tokens without draft", [*sim, "--spec-tokens", "6"], "refuse"),
        Case("simulate --spec-accept without draft", [*sim, "--spec-accept", "0.9"], "refuse"),
        Case("simulate --task without draft", [*sim, "--task", "code"], "refuse"),
        Case("simulate --task unknown", [*sim, "--draft-head", "0.1", "--task", "poetry"],
             "refuse"),
        Case("estimate --task without draft", ["estimate", "--task", "math"], "refuse"),
        Case("estimate --task unknown", ["estimate", "--draft-head", "0.1", "--task", ""],
             "refuse"),
        Case("simulate --cv without gamma", [*sim, "--cv", "2"], "refuse"),
        Case("simulate --think-time without clients", [*sim, "--think-time", "1s"], "refuse"),
        Case("estimate --spec-tokens without draft", ["estimate", "--spec-tokens", "6"], "refuse"),
        Case("estimate --link-latency without link",
             ["estimate", "--prefill-hardware", "h100-sxm", "--link-latency", "5"], "refuse"),
        Case("estimate --link-latency without disaggregation",
             ["estimate", "--link-latency", "5"], "refuse"),
        Case("estimate --prefill-pool without disaggregation",
             ["estimate", "--prefill-pool", "4"], "refuse"),
        Case("estimate --mix without disaggregation",
             ["estimate", "--mix", "4096:256:0.7,512:1024:0.3"], "refuse"),
        Case("calibrate --from ''", ["calibrate", "--from", ""], "refuse"),
        Case("estimate --tp 16 on an 8-GPU domain", ["estimate", "--tp", "16",
                                                     "--format", "json"], json_out=True),
        Case("estimate --tp 3 (does not divide heads)", ["estimate", "--tp", "3"], "refuse"),
        Case("explain --batches without sweep", ["explain", "--batches", "1,2"]),
        Case("validate --why unknown id", ["validate", "--measurements", "meas/good.csv",
                                           "--why", "NOPE-1"], "refuse"),
    ]


def _resource_cases() -> list[Case]:
    """Inputs whose work grows without bound: refused up front, or done as arithmetic."""
    return [
        Case("simulate -n 2e9", ["simulate", "-n", "2000000000", "--rate", "1"]),
        Case("simulate -n 1e8", ["simulate", "-n", "100000000", "--rate", "1"]),
        Case("simulate -n 1e7 closed", ["simulate", "-n", "10000000", "--clients", "4"]),
        Case("simulate --replicas 1e9", ["simulate", "-n", "20", "--rate", "1",
                                          "--replicas", "1000000000"]),
        Case("simulate --max-num-seqs 1e9", ["simulate", "-n", "20", "--rate", "1",
                                              "--max-num-seqs", "1000000000"]),
        Case("simulate --rate 1e-300", ["simulate", "-n", "20", "--rate", "1e-300"]),
        Case("simulate --rate 1e300", ["simulate", "-n", "20", "--rate", "1e300"]),
        Case("simulate --isl 1e7", ["simulate", "-n", "5", "--rate", "1", "--isl", "10000000"]),
        Case("simulate --memory-budget 1e300",
             ["simulate", "-n", "20", "--rate", "1", "--memory-budget", "1e300"]),
        Case("simulate --cv 1e300 gamma", ["simulate", "-n", "20", "--rate", "1",
                                           "--arrival", "gamma", "--cv", "1e300"]),
        Case("estimate llama.cpp --isl 1e8", ["estimate", "--engine", "llama.cpp",
                                              "--isl", "100000000"]),
        Case("estimate --isl 1e8", ["estimate", "--isl", "100000000", "--format", "json"],
             json_out=True),
        Case("estimate --batch-size 1e8", ["estimate", "--batch-size", "100000000"]),
        Case("estimate sweep 1e6 points", ["estimate", "--isl", ",".join(["1"] * 1000),
                                           "--osl", ",".join(["1"] * 1000)]),
        Case("compare --isl 2e6", ["compare", "--isl", "2000000"]),
        Case("estimate disaggregated pools 1e9",
             ["estimate", "--prefill-hardware", "h100-sxm", "--prefill-pool", "1000000000",
              "--decode-pool", "1000000000"]),
        Case("estimate --tp 1e9", ["estimate", "--tp", "1000000000"]),
        Case("explain --batches 1e9", ["explain", "--batches", "1000000000"]),
        Case("profile --repeats 1e9", ["profile", "--device", "cpu", "--micro", "--repeats",
                                       "1000000000"]),
        Case("profile --buffer-mib 1e9", ["profile", "--device", "cpu", "--micro",
                                          "--buffer-mib", "1000000000"], "refuse"),
        Case("profile --gemm-size 1e6", ["profile", "--device", "cpu", "--micro",
                                         "--gemm-size", "1000000"], "refuse"),
    ]


def _readability_cases() -> list[Case]:
    torchless = {"PYTHONPATH": "no_torch"}
    return [
        Case("profile without torch", ["profile", "--device", "cpu", "--micro"], "refuse",
             env=torchless),
        Case("calibrate without torch", ["calibrate", "--device", "cpu"], "refuse",
             env=torchless),
        Case("--version", ["--version"]),
        Case("-h", ["-h"]),
        Case("estimate -h", ["estimate", "-h"]),
        Case("unknown verb", ["estmate"], "refuse"),
        Case("unknown flag", ["estimate", "--isll", "5"], "refuse"),
        Case("missing flag value", ["estimate", "--isl"], "refuse"),
        Case("HF repo id not cached", ["estimate", "-m", "someone/not-a-model"], "refuse"),
        Case("HF repo id of a catalog model", ["estimate", "-m",
                                               "meta-llama/Llama-3.1-8B-Instruct"]),
        Case("model that does not fit", ["estimate", "-m", "llama-3.1-405b", "--format",
                                          "json"], json_out=True),
        Case("bad --format", ["estimate", "--format", "xml"], "refuse"),
        Case("bad --engine", ["estimate", "--engine", "llamacpp2"], "refuse"),
        Case("bad --cost", ["estimate", "--cost", "magic"], "refuse"),
        Case("bad --kv-dtype", ["estimate", "--kv-dtype", "fp3"], "refuse"),
        Case("bad --what-if", ["estimate", "--what-if", "kv-dtype"], "refuse"),
        Case("bad --what-if value", ["estimate", "--what-if", "kv-keep=nan"], "refuse"),
        Case("bad --mix", ["estimate", "--prefill-hardware", "h100-sxm", "--mix",
                           "1:2:nan"], "refuse"),
        Case("bad --mix share", ["estimate", "--prefill-hardware", "h100-sxm", "--mix",
                                 "4096:256:-1"], "refuse"),
        Case("bad --rank-by", ["compare", "-H", "h100-sxm", "--rank-by", "speed"], "refuse"),
        Case("bad --scheduler", ["simulate", "-n", "5", "--scheduler", "fifo"], "refuse"),
        Case("bad --arrival", ["simulate", "-n", "5", "--arrival", "burst"], "refuse"),
        Case("bad --load-balancer", ["simulate", "-n", "5", "--load-balancer", "x"], "refuse"),
        Case("bad --device", ["profile", "--device", "tpu"], "refuse"),
        Case("bad --dtype", ["profile", "--device", "cpu", "--dtype", "fp7"], "refuse"),
        Case("catalog hardware unknown", ["catalog", "hardware", "h1000"], "refuse"),
        Case("catalog models json", ["catalog", "models", "--format", "json"], json_out=True),
        Case("simulate json", ["simulate", "-n", "20", "--rate", "1", "--format", "json"],
             json_out=True),
        Case("estimate json", ["estimate", "--format", "json"], json_out=True),
        Case("compare json", ["compare", "-H", "h100-sxm,h200-sxm", "--format", "json"],
             json_out=True),
        Case("disaggregated json", ["estimate", "--prefill-hardware", "h100-sxm",
                                    "--decode-hardware", "h200-sxm", "--format", "json"],
             json_out=True),
    ]


def all_cases() -> list[Case]:
    return (_flag_cases() + _length_cases() + _file_cases() + _output_cases()
            + _dead_flag_cases() + _resource_cases() + _readability_cases())


# ---------------------------------------------------------------- running and judging

def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S + 1, CPU_LIMIT_S + 2))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    os.setsid()


def run_case(case: Case, folder: Path) -> Outcome:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "100",
           **case.env}
    if "PYTHONPATH" in case.env:  # a folder of the fixtures, first on the path
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(folder / case.env["PYTHONPATH"]),
                                                          os.environ.get("PYTHONPATH"))))
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([*PHASEWISE, *case.args], cwd=folder, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, env=env, preexec_fn=_limits)
        rc, usage = _wait(child, start)
        out.seek(0), err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    outcome = Outcome(case, rc, cpu, wall, usage.ru_maxrss, stdout, stderr, [])
    outcome.problems = judge(outcome)
    return outcome


def _wait(child: subprocess.Popen, start: float) -> tuple[int, resource.struct_rusage]:
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode, usage
        if time.monotonic() - start > WALL_LIMIT_S:
            os.killpg(child.pid, signal.SIGKILL)
        time.sleep(0.02)


def judge(o: Outcome) -> list[str]:
    """What is wrong with one run, in words; empty when it ended as it should."""
    problems = []
    text = o.stdout + o.stderr
    if "Traceback (most recent call last)" in text:
        problems.append("traceback")
    if o.rc < 0 or o.rc in (124, 137) or o.cpu_s > CPU_LIMIT_S or o.wall_s >= WALL_LIMIT_S:
        problems.append(f"hang or killed (rc {o.rc}, {o.cpu_s:.1f} CPU s, {o.wall_s:.1f} s)")
    elif o.rc not in (0, 2):
        problems.append(f"exit {o.rc}")
    if o.rc == 2:
        lines = [line for line in o.stderr.splitlines() if line.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"refusal is {len(lines)} lines, not one 'error: ...' line")
        if o.stdout.strip():
            problems.append("refusal printed to stdout")
        if o.rss_kib > REFUSED_RSS_LIMIT_KIB:
            problems.append(f"refusal peaked at {o.rss_kib / 2**20:.2f} GiB")
    if o.rc == 0:
        if o.case.expect == "refuse":
            problems.append("bad input accepted (exit 0)")
        problems += _nonsense(o)
    return problems


def _nonsense(o: Outcome) -> list[str]:
    problems = []
    if o.case.json_out:
        try:
            doc = json.loads(o.stdout, parse_constant=_reject_constant)
        except ValueError as err:
            return [f"invalid JSON ({err})"]
        bad = list(_negative_fields(doc))
        if bad:
            problems.append(f"negative figures in JSON: {', '.join(bad[:3])}")
    else:
        match = NONSENSE.search(o.stdout) or NEGATIVE_TIME.search(o.stdout)
        if match:
            problems.append(f"nonsense figure '{match.group(0)}' in the output")
    return problems


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _negative_fields(doc: object, path: str = "") -> list[str]:
    out = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if NON_NEGATIVE_KEY.search(str(key)) and value < 0:
                    out.append(f"{where}={value}")
                if isinstance(value, float) and not math.isfinite(value):
                    out.append(f"{where}={value}")
            else:
                out += _negative_fields(value, where)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _negative_fields(value, f"{path}[{i}]")
    return out


def _no_torch(folder: Path) -> None:
    """A package named torch that fails to import, first on the path: torch not installed."""
    package = folder / "no_torch" / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", "
                                         "name='torch')\n")


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*.tmp"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run the cases whose name holds this")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--json", help="write every outcome here")
    options = parser.parse_args()
    cases = [c for c in all_cases() if options.only in c.name]
    if options.list:
        print("\n".join(f"{c.expect:7} {c.name}" for c in cases))
        print(f"{len(cases)} cases")
        return 0
    folder = Path(tempfile.mkdtemp(prefix="phasewise-fuzz-"))
    try:
        write_fixtures(folder)
        _no_torch(folder)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            outcomes = list(pool.map(lambda c: run_case(c, folder), cases))
        elapsed = time.monotonic() - started
        leftovers = _leftovers(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _report(outcomes, leftovers, elapsed)
    if options.json:
        Path(options.json).write_text(json.dumps([
            {"case": o.case.name, "args": o.case.args[:12], "expect": o.case.expect, "rc": o.rc,
             "cpu_s": round(o.cpu_s, 3), "wall_s": round(o.wall_s, 3), "rss_kib": o.rss_kib,
             "problems": o.problems, "stderr_tail": o.stderr[-400:]} for o in outcomes],
            indent=1))
    return 1 if any(o.problems for o in outcomes) or leftovers else 0


def _report(outcomes: list[Outcome], leftovers: list[str], elapsed: float) -> None:
    for o in outcomes:
        if o.problems:
            last = (o.stderr.strip().splitlines() or [""])[-1][:160]
            print(f"FAIL {o.case.name[:70]}: {'; '.join(o.problems)} | {last}")
    n = len(outcomes)
    refused = [o for o in outcomes if o.rc == 2]
    def count(*starts: str) -> int:
        return sum(any(p.startswith(starts) for p in o.problems) for o in outcomes)

    kinds = {
        "cases": n,
        "ended right (exit 2 with one line, or a correct run)":
            sum(not o.problems for o in outcomes),
        "tracebacks": count("traceback"),
        "other exit codes (bugs)": count("exit "),
        "hangs or kills (> 10 CPU s)": count("hang"),
        "bad input accepted": count("bad input accepted"),
        "NaN, infinite or negative output": count("nonsense", "negative", "invalid JSON"),
        "refusals not one line": count("refusal is"),
        "refusals over 1 GiB peak": count("refusal peaked"),
        "temporary files left behind": len(leftovers),
    }
    print()
    for label, value in kinds.items():
        share = f" ({100 * value / n:.1f}%)" if label.startswith("ended") and n else ""
        print(f"{label:55} {value}{share}")
    if refused:
        peak_mib = max(o.rss_kib for o in refused) / 1024
        print(f"{'peak memory of a refusal, max':55} {peak_mib:.0f} MiB")
    print(f"{'CPU seconds per case, max':55} {max(o.cpu_s for o in outcomes):.2f}")
    print(f"{'wall seconds, all cases':55} {elapsed:.0f}")


if __name__ == "__main__":
    sys.exit(main())
