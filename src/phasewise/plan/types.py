"""Typed results of a plan: what the CLI renders and the JSON document carries."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class PoolRow(_Frozen):
    role: str  # "both", "prefill" or "decode"
    hardware: str
    replicas: int
    tp: int
    pp: int
    ep: int
    attention_dp: int
    devices_per_replica: int
    weight_dtype: str
    act_dtype: str
    kv_dtype: str
    engine: str | None
    usd_per_device_hour: float


class TargetResult(_Frozen):
    target: str
    metric: str
    percentile: float
    limit_s: float
    predicted_s: float | None  # the analytic screen's figure at the target load
    simulated_s: float | None  # the simulator's percentile; None when not verified


class CandidateRow(_Frozen):
    """One layout: its pools, the screen's verdict and, when verified, the simulator's."""

    index: int
    label: str
    layout: str  # aggregated or disaggregated
    device_types: str
    pools: list[PoolRow]
    devices: int
    usd_per_hour: float
    max_num_seqs: int
    max_num_batched_tokens: int | None
    speculative: bool
    request_rate_rps: float
    screen_status: str
    screen_reason: str
    targets: list[TargetResult]
    predicted_batch: float
    predicted_prefill_share: float
    predicted_kv_use: float
    kv_transfer_s: float | None
    verified: bool = False
    meets_slos: bool | None = None  # the simulator's verdict; None when not verified
    goodput_rps: float | None = None
    attainment: float | None = None
    output_tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    usd_per_million_output_tokens: float | None
    latency_s: float  # E2E at the first SLO percentile, simulated when verified
    why: str
    simulate_command: str | None = None


class Front(_Frozen):
    """Candidates no other candidate beats on both axes (``x`` and ``y`` name the fields,
    with whether larger is better on each)."""

    name: str
    x: str
    y: str
    x_larger_better: bool
    y_larger_better: bool
    source: str  # "simulated" (verified candidates) or "analytic" (every stable candidate)
    indices: list[int]
    points: list[tuple[float, float]]


class PlanReport(_Frozen):
    schema_version: int = SCHEMA_VERSION
    tool_version: str
    model: str
    inputs: dict
    shapes_priced: int
    shapes_unfit: int
    candidates_screened: int
    candidates_verified: int
    chosen: CandidateRow | None
    verdict: str
    closest: CandidateRow | None
    best_per_device: list[CandidateRow]
    verified: list[CandidateRow]
    fronts: list[Front]
    notes: list[str] = []
