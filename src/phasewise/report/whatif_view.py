"""Views of the what-ifs: input variants, speculative decoding, disaggregated pools, and the
cost and energy of an estimate."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasewise.estimate.types import Estimate
from phasewise.estimate.whatif_types import DisaggReport, SpeculativeReport, WhatIf
from phasewise.report.units import gigabytes, percent, rate, seconds, usd


def _pairs(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table


def _joules(value: float | None) -> str:
    return "—" if value is None else f"≤ {value:,.3g} J"


def cost_energy_table(est: Estimate) -> Table:
    ce = est.cost_energy
    if ce is None:
        return _pairs("Cost and energy", [("", "not available")])
    return _pairs("Cost and energy (each phase charged its own device time)", [
        ("price, all devices", usd(ce.usd_per_hour) + ("/h" if ce.usd_per_hour else "")),
        ("$ per million input tokens (prefill)", usd(ce.usd_per_million_input_tokens)),
        ("$ per million output tokens (decode)", usd(ce.usd_per_million_output_tokens)),
        ("energy per input token", _joules(ce.joules_per_input_token_upper_bound)),
        ("energy per output token", _joules(ce.joules_per_output_token_upper_bound)),
        ("energy basis", ce.energy_basis),
    ])


def cost_energy_row(est: Estimate) -> dict[str, Any]:
    """Flat cost and energy columns to add to an estimate's row."""
    return dict(est.cost_energy.model_dump()) if est.cost_energy else {}


def whatif_table(w: WhatIf) -> Table:
    table = Table(title="What-if: baseline against each variant", title_justify="left")
    for column in ("variant", "TTFT", "TPOT", "largest batch", "fits", "tok/s/GPU", "$/M input",
                   "$/M output", "what it does"):
        table.add_column(column, justify="left" if column in ("variant", "what it does") else "right")
    for r in w.results:
        table.add_row(r.label, seconds(r.ttft_s), seconds(r.tpot_s), f"{r.max_batch_size:,}",
                      "yes" if r.fits else "no", rate(r.tokens_per_s_per_gpu, ""),
                      usd(r.usd_per_million_input_tokens), usd(r.usd_per_million_output_tokens),
                      "; ".join(r.effects))
    return table


def whatif_rows(w: WhatIf) -> list[dict[str, Any]]:
    return [{**r.model_dump(exclude={"changes", "effects"}), "effects": "; ".join(r.effects)}
            for r in w.results]


def speculative_table(s: SpeculativeReport) -> Group:
    table = Table(title=f"Speculative decoding: {s.draft} drafts γ={s.spec_tokens}, accepted "
                        f"with α={s.spec_accept:g} each", title_justify="left")
    for column in ("batch", "TPOT plain", "draft (γ steps)", "verify (γ+1 tokens)", "round",
                   "TPOT speculative", "speed-up", "verify bound", "fits"):
        table.add_column(column, justify="right")
    for p in s.points:
        style = "bold" if p.batch_size == s.batch_size else None
        table.add_row(f"{p.batch_size:,}", seconds(p.tpot_baseline_s), seconds(p.draft_s),
                      seconds(p.verify_s), seconds(p.round_s), seconds(p.tpot_s),
                      f"{p.speedup:.2f}×", p.verify_bound, "yes" if p.fits else "no", style=style)
    at = s.at_batch
    lines = [
        f"• Acceptance α={s.spec_accept:g} ({s.task}): {s.spec_accept_source}",
        "• Expected tokens per round: (1 − α^(γ+1)) / (1 − α) = "
        f"{s.expected_tokens_per_round:.3f}.",
        f"• At batch {s.batch_size}: TPOT {seconds(at.tpot_baseline_s)} → {seconds(at.tpot_s)} "
        f"({at.speedup:.2f}×). The verify step reads the weights once for γ+1 tokens, which is "
        "nearly free while decode is bandwidth-bound and costs γ+1 times the work once it is "
        "compute-bound, so the speed-up shrinks as the batch grows (long contexts keep decode "
        "bandwidth-bound, and speculation paying, longer).",
        f"• The draft holds {gigabytes(s.draft_weights_bytes)} of weights and "
        f"{gigabytes(s.draft_kv_bytes_per_sequence)} of KV per sequence per device: the largest "
        f"batch that fits goes from {s.max_batch_size_baseline:,} to {s.max_batch_size_with_draft:,}.",
    ]
    parts: list[Any] = [table, *(Text(line) for line in lines)]
    parts += [Text(f"warning: {w}", style="yellow") for w in s.warnings]
    return Group(*parts)


def speculative_rows(s: SpeculativeReport) -> list[dict[str, Any]]:
    return [p.model_dump() for p in s.points]


def disagg_table(d: DisaggReport) -> Group:
    pools = Table(title="Disaggregated prefill and decode", title_justify="left")
    for column in ("pool", "device", "devices", "TP", "instances", "instance time/request",
                   "capacity (req/s)", "utilization", "$/h", "fits"):
        pools.add_column(column, justify="left" if column in ("pool", "device") else "right")
    for p in (d.prefill, d.decode):
        pools.add_row(p.role, p.display_name, str(p.devices), str(p.tp), str(p.instances),
                      seconds(p.instance_seconds_per_request), f"{p.requests_per_s:,.2f}",
                      percent(p.utilization), usd(p.usd_per_hour), "yes" if p.fits else "no")
    mix = Table(title="Request mix", title_justify="left")
    for column in ("ISL", "OSL", "share", "prompts/prefill step", "TTFT (prefill + transfer)",
                   "TPOT", "KV transfer"):
        mix.add_column(column, justify="right")
    for c in d.classes:
        mix.add_row(f"{c.isl:,}", f"{c.osl:,}", percent(c.share), str(c.prompts_per_prefill_step),
                    seconds(c.ttft_s), seconds(c.tpot_s),
                    f"{gigabytes(c.kv_transfer_bytes)} in {seconds(c.kv_transfer_s)}")
    summary = _pairs("Latency, balance and cost", [
        ("KV transfer per request (per device shard)",
         f"{gigabytes(d.kv_transfer_bytes)} over {d.link} = {seconds(d.kv_transfer_s)}"),
        ("TTFT = prefill + KV transfer", seconds(d.ttft_s)),
        ("TPOT (decode pool)", seconds(d.tpot_s)),
        ("sustained requests/s", f"{d.sustained_requests_per_s:,.2f} (set by {d.bottleneck})"),
        ("balanced ratio", f"{d.balanced_prefill_to_decode:.2f} prefill devices per decode device"),
        (f"best split of {sum(d.best_split)} devices",
         f"{d.best_split[0]} prefill : {d.best_split[1]} decode → "
         f"{d.best_split_requests_per_s:,.2f} req/s"),
        ("$ per million output tokens", usd(d.usd_per_million_output_tokens)),
        ("$ per million tokens (input + output)", usd(d.usd_per_million_tokens)),
    ])
    colocated = Table(title="Colocated on one device type, for comparison", title_justify="left")
    for column in ("device", "TP", "req/s per device", "TTFT", "TPOT (stalled by prefills)",
                   "$/M tokens (input + output)", "fits"):
        colocated.add_column(column, justify="left" if column == "device" else "right")
    for c in d.colocated:
        colocated.add_row(c.hardware, str(c.tp), f"{c.requests_per_s_per_device:,.3f}",
                          seconds(c.ttft_s), seconds(c.tpot_s), usd(c.usd_per_million_tokens),
                          "yes" if c.fits else "no")
    parts: list[Any] = [mix, pools, summary, colocated]
    parts += [Text(f"warning: {w}", style="yellow") for w in d.warnings]
    return Group(*parts)


def disagg_rows(d: DisaggReport) -> list[dict[str, Any]]:
    from phasewise.report.output import flatten

    return [flatten(d.model_dump(exclude={"colocated", "warnings", "classes"}))]
