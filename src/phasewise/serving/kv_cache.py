"""How many KV-cache blocks a replica has: device memory minus weights, the transient
activations of the largest step, and the runtime reserve, in pages of ``block_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phasewise.errors import InputError
from phasewise.estimate.core import reserve_bytes
from phasewise.ledger import activation_bytes_per_device, weight_bytes_per_device
from phasewise.ledger.memory import kv_bytes_per_token_per_device, state_bytes_per_device
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision

# vLLM's default page (block) size for the paged KV cache, in tokens.
DEFAULT_BLOCK_TOKENS = 16
# vLLM's block manager admits a prompt only if 1% of the blocks stay free afterwards
# (BlockSpaceManager watermark=0.01), so running sequences have room to grow.
ADMISSION_WATERMARK = 0.01
# Blocks of a model whose layers hold no KV cache at all: memory never limits them.
UNBOUNDED_BLOCKS = 1 << 40


@dataclass(frozen=True, slots=True)
class KVCapacity:
    """Per-device memory split of one replica, and the blocks left for the KV cache."""

    device_bytes: float
    weights_bytes: float
    activations_bytes: float
    reserve_bytes: float
    bytes_per_token: float  # per device, every layer (sliding layers priced in full)
    block_tokens: int
    blocks: int

    @property
    def kv_bytes(self) -> float:
        return self.blocks * self.block_tokens * self.bytes_per_token

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens

    @property
    def watermark_blocks(self) -> int:
        return int(ADMISSION_WATERMARK * self.blocks)


def kv_capacity(model: ModelSpec, hardware: HardwareSpec, precision: Precision,
                parallelism: Parallelism, *, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                max_batched_tokens: int, max_seqs: int,
                draft: tuple[float, float] | None = None,
                memory_fraction: float | None = None, of_free: bool = False) -> KVCapacity:
    """Blocks = ⌊(memory − weights − activations − reserve) ÷ (block_tokens × KV bytes per
    token)⌋ on each device of the replica. Sliding-window layers are given a full page per
    token, as a paged allocator without per-layer windows holds them (an upper bound).
    A speculative ``draft`` adds (weight bytes, KV bytes per token) of its own.

    An engine's ``memory_fraction`` f replaces the reserve: the KV cache gets
    f·memory − weights − activations (vLLM's gpu_memory_utilization, SGLang's
    mem_fraction_static), or, ``of_free``, f·(memory − weights − activations − reserve)
    (TensorRT-LLM's free_gpu_memory_fraction)."""
    if block_tokens < 1:
        raise InputError(f"--block-size {block_tokens}: give a positive number of tokens.")
    weights = weight_bytes_per_device(model, precision, parallelism)
    activations = activation_bytes_per_device(model, precision, parallelism,
                                              tokens=max_batched_tokens, logit_tokens=max_seqs)
    reserve = reserve_bytes(hardware)
    per_token = kv_bytes_per_token_per_device(model, precision, parallelism)
    if draft is not None:
        weights, per_token = weights + draft[0], per_token + draft[1]
    # SSM and linear-attention layers hold a fixed state per running sequence, reserved up
    # front for max_seqs sequences as vLLM's hybrid allocator does (one state slot each).
    state = max_seqs * state_bytes_per_device(model, precision, parallelism)
    room = hardware.memory_bytes - weights - activations - reserve
    if memory_fraction is not None:
        room = memory_fraction * room if of_free else \
            memory_fraction * hardware.memory_bytes - weights - activations
    room -= state
    if per_token <= 0:  # no layer keeps a KV cache (a pure state-space model): never binds
        blocks = UNBOUNDED_BLOCKS if room > 0 else 0
    else:
        blocks = int(room // (block_tokens * per_token)) if room > 0 else 0
    if blocks < 1:
        raise InputError(
            f"{model.name} does not fit on {hardware.display_name} with tp={parallelism.tp}: "
            f"weights {weights / 1e9:.1f} GB + activations {activations / 1e9:.1f} GB + reserve "
            f"{reserve / 1e9:.1f} GB leave no room for a KV cache in "
            f"{hardware.memory_bytes / 1e9:.0f} GB; raise --tp, lower --weight-dtype or "
            "--max-num-batched-tokens.")
    return KVCapacity(hardware.memory_bytes, weights, activations, reserve, per_token,
                      block_tokens, blocks)


def blocks_for(tokens: int, block_tokens: int) -> int:
    return math.ceil(tokens / block_tokens)
