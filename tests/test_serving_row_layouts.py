"""Serving rows read as the engine ran them (validate.serving_layouts): vLLM's MoE TP over
its data-parallel group, and rows that record an engine's --tp/--ep flags as layout sizes.
Expectations from the engines' documented semantics and the file's twin records."""

import pytest

from phasewise.serving.layouts import engine_layout
from phasewise.specs import Parallelism
from phasewise.validate.serving import Pool, ServingRow, load_serving, server_for
from phasewise.validate.serving_layouts import as_engine_ran


def _row(record_id: str, engine: str, pool: Pool) -> ServingRow:
    return ServingRow(record_id, "", engine, "", "m", "h200_sxm", "fp8", "agg", 1024, 1024, 64,
                      (pool,), 0.1, 0.01, 2)


def _layout(pool: Pool) -> Parallelism:
    return engine_layout(tp=pool.tp, attention_dp=pool.attention_dp, moe_tp=pool.moe_tp,
                         moe_ep=pool.moe_ep)


def test_vllm_moe_tp_wider_than_attention_is_data_parallel_attention() -> None:
    # vLLM --tensor-parallel-size 1 --data-parallel-size 2, no EP: the MoE runs TP 2 over the
    # two DP ranks (FusedMoEParallelConfig flattens DP × TP): 2 GPUs, each its own attention.
    row = _row("x_tp1_epnone_2", "vllm", Pool(1, 1, 1, 2, 1, 8))
    pool = as_engine_ran(row, is_moe=True).pools[0]
    assert (pool.tp, pool.attention_dp, pool.moe_tp, pool.moe_ep) == (1, 2, 2, 1)
    par = _layout(pool)
    assert (par.devices, par.attention_dp, par.moe_tp) == (2, 2, 2)
    # TP 2 attention, MoE TP 4: DP 2
    wide = as_engine_ran(_row("x_tp2_epnone_13", "vllm", Pool(1, 2, 1, 4, 1, 11)),
                         is_moe=True).pools[0]
    assert (wide.tp, wide.attention_dp) == (2, 2)


def test_flags_recorded_as_sizes_read_as_the_flags_say() -> None:
    # '--tp 8 --ep 8' recorded as TP 64 with MoE TP 8 × EP 8: 8 GPUs, MoE EP 8, MoE TP 1.
    row = _row("qwen3_5_397b_sglang_c16_tp8_ep8_1874", "sglang", Pool(1, 64, 1, 8, 8, 16))
    pool = as_engine_ran(row, is_moe=True).pools[0]
    assert (pool.tp, pool.attention_dp, pool.moe_tp, pool.moe_ep, pool.batch) == (8, 1, 1, 8, 16)
    # with attention DP: DP 64 over MoE TP 8 × EP 8, 1 sequence a rank, is DP 8, 8 a rank
    dp = as_engine_ran(_row("dsr1_trtllm_c64_tp8_ep8_941", "trtllm", Pool(1, 1, 64, 8, 8, 1)),
                       is_moe=True).pools[0]
    assert (dp.tp, dp.attention_dp, dp.moe_tp, dp.moe_ep, dp.batch) == (1, 8, 1, 8, 8)
    assert _layout(dp) == Parallelism(tp=1, ep=8)


def test_a_genuine_hybrid_layout_is_left_as_recorded() -> None:
    # TensorRT-LLM TP 4 with MoE TP 2 × EP 2, the id naming --tp 4: a real 4-GPU layout.
    pool = Pool(1, 4, 1, 2, 2, 16)
    assert as_engine_ran(_row("gpt_oss_trtllm_c16_tp4_epnone_16", "trtllm", pool),
                         is_moe=True).pools == (pool,)
    # an SGLang row whose MoE does not fill the replica is not guessed at
    odd = Pool(1, 1, 1, 2, 1, 8)
    assert as_engine_ran(_row("x_tp1_epnone_2", "sglang", odd), is_moe=True).pools == (odd,)


def test_the_twin_records_of_one_run_build_the_same_server() -> None:
    # DeepSeek-R1 TensorRT-LLM 8192/1024 at 64 clients, mean TPOT 39.7547 ms, recorded twice.
    rows = {r.record_id: r for r in load_serving()[0]}
    flags = rows["2026_04_06_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c64_tp8_ep8_941"]
    sizes = rows["2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c64_tp8_0_ep8_0_1242"]
    assert flags.tpot_s == pytest.approx(sizes.tpot_s)
    one, two = server_for(flags), server_for(sizes)
    assert one.pool.parallelism == two.pool.parallelism == Parallelism(tp=1, ep=8)
    assert one.max_seqs == two.max_seqs
