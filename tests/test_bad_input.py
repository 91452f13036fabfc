"""Bad input as careless or hostile users gave it: each case ends with exit code 2 and one
line saying what is wrong, before any long work, and never with a traceback.

The cases run in process through ``cli.main`` (the same path as the `phasewise` command);
``test_bad_input_files.py`` covers the readers and writers one by one.
"""

import json
from pathlib import Path

import pytest

from phasewise.cli import main
from phasewise.errors import InputError

CATALOG = Path(__file__).resolve().parent.parent / "src" / "phasewise" / "catalog"
H100_SHEET = (CATALOG / "hardware" / "h100-sxm.toml").read_text()
SIM = ["simulate", "-n", "5", "--rate", "1", "--no-progress"]


def run(args, capsys, cwd=None, monkeypatch=None):
    """(exit code, stdout, stderr) of `phasewise ARGS`."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    try:
        main(list(args))
        code = 0
    except SystemExit as exit_:
        code = exit_.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_refused(code, out, err, *words):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err and not out.strip()
    for word in words:
        assert word.lower() in lines[0].lower(), lines[0]


@pytest.fixture
def files(tmp_path):
    """The bad files the cases name, in a scratch folder."""
    (tmp_path / "binary.json").write_bytes(b"\xfe\xff\x00b\x00a\x00d")
    config = (CATALOG / "models" / "llama-3.1-8b.json").read_text()
    (tmp_path / "utf16.json").write_bytes(config.encode("utf-16"))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "nan.json").write_text(config.replace('"hidden_size": 4096',
                                                      '"hidden_size": NaN'))
    with open(tmp_path / "huge.json", "wb") as handle:  # sparse: 3 GB to a reader, no disk
        handle.truncate(3 * 2**30)
    (tmp_path / "plain_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    for name, old, new in (("negative_latency", "latency_us = 3.0", "latency_us = -3.0"),
                           ("nan_bandwidth", "bandwidth_gb_per_s = 3350",
                            "bandwidth_gb_per_s = nan"),
                           ("inf_peak", "bf16_tflops = 989.4", "bf16_tflops = inf"),
                           ("huge_capacity", "capacity_gb = 80", "capacity_gb = 1e300"),
                           ("negative_price", "usd_per_hour = 2.99", "usd_per_hour = -2.99"),
                           ("negative_tdp", "tdp_w = 700", "tdp_w = -700"),
                           ("typo_key", "capacity_gb = 80", "capacity_gb = 80\ncapacty_gb = 80")):
        assert old in H100_SHEET
        (tmp_path / f"{name}.toml").write_text(H100_SHEET.replace(old, new, 1))
    (tmp_path / "unknown_section.toml").write_text(H100_SHEET + "\n[memroy]\nkind = 'HBM3'\n")
    (tmp_path / "sheet_as_calibration.toml").write_text(H100_SHEET)
    (tmp_path / "calibration_typo.toml").write_text("[globel]\ngemm_fraction = 0.5\n")
    (tmp_path / "calibration_huge.toml").write_text("[global]\nstep_overhead_s = 1e300\n")
    (tmp_path / "long_name.toml").write_text(H100_SHEET.replace('name = "h100-sxm"',
                                                                f'name = "{"h" * 100_000}"', 1))
    (tmp_path / "trace_nan.csv").write_text("arrival_s,input_tokens,output_tokens\nnan,128,16\n")
    (tmp_path / "trace_huge.csv").write_text("arrival_s,input_tokens,output_tokens\n0,1e30,16\n")
    (tmp_path / "len_zero.txt").write_text("0\n")
    (tmp_path / "trace_big_field.csv").write_text("arrival_s,input_tokens,output_tokens\n0,"
                                                  + "1" * 200_000 + ",16\n")
    (tmp_path / "profile_v99.json").write_text(json.dumps({"schema_version": 99,
                                                           "ceilings": {}}))
    return tmp_path


# (arguments, words the one line must hold): the cases the issue lists, as users gave them.
SEEN_CASES = [
    (["estimate", "--model", "binary.json"], ["utf-16"]),
    (["estimate", "--model", "utf16.json"], ["utf-16", "utf-8"]),
    (["estimate", "--model", "deep.json"], ["nests"]),
    (["estimate", "--model", "nan.json"], ["nan"]),
    (["estimate", "--model", "huge.json"], ["larger than"]),
    (["estimate", "--model", "/dev/zero"], ["larger than"]),
    (["estimate", "--model", "m" * 100_000], ["characters"]),
    (["estimate", "-H", "negative_latency.toml"], ["latency_us"]),
    (["estimate", "-H", "nan_bandwidth.toml"], ["bandwidth_gb_per_s", "finite"]),
    (["estimate", "-H", "inf_peak.toml"], ["bf16_tflops"]),
    (["estimate", "-H", "huge_capacity.toml"], ["capacity_gb"]),
    (["estimate", "-H", "negative_price.toml"], ["usd_per_hour"]),
    (["estimate", "-H", "negative_tdp.toml"], ["tdp_w"]),
    (["estimate", "-H", "typo_key.toml"], ["capacty_gb", "capacity_gb"]),
    (["estimate", "-H", "unknown_section.toml"], ["memroy", "memory"]),
    (["estimate", "--calibration", "sheet_as_calibration.toml"], ["hardware sheet", "--hardware"]),
    (["estimate", "-H", str(CATALOG / "calibration" / "default.toml")],
     ["calibration profile", "--calibration"]),
    (["estimate", "--calibration", "calibration_typo.toml"], ["globel", "global"]),
    (["estimate", "--calibration", "calibration_huge.toml"], ["step_overhead_s"]),
    (["estimate", "-H", "long_name.toml"], ["100,000 characters"]),
    (["estimate", "--isl", ",".join(["1"] * 1000), "--osl", ",".join(["1"] * 1000)],
     ["1,000,000 estimates"]),
    (["estimate", "--isl", "inf"], ["--isl", "finite"]),
    (["estimate", "--isl", "100000000"], ["--isl"]),
    (["estimate", "--price", "nan"], ["--price"]),
    (["estimate", "--price", "inf"], ["--price"]),
    (["estimate", "--kv-keep", "nan"], ["--kv-keep"]),
    (["estimate", "--pp", "1e23"], ["--pp"]),
    (["estimate", "--isll", "5"], ["--isll", "--help"]),
    (["estimate", "--engine", "llama.cpp", "--isl", "10000000", "--batch-size", "512"],
     ["micro-batches"]),
    ([*SIM[:2], "-5", *SIM[3:]], ["--num-requests"]),
    (["simulate", "-n", "1e23", "--rate", "1"], ["--num-requests"]),
    (["simulate", "-n", "2000000000", "--rate", "1"], ["--num-requests"]),
    (["simulate", "-n", "10000000", "--rate", "1"], ["GiB", "--memory-budget"]),
    ([*SIM, "--seed", "-1"], ["--seed"]),
    ([*SIM, "--isl", "uniform:1:1e30"], ["--isl"]),
    ([*SIM, "--osl", "normal:1e30:1"], ["--osl"]),
    ([*SIM, "--osl", "normal:nan:1"], ["--osl", "finite"]),
    ([*SIM, "--arrival", "gamma", "--cv", "1e300"], ["--cv"]),
    ([*SIM, "--memory-budget", "nan"], ["--memory-budget"]),
    ([*SIM, "--bucket-tokens", "0"], ["--bucket-tokens"]),
    ([*SIM, "--max-num-batched-tokens", "0"], ["--max-num-batched-tokens"]),
    ([*SIM, "--rate", "inf"], ["--rate"]),
    ([*SIM, "--ttft", "1e309"], ["--ttft"]),
    ([*SIM, "--isl", "file:len_zero.txt"], ["got 0", "line 1"]),
    (["simulate", "--no-progress", "--trace", "trace_nan.csv"], ["arrival_s", "finite"]),
    (["simulate", "--no-progress", "--trace", "trace_huge.csv"], ["input_tokens"]),
    (["simulate", "--no-progress", "--trace", "binary.json"], ["utf-16"]),
    (["simulate", "--no-progress", "--trace", "trace_big_field.csv"], ["line 2", "field"]),
    ([*SIM, "--requests-out", "binary.json/r.jsonl"], ["is a file"]),
    ([*SIM, "--requests-out", "no/such/dir/r.jsonl"], ["does not exist"]),
    ([*SIM, "--requests-out", "a_dir"], ["folder"]),
    ([*SIM, "--trace-out", "/proc/self/t.json"], ["cannot write"]),
    ([*SIM, "--plot", "plain_file/plots"], ["is a file"]),
    (["validate", "--measurements", "binary.json"], ["utf-16"]),
    (["validate", "--write-calibration", "no/such/dir/c.toml"], ["does not exist"]),
    (["validate", "--plot", "plain_file"], ["is a file"]),
    (["explain", "--batch-sweep", "--plot", "no/such/dir/sweep"], ["does not exist"]),
    # Flags that would do nothing in the run asked for.
    ([*SIM, "--prefill-replicas", "2"], ["--prefill-replicas", "disaggregated"]),
    ([*SIM, "--scheduler", "disaggregated", "--prefill-replicas", "0"], ["--prefill-replicas"]),
    ([*SIM, "--spec-tokens", "6"], ["--spec-tokens", "--draft"]),
    ([*SIM, "--cv", "2"], ["--cv", "gamma"]),
    (["estimate", "--spec-tokens", "6"], ["--spec-tokens", "--draft"]),
    (["estimate", "--prefill-hardware", "h100-sxm", "--link-latency", "5"],
     ["--link-latency", "--link-bandwidth"]),
    (["estimate", "--prefill-pool", "4"], ["--prefill-pool", "--prefill-hardware"]),
    (["estimate", "--prefill-hardware", "h100-sxm", "--mix", "1:2:nan"], ["--mix"]),
    (["calibrate", "--from", ""], ["--from", "empty"]),
    (["calibrate", "--from", "profile_v99.json", "--out-dir", "."], ["schema_version", "99"]),
    (["profile", "--repeats", "0"], ["--repeats"]),
    (["profile", "--warmup", "-1"], ["--warmup"]),
    (["profile", "--gemm-size", "0"], ["--gemm-size"]),
    (["profile", "--buffer-mib", "100000000000"], ["--buffer-mib"]),
]


@pytest.mark.parametrize("args, words", SEEN_CASES,
                         ids=[" ".join(a)[:60] for a, _ in SEEN_CASES])
def test_seen_bad_input_ends_with_one_line_and_exit_2(args, words, files, capsys, monkeypatch):
    assert_refused(*run(args, capsys, files, monkeypatch), *words)


def test_refused_output_paths_leave_no_files(files, capsys, monkeypatch):
    before = sorted(p.name for p in files.rglob("*"))
    run([*SIM, "--requests-out", "no/such/dir/r.jsonl"], capsys, files, monkeypatch)
    assert sorted(p.name for p in files.rglob("*")) == before


def test_version_and_short_help(capsys):
    from phasewise.version import __version__

    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"phasewise {__version__}"
    code, out, _ = run(["estimate", "-h"], capsys)
    assert code == 0 and "--isl" in out


def test_a_model_that_does_not_fit_is_warned_in_the_json(capsys):
    # Llama 3.1 405B in bf16: 405e9 weights x 2 bytes = 810 GB, ten times an H100's 80 GB.
    code, out, _ = run(["estimate", "-m", "llama-3.1-405b", "--format", "json"], capsys)
    doc = json.loads(out)
    assert code == 0 and not doc["memory"]["fits"]
    assert any("does not fit" in w for w in doc["warnings"])


def test_tp_past_the_scale_up_domain_is_noted(capsys):
    # An HGX H100 board's NVSwitch domain holds 8 GPUs (h100-sxm.toml, max_devices = 8).
    code, out, _ = run(["estimate", "--tp", "16", "--format", "json"], capsys)
    warnings = json.loads(out)["warnings"]
    assert code == 0 and any("TP 16" in w and "8" in w for w in warnings)
    code, out, _ = run(["estimate", "--tp", "8", "--format", "json"], capsys)
    assert not any("TP 8" in w for w in json.loads(out)["warnings"])


def test_a_repo_id_of_a_catalog_model_maps_to_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    code, out, _ = run(["estimate", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--format",
                        "json"], capsys)
    assert code == 0 and json.loads(out)["inputs"]["model"] == "llama-3.1-8b"


def test_a_repo_id_not_found_names_the_cache_folders(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    code, out, err = run(["estimate", "-m", "someone/not-a-model"], capsys)
    assert_refused(code, out, err, str(tmp_path / "hub-cache"), str(tmp_path / "hf-home"),
                   "HF_HUB_CACHE")


def test_a_cached_folder_is_titled_by_its_repo(capsys, tmp_path):
    snapshot = tmp_path / "models--acme--tiny-llama" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((CATALOG / "models" / "llama-3.2-1b.json").read_text())
    code, out, _ = run(["estimate", "-m", str(snapshot), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["inputs"]["model"] == "acme/tiny-llama"


def test_profile_without_torch_names_the_extra(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    for verb in (["profile", "--micro"], ["calibrate"]):
        assert_refused(*run(verb, capsys), "phasewise[profile]")


def test_the_python_api_exports_the_verbs_with_errors_naming_parameters():
    import phasewise

    for verb in ("estimate", "explain", "compare", "what_if", "speculative", "disaggregate",
                 "batch_sweep", "tp_scaling", "simulate", "validate"):
        assert callable(getattr(phasewise, verb)), verb
    with pytest.raises(phasewise.InputError, match=r"^isl must be a positive whole number"):
        phasewise.Workload(isl=0)
    with pytest.raises(phasewise.InputError, match=r"^num_requests must"):
        phasewise.simulate(num_requests=float("nan"))
    with pytest.raises(phasewise.InputError, match=r"^kv_keep"):
        phasewise.Precision(kv_keep=float("nan"))
    summary = phasewise.simulate(num_requests=20, rate_per_s=2.0, seed=1)
    assert summary.requests == 20


def test_json_output_never_holds_nan_or_infinity():
    from phasewise.report.output import to_json

    assert to_json({"ttft_s": 0.25}) == '{\n  "ttft_s": 0.25\n}\n'
    with pytest.raises(InputError, match=r"prefill\.time_s of this result"):
        to_json({"prefill": {"time_s": float("inf")}})
