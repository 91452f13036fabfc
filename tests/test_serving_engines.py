"""Engine presets, CUDA-graph padding, host time, the engines' schedulers, layouts and the
benchmark's own load, each checked against a hand calculation or the engine's source."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tests.test_serving_fakes import FixedStep, trace

from phasewise.catalog import load_hardware
from phasewise.cost import StepTiming, Timing
from phasewise.errors import InputError
from phasewise.serving import ClosedLoop, Pool, Requests, Server, request_metrics, simulate
from phasewise.serving.layouts import engine_layout
from phasewise.serving.presets import HostTime, capture_sizes, engine_settings, is_preset
from phasewise.serving.requests import Lengths, range_lengths
from phasewise.specs import Parallelism


class BatchStep:
    """A step costs 1 ms per decode sequence in it (and 1 µs per prompt token): the
    padded batch a step was priced at can be read off its time."""

    name = "batch"

    def step_time(self, ledger, hardware) -> StepTiming:  # noqa: ANN001
        seconds = 0.0
        for group in ledger.step.groups:
            per = 1e-3 if group.new_tokens == 1 else 1e-6 * group.new_tokens
            seconds += group.count * per
        return StepTiming(Timing(seconds, 0, 0, 0, seconds, "overhead", 0, 0, 0), ())


H100 = load_hardware("h100-sxm")


# ---------------------------------------------------------------- presets


def test_vllm_v1_on_h100_takes_the_large_memory_defaults() -> None:
    # arg_utils.get_batch_defaults: ≥ 70 GiB and not A100 -> 8192 tokens, 1024 sequences
    vllm = engine_settings("vllm@0.19", H100)
    assert (vllm.scheduler, vllm.max_num_batched_tokens, vllm.max_num_seqs) == ("chunked", 8192, 1024)
    assert vllm.memory_fraction == 0.9 and vllm.prefix_caching


def test_vllm_schedules_ahead_from_the_async_default_on() -> None:
    # vllm/config/vllm.py: async_scheduling None -> True unless an incompatible option;
    # 0.10 shipped async_scheduling = False (config/scheduler.py)
    assert engine_settings("vllm@0.19", H100).host.overlap
    assert not engine_settings("vllm@0.10", H100).host.overlap


def test_vllm_v1_on_a100_keeps_the_small_defaults() -> None:
    vllm = engine_settings("vllm", load_hardware("a100-80gb-sxm"))
    assert (vllm.max_num_batched_tokens, vllm.max_num_seqs) == (2048, 256)


def test_vllm_capture_sizes_follow_set_cudagraph_sizes() -> None:
    # [1, 2, 4] + range(8, 256, 8) + range(256, min(2 * 1024, 512) + 1, 16)
    expected = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert list(engine_settings("vllm@0.19", H100).cuda_graph_sizes) == expected


def test_sglang_memory_fraction_is_its_formula() -> None:
    # tp 8 on an 80 GB part: chunk 8192, cuda_graph_max_bs 512; reserved = 512 + 1.5·8192
    # + 2·512 + 1024·8/8 = 14,848 MB of 80e9 / 2^20 = 76,293.9 MB -> 0.805
    sglang = engine_settings("sglang", H100, tp=8, ranks=8)
    assert sglang.memory_fraction == pytest.approx(0.805)
    assert sglang.cuda_graph_sizes[-1] == 512 and sglang.host.overlap
    assert sglang.scheduler == "prefill-first"


def test_trtllm_does_not_pad_to_graphs_by_default() -> None:
    trt = engine_settings("trtllm", H100)
    assert trt.cuda_graph_sizes == () and trt.padded_batch(5) == 5
    assert (trt.scheduler, trt.max_num_batched_tokens, trt.memory_fraction_of_free) == \
        ("mixed", 8192, True)


def test_llama_server_slots_follow_the_release() -> None:
    assert engine_settings("llama.cpp@b7000", H100).max_num_seqs == 4  # PR #16736
    assert engine_settings("llama.cpp@b5000", H100).max_num_seqs == 1


def test_a_version_before_the_presets_is_refused() -> None:
    with pytest.raises(InputError, match="start at"):
        engine_settings("trtllm@0.8", H100)
    with pytest.raises(InputError, match="unknown engine preset"):
        engine_settings("vlm", H100)
    assert is_preset("vllm@0.19") and not is_preset("tgi")


def test_capture_sizes_cut_at_the_largest() -> None:
    assert capture_sizes([[1, 1, 1], [8, 32, 8]], 20) == (1, 8, 16)


# ---------------------------------------------------------------- padding and host time


def _run(preset, requests, *, clients=None, scheduler=None, cost=None, **server):  # noqa: ANN001, ANN003, ANN202
    s = Server(model="llama-3.1-8b", pool=Pool(H100, Parallelism()),
               scheduler=scheduler or preset.scheduler, cost=cost or BatchStep(),
               preset=preset, **server)
    sim = simulate(s, requests, closed_loop=ClosedLoop(clients) if clients else None)
    return sim, request_metrics(sim)


def test_a_decode_batch_costs_its_padded_graph_size() -> None:
    # five sequences decode together; graphs at 1, 2, 4, 8: the step runs the 8-graph,
    # 8 ms a token under BatchStep, not 5 ms
    preset = dataclasses.replace(engine_settings("vllm", H100), cuda_graph_sizes=(1, 2, 4, 8),
                                 host=HostTime())
    requests = Requests(np.full(5, 8), np.full(5, 11))
    _, m = _run(preset, requests, clients=5)
    assert m.tpot_s == pytest.approx(np.full(5, 8e-3))


def test_host_time_adds_without_overlap_and_hides_with_it() -> None:
    requests = Requests(np.full(2, 8), np.full(2, 21))
    base = engine_settings("vllm", H100)
    for overlap, expected_s in ((False, 2e-3 + 3e-3 + 2 * 0.5e-3), (True, 4e-3)):
        # a 2-sequence decode step: 2 ms device; host 3 ms + 0.5 ms a sequence = 4 ms
        host = HostTime(3e-3, 0.5e-3, overlap)
        preset = dataclasses.replace(base, cuda_graph_sizes=(), host=host)
        _, m = _run(preset, requests, clients=2)
        assert m.tpot_s == pytest.approx(np.full(2, expected_s))


# ---------------------------------------------------------------- schedulers


def test_chunked_prefill_gives_prompts_the_budget_left_by_decodes() -> None:
    # budget 100: three sequences decoding leave 97 tokens; a 500-token prompt arriving
    # while they run is prefilled in chunks of at most 97
    preset = dataclasses.replace(engine_settings("vllm", H100), cuda_graph_sizes=(),
                                 host=HostTime())
    requests = trace((0.0, 10, 400), (0.0, 10, 400), (0.0, 10, 400), (0.05, 500, 5))
    sim, _ = _run(preset, requests, max_batched_tokens=100, max_seqs=8)
    rows = np.frombuffer(sim.replicas[0].steps, dtype=float).reshape(-1, 8)
    prefill, decodes = rows[:, 3], rows[:, 2]
    mixed = (prefill > 0) & (decodes == 3)
    assert mixed.any() and (prefill[mixed] <= 100 - 3).all()
    assert prefill[mixed].max() == 97


def test_sglang_runs_prefill_steps_apart_from_decodes() -> None:
    preset = dataclasses.replace(engine_settings("sglang", H100), cuda_graph_sizes=(),
                                 host=HostTime())
    requests = trace((0.0, 10, 200), (0.05, 300, 5))
    sim, _ = _run(preset, requests, max_batched_tokens=128, max_seqs=8)
    rows = np.frombuffer(sim.replicas[0].steps, dtype=float).reshape(-1, 8)
    assert not ((rows[:, 3] > 0) & (rows[:, 2] > 0)).any()  # no step both prefills and decodes
    assert rows[:, 3].max() == 128  # a 300-token prompt in chunks of the budget


def test_trtllm_prompts_join_the_decodes_whole() -> None:
    preset = dataclasses.replace(engine_settings("trtllm", H100), host=HostTime())
    requests = trace((0.0, 10, 200), (0.05, 300, 5))
    sim, _ = _run(preset, requests, max_batched_tokens=512)
    rows = np.frombuffer(sim.replicas[0].steps, dtype=float).reshape(-1, 8)
    joined = (rows[:, 3] > 0) & (rows[:, 2] > 0)
    assert joined.sum() == 1 and rows[joined, 3][0] == 300


def test_fast_forward_gives_the_same_run_as_stepping() -> None:
    rng = np.random.default_rng(3)
    requests = Requests(rng.integers(20, 400, 120), rng.integers(2, 200, 120),
                        np.sort(rng.uniform(0, 2, 120)))
    preset = engine_settings("vllm", H100)
    runs = [_run(preset, requests, cost=FixedStep(0.004), max_seqs=16, fast_forward=ff)[1]
            for ff in (True, False)]
    for name in ("ttft_s", "e2el_s"):
        assert np.array_equal(getattr(runs[0], name), getattr(runs[1], name))


# ---------------------------------------------------------------- the benchmark's load


def test_clients_starting_at_once_wait_in_one_wave() -> None:
    # four clients, fixed 10 ms steps, whole prompts first: all four prompts share the
    # first step (TTFT 10 ms each); their answers end together, so do the next four's
    requests = Requests(np.full(8, 16), np.full(8, 3))
    preset = dataclasses.replace(engine_settings("vllm@0.6", H100), cuda_graph_sizes=(),
                                 host=HostTime())
    _, m = _run(preset, requests, clients=4, cost=FixedStep(0.01))
    assert m.ttft_s == pytest.approx(np.full(8, 0.01))
    assert m.e2el_s == pytest.approx(np.full(8, 0.03))


def test_a_staggered_closed_loop_has_p50_below_max_ttft() -> None:
    # 8 clients ramped over 0.7 s against 10 ms steps: the early ones find the server idle,
    # later ones queue behind ongoing prefills
    requests = Requests(np.full(32, 2000), np.full(32, 50))
    preset = dataclasses.replace(engine_settings("vllm", H100), host=HostTime())
    s = Server(model="llama-3.1-8b", pool=Pool(H100, Parallelism()), scheduler="chunked",
               cost=FixedStep(0.01), preset=preset, max_batched_tokens=512)
    m = request_metrics(simulate(s, requests, closed_loop=ClosedLoop(8, ramp_up_s=0.7)))
    assert np.median(m.ttft_s) < m.ttft_s.max()
    assert ClosedLoop(8, ramp_up_s=0.7).start_s(4) == pytest.approx(0.35)


def test_warmup_requests_are_left_out_of_the_figures() -> None:
    requests = Requests(np.full(6, 16), np.full(6, 3))
    s = Server(model="llama-3.1-8b", pool=Pool(H100, Parallelism()), cost=FixedStep(0.01))
    m = request_metrics(simulate(s, requests, closed_loop=ClosedLoop(2), warmup=2))
    assert list(m.id) == [2, 3, 4, 5]


def test_random_range_ratio_draws_as_benchmark_serving() -> None:
    # np.random.randint(int(1000 * 0.8), 1000 + 1): uniform on 800..1000
    assert range_lengths(Lengths("fixed", (1000,)), 0.8) == Lengths("uniform", (800, 1000))
    assert range_lengths(Lengths("fixed", (1000,)), 1.0) == Lengths("fixed", (1000,))


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize(("layout", "expected"), [
    (dict(tp=1, attention_dp=8, moe_tp=1, moe_ep=8), Parallelism(1, 1, 8)),  # DP attention + EP
    (dict(tp=8, attention_dp=1, moe_tp=8, moe_ep=1), Parallelism(8, 1, 1)),  # MoE TP
    (dict(tp=8, attention_dp=1, moe_tp=1, moe_ep=8), Parallelism(8, 1, 8)),  # MoE EP
    (dict(tp=4, attention_dp=1, moe_tp=2, moe_ep=2), Parallelism(4, 1, 2)),  # TP 2 × EP 2
    (dict(tp=4, attention_dp=4, moe_tp=1, moe_ep=16), Parallelism(4, 1, 16)),  # wide EP
])
def test_engine_layouts_map_to_the_ledger(layout: dict, expected: Parallelism) -> None:
    par = engine_layout(**layout)
    assert par == expected and par.attention_dp == layout["attention_dp"]


def test_expert_tp_under_dp_attention_states_its_dp_apart() -> None:
    # attention TP 1 × DP 64 over MoE TP 8 × EP 8: 64 ranks, each expert split 8 ways
    par = engine_layout(tp=1, attention_dp=64, moe_tp=8, moe_ep=8)
    assert par == Parallelism(1, 1, 8, 64) and (par.devices, par.moe_tp) == (64, 8)


def test_a_layout_whose_moe_does_not_fill_the_replica_is_refused() -> None:
    with pytest.raises(InputError, match="must equal"):
        engine_layout(tp=8, moe_tp=2, moe_ep=2)


# ---------------------------------------------------------------- the command


def _cli(*args: str):  # noqa: ANN202
    from typer.testing import CliRunner

    from phasewise.cli import app

    return CliRunner().invoke(app, ["simulate", "-n", "30", "--isl", "256", "--osl", "16", *args])


def test_simulate_engine_preset_is_named_and_overridable() -> None:
    import json

    result = _cli("--engine", "vllm@0.19", "--clients", "4", "--max-num-seqs", "8",
                  "--cuda-graph-sizes", "1,2,4,8", "--percentiles", "50,95", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    inputs = doc["inputs"]
    assert inputs["engine_preset"] == "vllm@0.19" and inputs["scheduler"] == "chunked"
    assert inputs["max_num_seqs"] == 8 and inputs["cuda_graph_sizes"] == [1, 2, 4, 8]
    assert inputs["max_num_batched_tokens"] == 8192 and inputs["engine"] == "vllm"
    assert set(doc["ttft"]["percentiles"]) == {"p50", "p95"}


def test_simulate_header_states_engine_load_and_lengths() -> None:
    result = _cli("--engine", "sglang", "--clients", "4", "--detail")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    for words in ("engine sglang@0.5", "4 clients", "ISL 256", "OSL 16", "calibration bundled",
                  "engine host time per step"):
        assert words in flat


def test_preset_flags_without_a_preset_are_refused() -> None:
    # an InputError: cli.main prints its one line and exits with 2
    result = _cli("--cuda-graph-sizes", "1,2", "--clients", "2")
    assert isinstance(result.exception, InputError) and "engine preset" in str(result.exception)
    bad = _cli("--engine", "vllm", "--percentiles", "0,101", "--clients", "2")
    assert isinstance(bad.exception, InputError) and "--percentiles" in str(bad.exception)


def test_an_idle_server_slo_break_is_noted() -> None:
    result = _cli("--engine", "vllm", "--rate", "1", "--ttft", "0.01ms")
    assert result.exit_code == 0 and "idle server already breaks the SLO" in \
        " ".join(result.stdout.split())


def test_an_overloaded_open_loop_is_noted() -> None:
    result = _cli("--engine", "vllm", "--rate", "500", "-n", "200", "--isl", "4096",
                  "--osl", "64")
    assert result.exit_code == 0 and "overloaded" in result.stdout


def test_scales_apply_to_their_steps_and_host_time_adds() -> None:
    # device 10 ms, host 2 ms + 1 ms a sequence: a prefill step of one sequence at prefill
    # scale 0.5 takes 5 + 3 ms; a decode step of two at device scale 0.8 takes 8 + 4 ms
    host = HostTime(2e-3, 1e-3, False, device_scale=0.8, prefill_scale=0.5)
    assert host.step_s(10e-3, 1, prefills=True) == pytest.approx(8e-3)
    assert host.step_s(10e-3, 2) == pytest.approx(12e-3)
    assert dataclasses.replace(host, overlap=True).step_s(10e-3, 2) == pytest.approx(8e-3)


def test_the_api_servers_time_per_request_adds_to_ttft_not_tpot() -> None:
    # one client, three requests of 8 prompt tokens and 11 answer tokens under BatchStep:
    # 50 ms of API server per request lands once in each TTFT and E2E, never between
    # tokens, and each next request reaches the engine 50 ms after the last answer
    requests = Requests(np.full(3, 8), np.full(3, 11))
    base = dataclasses.replace(engine_settings("vllm", H100), cuda_graph_sizes=(),
                               host=HostTime())
    front = dataclasses.replace(base, host=HostTime(request_s=50e-3))
    plain, m0 = _run(base, requests, clients=1)
    served, m1 = _run(front, requests, clients=1)
    assert m1.ttft_s == pytest.approx(m0.ttft_s + 50e-3)
    assert m1.e2el_s == pytest.approx(m0.e2el_s + 50e-3)
    assert m1.tpot_s == pytest.approx(m0.tpot_s)
    assert np.diff(m1.arrival_s) == pytest.approx(np.diff(m0.arrival_s) + 50e-3)


class BatchStepWithFixed(BatchStep):
    """BatchStep plus a fixed 2 ms per forward pass, as the calibrated model's
    step_overhead_s (the host time single-request latency runs fold into each pass)."""

    def step_fixed_s(self, ledger) -> float:  # noqa: ANN001
        return 2e-3

    def step_time(self, ledger, hardware) -> StepTiming:  # noqa: ANN001
        device = super().step_time(ledger, hardware).total.time_s
        seconds = device + self.step_fixed_s(ledger)
        return StepTiming(Timing(seconds, 0, 0, 0, seconds, "overhead", 0, 0, 0), ())


def test_an_engines_host_time_replaces_the_cost_models_fixed_time_per_pass() -> None:
    # two sequences decoding: 2 ms of device time under BatchStep. Without a preset the
    # cost model's 2 ms per pass stands for the host: 4 ms a token. With an overlap
    # scheduler's 3 ms host time the step takes max(2, 3) = 3 ms (not max(4, 3) = 4);
    # without overlap 2 + 3 = 5 ms (not 7)
    requests = Requests(np.full(2, 8), np.full(2, 21))
    bare = Server(model="llama-3.1-8b", pool=Pool(H100, Parallelism()), scheduler="continuous",
                  cost=BatchStepWithFixed())
    m = request_metrics(simulate(bare, requests, closed_loop=ClosedLoop(2)))
    assert m.tpot_s == pytest.approx(np.full(2, 4e-3))
    base = dataclasses.replace(engine_settings("vllm", H100), cuda_graph_sizes=())
    for overlap, expected_s in ((True, 3e-3), (False, 5e-3)):
        preset = dataclasses.replace(base, host=HostTime(3e-3, 0.0, overlap))
        _, m = _run(preset, requests, clients=2, cost=BatchStepWithFixed())
        assert m.tpot_s == pytest.approx(np.full(2, expected_s))


def test_the_moe_scale_applies_to_decode_steps_of_moe_models_only() -> None:
    # device 10 ms at device scale 0.8 and MoE scale 1.5: a MoE decode step takes
    # 10 · 0.8 · 1.5 = 12 ms + 2 ms host; a dense one 8 + 2 ms; a prefill step 10 · 0.5 + 2
    host = HostTime(2e-3, 0.0, False, device_scale=0.8, prefill_scale=0.5, moe_scale=1.5)
    assert host.step_s(10e-3, 4, moe=True) == pytest.approx(14e-3)
    assert host.step_s(10e-3, 4) == pytest.approx(10e-3)
    assert host.step_s(10e-3, 4, prefills=True, moe=True) == pytest.approx(7e-3)


# ---------------------------------------------------------------- TensorRT-LLM batch waiting


def _waiting(iters: int, ratio: float, requests: Requests, **server):  # noqa: ANN003, ANN202
    preset = dataclasses.replace(engine_settings("trtllm", H100), host=HostTime(),
                                 batch_wait_iters=iters, batch_wait_tokens_ratio=ratio)
    return _run(preset, requests, cost=FixedStep(0.01), **server)


def test_a_prompt_arriving_during_decodes_waits_the_batch_wait_steps() -> None:
    # 10 ms steps; A decodes from 0.01 s. B (300 tokens) arrives at 0.055 s and is planned
    # at the tick ending 0.06 s. Waiting 5 steps with a 461-token threshold (0.9 x 512):
    # held at the plans of 0.06, 0.07, 0.08, 0.09 and 0.10 s (count 0 -> 5), it runs in
    # the step 0.11-0.12 s: TTFT 0.12 - 0.055 = 0.065 s, against 0.015 s without waiting
    requests = trace((0.0, 10, 200), (0.055, 300, 5))
    _, waits = _waiting(5, 0.9, requests, max_batched_tokens=512)
    _, plain = _waiting(0, 0.0, requests, max_batched_tokens=512)
    assert waits.ttft_s == pytest.approx([0.01, 0.065])
    assert plain.ttft_s == pytest.approx([0.01, 0.015])


def test_enough_prompt_tokens_end_the_wait_early() -> None:
    # two 300-token prompts at once: 600 + 1 decode token reach ceil(0.45 x 1024) = 461,
    # so they run at the first plan (0.06 s) as if nothing waited; one alone waits 5 steps
    two = trace((0.0, 10, 200), (0.055, 300, 5), (0.055, 300, 5))
    _, m = _waiting(5, 0.45, two, max_batched_tokens=1024)
    assert m.ttft_s == pytest.approx([0.01, 0.015, 0.015])
    one = trace((0.0, 10, 200), (0.055, 300, 5))
    _, m = _waiting(5, 0.45, one, max_batched_tokens=1024)
    assert m.ttft_s == pytest.approx([0.01, 0.065])


def test_nothing_waits_without_decodes_or_with_one_setting_alone() -> None:
    # py_executor.py waits only while generation requests run, and only with both set
    alone = trace((0.0, 300, 5), (0.2, 300, 5))
    _, m = _waiting(5, 0.9, alone, max_batched_tokens=512)
    assert m.ttft_s == pytest.approx([0.01, 0.01])
    requests = trace((0.0, 10, 200), (0.055, 300, 5))
    for iters, ratio in ((5, 0.0), (0, 0.9)):
        _, m = _waiting(iters, ratio, requests, max_batched_tokens=512)
        assert m.ttft_s == pytest.approx([0.01, 0.015])


def test_simulate_batch_wait_flags_go_together_and_only_with_trtllm() -> None:
    result = _cli("--engine", "trtllm", "--clients", "2", "--batch-wait-iters", "20",
                  "--batch-wait-ratio", "0.9", "--detail")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert "new prompts wait for a batch" in flat and "up to 20 steps" in flat
    assert "7,373 tokens" in flat  # 0.9 x TensorRT-LLM's max_num_tokens 8192, rounded up
    one = _cli("--engine", "trtllm", "--clients", "2", "--batch-wait-iters", "20")
    assert isinstance(one.exception, InputError) and "both" in str(one.exception)
    vllm = _cli("--engine", "vllm", "--clients", "2", "--batch-wait-iters", "20",
                "--batch-wait-ratio", "0.9")
    assert isinstance(vllm.exception, InputError) and "trtllm" in str(vllm.exception)


def test_batch_waiting_gives_the_same_run_fast_forwarded_as_stepped() -> None:
    rng = np.random.default_rng(5)
    requests = Requests(rng.integers(20, 400, 120), rng.integers(2, 200, 120),
                        np.sort(rng.uniform(0, 2, 120)))
    preset = dataclasses.replace(engine_settings("trtllm", H100), host=HostTime(),
                                 batch_wait_iters=6, batch_wait_tokens_ratio=0.5)
    runs = [_run(preset, requests, cost=FixedStep(0.004), max_seqs=16, max_batched_tokens=1024,
                 fast_forward=ff)[1] for ff in (True, False)]
    for name in ("ttft_s", "e2el_s"):
        assert np.array_equal(getattr(runs[0], name), getattr(runs[1], name))
    plain = _run(dataclasses.replace(preset, batch_wait_iters=0), requests,
                 cost=FixedStep(0.004), max_seqs=16, max_batched_tokens=1024)[1]
    assert runs[0].ttft_s.mean() > plain.ttft_s.mean()  # the waits are in the figures
