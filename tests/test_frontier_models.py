"""Frontier checkpoints (2025-2026) against their model cards and against hand counts.

Each model's expectations come from two independent places: the parameter counts its model
card publishes (cited beside it), and a count by hand from the numbers of its config.json,
written out below as arithmetic. KV-cache bytes per token and the recurrent state of
state-space and linear-attention layers are derived by hand only.

Conventions of the hand counts: weight matrices and norm vectors, biases left out (as
``param_counts`` counts them); MTP layers and vision towers are not part of the language
model's total. Small per-head vectors of Mamba2 and Gated DeltaNet layers (A_log, D, dt_bias)
are left out: under 0.001% of any model here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from phasewise.catalog.models import load_model
from phasewise.ledger.memory import weight_bytes_per_device
from phasewise.ledger.params import param_counts
from phasewise.specs import Parallelism, Precision

CONFIGS = Path(__file__).parent / "data" / "configs"
BF16 = 2  # bytes per element of the KV cache and recurrent state at param_counts' default


def swiglu(hidden: int, width: int) -> int:
    """Gate, up and down projections of a gated MLP."""
    return 3 * hidden * width


def relu2(hidden: int, width: int) -> int:
    """Up and down projections of an ungated (squared-ReLU) MLP."""
    return 2 * hidden * width


def gqa(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q, k, v and o projections of grouped-query attention."""
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


# --- DeepSeek-R1 / V3.1 (DeepseekV3ForCausalLM): 61 layers, hidden 7168, 128 heads, MLA with
# q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128; layers 0-2 dense SwiGLU
# 18432, layers 3-60 MoE of 256 routed experts (2048 wide, top-8) plus one shared; vocab 129280.
DSV3_ATTN = (7168 * 1536 + 1536           # q_a_proj + q_a_layernorm
             + 1536 * 128 * (128 + 64)    # q_b_proj to 128 heads of nope+rope
             + 7168 * (512 + 64) + 512    # kv_a_proj_with_mqa + kv_a_layernorm
             + 512 * 128 * (128 + 128)    # kv_b_proj to 128 heads of nope k and v
             + 128 * 128 * 7168)          # o_proj
DSV3_EXPERT = swiglu(7168, 2048)
DSV3_TOTAL = (2 * 129280 * 7168 + 7168                 # embedding, untied head, final norm
              + 61 * (DSV3_ATTN + 2 * 7168)             # attention and two norms per layer
              + 3 * swiglu(7168, 18432)                 # dense layers 0-2
              + 58 * (257 * DSV3_EXPERT + 7168 * 256))  # 256 routed + 1 shared, router
DSV3_ACTIVE = DSV3_TOTAL - 58 * (256 - 8) * DSV3_EXPERT
# DeepSeek-V3.2 adds the lightning indexer to every layer: wq_b from the q latent to 64 heads
# of 128, wk 7168 -> 128, a LayerNorm of 128 (weight and bias), weights_proj 7168 -> 64 heads.
DSV32_INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
# KV per token: the MLA latent and its rope key, kv_lora_rank + qk_rope_head_dim elements.
DSV3_KV = 61 * (512 + 64) * BF16
# Sparse attention also keeps the indexer's key per token (index_head_dim 128 elements): the
# selection of the index_topk tokens reads it over the whole context. DeepSeek's reference
# inference code (inference/model.py, Indexer.k_cache) and vLLM (DeepseekV32IndexerCache)
# store it in fp8 with one fp32 scale per 128 values: 128 + 4 bytes, whatever the KV format.
INDEX_KEY_BYTES = 128 * 1 + 4
DSV32_KV = DSV3_KV + 61 * INDEX_KEY_BYTES

# --- Kimi-K2 (DeepSeek-V3 layout): 61 layers, hidden 7168, 64 heads, same MLA ranks, layer 0
# dense SwiGLU 18432, layers 1-60 MoE of 384 experts (2048, top-8) plus one shared; vocab 163840.
K2_ATTN = (7168 * 1536 + 1536 + 1536 * 64 * (128 + 64) + 7168 * (512 + 64) + 512
           + 512 * 64 * (128 + 128) + 64 * 128 * 7168)
K2_TOTAL = (2 * 163840 * 7168 + 7168 + 61 * (K2_ATTN + 2 * 7168) + swiglu(7168, 18432)
            + 60 * (385 * DSV3_EXPERT + 7168 * 384))
K2_ACTIVE = K2_TOTAL - 60 * (384 - 8) * DSV3_EXPERT

# --- Qwen3-Next-80B-A3B: 48 layers, hidden 2048; every 4th layer gated softmax attention
# (16 query heads of 256 with an output gate, so q_proj is twice as wide; 2 KV heads; q/k norms
# of 256), the other 36 Gated DeltaNet (16 key heads and 32 value heads of 128). Every layer
# MoE: 512 experts of 512, top-10, one shared expert of 512 with its sigmoid gate; vocab 151936.
QN_ATTN = 2048 * 16 * 256 * 2 + 2 * 2048 * 2 * 256 + 16 * 256 * 2048 + 2 * 256
QN_KEY, QN_VALUE = 16 * 128, 32 * 128  # key_dim 2048, value_dim 4096
QN_DELTANET = (2048 * (2 * QN_KEY + 2 * QN_VALUE)   # in_proj_qkvz
               + 2048 * 2 * 32                      # in_proj_ba: beta and decay per value head
               + (2 * QN_KEY + QN_VALUE) * 4        # depthwise conv1d over q, k, v, kernel 4
               + 128                                # gated RMSNorm over the value head dim
               + QN_VALUE * 2048)                   # out_proj
QN_EXPERT = swiglu(2048, 512)
QN_MOE = 512 * QN_EXPERT + QN_EXPERT + 2048 + 2048 * 512  # routed, shared, shared gate, router
QN_TOTAL = (2 * 151936 * 2048 + 2048 + 12 * QN_ATTN + 36 * QN_DELTANET
            + 48 * (QN_MOE + 2 * 2048))
QN_ACTIVE = QN_TOTAL - 48 * (512 - 10) * QN_EXPERT
QN_KV = 12 * 2 * 2 * 256 * BF16  # 12 attention layers x K,V x 2 KV heads x d 256
# Per sequence, each DeltaNet layer holds a (d_k x d_v) state per value head and the last
# kernel-1 inputs of its conv: 32 x 128 x 128 + 3 x 8192 elements.
QN_STATE = 36 * (32 * 128 * 128 + 3 * (2 * QN_KEY + QN_VALUE)) * BF16

# --- Qwen3.5-397B-A17B (text_config): 60 layers, hidden 4096; 15 gated attention layers (32
# heads of 256, 2 KV heads), 45 Gated DeltaNet (16 key heads, 64 value heads of 128, with
# separate in_proj_qkv / in_proj_z / in_proj_b / in_proj_a); MoE 512 x 1024 top-10 plus one
# shared of 1024; vocab 248320.
Q35L_ATTN = 4096 * 32 * 256 * 2 + 2 * 4096 * 2 * 256 + 32 * 256 * 4096 + 2 * 256
Q35L_KEY, Q35L_VALUE = 16 * 128, 64 * 128
Q35L_DELTANET = (4096 * (2 * Q35L_KEY + Q35L_VALUE) + 4096 * Q35L_VALUE + 2 * 4096 * 64
                 + (2 * Q35L_KEY + Q35L_VALUE) * 4 + 128 + Q35L_VALUE * 4096)
Q35L_EXPERT = swiglu(4096, 1024)
Q35L_TOTAL = (2 * 248320 * 4096 + 4096 + 15 * Q35L_ATTN + 45 * Q35L_DELTANET
              + 60 * (513 * Q35L_EXPERT + 4096 + 4096 * 512 + 2 * 4096))
Q35L_ACTIVE = Q35L_TOTAL - 60 * (512 - 10) * Q35L_EXPERT
Q35L_KV = 15 * 2 * 2 * 256 * BF16
Q35L_STATE = 45 * (64 * 128 * 128 + 3 * (2 * Q35L_KEY + Q35L_VALUE)) * BF16

# --- Qwen3.5-27B (dense): 64 layers, hidden 5120; 16 gated attention layers (24 heads of 256,
# 4 KV heads), 48 Gated DeltaNet (16 key heads, 48 value heads of 128); SwiGLU 17408; vocab 248320.
Q35D_ATTN = 5120 * 24 * 256 * 2 + 2 * 5120 * 4 * 256 + 24 * 256 * 5120 + 2 * 256
Q35D_KEY, Q35D_VALUE = 16 * 128, 48 * 128
Q35D_DELTANET = (5120 * (2 * Q35D_KEY + Q35D_VALUE) + 5120 * Q35D_VALUE + 2 * 5120 * 48
                 + (2 * Q35D_KEY + Q35D_VALUE) * 4 + 128 + Q35D_VALUE * 5120)
Q35D_TOTAL = (2 * 248320 * 5120 + 5120 + 16 * Q35D_ATTN + 48 * Q35D_DELTANET
              + 64 * (swiglu(5120, 17408) + 2 * 5120))
Q35D_KV = 16 * 2 * 4 * 256 * BF16
Q35D_STATE = 48 * (48 * 128 * 128 + 3 * (2 * Q35D_KEY + Q35D_VALUE)) * BF16

# --- Llama-4 (text_config): 48 layers, hidden 5120, 40 heads of 128, 8 KV heads; experts and
# the shared expert 8192 wide, top-1; vocab 202048, untied. Scout: 16 experts in every layer.
# Maverick: 128 experts in layers 1, 3, ..., 47 (interleave_moe_layer_step 2), and a dense SwiGLU
# of intermediate_size_mlp 16384 in the other 24.
L4_ATTN = gqa(5120, 40, 8, 128) + 2 * 5120
L4_EXPERT = swiglu(5120, 8192)
SCOUT_TOTAL = 2 * 202048 * 5120 + 5120 + 48 * (L4_ATTN + 17 * L4_EXPERT + 5120 * 16)
SCOUT_ACTIVE = SCOUT_TOTAL - 48 * (16 - 1) * L4_EXPERT
MAVERICK_TOTAL = (2 * 202048 * 5120 + 5120 + 48 * L4_ATTN + 24 * swiglu(5120, 16384)
                  + 24 * (129 * L4_EXPERT + 5120 * 128))
MAVERICK_ACTIVE = MAVERICK_TOTAL - 24 * (128 - 1) * L4_EXPERT
L4_KV = 48 * 2 * 8 * 128 * BF16  # every layer, before chunked layers cap at 8192 tokens
# Vision encoder (vision_config): 34 blocks of 1408 (q, k, v, o and a GELU MLP of 5632, two
# LayerNorms), the 14x14 patch embedding, 577 position embeddings, and the pixel-shuffle MLP
# (4 x 1408 -> 4096 -> 4096) with the projector into 5120.
L4_VISION = (34 * (4 * 1408 * 1408 + 2 * 1408 * 5632 + 4 * 1408) + 3 * 14 * 14 * 1408
             + 577 * 1408 + 4 * 1408 * 4096 + 4096 * 4096 + 4096 * 5120)

# --- Nemotron-H-56B: 118 blocks (54 Mamba2 'M', 54 relu2 MLP '-', 10 attention '*'), one norm
# each; hidden 8192. Mamba2: 256 heads of 64 (d_inner 16384), 8 groups, state 256, conv 4.
# MLP 32768 wide; attention 64 heads of 128, 8 KV heads; vocab 131072, untied.
NH_CONV = 16384 + 2 * 8 * 256  # conv over x, B and C
NH_MAMBA = (8192 * (2 * 16384 + 2 * 8 * 256 + 256)  # in_proj to z, x, B, C and dt
            + NH_CONV * 4 + 16384                  # conv1d and the gated norm
            + 16384 * 8192)                        # out_proj
NH_TOTAL = (2 * 131072 * 8192 + 8192 + 54 * NH_MAMBA + 54 * relu2(8192, 32768)
            + 10 * gqa(8192, 64, 8, 128) + 118 * 8192)
NH_KV = 10 * 2 * 8 * 128 * BF16  # 10 attention layers x K,V x 8 KV heads x d 128
NH_STATE = 54 * (256 * 64 * 256 + 3 * NH_CONV) * BF16  # SSM state and conv window per layer

# --- Nemotron-3 Nano 30B-A3B: 52 blocks (23 Mamba2 'M', 23 MoE 'E', 6 attention '*'); hidden
# 2688. Mamba2: 64 heads of 64 (d_inner 4096), 8 groups, state 128. MoE: 128 relu2 experts of
# 1856, top-6, one shared of 3712. Attention 32 heads of 128, 2 KV heads; vocab 131072, untied.
NANO_CONV = 4096 + 2 * 8 * 128
NANO_MAMBA = 2688 * (2 * 4096 + 2 * 8 * 128 + 64) + NANO_CONV * 4 + 4096 + 4096 * 2688
NANO_EXPERT = relu2(2688, 1856)
NANO_TOTAL = (2 * 131072 * 2688 + 2688 + 23 * NANO_MAMBA
              + 23 * (128 * NANO_EXPERT + relu2(2688, 3712) + 2688 * 128)
              + 6 * gqa(2688, 32, 2, 128) + 52 * 2688)
NANO_ACTIVE = NANO_TOTAL - 23 * (128 - 6) * NANO_EXPERT
NANO_KV = 6 * 2 * 2 * 128 * BF16
NANO_STATE = 23 * (64 * 64 * 128 + 3 * NANO_CONV) * BF16


def decilm_width(ffn_mult: float, hidden: int = 8192) -> int:
    """DeciLM's FFN width: int(2/3 * ffn_mult * hidden) rounded up to a multiple of 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


# --- Llama-3.3-Nemotron-Super-49B (block_configs): 80 blocks of hidden 8192; 49 keep attention
# (64 heads of 128, 64/8 = 8 KV heads), 31 are no-op; FFN ffn_mult per block: 49 x 5.25,
# 10 x 1.3125, 8 x 1.0, 6 x 2.625, 6 x 0.5, 1 x 3.28125. A norm per kept attention and per FFN.
NAS_MLP = sum(count * swiglu(8192, decilm_width(mult)) for mult, count in
              [(5.25, 49), (1.3125, 10), (1.0, 8), (2.625, 6), (0.5, 6), (3.28125, 1)])
NAS_TOTAL = 2 * 128256 * 8192 + 8192 + 49 * gqa(8192, 64, 8, 128) + NAS_MLP + (49 + 80) * 8192
NAS_KV = 49 * 2 * 8 * 128 * BF16

# --- MiniMax-M2.5: 62 layers, hidden 3072, 48 heads of 128, 8 KV heads, per-layer q/k norms
# over all heads; 256 experts of 1536, top-8, no shared expert; vocab 200064, untied.
MM_EXPERT = swiglu(3072, 1536)
MM_TOTAL = (2 * 200064 * 3072 + 3072
            + 62 * (gqa(3072, 48, 8, 128) + 48 * 128 + 8 * 128 + 256 * MM_EXPERT + 3072 * 256
                    + 2 * 3072))
MM_ACTIVE = MM_TOTAL - 62 * (256 - 8) * MM_EXPERT
MM_KV = 62 * 2 * 8 * 128 * BF16

# --- Gemma-4 26B-A4B (text_config): 30 layers, hidden 2816; 25 sliding layers (16 heads of
# 256, 8 KV heads) and 5 global (16 heads of 512, 2 KV heads, keys reused as values so no
# v_proj); every layer a dense GeGLU of 2112 beside an MoE of 128 experts of 704, top-8.
# Four norms per layer plus q/k norms; vocab 262144, tied embedding.
G4_SLIDING = gqa(2816, 16, 8, 256) + 2 * 256
G4_GLOBAL = 2 * 2816 * 16 * 512 + 2816 * 2 * 512 + 2 * 512
G4_EXPERT = swiglu(2816, 704)
G4_TOTAL = (262144 * 2816 + 2816 + 25 * G4_SLIDING + 5 * G4_GLOBAL
            + 30 * (swiglu(2816, 2112) + 128 * G4_EXPERT + 2816 * 128 + 4 * 2816))
G4_ACTIVE = G4_TOTAL - 30 * (128 - 8) * G4_EXPERT
# The cache holds K and V planes for every layer (sliding ones capped at 1024 tokens).
G4_KV = 25 * 2 * 8 * 256 * BF16 + 5 * 2 * 2 * 512 * BF16

# --- GLM-5: 78 layers, hidden 6144, 64 heads, MLA q_lora 2048, kv_lora 512, qk_nope 192,
# qk_rope 64, v 256; indexer of 32 heads of 128; layers 0-2 dense SwiGLU 12288, layers 3-77
# MoE of 256 experts (2048, top-8) plus one shared; vocab 154880, untied.
GLM5_ATTN = (6144 * 2048 + 2048 + 2048 * 64 * (192 + 64) + 6144 * (512 + 64) + 512
             + 512 * 64 * (192 + 256) + 64 * 256 * 6144)
GLM5_INDEXER = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
GLM5_EXPERT = swiglu(6144, 2048)
GLM5_TOTAL = (2 * 154880 * 6144 + 6144 + 78 * (GLM5_ATTN + GLM5_INDEXER + 2 * 6144)
              + 3 * swiglu(6144, 12288) + 75 * (257 * GLM5_EXPERT + 6144 * 256))
GLM5_ACTIVE = GLM5_TOTAL - 75 * (256 - 8) * GLM5_EXPERT
GLM5_KV = 78 * (512 + 64) * BF16 + 78 * INDEX_KEY_BYTES  # MLA latent + fp8 indexer key

# --- GLM-4.5-Air: 46 layers, hidden 4096, 96 heads of 128, 8 KV heads; layer 0 dense SwiGLU
# 10944, layers 1-45 MoE of 128 experts (1408, top-8) plus one shared; vocab 151552, untied.
AIR_EXPERT = swiglu(4096, 1408)
AIR_TOTAL = (2 * 151552 * 4096 + 4096 + 46 * (gqa(4096, 96, 8, 128) + 2 * 4096)
             + swiglu(4096, 10944) + 45 * (129 * AIR_EXPERT + 4096 * 128))
AIR_ACTIVE = AIR_TOTAL - 45 * (128 - 8) * AIR_EXPERT
AIR_KV = 46 * 2 * 8 * 128 * BF16

# --- Qwen3 MoE FP8 checkpoints (q/k norms of 128 per layer).
# 235B-A22B: 94 layers, hidden 4096, 64 heads, 4 KV heads, 128 experts of 1536, top-8.
Q235_EXPERT = swiglu(4096, 1536)
Q235_TOTAL = (2 * 151936 * 4096 + 4096
              + 94 * (gqa(4096, 64, 4, 128) + 2 * 128 + 128 * Q235_EXPERT + 4096 * 128 + 2 * 4096))
Q235_ACTIVE = Q235_TOTAL - 94 * (128 - 8) * Q235_EXPERT
Q235_KV = 94 * 2 * 4 * 128 * BF16
# 30B-A3B: 48 layers, hidden 2048, 32 heads, 4 KV heads, 128 experts of 768, top-8.
Q30_EXPERT = swiglu(2048, 768)
Q30_TOTAL = (2 * 151936 * 2048 + 2048
             + 48 * (gqa(2048, 32, 4, 128) + 2 * 128 + 128 * Q30_EXPERT + 2048 * 128 + 2 * 2048))
Q30_ACTIVE = Q30_TOTAL - 48 * (128 - 8) * Q30_EXPERT
Q30_KV = 48 * 2 * 4 * 128 * BF16

# --- Llama-3.1-70B: 80 layers, hidden 8192, 64 heads, 8 KV heads, SwiGLU 28672, vocab 128256.
L70_LINEAR = 80 * (gqa(8192, 64, 8, 128) + swiglu(8192, 28672))
L70_TOTAL = 2 * 128256 * 8192 + 8192 + L70_LINEAR + 80 * 2 * 8192
L70_KV = 80 * 2 * 8 * 128 * BF16

# --- Qwen2.5-VL-7B language model: 28 layers, hidden 3584, 28 heads, 4 KV heads, SwiGLU 18944,
# vocab 152064, untied. Vision tower: 32 blocks of 1280 (qkv, proj, SwiGLU 3420, two norms), a
# 3D patch embedding (3 channels x 2 frames x 14 x 14) and the merger (norm, 5120 -> 5120 -> 3584).
QVL_TOTAL = 2 * 152064 * 3584 + 3584 + 28 * (gqa(3584, 28, 4, 128) + swiglu(3584, 18944) + 2 * 3584)
QVL_VISION = (32 * (1280 * 3 * 1280 + 1280 * 1280 + swiglu(1280, 3420) + 2 * 1280)
              + 3 * 2 * 14 * 14 * 1280 + 1280 + 5120 * 5120 + 5120 * 3584)
QVL_KV = 28 * 2 * 4 * 128 * BF16

# --- MiMo-V2-Flash: 48 layers, hidden 4096; 9 full-attention layers (0, 5, 11, ..., 47: 64
# heads, 4 KV heads, qk head 192, v head 128) and 39 sliding-window layers (window 128, 64
# heads, 8 KV heads, 192 / 128); layer 0 dense SwiGLU 16384, layers 1-47 MoE of 256 experts
# (2048, top-8), no shared expert; vocab 152576, untied.
MIMO_FULL = 4096 * 64 * 192 + 4096 * 4 * (192 + 128) + 64 * 128 * 4096
MIMO_SWA = 4096 * 64 * 192 + 4096 * 8 * (192 + 128) + 64 * 128 * 4096
MIMO_EXPERT = swiglu(4096, 2048)
MIMO_TOTAL = (2 * 152576 * 4096 + 4096 + 9 * MIMO_FULL + 39 * MIMO_SWA + 48 * 2 * 4096
              + swiglu(4096, 16384) + 47 * (256 * MIMO_EXPERT + 4096 * 256))
MIMO_ACTIVE = MIMO_TOTAL - 47 * (256 - 8) * MIMO_EXPERT
MIMO_KV = 9 * 4 * (192 + 128) * BF16 + 39 * 8 * (192 + 128) * BF16


@dataclass(frozen=True)
class Frontier:
    """One checkpoint: its card's figures and our hand counts."""

    ref: str                  # catalog name, or a file under tests/data/configs
    card_total_b: float       # the model card's total, vision tower included where it says so
    card_active_b: float | None
    card_active_counts: str   # what the card's active figure counts of the embeddings
    hand_total: int
    hand_active: int
    kv_bytes_per_token: int
    embedding: int            # vocab x hidden: one table, for the active conventions
    card_vision_b: float = 0.0  # the part of card_total_b that is the vision tower

    def path_or_name(self) -> str:
        local = CONFIGS / f"{self.ref}.json"
        return str(local) if local.is_file() else self.ref


# card_active_counts: "all" (input embedding and head, as Qwen and Meta count), "no_input"
# (the head but not the input embedding, as DeepSeek and NVIDIA count), "neither".
FRONTIER = [
    # https://huggingface.co/deepseek-ai/DeepSeek-R1: 671B total, 37B activated.
    Frontier("deepseek-r1", 671, 37, "no_input", DSV3_TOTAL, DSV3_ACTIVE, DSV3_KV, 129280 * 7168),
    # https://huggingface.co/deepseek-ai/DeepSeek-V3.1: 671B total, 37B activated.
    Frontier("deepseek-v3.1-nvfp4", 671, 37, "no_input", DSV3_TOTAL, DSV3_ACTIVE, DSV3_KV,
             129280 * 7168),
    # https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp: V3.1-Terminus (671B / 37B) plus the
    # indexer, 61 x DSV32_INDEXER = 0.85B, all of it active.
    Frontier("deepseek-v3.2-nvfp4", 671.85, 37.85, "no_input", DSV3_TOTAL + 61 * DSV32_INDEXER,
             DSV3_ACTIVE + 61 * DSV32_INDEXER, DSV32_KV, 129280 * 7168),
    # https://huggingface.co/moonshotai/Kimi-K2-Instruct: 1T total, 32B activated.
    Frontier("kimi-k2-instruct", 1000, 32, "no_input", K2_TOTAL, K2_ACTIVE, DSV3_KV, 163840 * 7168),
    # https://huggingface.co/moonshotai/Kimi-K2.5: 1T total, 32B activated, MoonViT 400M.
    Frontier("kimi-k2.5", 1000, 32, "no_input", K2_TOTAL, K2_ACTIVE, DSV3_KV, 163840 * 7168),
    # https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Thinking: 80B in total, 3B activated.
    Frontier("qwen3-next-80b-a3b-thinking", 80, 3, "all", QN_TOTAL, QN_ACTIVE, QN_KV,
             151936 * 2048),
    # https://huggingface.co/Qwen/Qwen3.5-397B-A17B: 397B in total, 17B activated.
    Frontier("qwen3.5-397b-a17b", 397, 17, "all", Q35L_TOTAL, Q35L_ACTIVE, Q35L_KV, 248320 * 4096),
    # https://huggingface.co/Qwen/Qwen3.5-27B: 27B.
    Frontier("qwen3.5-27b", 27, None, "all", Q35D_TOTAL, Q35D_TOTAL, Q35D_KV, 248320 * 5120),
    # https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct: 17B active, 109B total
    # (vision encoder included: L4_VISION by hand, 0.87B).
    Frontier("llama-4-scout-17b-16e", 109, 17, "all", SCOUT_TOTAL, SCOUT_ACTIVE, L4_KV,
             202048 * 5120, card_vision_b=L4_VISION / 1e9),
    # https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E-Instruct: 17B active, 400B total.
    Frontier("llama-4-maverick-17b-128e", 400, 17, "all", MAVERICK_TOTAL, MAVERICK_ACTIVE, L4_KV,
             202048 * 5120, card_vision_b=L4_VISION / 1e9),
    # https://huggingface.co/nvidia/Nemotron-H-56B-Base-8K (arXiv:2504.03624): 56B.
    Frontier("nemotron-h-56b", 56, None, "all", NH_TOTAL, NH_TOTAL, NH_KV, 131072 * 8192),
    # https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: 31.6B total, ~3.2B
    # active (3.6B with embeddings).
    Frontier("nemotron-3-nano-30b-a3b", 31.6, 3.2, "no_input", NANO_TOTAL, NANO_ACTIVE, NANO_KV,
             131072 * 2688),
    # https://huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1: 49B (Hub metadata 49.9B).
    Frontier("llama-3.3-nemotron-super-49b", 49.9, None, "all", NAS_TOTAL, NAS_TOTAL, NAS_KV,
             128256 * 8192),
    # https://huggingface.co/MiniMaxAI/MiniMax-M2: 230B total, 10B active (M2.5: same shapes).
    Frontier("minimax-m2.5", 230, 10, "no_input", MM_TOTAL, MM_ACTIVE, MM_KV, 200064 * 3072),
    # https://huggingface.co/google/gemma-4-26B-A4B-it: 25.2B total, 3.8B active.
    Frontier("gemma-4-26b-a4b", 25.2, 3.8, "all", G4_TOTAL, G4_ACTIVE, G4_KV, 262144 * 2816),
    # https://huggingface.co/zai-org/GLM-5: 744B parameters, 40B active.
    Frontier("glm-5-fp8", 744, 40, "neither", GLM5_TOTAL, GLM5_ACTIVE, GLM5_KV, 154880 * 6144),
    # https://huggingface.co/zai-org/GLM-4.5-Air: 106B total, 12B active.
    Frontier("glm-4.5-air", 106, 12, "neither", AIR_TOTAL, AIR_ACTIVE, AIR_KV, 151552 * 4096),
    # https://huggingface.co/Qwen/Qwen3-235B-A22B-FP8: 235B in total, 22B activated.
    Frontier("qwen3-235b-a22b-fp8", 235, 22, "all", Q235_TOTAL, Q235_ACTIVE, Q235_KV,
             151936 * 4096),
    # https://huggingface.co/Qwen/Qwen3-30B-A3B-FP8: 30.5B in total, 3.3B activated.
    Frontier("qwen3-30b-a3b-fp8", 30.5, 3.3, "all", Q30_TOTAL, Q30_ACTIVE, Q30_KV, 151936 * 2048),
    # https://huggingface.co/nvidia/Llama-3.1-70B-Instruct-FP8 (of Llama-3.1-70B, Hub 70.6B).
    Frontier("llama-3.1-70b-instruct-fp8", 70.6, None, "all", L70_TOTAL, L70_TOTAL, L70_KV,
             128256 * 8192),
    # Hub metadata of https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct: 8.29B with the vision
    # tower (QVL_VISION by hand, 0.676B).
    Frontier("qwen2.5-vl-7b", 8.29, None, "all", QVL_TOTAL, QVL_TOTAL, QVL_KV, 152064 * 3584,
             card_vision_b=QVL_VISION / 1e9),
    # https://huggingface.co/XiaomiMiMo/MiMo-V2-Flash: 309B total, 15B active.
    Frontier("mimo-v2-flash", 309, 15, "all", MIMO_TOTAL, MIMO_ACTIVE, MIMO_KV, 152576 * 4096),
]
IDS = [model.ref for model in FRONTIER]


def card_tolerance_b(published_b: float) -> float:
    """3%, or one unit of the card's last digit when the card rounds coarser than that
    ('3B activated' says only that the count lies between 2 and 4)."""
    text = f"{published_b:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return max(0.03 * published_b, 10.0 ** -decimals)


def counts(model: Frontier):
    return param_counts(load_model(model.path_or_name()))


@pytest.mark.parametrize("model", FRONTIER, ids=IDS)
def test_total_parameters_match_the_model_card(model):
    published = model.card_total_b - model.card_vision_b
    assert counts(model).total / 1e9 == pytest.approx(published, abs=0.03 * published)


@pytest.mark.parametrize("model", [m for m in FRONTIER if m.card_active_b], ids=lambda m: m.ref)
def test_active_parameters_match_the_model_card(model):
    active = counts(model).active
    left_out = {"all": 0, "no_input": 1, "neither": 2}[model.card_active_counts]
    counted_b = (active - left_out * model.embedding) / 1e9
    assert counted_b == pytest.approx(model.card_active_b,
                                      abs=card_tolerance_b(model.card_active_b))


@pytest.mark.parametrize("model", FRONTIER, ids=IDS)
def test_total_and_active_parameters_match_the_hand_count(model):
    # Tighter than the cards: the hand count and ours count the same tensors, so only the
    # small vectors left out of the hand count (and biases) may differ.
    result = counts(model)
    assert result.total == pytest.approx(model.hand_total, rel=0.005)
    assert result.active == pytest.approx(model.hand_active, rel=0.005)


@pytest.mark.parametrize("model", FRONTIER, ids=IDS)
def test_kv_bytes_per_token_match_the_hand_derivation(model):
    assert counts(model).kv_bytes_per_token == model.kv_bytes_per_token


def test_the_hand_counts_agree_with_the_cards():
    # The two sources checked against each other, so a wrong hand count cannot hide behind a
    # reader that makes the same mistake.
    for model in FRONTIER:
        published = model.card_total_b - model.card_vision_b
        assert model.hand_total / 1e9 == pytest.approx(published, abs=0.03 * published), model.ref


EVALUATION_CONFIGS = sorted(p for p in CONFIGS.glob("*.json")
                            if not p.name.endswith(".hf_quant_config.json"))


@pytest.mark.parametrize("config", EVALUATION_CONFIGS, ids=lambda p: p.stem)
def test_every_evaluation_config_loads_or_says_why_not(config):
    # A published config either loads or is refused with one clear line (InputError): never
    # a traceback from inside the reader.
    from phasewise.errors import InputError

    try:
        param_counts(load_model(str(config)))
    except InputError as err:
        assert "\n" not in str(err)


# --- Recurrent state, checkpoint formats, vision towers and MTP layers.

STATE = [("nemotron-h-56b", NH_STATE), ("nemotron-3-nano-30b-a3b", NANO_STATE),
         ("qwen3-next-80b-a3b-thinking", QN_STATE), ("qwen3.5-397b-a17b", Q35L_STATE),
         ("qwen3.5-27b", Q35D_STATE)]


@pytest.mark.parametrize("name,state_bytes", STATE, ids=[n for n, _ in STATE])
def test_recurrent_state_bytes_per_sequence(name, state_bytes):
    # ParamCounts.state_bytes_per_sequence, at the same element size as kv_bytes.
    assert param_counts(load_model(name)).state_bytes_per_sequence == state_bytes


def test_pure_transformers_hold_no_recurrent_state():
    assert param_counts(load_model("llama-3.1-70b-instruct-fp8")).state_bytes_per_sequence == 0


# Weight bytes at the checkpoint's own formats, scales included:
# - fp8 with 128x128 blocks: 1 byte per weight + one fp32 scale per 16384 weights;
# - modelopt FP8: 1 byte per weight (one scale per tensor);
# - NVFP4: 4 bits + one FP8 scale per 16 weights = 0.5625 bytes;
# - MXFP4: 4 bits + one E8M0 scale per 32 weights = 0.53125 bytes;
# - compressed-tensors INT4, group 32, symmetric: 4 bits + one bf16 scale per 32 = 0.5625 bytes;
# everything a checkpoint leaves out (embeddings, norms, routers, excluded modules) in bf16.
FP8_BLOCK = 1 + 4 / (128 * 128)
NVFP4 = 0.5 + 1 / 16
MXFP4 = 0.5 + 1 / 32
INT4_G32 = 0.5 + 2 / 32

# nvidia/DeepSeek-V3.1-NVFP4: NVFP4 on the dense MLPs of layers 0-2, routed and shared experts of
# layers 3-60 and every o_proj (not in exclude_modules); bf16 MLA projections (excluded),
# routers (not Linear layers), embedding, lm_head (excluded) and norms.
DSV31_NVFP4_PARAMS = 3 * swiglu(7168, 18432) + 58 * 257 * DSV3_EXPERT + 61 * 128 * 128 * 7168
DSV31_WEIGHT_BYTES = DSV31_NVFP4_PARAMS * NVFP4 + (DSV3_TOTAL - DSV31_NVFP4_PARAMS) * BF16
# nvidia/Llama-3.1-70B-Instruct-FP8: FP8 on every linear layer but lm_head.
L70_WEIGHT_BYTES = L70_LINEAR * 1 + (L70_TOTAL - L70_LINEAR) * BF16
# Qwen/Qwen3-30B-A3B-FP8: fp8 blocks on attention and experts; lm_head, norms, routers bf16.
Q30_FP8_PARAMS = 48 * (gqa(2048, 32, 4, 128) + 128 * Q30_EXPERT)
Q30_WEIGHT_BYTES = Q30_FP8_PARAMS * FP8_BLOCK + (Q30_TOTAL - Q30_FP8_PARAMS) * BF16
# openai/gpt-oss-120b: MXFP4 experts (36 layers x 128 x fused gate_up 2880x5760 + down
# 2880x2880); attention, routers, embedding and unembedding bf16 (modules_to_not_convert).
GPTOSS_EXPERTS = 36 * 128 * 3 * 2880 * 2880
GPTOSS_OTHER = (36 * (gqa(2880, 64, 8, 64) + 2880 * 128 + 2 * 2880) + 2 * 201088 * 2880 + 2880)
GPTOSS_WEIGHT_BYTES = GPTOSS_EXPERTS * MXFP4 + GPTOSS_OTHER * BF16
# moonshotai/Kimi-K2.5: INT4 routed experts only (attention, shared experts, the dense layer-0
# MLP and lm_head are on the ignore list).
K25_INT4_PARAMS = 60 * 384 * DSV3_EXPERT
K25_WEIGHT_BYTES = K25_INT4_PARAMS * INT4_G32 + (K2_TOTAL - K25_INT4_PARAMS) * BF16
WEIGHTS = [("deepseek-v3.1-nvfp4", DSV31_WEIGHT_BYTES),
           ("llama-3.1-70b-instruct-fp8", L70_WEIGHT_BYTES),
           ("qwen3-30b-a3b-fp8", Q30_WEIGHT_BYTES), ("gpt-oss-120b", GPTOSS_WEIGHT_BYTES),
           ("kimi-k2.5", K25_WEIGHT_BYTES)]


@pytest.mark.parametrize("name,weight_bytes", WEIGHTS, ids=[n for n, _ in WEIGHTS])
def test_weight_bytes_follow_the_checkpoint_format(name, weight_bytes):
    # The bytes of the weights at the formats the checkpoint's quantization_config /
    # hf_quant_config.json declare, block scales included ('auto', the default).
    weights = weight_bytes_per_device(load_model(name), Precision(), Parallelism())
    assert weights == pytest.approx(weight_bytes, rel=0.005)


@pytest.mark.parametrize("name", ["deepseek-v3.1-nvfp4", "llama-3.1-70b-instruct-fp8"])
def test_a_checkpoint_that_declares_an_fp8_kv_cache_sizes_it_at_one_byte(name):
    # hf_quant_config.json kv_cache_quant_algo FP8: the 'auto' KV format is fp8, half bf16.
    model = next(m for m in FRONTIER if m.ref == name)
    spec = load_model(name)
    kv_bytes = Precision().for_model(spec).kv_bytes
    assert param_counts(spec, kv_bytes=kv_bytes).kv_bytes_per_token == (
        model.kv_bytes_per_token // 2)


def test_the_vision_tower_is_counted_apart():
    # ParamCounts.vision: the vision tower, not in total.
    assert param_counts(load_model("qwen2.5-vl-7b")).vision == pytest.approx(QVL_VISION, rel=0.01)


@pytest.mark.parametrize("name,layers", [("deepseek-r1", 1), ("glm-5-fp8", 1),
                                         ("qwen3.5-397b-a17b", 1), ("kimi-k2-instruct", 0)])
def test_mtp_layers_are_read_and_counted_apart(name, layers):
    # ModelSpec.mtp_layers, from num_nextn_predict_layers / mtp_num_hidden_layers.
    assert len(load_model(name).mtp_layers) == layers
