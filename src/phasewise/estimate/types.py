"""Typed results of an estimate: what the CLI renders and the JSON document carries."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Inputs(_Frozen):
    """The fully resolved inputs, so a JSON document can be re-run as it stands."""

    model: str
    hardware: str
    isl: int
    osl: int
    batch_size: int
    weight_dtype: str
    act_dtype: str
    kv_dtype: str
    tp: int
    pp: int
    ep: int
    cost_model: str
    kv_keep: float = 1.0  # fraction of cached tokens the KV cache keeps
    engine: str | None = None  # the calibrated model's engine profile; None for speed of light
    calibration: str | None = None  # a calibration profile file, when not the bundled one
    # The weight format per module class and where it came from (the checkpoint's
    # quantization_config, a flag, or bf16 for a checkpoint that declares none).
    weight_formats: dict[str, str] | None = None
    formats_source: str | None = None
    # Attention projections the checkpoint stores otherwise than their class (o_proj nvfp4
    # beside bf16 MLA projections); their bytes per weight are weighed into the class's.
    projection_formats: dict[str, str] | None = None


class ModelSummary(_Frozen):
    name: str
    params_total: float
    params_active: float
    kv_bytes_per_token: float
    layers: int
    max_context: int
    state_bytes_per_sequence: float = 0.0  # fixed recurrent state (SSM / linear attention)
    params_mtp: float = 0.0  # multi-token-prediction layers, apart from the total
    params_vision: float = 0.0  # vision tower, apart from the total
    layer_kinds: dict[str, int] | None = None  # layer label → count


class HardwareSummary(_Frozen):
    name: str
    display_name: str
    device_class: str
    math_format: str
    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    memory_bytes: float
    ridge_point: float  # FLOP per byte
    devices: int
    price_usd_per_hour: float | None
    math_format_reason: str = ""  # why the matmuls run in math_format on this device, if not plain
    price_basis: str | None = None  # "on-demand", "purchase" (amortised) or "override"
    price_date: str | None = None
    price_label: str | None = None  # the price as a report line: figure, basis, provider, date


class PhaseReport(_Frozen):
    """One phase: prefill (the whole prompt batch in one step) or decode (the average step)."""

    phase: str
    label: str  # llama-bench style: pp2048, tg256
    tokens_per_step: int
    flops: float
    bytes: dict[str, float]  # by class: weights, kv_read, kv_write, activations, network
    memory_bytes: float
    arithmetic_intensity: float
    ridge_point: float
    bound: str
    time_s: float  # from the headline cost model
    sol_time_s: float  # speed-of-light floor
    compute_s: float  # speed-of-light parts
    memory_s: float
    network_s: float
    tokens_per_s: float
    mfu: float
    mbu: float
    attention_share: float  # of time_s: attention kernels and KV traffic


class MemoryReport(_Frozen):
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    shortfall_bytes: float
    max_batch_size: int  # largest batch whose KV cache fits at this context


class CostEnergy(_Frozen):
    """Price and energy per token, each phase charged for the device time it uses."""

    usd_per_hour: float | None  # all devices of the replica
    usd_per_million_input_tokens: float | None  # prefill device-time per prompt token
    usd_per_million_output_tokens: float | None  # decode device-time per generated token
    joules_per_input_token_upper_bound: float | None  # at TDP for the whole step
    joules_per_output_token_upper_bound: float | None
    energy_basis: str


class OpRow(_Frozen):
    phase: str
    name: str
    kind: str
    layers: str
    flops: float
    bytes: dict[str, float]
    arithmetic_intensity: float
    bound: str
    time_s: float
    sol_time_s: float


class KernelRow(_Frozen):
    """A kernel the engine runs for one ledger operator (``lower``): how it differs from
    the operator's count, and the engine traits (``engines.toml``) that make it differ."""

    phase: str
    name: str
    layers: str
    unit: str  # matrix, vector, attention, attention-unfused, elementwise, network
    flops: float  # computed, tile padding and masked scores included
    op_flops: float  # what the ledger counts
    passes: float  # passes over the weights
    memory_bytes: float  # moved by the main kernel, every pass counted
    extra_bytes: float  # moved by kernels of their own (dequant buffer, attention scores)
    launches: float
    rules: list[str]


class ConstantRow(_Frozen):
    """A calibrated constant the estimate used, and the profile level it came from."""

    name: str
    value: float
    unit: str
    level: str
    rows: int
    rms_log_residual: float | None


class Estimate(_Frozen):
    schema_version: int = SCHEMA_VERSION
    tool_version: str
    inputs: Inputs
    model: ModelSummary
    hardware: HardwareSummary
    prefill: PhaseReport
    decode: PhaseReport
    ttft_s: float
    tpot_s: float
    e2el_s: float
    tokens_per_s: float  # output tokens per second over the whole request batch
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    usd_per_million_output_tokens: float | None  # as cost_energy's: decode time per token
    memory: MemoryReport
    cost_energy: CostEnergy | None = None
    warnings: list[str] = []
    ops: list[OpRow] | None = None
    constants: list[ConstantRow] | None = None  # --detail with the calibrated model
    kernels: list[KernelRow] | None = None  # --detail with the calibrated model
