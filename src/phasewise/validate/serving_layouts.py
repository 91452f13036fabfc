"""A serving row's layout as the engine ran it.

The serving file records each pool as attention TP × DP and MoE TP × EP
(``catalog/measurements/serving/README.md``). Two kinds of row need the engine's own
semantics to be read:

- **vLLM without expert parallelism.** vLLM's MoE layers run tensor-parallel over the whole
  data-parallel group when ``--enable-expert-parallel`` is off: FusedMoEParallelConfig.make
  flattens DP × TP into the MoE's TP (``flatten_tp_size = dp_size * tp_size``;
  vllm/model_executor/layers/fused_moe/config.py). A vLLM row whose MoE TP × EP is wider than
  its attention TP × DP, the DP column left empty, is a ``--data-parallel-size`` run: attention
  DP = MoE TP × EP / attention TP (Qwen3-235B-A22B-FP8 at attention TP 1, MoE TP 2 is
  ``--tensor-parallel-size 1 --data-parallel-size 2``: 2 GPUs, each its own attention).
- **The engine's flags recorded as layout sizes.** Some rows write an engine's ``--tp N --ep M``
  as MoE TP N × EP M and put the product N·M in the attention TP (or, with DP attention, the
  attention DP) column, while the record id keeps the flags (``…_tp8_ep8_1499``). In SGLang
  (ServerArgs: ``--ep-size`` divides ``--tp-size``, the world size; moe_tp = tp / ep) and in
  TensorRT-LLM (Mapping: world = tp_size, moe_tp_size · moe_ep_size = tp_size, attention DP
  over the tp ranks with ``enable_attention_dp``) those flags mean N GPUs, MoE TP N / M × EP M.
  The file holds the same measurements under both spellings: DeepSeek-R1 TensorRT-LLM 8192/1024
  at 64 clients, mean TPOT 39.7547 ms, is recorded as attention DP 64, MoE TP 8 × EP 8
  (``…_c64_tp8_ep8_941``) and as attention DP 8, MoE EP 8 (``…_c64_tp8_0_ep8_0_1242``);
  Qwen3.5-397B SGLang 1024/1024 at 16 clients, 22.6269 ms, as TP 64 (which its 32 attention
  heads cannot be split over) and as TP 8, EP 8. Such a row is read as its flags say, its
  per-rank batch scaled with the DP ranks as its twin records it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from phasewise.validate.serving import Pool, ServingRow

_FLAGS = re.compile(r"_tp(\d+)_ep(\d+)_\d+$")


def as_engine_ran(row: ServingRow, *, is_moe: bool) -> ServingRow:
    """The row with each pool's layout as the engine ran it (module docstring)."""
    if not is_moe:
        return row
    pools = tuple(_pool_as_ran(row, pool) for pool in row.pools)
    return row if pools == row.pools else replace(row, pools=pools)


def _pool_as_ran(row: ServingRow, pool: Pool) -> Pool:
    mt, me = pool.moe_tp or 1, pool.moe_ep or 1
    devices = pool.tp * pool.attention_dp
    flags = _FLAGS.search(row.record_id)
    if (flags and mt > 1 and me > 1 and (int(flags[1]), int(flags[2])) == (mt, me)
            and devices == mt * me):
        # the world is the --tp flag: N GPUs, MoE TP N / M × EP M
        if pool.attention_dp > 1:
            dp = pool.attention_dp // me
            batch = pool.batch * me if pool.batch else pool.batch
            return replace(pool, attention_dp=dp, moe_tp=mt // me, batch=batch)
        return replace(pool, tp=pool.tp // me, moe_tp=mt // me)
    if (row.engine == "vllm" and pool.attention_dp == 1 and mt * me > devices
            and (mt * me) % pool.tp == 0):
        return replace(pool, attention_dp=mt * me // pool.tp)
    return pool
