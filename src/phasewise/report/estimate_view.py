"""Terminal and row views of an ``Estimate``."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasewise.estimate.types import Estimate, PhaseReport
from phasewise.report.units import gigabytes, percent, rate, seconds, si, usd


def headline(est: Estimate) -> str:
    i = est.inputs
    par = f"TP{i.tp}" + (f"·PP{i.pp}" if i.pp > 1 else "") + (f"·EP{i.ep}" if i.ep > 1 else "")
    return (f"{est.model.name} on {est.hardware.display_name}"
            f"{f' ×{est.hardware.devices}' if est.hardware.devices > 1 else ''} · ISL {i.isl:,} · "
            f"OSL {i.osl:,} · batch {i.batch_size} · weights {_weights(est)} / act "
            f"{i.act_dtype} / KV {i.kv_dtype} · {par} · cost model: {i.cost_model}")


def _weights(est: Estimate) -> str:
    """The weight format, with the module classes that differ and where they came from."""
    i = est.inputs
    formats = dict(i.weight_formats or {})
    if i.projection_formats and "attention" in formats:
        formats["attention"] += " but " + " and ".join(
            f"{part} {fmt}" for part, fmt in i.projection_formats.items())
    others = {cls: fmt for cls, fmt in formats.items() if fmt != i.weight_dtype}
    text = i.weight_dtype + (f" ({', '.join(f'{c} {f}' for c, f in others.items())})"
                             if others else "")
    source = i.formats_source or ""
    return text + (f" [{source}]" if source.startswith("quantization_config")
                   or source.startswith("hf_quant") else "")


def model_line(est: Estimate) -> str:
    """Parameters, cache per token, recurrent state, MTP and vision parts, layer kinds."""
    m = est.model
    parts = [f"{m.params_total / 1e9:,.2f} B params ({m.params_active / 1e9:,.2f} B active)",
             f"KV {m.kv_bytes_per_token / 1e3:,.1f} kB/token"]
    if m.state_bytes_per_sequence:
        parts.append(f"recurrent state {m.state_bytes_per_sequence / 1e6:,.1f} MB/sequence")
    if m.params_mtp:
        parts.append(f"MTP {m.params_mtp / 1e9:,.2f} B apart")
    if m.params_vision:
        parts.append(f"vision {m.params_vision / 1e9:,.2f} B apart")
    if m.layer_kinds and len(m.layer_kinds) > 1:
        parts.append("layers " + ", ".join(f"{n}×{k}" for k, n in m.layer_kinds.items()))
    return " · ".join(parts)


def _phase_rows(p: PhaseReport) -> list[str]:
    return [
        p.label,
        si(p.flops, "FLOP"),
        gigabytes(p.bytes["weights"]),
        gigabytes(p.bytes["kv_read"]),
        gigabytes(p.bytes["kv_write"]),
        gigabytes(p.bytes["activations"]),
        gigabytes(p.bytes["network"]),
        f"{p.arithmetic_intensity:,.1f} (ridge {p.ridge_point:,.0f})",
        p.bound,
        seconds(p.time_s),
        seconds(p.sol_time_s),
        percent(p.mfu),
        percent(p.mbu),
    ]


PHASE_ROW_NAMES = ["step", "FLOPs", "weight bytes", "KV read", "KV write", "activation bytes",
                   "network bytes", "FLOP/byte", "bound", "time (expected)",
                   "time (speed of light)", "MFU", "MBU"]


def estimate_table(est: Estimate) -> Group:
    phases = Table(title="Per phase, per device", title_justify="left")
    phases.add_column("")
    phases.add_column("prefill (one step)", justify="right")
    phases.add_column("decode (average step)", justify="right")
    rows = zip(PHASE_ROW_NAMES, _phase_rows(est.prefill), _phase_rows(est.decode), strict=False)
    for name, pre, dec in rows:
        phases.add_row(name, pre, dec)

    latency = Table(title="Latency and throughput", title_justify="left", show_header=False)
    latency.add_column("")
    latency.add_column("", justify="right")
    latency.add_row("TTFT", seconds(est.ttft_s))
    latency.add_row("TPOT", seconds(est.tpot_s))
    latency.add_row("end-to-end latency", seconds(est.e2el_s))
    latency.add_row("output tokens/s (batch, end to end)", rate(est.tokens_per_s))
    latency.add_row("prefill tokens/s", rate(est.prefill_tokens_per_s))
    latency.add_row("decode tokens/s", rate(est.decode_tokens_per_s))
    latency.add_row("tokens/s per user", rate(est.tokens_per_s_per_user))
    latency.add_row("tokens/s per GPU", rate(est.tokens_per_s_per_gpu))
    latency.add_row("$ per million output tokens", usd(est.usd_per_million_output_tokens))

    m = est.memory
    memory = Table(title="Memory per device", title_justify="left", show_header=False)
    memory.add_column("")
    memory.add_column("", justify="right")
    memory.add_row("weights", gigabytes(m.weights_bytes))
    memory.add_row(f"KV cache ({est.inputs.batch_size} × {est.inputs.isl + est.inputs.osl - 1:,} "
                   "tokens)", gigabytes(m.kv_cache_bytes))
    memory.add_row("activations (peak step)", gigabytes(m.activations_bytes))
    memory.add_row("runtime reserve", gigabytes(m.reserve_bytes))
    memory.add_row("total / capacity", f"{gigabytes(m.total_bytes)} / {gigabytes(m.capacity_bytes)}")
    verdict = Text("fits", style="green") if m.fits else \
        Text(f"does not fit: {gigabytes(m.shortfall_bytes)} short", style="bold red")
    memory.add_row("verdict", verdict)
    memory.add_row("largest batch that fits", f"{m.max_batch_size:,}")

    parts: list[Any] = [Text(headline(est), style="bold"), Text(model_line(est)),
                        *_device_lines(est), phases, latency, memory]
    parts += [Text(f"warning: {w}", style="yellow") for w in est.warnings]
    if est.ops:
        parts.append(ops_table(est))
    if est.kernels:
        parts.append(kernels_table(est))
    if est.constants:
        parts.append(constants_table(est))
    return Group(*parts)


def _device_lines(est: Estimate) -> list[Text]:
    """The matmul format the device runs (and why, when the device decided it) and the price
    the dollar figures use, with its basis and date."""
    hw = est.hardware
    math = f"matmuls in {hw.math_format}" + (f": {hw.math_format_reason}" if hw.math_format_reason
                                             else "")
    price = hw.price_label or "no catalog price (give --price for dollar figures)"
    return [Text(math, style="dim"), Text(f"price: {price}", style="dim")]


def constants_table(est: Estimate) -> Table:
    """The calibrated constants the expected times used, each with the profile level it came
    from and what that level was fitted to."""
    engine = est.inputs.engine or "generic"
    table = Table(title=f"Calibrated constants ({engine} on {est.inputs.hardware}; profile "
                        f"{est.inputs.calibration or 'bundled'})", title_justify="left")
    for column in ("constant", "value", "unit", "from", "rows", "rms log residual"):
        table.add_column(column, justify="right" if column in ("value", "rows",
                                                               "rms log residual") else "left")
    for c in est.constants or []:
        fitted = c.rows and c.rms_log_residual is not None
        table.add_row(c.name, f"{c.value:.4g}", c.unit, c.level, str(c.rows) if c.rows else "",
                      f"{c.rms_log_residual:.3f}" if fitted else "")
    return table


def ops_table(est: Estimate) -> Table:
    table = Table(title="Ledger per operator (decode at the middle context)", title_justify="left")
    for column in ("phase", "op", "layers", "kind", "FLOPs", "weights", "KV read", "KV write",
                   "activations", "network", "FLOP/B", "bound", "time", "SOL"):
        table.add_column(column, justify="left" if column in ("phase", "op", "layers", "kind",
                                                              "bound") else "right")
    for row in est.ops or []:
        b = row.bytes
        table.add_row(row.phase, row.name, row.layers, row.kind, si(row.flops, "FLOP"),
                      gigabytes(b["weights"]), gigabytes(b["kv_read"]), gigabytes(b["kv_write"]),
                      gigabytes(b["activations"]), gigabytes(b["network"]),
                      f"{row.arithmetic_intensity:.1f}", row.bound, seconds(row.time_s),
                      seconds(row.sol_time_s))
    return table


def kernels_table(est: Estimate) -> Table:
    """The kernels the engine runs for each operator (its lowering), with what differs
    from the ledger's count and the engine traits that make it differ."""
    engine = est.inputs.engine or "generic"
    table = Table(title=f"Kernels {engine} runs (lowered from the ledger; decode at the middle "
                        "context)", title_justify="left")
    for column in ("phase", "op", "layers", "unit", "FLOPs run", "× ledger", "weight passes",
                   "bytes", "extra bytes", "launches", "engine traits"):
        table.add_column(column, justify="left" if column in ("phase", "op", "layers", "unit",
                                                              "engine traits") else "right")
    for row in est.kernels or []:
        padding = row.flops / row.op_flops if row.op_flops else 1.0
        table.add_row(row.phase, row.name, row.layers, row.unit, si(row.flops, "FLOP"),
                      f"{padding:.3g}", f"{row.passes:g}", gigabytes(row.memory_bytes),
                      gigabytes(row.extra_bytes), f"{row.launches:g}", ", ".join(row.rules))
    return table


def estimate_row(est: Estimate) -> dict[str, Any]:
    """One flat row per estimate, for sweeps, CSV and Markdown (SI units in the names)."""
    i = est.inputs
    return {
        "model": i.model, "hardware": i.hardware, "isl": i.isl, "osl": i.osl,
        "batch_size": i.batch_size, "weight_dtype": i.weight_dtype, "act_dtype": i.act_dtype,
        "kv_dtype": i.kv_dtype, "tp": i.tp, "pp": i.pp, "ep": i.ep, "cost_model": i.cost_model,
        "ttft_s": est.ttft_s, "ttft_sol_s": est.prefill.sol_time_s, "tpot_s": est.tpot_s,
        "tpot_sol_s": est.decode.sol_time_s, "e2el_s": est.e2el_s,
        "tokens_per_s": est.tokens_per_s, "tokens_per_s_per_user": est.tokens_per_s_per_user,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "prefill_bound": est.prefill.bound, "decode_bound": est.decode.bound,
        "prefill_intensity": est.prefill.arithmetic_intensity,
        "decode_intensity": est.decode.arithmetic_intensity,
        "ridge_point": est.hardware.ridge_point,
        "memory_total_bytes": est.memory.total_bytes, "fits": est.memory.fits,
        "max_batch_size": est.memory.max_batch_size,
        "usd_per_million_output_tokens": est.usd_per_million_output_tokens,
    }


def sweep_table(estimates: list[Estimate]) -> Table:
    table = Table(title=f"{len(estimates)} estimates", title_justify="left")
    for column in ("model", "hardware", "ISL", "OSL", "batch", "TP", "TTFT", "TPOT",
                   "tok/s", "tok/s/user", "decode FLOP/B", "ridge", "decode bound", "fits"):
        table.add_column(column, justify="left" if column in ("model", "hardware") else "right")
    for est in estimates:
        i = est.inputs
        table.add_row(i.model, i.hardware, f"{i.isl:,}", f"{i.osl:,}", str(i.batch_size), str(i.tp),
                      seconds(est.ttft_s), seconds(est.tpot_s), f"{est.tokens_per_s:,.0f}",
                      f"{est.tokens_per_s_per_user:,.1f}",
                      f"{est.decode.arithmetic_intensity:,.1f}",
                      f"{est.hardware.ridge_point:,.0f}", est.decode.bound,
                      "yes" if est.memory.fits else "no")
    return table
