"""Typed results of a simulation: what the CLI renders and the JSON document carries."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class PoolInputs(_Frozen):
    role: str  # "both" (colocated), "prefill" or "decode"
    hardware: str
    replicas: int
    tp: int
    pp: int
    ep: int
    kv_cache_blocks: int  # per replica
    kv_cache_tokens: int
    kv_cache_bytes: float  # per device
    weights_bytes: float  # per device


class SimInputs(_Frozen):
    """The fully resolved inputs: the server, and the workload as the caller described it."""

    model: str
    pools: list[PoolInputs]
    scheduler: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    load_balancer: str
    kv_link: str | None
    weight_dtype: str
    act_dtype: str
    kv_dtype: str
    # Each module class's weight format, and where the formats came from (the checkpoint's
    # quantization_config, or --weight-dtype).
    weight_formats: dict[str, str] = {}
    formats_source: str | None = None
    cost_model: str
    engine: str | None  # the calibrated model's engine profile; None under speed of light
    engine_preset: str | None = None  # the serving engine's scheduler preset (vllm@0.19)
    calibration: str = "bundled"  # the calibration profile the cost model took
    cuda_graph_sizes: list[int] = []  # decode batches are padded to these
    memory_fraction: float | None = None
    host_overhead: str | None = None  # the engine's host time per step, and its source
    batch_wait: str | None = None  # TensorRT-LLM's batch waiting, where it is on
    fusion: str | None = None  # the engine's all-reduce + RMSNorm fusion, where it applies
    bucket_tokens: int
    speculation: str | None  # draft, γ, α and the expected tokens a round
    workload: dict[str, str | float | int | None]


class LatencyStats(_Frozen):
    """Seconds over the requests (ITL: over every gap between two tokens of a request)."""

    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float
    percentiles: dict[str, float] = {}  # "p50" -> seconds, for the percentiles asked for


class SloReport(_Frozen):
    """Goodput as vLLM's benchmark counts it: requests per second meeting every SLO given.
    ``met``: at least ``percentile`` % of requests meet them (DistServe's attainment)."""

    ttft_s: float | None
    tpot_s: float | None
    percentile: float
    attainment: float
    goodput_rps: float
    met: bool
    ttft_at_percentile_s: float
    tpot_at_percentile_s: float
    unreachable: list[str]  # SLOs below what one request on an idle server gets


class SimSummary(_Frozen):
    schema_version: int = SCHEMA_VERSION
    tool_version: str
    inputs: SimInputs
    requests: int
    devices: int
    duration_s: float  # first arrival to last token
    steps: int
    events: int
    priced_shapes: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    request_rate_rps: float  # arrivals per second over the run
    requests_per_s: float  # completions per second over the run
    input_tokens_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    tokens_per_s_per_gpu: float  # output tokens
    tokens_per_s_per_user: float  # 1 / mean TPOT
    mean_in_system: float  # requests queued or in flight, time-weighted
    mean_queue: float  # requests waiting for admission, time-weighted
    max_queue: int
    mean_batch: float  # sequences per decode step
    max_batch: int
    kv_use_mean: float  # fraction of KV blocks in use, time-weighted, mean over replicas
    kv_use_peak: float
    preemptions: int
    prefix_cached_tokens: int
    kv_transfer_mean_s: float | None  # disaggregated: prefill end to KV at the decode replica
    idle_ttft_s: float  # one request of mean length on an idle server (phasewise estimate)
    idle_tpot_s: float
    slo: SloReport | None = None
    notes: list[str] = []
