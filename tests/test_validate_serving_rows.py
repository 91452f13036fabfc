"""Serving rows in the measurement layout: loads read, figures converted by hand from the
published tables, layouts as the engines' docs write them, replays scored and held out."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasewise.validate.measurements import MEASUREMENTS_DIR, load_measurements
from phasewise.validate.outcome import run_validation
from phasewise.validate.run import dataset
from phasewise.validate.scenario import MappingError
from phasewise.validate.serving_rows import (
    MAX_REPLAY_OUTPUT_TOKENS,
    engine_flags,
    layout_for,
    predict,
    preset_spec,
    server_for,
    serving_scenario_for,
)

HEADER = ("record_id,phase,source_name,hardware,num_accelerators,model,weight_dtype,"
          "software_stack,parallelism,batch_or_concurrency,input_len,output_len,metric,value,"
          "unit,load,request_rate,num_prompts")
NEW_FILES = ("trtllm_perf_overview_v1.csv", "trtllm_perf_overview_per_gpu.csv",
             "dstack_deepseek_r1_serving.csv")


def _file(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "rows.csv"
    path.write_text("\n".join((HEADER, *rows)) + "\n")
    return path


def _bundled(record_id: str):
    for name in NEW_FILES:
        for row in load_measurements(MEASUREMENTS_DIR / name).rows:
            if row.record_id == record_id:
                return row
    raise KeyError(record_id)


# ---------------------------------------------------------------- reading loads

def test_a_load_written_in_words_is_read_as_the_load(tmp_path: Path) -> None:
    path = _file(tmp_path,
                 "A,end_to_end,s,B200,1,Llama 3.3 70B,NVFP4,TensorRT-LLM 1.0,TP1,max throughput,"
                 "128,128,output_throughput,11147,tokens/s,,,",
                 "B,end_to_end,s,B200,1,Llama 3.3 70B,NVFP4,TensorRT-LLM 1.0,TP1,Offline,128,128,"
                 "output_throughput,11147,tokens/s,,,",
                 "C,end_to_end,s,H100,1,Llama 3.1 8B,FP8,vLLM 0.10,TP1,16,1000,1000,mean_ttft,"
                 "80,ms,concurrency,,160")
    rows = {r.record_id: r for r in load_measurements(path).rows}
    assert (rows["A"].load, rows["B"].load, rows["C"].load) == (
        "max_throughput", "mlperf_offline", "concurrency")
    assert rows["C"].batch == 16 and rows["C"].num_prompts == 160


@pytest.mark.parametrize("batch, load, rate, reason", [
    ("lots", "", "", "neither a number nor a load"),
    ("Server", "", "", "needs a request_rate"),
    ("4", "bursty", "", "is not one of"),
    ("", "concurrency", "", "needs the number of clients"),
    ("Offline", "rate", "2", "says mlperf_offline but load says rate"),
])
def test_a_load_that_cannot_be_read_names_the_problem(tmp_path: Path, batch, load, rate,
                                                      reason) -> None:
    path = _file(tmp_path, f"X,end_to_end,s,B200,1,Llama 3.3 70B,NVFP4,vLLM 0.10,TP1,{batch},"
                           f"128,128,output_throughput,100,tokens/s,{load},{rate},")
    loaded = load_measurements(path)
    assert not loaded.rows and reason in loaded.problems[0].reason


# ---------------------------------------------------------------- the published figures

def test_a_per_gpu_throughput_is_read_as_seconds_per_token_of_the_whole_replica() -> None:
    # TensorRT-LLM perf overview, Deepseek R1 0528, 1000/1000, B200 DEP4 (FP4): 6,463
    # output tokens/s per GPU on 4 GPUs = 25,852 tokens/s, 1 / 25,852 = 38.68 us a token
    s = serving_scenario_for(_bundled("TRTV2-0001"))
    assert s.measured_s == pytest.approx(1 / (6463 * 4))
    assert s.measured_s == pytest.approx(38.68e-6, rel=1e-3)
    assert (s.load, s.devices, s.parallelism.tp, s.parallelism.ep) == ("max_throughput", 4, 1, 4)
    assert s.precision.weights == "nvfp4" and s.precision.kv_cache == "fp8"  # dtype fp8 KV


def test_a_total_throughput_keeps_its_devices_and_caps_the_requests() -> None:
    # v1.0 page, Llama 3.3 70B, 128/128, B200 TP1 (FP4): 11,147 tokens/s; 30,000 requests
    # stated, a replay keeps 1,000,000 // 128 = 7,812 of them
    s = serving_scenario_for(_bundled("TRTV1-0001"))
    assert s.measured_s == pytest.approx(1 / 11147)
    assert s.requests == MAX_REPLAY_OUTPUT_TOKENS // 128 == 7812
    assert s.engine == "tensorrt-llm@1.0"


def test_a_concurrency_row_keeps_its_clients_prompts_and_milliseconds() -> None:
    # dstack online_results.csv line 2: MI300X vLLM, concurrency 128, 3200/800, 500 prompts,
    # mean_tpot_ms 109.0719536
    s = serving_scenario_for(_bundled("DSTK-0002"))
    assert (s.load, s.concurrency, s.requests, s.isl, s.osl) == ("concurrency", 128, 500, 3200, 800)
    assert (s.statistic, s.figure) == ("mean", "tpot")
    assert s.measured_s == pytest.approx(0.1090719536, rel=1e-5)
    assert s.engine == "vllm@0.7.3" and s.parallelism.tp == 8 and s.parallelism.ep == 1


def test_every_new_row_names_its_source_and_locator() -> None:
    for name in NEW_FILES:
        loaded = load_measurements(MEASUREMENTS_DIR / name)
        assert not loaded.problems
        for row in loaded.rows:
            assert row.source_url.startswith("https://github.com/") and row.source_locator
            assert row.load and row.input_len and row.output_len


# ---------------------------------------------------------------- layouts and engines

@pytest.mark.parametrize("text, devices, moe, tp, pp, ep", [
    ("TP8 EP4", 8, True, 8, 1, 4),          # experts EP4 x TP2 under attention TP8
    ("TP8", 8, True, 8, 1, 1),              # no EP: the experts split by TP
    ("DEP2", 2, True, 1, 1, 2),             # attention DP 2, experts EP 2
    ("TP1,PP2", 2, False, 1, 2, 1),
])
def test_layouts_as_the_engines_write_them(text, devices, moe, tp, pp, ep) -> None:
    par = layout_for(text, devices, is_moe=moe)
    assert (par.tp, par.pp, par.ep) == (tp, pp, ep)


def test_expert_tp_under_dp_attention_is_read_and_a_wrong_device_count_refused() -> None:
    # SGLang --tp 8 --dp 8 --enable-dp-attention without EP: attention TP 1 × DP 8, the MoE
    # TP 8 over all 8 ranks.
    par = layout_for("TP8 DP-attention8 MoE-TP8", 8, is_moe=True)
    assert (par.tp, par.attention_dp, par.moe_tp, par.ep, par.devices) == (1, 8, 8, 1, 8)
    with pytest.raises(MappingError, match="uses 4 devices but the row says 8"):
        layout_for("TP4", 8, is_moe=False)


def test_the_engine_named_first_is_the_server() -> None:
    assert preset_spec("vLLM 0.7.3.dev138 (ROCm 6.3), vllm serve; SGLang bench_serving") \
        == "vllm@0.7.3"
    assert preset_spec("SGLang 0.4.2.post4, sglang.launch_server") == "sglang@0.4.2"
    assert preset_spec("TensorRT-LLM (PyTorch backend), trtllm-bench") == "tensorrt-llm"


# ---------------------------------------------------------------- replays

def _row(tmp_path: Path, batch: str, metric: str, unit: str, load: str,
         prompts: str = "16"):
    path = _file(tmp_path, f"R,end_to_end,s,NVIDIA H100 SXM,1,Llama 3.1 8B,bf16,vLLM 0.10,TP1,"
                           f"{batch},512,64,{metric},1,{unit},{load},,{prompts}")
    return serving_scenario_for(load_measurements(path).rows[0])


def test_more_clients_never_make_a_token_faster(tmp_path: Path) -> None:
    one = predict(_row(tmp_path, "1", "mean_tpot", "ms", "concurrency")).predicted_s
    eight = predict(_row(tmp_path, "8", "mean_tpot", "ms", "concurrency")).predicted_s
    assert one <= eight


def test_the_calibrated_throughput_is_below_the_speed_of_light_replay(tmp_path: Path) -> None:
    p = predict(_row(tmp_path, "max throughput", "output_throughput", "tokens/s", "", "64"))
    assert 0 < p.predicted < p.floor  # rates: the floor replay is the faster one
    assert p.phase == "serving"


def test_validate_scores_serving_rows_held_out_and_skips_what_it_cannot_describe(
        tmp_path: Path) -> None:
    path = _file(tmp_path,
                 "S1,end_to_end,s,NVIDIA H100 SXM,1,Llama 3.1 8B,bf16,vLLM 0.10,TP1,4,512,64,"
                 "p99_ttft,50,ms,concurrency,,8",
                 "S2,end_to_end,s,AMD Instinct MI300X,8,DeepSeek-R1,FP8,SGLang 0.4.3,"
                 "TP4,4,512,64,mean_ttft,50,ms,concurrency,,8")
    outcome = run_validation([load_measurements(path)])
    assert [p.record_id for p in outcome.predictions] == ["S1"]
    assert [s.phase for s in outcome.scores] == ["serving", "serving"]  # the source, then all
    assert "held out in every mode" in " ".join(outcome.notes)
    assert "uses 4 devices but the row says 8" in outcome.skipped[0].reason
    assert len(dataset([load_measurements(path)]).serving) == 1


def test_why_names_a_serving_row_as_replayed_not_estimated(tmp_path: Path) -> None:
    from phasewise.errors import InputError
    from phasewise.validate.outcome import explain_rows

    path = _file(tmp_path, "S1,end_to_end,s,NVIDIA H100 SXM,1,Llama 3.1 8B,bf16,vLLM 0.10,TP1,4,"
                           "512,64,p99_ttft,50,ms,concurrency,,8")
    with pytest.raises(InputError, match="S1 is a serving row, replayed through the simulator"):
        explain_rows([load_measurements(path)], ["S1"])


def test_engine_flags_in_the_software_replace_the_preset_settings() -> None:
    # dstack's TensorRT-LLM server: trtllm-serve --max_batch_size 512 --max_num_tokens 16384
    s = serving_scenario_for(_bundled("DSTK-0073"))
    assert dict(s.overrides) == {"max_num_seqs": 512, "max_num_batched_tokens": 16384}
    server = server_for(s)
    assert (server.max_seqs, server.max_batched_tokens) == (512, 16384)
    assert engine_flags("vllm serve --gpu-memory-utilization 0.95") == (
        ("memory_fraction", 0.95),)
    assert engine_flags("vLLM 0.10, vllm serve") == ()
    for bad in ("--gpu-memory-utilization 1.5", "--gpu-memory-utilization 0.9.1",
                "--max-num-seqs 0"):
        with pytest.raises(MappingError):
            engine_flags(f"vllm serve {bad}")
