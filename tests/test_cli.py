"""The command line as a user meets it: output, formats, sweeps and bad input."""

import json
import subprocess
import sys

import pytest


def run(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                            text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_default_estimate_prints_both_phases():
    out = run("estimate").stdout
    assert "llama-3.1-8b" in out and "H100" in out
    for words in ("prefill", "decode", "TTFT", "TPOT", "fits", "speed of light"):
        assert words in out


def test_json_document_has_the_promised_fields():
    doc = json.loads(run("estimate", "--format", "json").stdout)
    assert doc["schema_version"] == 1 and doc["tool_version"]
    assert doc["inputs"]["isl"] == 2048 and doc["inputs"]["osl"] == 256
    for phase in ("prefill", "decode"):
        section = doc[phase]
        assert {"flops", "bytes", "arithmetic_intensity", "bound", "time_s"} <= set(section)
        assert set(section["bytes"]) == {"weights", "kv_read", "kv_write", "activations",
                                         "network"}
    assert {"weights_bytes", "kv_cache_bytes", "total_bytes", "fits"} <= set(doc["memory"])
    assert {"params_total", "params_active", "kv_bytes_per_token"} <= set(doc["model"])
    assert doc["prefill"]["bound"] == "compute" and doc["decode"]["bound"] == "memory"


def test_comma_lists_sweep():
    rows = run("estimate", "--batch-size", "1,8", "--isl", "512,4096", "--format", "csv")
    lines = rows.stdout.strip().splitlines()
    assert len(lines) == 1 + 4 and lines[0].startswith("model,hardware")


def test_markdown_and_detail():
    assert run("estimate", "--format", "md").stdout.startswith("| model |")
    assert "attn.qkv" in run("estimate", "--detail").stdout


@pytest.mark.parametrize("args,needle", [
    (["estimate", "--model", "llama-3.1-8bb"], "unknown model"),
    (["estimate", "--hardware", "h100-sxn"], "unknown hardware"),
    (["estimate", "--isl", "0"], "--isl"),
    (["estimate", "--isl", "abc"], "--isl"),
    (["estimate", "--osl", "999999999999"], "is beyond any real workload"),
    (["estimate", "--kv-dtype", "fp7"], "unknown number format"),
    (["estimate", "--tp", "3"], "does not divide"),
    (["estimate", "--hardware", "v100-sxm2-32gb", "--act-dtype", "fp8", "--weight-dtype", "fp8"],
     "no fp8"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, needle):
    result = run(*args, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr


def test_debug_shows_the_traceback():
    result = run("estimate", "--model", "nope", "--debug", check=False)
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_context_beyond_the_model_maximum_is_a_warning():
    out = run("estimate", "--model", "llama-2-7b", "--isl", "8000").stdout
    assert "exceeds" in out


def test_catalog_listing_and_a_sheet_with_sources():
    assert "deepseek-v3" in run("catalog", "models").stdout
    sheet = run("catalog", "hardware", "h100-sxm").stdout
    assert "source" in sheet and "3350" in sheet


def test_catalog_formats_lists_bits_per_weight_with_their_sources():
    formats = {f["name"]: f for f in json.loads(run("catalog", "formats", "-f", "json").stdout)}
    # ggml block layouts: Q4_0 is an fp16 scale and 16 bytes of nibbles per 32 weights
    # (18 B / 32 = 4.5 bits); MXFP4_MOE keeps routed experts in MXFP4 (17 B / 32 = 4.25)
    # and the rest in Q8_0 (34 B / 32 = 8.5)
    assert formats["Q4_0"]["bits_per_element"] == 4.5
    assert formats["Q4_0"]["expert_bits_per_element"] is None
    assert (formats["MXFP4_MOE"]["bits_per_element"],
            formats["MXFP4_MOE"]["expert_bits_per_element"]) == (8.5, 4.25)
    assert formats["bf16"]["math_format"] == "bf16" and all(f["source"] for f in formats.values())
    assert "MXFP4_MOE" in run("catalog", "formats").stdout


def test_catalog_engines_lists_variants_and_shows_one_engine():
    listing = run("catalog", "engines", "--format", "json").stdout
    engines = {e["name"]: e for e in json.loads(listing)}
    assert {"llama.cpp", "vllm", "trtllm", "tgi"} <= set(engines)
    assert {"flash-attn", "cublas-fp16", "mmq-4-token-tiles"} <= {
        v["name"] for v in engines["llama.cpp"]["variants"]}
    # an engine without measurements takes the global values: nothing fitted at its level
    assert engines["tgi"]["fitted_rows"] == 0 and engines["tgi"]["constants"] == {}
    assert engines["llama.cpp"]["fitted_rows"] > 0
    one = json.loads(run("catalog", "engines", "llama.cpp+flash-attn", "-f", "json").stdout)
    assert one["applied"] == ["flash-attn"]
    # ggml-cuda's mmvq.cuh: '#define MMVQ_MAX_BATCH_SIZE 8'
    assert one["backend_traits"]["cuda"]["matvec_max_tokens"] == 8
    # llama.cpp PR #8075 (MMQ for every batch size) was merged on 2024-06-24
    cublas = next(v for v in one["variants"] if v["name"] == "cublas-fp16")
    assert "a date before 2024-06-24" in cublas["selected_by"] and cublas["backend"] == "cuda"
    table = run("catalog", "engines", "llama.cpp").stdout
    assert "mmq-4-token-tiles" in table and "before pr #7716" in table
    bad = run("catalog", "engines", "llama.cpp+no-such-variant", check=False)
    assert bad.returncode == 2 and "no-such-variant" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_estimate_never_imports_torch():
    code = ("import sys; from phasewise.cli import main\n"
            "try:\n    main(['estimate', '--format', 'json'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'matplotlib' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stderr.strip().endswith("False False")


def test_json_records_the_engine_and_matches_its_schema():
    doc = json.loads(run("estimate", "--engine", "llama.cpp", "--format", "json").stdout)
    assert doc["inputs"]["engine"] == "llama.cpp" and doc["inputs"]["cost_model"] == "calibrated"
    schema = json.loads(run("estimate", "--json-schema").stdout)
    assert set(schema["required"]) <= set(doc)
    assert set(doc["inputs"]) == set(schema["$defs"]["Inputs"]["properties"])
