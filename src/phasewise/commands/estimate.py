"""`phasewise estimate`: per-phase FLOPs, bytes, bound, TTFT, TPOT, memory fit."""

from __future__ import annotations

import itertools
import math

import typer

from phasewise.commands._app import (
    act_dtype_option,
    app,
    batch_size_option,
    calibration_option,
    check_format,
    console,
    echo,
    ep_option,
    ints,
    kv_dtype_option,
    kv_keep_option,
    pp_option,
    split_list,
    task_option,
    weight_dtype_option,
)
from phasewise.commands._whatif import WhatIfFlags, fraction, priced_device, render_whatifs
from phasewise.commands.options import (
    engine_option,
    isl_option,
    osl_option,
    tp_degrees,
    tp_option,
)
from phasewise.errors import InputError

DEFAULT_MODEL = "llama-3.1-8b"
# Estimates one sweep runs (about a thousand a second): past this a list is a typo.
MAX_SWEEP_POINTS = 10_000
DEFAULT_HARDWARE = "h100-sxm"


@app.command()
def estimate(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Catalog name, path to a config.json or its folder, or a Hugging "
                                   "Face repo id in the local cache. Comma list sweeps."),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-H",
                                 help="Catalog device or path to a TOML sheet. Comma list sweeps."),
    isl: str = isl_option("sweep"),
    osl: str = osl_option("sweep"),
    batch_size: str = batch_size_option(),
    weight_dtype: str = weight_dtype_option(),
    act_dtype: str = act_dtype_option(),
    kv_dtype: str = kv_dtype_option(),
    tp: str = tp_option(purpose="Tensor-parallel degree (a comma list sweeps)"),
    pp: int = pp_option(),
    ep: int = ep_option(),
    cost: str | None = typer.Option(None, "--cost", help="Cost model for the headline numbers "
                                       "(the speed-of-light floor is always shown)."),
    engine: str | None = engine_option(),
    calibration: str | None = calibration_option(),
    detail: bool = typer.Option(False, "--detail", help="Print the per-operator ledger."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
    kv_keep: str | None = kv_keep_option(),
    price: str | None = typer.Option(None, "--price", help="US$ per device-hour: one number, "
                                        "or DEVICE=PRICE pairs (default: catalog price)."),
    what_if: list[str] | None = typer.Option(None, "--what-if", help="A variant to set beside "
                                                "the baseline, e.g. kv-dtype=fp8,kv-keep=0.5 "
                                                "(repeatable)."),
    draft: str | None = typer.Option(None, "--draft", help="Speculative decoding with this "
                                        "draft model (catalog name or config), or `mtp` for "
                                        "the model's own MTP layers."),
    draft_head: str | None = typer.Option(None, "--draft-head", help="Speculative decoding "
                                             "with an EAGLE/MTP-style head costing this fraction "
                                             "of the target's layers."),
    spec_tokens: int = typer.Option(4, "--spec-tokens", help="Draft tokens per round (γ)."),
    spec_accept: str | None = typer.Option(None, "--spec-accept", help="Per-token "
                                              "acceptance rate α in [0, 1) (default: the "
                                              "published figure for the draft and --task)."),
    task: str = task_option(),
    prefill_hardware: str | None = typer.Option(None, "--prefill-hardware",
                                                   help="Disaggregated serving: prefill pool device."),
    decode_hardware: str | None = typer.Option(None, "--decode-hardware",
                                                  help="Disaggregated serving: decode pool device."),
    prefill_pool: int | None = typer.Option(None, "--prefill-pool", help="Prefill pool devices."),
    decode_pool: int | None = typer.Option(None, "--decode-pool", help="Decode pool devices."),
    prefill_tp: int | None = typer.Option(None, "--prefill-tp", help="TP of a prefill instance."),
    decode_tp: int | None = typer.Option(None, "--decode-tp", help="TP of a decode instance."),
    link: str | None = typer.Option(None, "--link", help="Catalog link for the KV transfer "
                                       "(`phasewise catalog links`)."),
    link_bandwidth: str | None = typer.Option(None, "--link-bandwidth",
                                                 help="KV-transfer link, GB/s per direction."),
    link_latency: str | None = typer.Option(None, "--link-latency",
                                               help="KV-transfer link latency, µs."),
    mix: str | None = typer.Option(None, "--mix", help="Request mix for disaggregated pools: "
                                      "ISL:OSL:SHARE per class, comma-separated."),
    json_schema: bool = typer.Option(False, "--json-schema", help="Print the JSON Schema of one "
                                     "estimate's --format json document and exit (a sweep lists "
                                     "such documents under 'estimates')."),
) -> None:
    """Estimate prefill and decode for one model on one device (comma lists sweep)."""
    from phasewise.cost.registry import DEFAULT_COST_MODEL
    from phasewise.estimate import estimate as run_estimate
    from phasewise.estimate.pricing import CostChoice
    from phasewise.report.estimate_view import estimate_row, estimate_table, sweep_table
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.whatif_view import cost_energy_row, cost_energy_table
    from phasewise.specs import Parallelism, Precision, Workload

    if json_schema:
        from phasewise.estimate import Estimate

        echo(to_json(Estimate.model_json_schema()))
        return
    check_format(fmt)
    keep = fraction(kv_keep, "--kv-keep")
    precision = Precision(weight_dtype, act_dtype, kv_dtype, 1.0 if keep is None else keep)
    whatifs = WhatIfFlags(what_if=what_if, draft=draft, draft_head=draft_head,
                          spec_tokens=spec_tokens, spec_accept=spec_accept, task=task,
                          prefill_hardware=prefill_hardware, decode_hardware=decode_hardware,
                          prefill_pool=prefill_pool, decode_pool=decode_pool,
                          prefill_tp=prefill_tp, decode_tp=decode_tp, link=link,
                          link_bandwidth=link_bandwidth, link_latency=link_latency, mix=mix)
    axes = (split_list(model, "--model", str), split_list(hardware, "--hardware", str),
            ints(isl, "--isl"), ints(osl, "--osl"), ints(batch_size, "--batch-size"),
            tp_degrees(tp))
    if math.prod(map(len, axes)) > MAX_SWEEP_POINTS:
        raise InputError(f"the comma lists sweep {math.prod(map(len, axes)):,} estimates, more "
                         f"than {MAX_SWEEP_POINTS:,}; sweep fewer values at a time.")
    grid = itertools.product(*axes)
    results = [
        run_estimate(m, priced_device(h, price), Workload(i, o, b), precision,
                     Parallelism(t, pp, ep), cost=cost or DEFAULT_COST_MODEL, detail=detail,
                     engine=engine, calibration=calibration)
        for m, h, i, o, b, t in grid
    ]
    if whatifs.any:
        render_whatifs(whatifs, results, model, hardware, price, precision,
                       CostChoice(cost or DEFAULT_COST_MODEL, engine, calibration), fmt)
        return
    if fmt == "json":
        docs = [r.model_dump(mode="json") for r in results]
        echo(to_json(docs[0] if len(docs) == 1 else _sweep_document(docs)))
    elif fmt == "csv":
        echo(rows_to_csv(estimate_row(r) | cost_energy_row(r) for r in results))
    elif fmt == "md":
        echo(rows_to_markdown(estimate_row(r) | cost_energy_row(r) for r in results))
    elif len(results) == 1:
        console().print(estimate_table(results[0]), cost_energy_table(results[0]))
    else:
        console().print(sweep_table(results))


def _sweep_document(docs: list[dict]) -> dict:
    from phasewise.estimate import SCHEMA_VERSION
    from phasewise.version import __version__

    return {"schema_version": SCHEMA_VERSION, "tool_version": __version__, "estimates": docs}
