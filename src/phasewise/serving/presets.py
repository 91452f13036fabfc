"""Engine presets: the scheduler defaults each serving engine ships, as data with sources.

``catalog/engines/<engine>.toml`` holds, per release line, the batching policy, the token
budget of a step, the sequences in flight, the CUDA-graph capture sizes, prefix caching,
the memory share and the overlap scheduler, each with the engine file it comes from;
``catalog/engines/host_fit.toml`` holds the one fitted constant per engine, its host time
per step. ``--engine vllm@0.19`` takes the newest release table not newer than 0.19; a
user's flag overrides any value (``EngineSettings`` is a frozen dataclass: ``replace`` it).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phasewise.errors import InputError, nearest_hint
from phasewise.files import read_toml
from phasewise.lower.fusion import AllreduceNormFusion
from phasewise.specs import HardwareSpec

ENGINES_DIR = Path(__file__).resolve().parent.parent / "catalog" / "engines"
HOST_FIT_FILE = ENGINES_DIR / "host_fit.toml"
GIB = 2**30
MIB = 2**20


@dataclass(frozen=True, slots=True)
class HostTime:
    """Engine host time per step: scheduling, input preparation, sampling, detokenising
    and launch, ``base_s + per_seq_s · sequences in the step``. With an overlap scheduler
    the host prepares step n+1 while the device runs step n, so a step takes
    max(device, host); without one they add."""

    base_s: float = 0.0
    per_seq_s: float = 0.0
    overlap: bool = False
    source: str = ""
    device_scale: float = 1.0  # the engine's kernels against the cost model's, fitted
    prefill_scale: float = 1.0  # the same for steps that prefill, fitted to TTFT
    # the API server's time per request outside the engine's steps (HTTP, tokenising the
    # prompt, handing it to the engine, streaming the first token back): it adds to TTFT
    # and end-to-end latency, not to the time between tokens
    request_s: float = 0.0
    # a decode step of a mixture-of-experts model against the cost model's, over and above
    # device_scale, fitted: the routed experts run as grouped GEMMs of a few tokens an
    # expert, slower than the dense GEMMs the cost model's constants were fitted to
    moe_scale: float = 1.0
    # seconds each kernel of a step costs over its work, fitted to serving rows (None: the
    # cost model's kernel_overhead_s, fitted to single-request latencies): a served decode
    # step replays a captured CUDA graph whose kernels start back to back, a different
    # launch regime from the latency benchmarks the cost model's constant comes from. The
    # simulator prices the pool's steps with it (Calibrated.with_kernel_overhead).
    kernel_s: float | None = None

    def step_s(self, device_s: float, sequences: int, prefills: bool = False,
               moe: bool = False) -> float:
        host_s = self.base_s + self.per_seq_s * sequences
        device_s *= self.prefill_scale if prefills else \
            self.device_scale * (self.moe_scale if moe else 1.0)
        return max(device_s, host_s) if self.overlap else device_s + host_s


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """One engine release's scheduler as it serves on one device and layout."""

    engine: str
    version: str
    display_name: str
    cost_engine: str
    scheduler: str
    max_num_seqs: int
    max_num_batched_tokens: int  # 0: the longest request
    cuda_graph_sizes: tuple[int, ...]  # ascending; a decode batch up to the last is padded
    prefix_caching: bool
    memory_fraction: float  # share of device memory for weights and KV (0: whole device)
    memory_fraction_of_free: bool  # the share is of the memory left after the weights
    host: HostTime
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # the token budget is each attention-DP rank's own (every rank schedules its own
    # requests), so a replica of D ranks computes up to D budgets a step
    budget_per_attention_rank: bool = False
    # TensorRT-LLM's batch waiting (py_executor.py _waiting_requests): while sequences
    # decode, new prompts are held back a step at a time until ``batch_wait_iters`` steps
    # have passed or the step's tokens reach ``batch_wait_tokens_ratio`` of the budget;
    # it waits only with both set, and never under attention DP (0, 0: off)
    batch_wait_iters: int = 0
    batch_wait_tokens_ratio: float = 0.0
    # TensorRT-LLM's all-reduce + residual + RMSNorm kernel (lower.fusion; None: none)
    allreduce_norm_fusion: AllreduceNormFusion | None = None

    @property
    def batch_waits(self) -> bool:
        return self.batch_wait_iters > 0 and self.batch_wait_tokens_ratio > 0

    def replica_budget(self, attention_dp: int) -> int:
        """Tokens one replica of ``attention_dp`` attention ranks computes a step (0: the
        longest request)."""
        ranks = attention_dp if self.budget_per_attention_rank else 1
        return self.max_num_batched_tokens * ranks

    @property
    def label(self) -> str:
        return f"{self.engine}@{self.version}"

    def padded_batch(self, decodes: int) -> int:
        """The captured graph a decode batch of ``decodes`` runs: the next captured size,
        or the batch itself above the largest (run without a graph)."""
        sizes = self.cuda_graph_sizes
        if not sizes or decodes > sizes[-1] or decodes <= 0:
            return decodes
        return sizes[bisect.bisect_left(sizes, decodes)]


# The policies the presets name, as the simulator's schedulers (serving.schedulers).
POLICY_SCHEDULERS = {"chunked": "chunked", "prefill-first-whole": "continuous",
                     "prefill-first-chunked": "prefill-first", "mixed-whole": "mixed"}


def engine_names() -> list[str]:
    return sorted(p.stem for p in ENGINES_DIR.glob("*.toml") if p.stem != "host_fit")


def _documents() -> dict[str, dict[str, Any]]:
    docs = {}
    for stem in engine_names():
        doc = read_toml(ENGINES_DIR / f"{stem}.toml", what="engine preset")
        for name in [doc["name"], stem, *doc.get("aliases", [])]:
            docs[name.lower()] = doc
    return docs


def is_preset(spec: str | None) -> bool:
    """Whether ``spec`` (``vllm``, ``vllm@0.19``, ``llama.cpp@b7000``) names an engine preset."""
    return spec is not None and spec.split("@")[0].strip().lower() in _documents()


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)) or (0,)


def _version_table(doc: dict, asked: str | None) -> tuple[str, dict]:
    versions = doc["versions"]
    wanted = asked or doc["default_version"]
    known = sorted(versions, key=_version_key)
    chosen = [v for v in known if _version_key(v) <= _version_key(wanted)]
    if not chosen:
        raise InputError(f"--engine {doc['name']}@{wanted}: the presets start at "
                         f"{doc['name']}@{known[0]}; give that or a later version.")
    table = dict(versions[chosen[-1]])
    while "inherit" in table:
        parent = dict(versions[table.pop("inherit")])
        table = {**parent, **table}
    return wanted, table


def _tiered(table: dict, hardware: HardwareSpec) -> dict:
    """The table with the overrides of every memory tier the device reaches."""
    memory_gib = hardware.memory_bytes / GIB
    name = f"{hardware.name} {hardware.display_name}".lower()
    out = dict(table)
    for tier in table.get("tiers", []):
        if memory_gib >= tier["min_memory_gib"] and not any(
                d in name for d in tier.get("exclude_devices", [])):
            out.update({k: v for k, v in tier.items()
                        if k not in ("min_memory_gib", "exclude_devices")})
    return out


def capture_sizes(ranges: list[list[int]], largest: int) -> tuple[int, ...]:
    """Captured batch sizes from (start, stop inclusive, step) ranges, cut at ``largest``."""
    sizes = {n for start, stop, step in ranges for n in range(start, stop + 1, step)}
    return tuple(sorted(n for n in sizes if n <= largest))


def sglang_memory_fraction(table: dict, hardware: HardwareSpec, *, chunk_tokens: int,
                           graph_max: int, ranks: int) -> float:
    """mem_fraction_static = (gpu_mem − reserved) / gpu_mem, reserved_mb = 512 +
    1.5·max(chunk, 2048) + 2·cuda_graph_max_bs + 1024·ranks/8, at least 10 GiB on parts
    over 60 GiB (sglang server_args.py, _handle_gpu_memory_settings)."""
    gpu_mb = hardware.memory_bytes / MIB
    reserved = (table["reserved_base_mb"] + table["reserved_mb_per_chunk_token"]
                * max(chunk_tokens, 2048) + table["reserved_mb_per_graph_seq"] * graph_max
                + table["reserved_mb_per_8_ranks"] * ranks / 8)
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, table["reserved_min_mb_large"])
    return round((gpu_mb - reserved) / gpu_mb, 3)


def host_time(engine: str, overlap: bool) -> HostTime:
    """The fitted host time of ``engine`` (zero where no fit covers it)."""
    if not HOST_FIT_FILE.is_file():
        return HostTime(overlap=overlap)
    fits = read_toml(HOST_FIT_FILE, what="host-time fit").get("engines", {})
    fit = fits.get(engine)
    if fit is None:
        return HostTime(overlap=overlap, source="no fit for this engine: no host time")
    return HostTime(fit["base_s"], fit["per_seq_s"], overlap, fit.get("source", ""),
                    fit.get("device_scale", 1.0), fit.get("prefill_scale", 1.0),
                    fit.get("request_s", 0.0), fit.get("moe_scale", 1.0),
                    fit.get("kernel_s"))


def engine_settings(spec: str, hardware: HardwareSpec, *, tp: int = 1,
                    ranks: int = 1) -> EngineSettings:
    """The preset ``spec`` names (``engine`` or ``engine@version``) on ``hardware`` with a
    replica of ``ranks`` devices whose attention runs ``tp`` ways."""
    name, _, version = spec.partition("@")
    docs = _documents()
    doc = docs.get(name.strip().lower())
    if doc is None:
        raise InputError(f"unknown engine preset '{name}'.{nearest_hint(name, list(docs))} "
                         f"Known: {', '.join(engine_names())} (a version after '@', "
                         "vllm@0.19).")
    version, table = _version_table(doc, version.strip() or None)
    table = _tiered(table, hardware)
    large_tp = ranks >= 4 and "cuda_graph_max_large_tp" in table
    graph_max = table["cuda_graph_max_large_tp"] if large_tp else table["cuda_graph_max"]
    if table.get("cuda_graph_max_from_max_num_seqs"):
        graph_max = min(2 * table["max_num_seqs"], graph_max)
    fraction = table["memory_fraction"] or (
        sglang_memory_fraction(table, hardware, chunk_tokens=table["max_num_batched_tokens"],
                               graph_max=graph_max, ranks=ranks)
        if "reserved_base_mb" in table else 1.0)
    sizes = capture_sizes(table["cuda_graph_sizes"], graph_max) \
        if table["cuda_graph_padding"] else ()
    return EngineSettings(
        engine=doc["name"], version=version, display_name=doc["display_name"],
        cost_engine=doc["cost_engine"], scheduler=POLICY_SCHEDULERS[table["policy"]],
        max_num_seqs=table["max_num_seqs"],
        max_num_batched_tokens=table["max_num_batched_tokens"], cuda_graph_sizes=sizes,
        prefix_caching=table["prefix_caching"], memory_fraction=fraction,
        memory_fraction_of_free=table.get("memory_fraction_of_free", False),
        host=host_time(doc["name"], table["overlap_scheduler"]),
        sources={k: v for k, v in table.items() if k.endswith("_source")},
        budget_per_attention_rank=table.get("budget_per_attention_rank", False),
        batch_wait_iters=table.get("batch_wait_timeout_iters", 0),
        batch_wait_tokens_ratio=table.get("batch_wait_max_tokens_ratio", 0.0),
        allreduce_norm_fusion=_allreduce_norm_fusion(table))


def _allreduce_norm_fusion(table: dict) -> AllreduceNormFusion | None:
    """The release's all-reduce + RMSNorm fusion rule, where its table states one."""
    types = table.get("allreduce_norm_fusion_model_types")
    if not types:
        return None
    return AllreduceNormFusion(tuple(types), int(table["allreduce_norm_fusion_min_hidden"]),
                               table.get("allreduce_norm_fusion_source", ""))
