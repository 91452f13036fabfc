"""Typed results of the what-ifs and comparisons: what the CLI renders and JSON carries."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from phasewise.estimate.types import SCHEMA_VERSION, Inputs
from phasewise.version import __version__


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Document(_Frozen):
    schema_version: int = SCHEMA_VERSION
    tool_version: str = __version__


# --- explain -----------------------------------------------------------------------------

class PhaseExplanation(_Frozen):
    """One phase in plain words, with this configuration's numbers beside them."""

    phase: str  # prefill | decode
    operation: str  # GEMM (matrix × matrix) or GEMV (matrix × vector)
    bound: str
    hardware_figure: str  # the device figure that sets its time
    sets: str  # the latency it sets: TTFT or TPOT
    latency_s: float
    grows_with_prompt: str
    grows_with_output: str
    grows_with_batch: str
    arithmetic_intensity: float  # FLOP/byte
    ridge_point: float
    time_s: float
    sol_time_s: float
    attention_share: float  # of time: attention kernels and KV traffic
    kv_bytes_share: float  # of bytes moved: KV reads and writes


class Explanation(_Document):
    inputs: Inputs
    hardware_display_name: str
    prefill: PhaseExplanation
    decode: PhaseExplanation
    decode_context_tokens: int  # the context the batch crossover is solved at
    decode_compute_bound_batch: int | None  # None: intensity levels off below the ridge
    decode_intensity_limit: float  # decode FLOP/byte as the batch grows without bound
    decode_compute_bound_batch_short_context: int | None  # same, with an empty cache
    max_batch_size: int  # largest batch whose KV cache fits
    attention_overtakes_gemms_at: int | None  # prompt tokens; None: never (sliding window)
    summary: list[str]


# --- batch sweep -------------------------------------------------------------------------

class BatchPoint(_Frozen):
    batch_size: int
    decode_intensity: float  # FLOP/byte of the average decode step
    ridge_point: float
    decode_bound: str
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_device: float  # decode: batch / TPOT / devices
    tokens_per_s_per_user: float  # 1 / TPOT
    kv_cache_bytes: float  # per device at the largest context
    memory_total_bytes: float
    fits: bool
    usd_per_million_output_tokens: float | None


class BatchSweep(_Document):
    inputs: Inputs
    hardware_display_name: str
    points: list[BatchPoint]
    max_batch_size: int
    compute_bound_batch: int | None


# --- what-if variants --------------------------------------------------------------------

class VariantResult(_Frozen):
    label: str
    changes: dict[str, str]
    ttft_s: float
    tpot_s: float
    max_batch_size: int
    fits: bool
    memory_total_bytes: float
    tokens_per_s_per_gpu: float
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    effects: list[str]  # against the baseline, in words: "TPOT −21%"


class WhatIf(_Document):
    baseline: Inputs
    results: list[VariantResult]  # the baseline first


# --- compare -----------------------------------------------------------------------------

class DeviceResult(_Frozen):
    hardware: str
    display_name: str
    tp: int
    pp: int
    ep: int
    devices: int
    fits: bool
    memory_total_bytes: float  # per device
    capacity_bytes: float
    max_batch_size: int
    ttft_s: float
    tpot_s: float
    prefill_bound: str
    decode_bound: str
    tokens_per_s_per_device: float  # output tokens over the request, per device
    usd_per_hour: float | None  # per device
    usd_per_million_input_tokens: float | None
    usd_per_million_output_tokens: float | None
    usd_per_thousand_requests: float | None  # whole request: prefill plus every decode step
    price_basis: str | None = None  # "on-demand", "purchase" (amortised), "override"; None: unpriced
    price_date: str | None = None
    unpriced: bool = False  # no price: ranked after every priced device, by throughput


class Comparison(_Document):
    model: str
    isl: int
    osl: int
    batch_size: int
    weight_dtype: str
    act_dtype: str
    kv_dtype: str
    kv_keep: float
    cost_model: str
    rank_by: str
    results: list[DeviceResult]  # best first
    winners: dict[str, str]  # criterion -> hardware (with parallelism when it varies)
    skipped: dict[str, str]  # device -> why it is not ranked


# --- speculative decoding ----------------------------------------------------------------

class SpeculativePoint(_Frozen):
    batch_size: int
    tpot_baseline_s: float
    draft_s: float  # the γ draft steps of one round
    verify_s: float  # one target step over γ+1 tokens per sequence
    round_s: float
    tpot_s: float  # round time / expected tokens per round
    speedup: float
    verify_bound: str
    fits: bool


class SpeculativeReport(_Document):
    model: str
    hardware: str
    draft: str
    draft_kind: str  # "model" | "head"
    spec_tokens: int  # γ
    spec_accept: float  # α, per token
    task: str = "chat"  # the task kind whose documented acceptance is the default
    spec_accept_source: str = ""  # where α came from: the catalog figure, or the user
    expected_tokens_per_round: float  # (1 − α^(γ+1)) / (1 − α)
    isl: int
    osl: int
    batch_size: int
    at_batch: SpeculativePoint
    points: list[SpeculativePoint]
    draft_weights_bytes: float  # per device
    draft_kv_bytes_per_sequence: float  # per device at the largest context
    max_batch_size_baseline: int
    max_batch_size_with_draft: int
    warnings: list[str] = []


# --- parallelism -------------------------------------------------------------------------

class ParallelPoint(_Frozen):
    tp: int
    devices: int
    ttft_s: float
    tpot_s: float
    prefill_network_share: float  # of the speed-of-light step time
    decode_network_share: float
    weights_bytes_per_device: float
    memory_total_bytes_per_device: float
    fits: bool
    tokens_per_s_per_device: float
    tpot_speedup: float  # over the smallest TP in the sweep
    tpot_efficiency: float  # speed-up per device added: speedup · tp0 / tp
    within_link_domain: bool  # tp within the interconnect's max_devices


class ParallelScaling(_Document):
    model: str
    hardware: str
    link: str
    isl: int
    osl: int
    batch_size: int
    points: list[ParallelPoint]
    best_tp_for_tpot: int
    best_tp_for_ttft: int
    tp_stops_paying_at: int | None  # first TP whose TPOT is no better than the one before
    skipped: dict[str, str]


# --- disaggregated serving ---------------------------------------------------------------

class PoolResult(_Frozen):
    role: str  # prefill | decode
    hardware: str
    display_name: str
    devices: int
    tp: int
    instances: int
    instance_seconds_per_request: float  # one instance's time per request of the mix
    requests_per_s: float  # the whole pool at full load
    utilization: float  # at the sustained request rate
    usd_per_hour: float | None
    fits: bool


class RequestClass(_Frozen):
    """One class of the request mix, as the disaggregated pools serve it."""

    isl: int
    osl: int
    share: float  # of requests
    prompts_per_prefill_step: int
    ttft_s: float  # a lone prompt's prefill + its KV transfer
    tpot_s: float
    kv_transfer_bytes: float  # per device shard
    kv_transfer_s: float


class ColocatedResult(_Frozen):
    hardware: str
    tp: int
    requests_per_s_per_device: float
    ttft_s: float
    tpot_s: float  # decode steps stretched by the prefills they share the device with
    usd_per_million_tokens: float | None  # input plus output tokens
    fits: bool


class DisaggReport(_Document):
    model: str
    batch_size: int  # concurrent sequences per decode instance
    classes: list[RequestClass]  # the request mix
    link: str
    link_bandwidth_bytes_per_s: float
    link_latency_s: float
    kv_transfer_bytes: float  # per request (mean over the mix), per device shard
    kv_transfer_s: float
    prefill: PoolResult
    decode: PoolResult
    ttft_s: float  # prefill + KV transfer, mean over the mix
    tpot_s: float  # mean per output token over the mix
    sustained_requests_per_s: float
    bottleneck: str  # the pool (or link) that sets the rate
    balanced_prefill_to_decode: float  # prefill devices per decode device so neither starves
    best_split: tuple[int, int]  # (prefill, decode) devices of this total with the most rate
    best_split_requests_per_s: float
    usd_per_million_output_tokens: float | None
    usd_per_million_tokens: float | None  # input plus output tokens
    colocated: list[ColocatedResult]
    warnings: list[str] = []
