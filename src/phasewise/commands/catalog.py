"""`phasewise catalog`: list and show the embedded models, devices, links, engines and
number formats."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import typer

from phasewise.commands._app import app, check_format, console, echo

catalog_app = typer.Typer(
    help="List or show catalog models, hardware, links, engines and number formats.",
    no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("models")
def catalog_models(
    name: str | None = typer.Argument(None, help="Show one model's normalised spec."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """The embedded models with parameter counts and KV bytes per token (bf16)."""
    from phasewise.catalog import load_model, model_index, model_names
    from phasewise.ledger import param_counts
    from phasewise.report.output import to_json

    check_format(fmt)
    names = [name] if name else model_names()
    rows = []
    for n in names:
        spec = load_model(n)
        counts = param_counts(spec)
        entry = model_index().get(spec.name, {})
        rows.append({"name": spec.name, "hf_repo": entry.get("hf_repo", ""),
                     "params_total": counts.total, "params_active": counts.active,
                     "layers": spec.num_layers, "hidden_size": spec.hidden_size,
                     "heads": spec.num_heads, "kv_heads": spec.num_kv_heads,
                     "experts": spec.num_experts, "attention": _attention_kind(spec),
                     "kv_bytes_per_token_bf16": counts.kv_bytes_per_token,
                     "max_context": spec.max_context})
    if fmt == "json":
        echo(to_json(rows if not name else rows[0]))
        return
    _print_table(f"{len(rows)} models",
                 ("name", "params", "active", "layers", "attention", "KV/token (bf16)",
                  "max context", "HF repo"),
                 ((r["name"], f"{r['params_total'] / 1e9:,.2f} B",
                   f"{r['params_active'] / 1e9:,.2f} B", str(r["layers"]), r["attention"],
                   f"{r['kv_bytes_per_token_bf16'] / 1024:,.1f} KiB", f"{r['max_context']:,}",
                   r["hf_repo"]) for r in rows))


def _attention_kind(spec) -> str:  # noqa: ANN001
    """The token mixers by kind with their layer counts, and the MoE shape."""
    from phasewise.specs.model import Attention, LatentAttention, MoE

    counts: dict[str, int] = {}
    for group in spec.layer_groups:
        mixer = group.layer.mixer
        if isinstance(mixer, Attention):
            kind = ("MHA" if mixer.kv_heads == mixer.heads else
                    "MQA" if mixer.kv_heads == 1 else "GQA")
            kind += f" sliding {mixer.window}" if mixer.window else ""
            kind += f" chunked {mixer.chunk}" if mixer.chunk else ""
        elif isinstance(mixer, LatentAttention):
            kind = f"MLA sparse top-{mixer.index_topk}" if mixer.index_topk else "MLA"
        else:
            kind = mixer.label if mixer is not None else "none"
        counts[kind] = counts.get(kind, 0) + group.count
    text = " + ".join(k if len(counts) == 1 else f"{k} ({n})" for k, n in counts.items()
                      if k != "none" or len(counts) == 1)
    moe = next((g.layer.mlp for g in spec.layer_groups if isinstance(g.layer.mlp, MoE)), None)
    if moe is not None:
        text += f", MoE {moe.top_k}/{moe.experts}"
    if spec.mtp_layers:
        text += f", MTP {len(spec.mtp_layers)}"
    return text


@catalog_app.command("hardware")
def catalog_hardware(
    name: str | None = typer.Argument(None, help="Show one device's sheet with sources."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """The embedded devices, or one device's sheet with the source of every figure."""
    from phasewise.catalog import hardware_names, hardware_sheet, load_hardware
    from phasewise.report.output import to_json

    check_format(fmt)
    if name:
        sheet = hardware_sheet(name)
        load_hardware(name)  # validates the sheet
        if fmt == "json":
            echo(to_json(sheet))
            return
        console().print(_sheet_table(sheet))
        return
    devices = [load_hardware(n) for n in hardware_names()]
    if fmt == "json":
        echo(to_json([{"name": d.name, "display_name": d.display_name,
                       "device_class": d.device_class, "peak_flops_per_s": d.peak_flops_per_s,
                       "memory_bytes": d.memory_bytes,
                       "memory_bandwidth_bytes_per_s": d.memory_bandwidth_bytes_per_s,
                       "price_usd_per_hour": d.price_usd_per_hour} for d in devices]))
        return
    _print_table(f"{len(devices)} devices (dense peaks)",
                 ("name", "device", "class", "bf16/fp16 TFLOP/s", "fp8 TFLOP/s", "memory",
                  "bandwidth", "ridge (bf16)", "$/h"),
                 (_device_row(d) for d in devices))


def _device_row(d) -> tuple[str, ...]:  # noqa: ANN001 - a HardwareSpec
    half = d.peak_flops_per_s.get("bf16") or d.peak_flops_per_s.get("fp16")
    fp8 = d.peak_flops_per_s.get("fp8")
    return (d.name, d.display_name, d.device_class,
            f"{half / 1e12:,.1f}" if half else "—", f"{fp8 / 1e12:,.1f}" if fp8 else "—",
            f"{d.memory_bytes / 1e9:,.0f} GB", f"{d.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
            f"{half / d.memory_bandwidth_bytes_per_s:,.0f}" if half else "—",
            f"{d.price_usd_per_hour:.2f}" if d.price_usd_per_hour else "—")


def _sheet_table(sheet: dict):  # noqa: ANN202
    from rich.table import Table

    table = Table(title=f"{sheet.get('display_name', sheet.get('name'))} ({sheet.get('name')})",
                  show_header=True)
    table.add_column("section")
    table.add_column("field")
    table.add_column("value")
    for key, value in sheet.items():
        if not isinstance(value, dict):
            table.add_row("", key, str(value))
    for section, values in sheet.items():
        if isinstance(values, dict):
            for key, value in values.items():
                table.add_row(section, key, str(value))
    return table


@catalog_app.command("links")
def catalog_links() -> None:
    """Network links for KV-cache transfer between machines."""
    from phasewise.catalog import link_names, load_link

    links = [(n, load_link(n)) for n in link_names()]
    _print_table("links", ("name", "link", "bandwidth", "latency", "source"),
                 ((n, link.name, f"{link.bandwidth_bytes_per_s / 1e9:,.1f} GB/s",
                   f"{link.latency_s * 1e6:.1f} µs", link.source) for n, link in links))


@catalog_app.command("engines")
def catalog_engines(
    name: str | None = typer.Argument(None, help="Show one engine: its documented traits "
                                                    "by backend, its variants and what "
                                                    "selects each, and its fitted constants."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """Engines the calibrated model knows, with their variants (--engine ENGINE+VARIANT)."""
    from phasewise.cost.calibration import load_profile
    from phasewise.lower import engine_names, resolve_engine
    from phasewise.report.output import to_json

    check_format(fmt)
    profile = load_profile(None)
    if name:
        engine = resolve_engine(name)
        doc = _engine_document(engine, profile)
        if fmt == "json":
            echo(to_json(doc))
            return
        _print_engine(doc)
        return
    docs = [_engine_document(resolve_engine(n), profile) for n in engine_names()]
    if fmt == "json":
        echo(to_json(docs))
        return
    _print_table(f"{len(docs)} engines (--engine NAME or NAME+VARIANT; "
                 "`phasewise catalog engines NAME` for one)",
                 ("name", "engine", "variants", "fitted to"),
                 ((d["name"], d["display_name"],
                   ", ".join(v["name"] for v in d["variants"]) or "—",
                   f"{d['fitted_rows']} measurements" if d["fitted_rows"] else "generic values")
                  for d in docs))


def _engine_document(engine, profile) -> dict:  # noqa: ANN001
    """One engine as data: traits (base, per backend), variants with their selectors, and
    the bundled profile's constants at the engine's levels with the rows fitted to."""
    base = engine.fitted_name
    levels = {key: values for key, values in profile.values.items()
              if key == f"engine:{base}" or key.startswith(f"engine:{base}/")}
    constants = {key: {constant: {"value": value,
                                  "rows": int(profile.records.get(key, {}).get(constant, {})
                                              .get("rows", 0) or 0)}
                       for constant, value in values.items()}
                 for key, values in sorted(levels.items())}
    rows = max((c["rows"] for values in constants.values() for c in values.values()), default=0)
    return {
        "name": base, "display_name": engine.display_name, "aliases": list(engine.aliases),
        "source": engine.source, "traits": dict(engine.traits),
        "backend_traits": {backend: dict(pairs) for backend, pairs in engine.backend_traits},
        "variants": [{"name": v.name, "backend": v.backend or "any",
                      "selected_by": _selectors(v), "traits": dict(v.traits),
                      "source": v.source} for v in engine.variants],
        "applied": list(engine.applied), "fitted_rows": rows, "constants": constants}


def _selectors(variant) -> list[str]:  # noqa: ANN001
    """What chooses a variant: its name after a '+', and what a measurement's software
    description may say."""
    chosen = [f"--engine ...+{variant.name}"]
    chosen += [f"'{phrase}'" for phrase in variant.when]
    if variant.before_date:
        chosen.append(f"a date before {variant.before_date.isoformat()}")
    if variant.before_build:
        chosen.append(f"a build before {variant.before_build}")
    return chosen


def _print_engine(doc: dict) -> None:
    from rich.table import Table

    title = f"{doc['display_name']} ({doc['name']})"
    if doc["applied"]:
        title += f" with {', '.join(doc['applied'])}"
    table = Table(title=title, show_header=True)
    for column in ("section", "field", "value"):
        table.add_column(column)
    table.add_row("", "aliases", ", ".join(doc["aliases"]) or "—")
    table.add_row("", "source", doc["source"])
    for key, value in doc["traits"].items():
        table.add_row("traits", key, _trait_text(value))
    for backend, traits in doc["backend_traits"].items():
        for key, value in traits.items():
            table.add_row(f"traits on {backend}", key, _trait_text(value))
    for variant in doc["variants"]:
        section = f"variant {variant['name']}"
        table.add_row(section, "backend", variant["backend"])
        table.add_row(section, "selected by", "; ".join(variant["selected_by"]))
        for key, value in variant["traits"].items():
            table.add_row(section, key, _trait_text(value))
        table.add_row(section, "source", variant["source"])
    for level, values in doc["constants"].items():
        for constant, entry in values.items():
            rows = f" ({entry['rows']} rows)" if entry["rows"] else ""
            table.add_row(f"fitted {level}", constant, f"{entry['value']:.4g}{rows}")
    if not doc["constants"]:
        table.add_row("fitted", "—", "no measurements: the global (generic) values")
    console().print(table)


def _trait_text(value) -> str:  # noqa: ANN001
    if isinstance(value, tuple) and len(value) > 8:
        return f"[{', '.join(map(str, value[:8]))}, ... ({len(value)} entries)]"
    return str(list(value) if isinstance(value, tuple) else value)


@catalog_app.command("formats")
def catalog_formats(
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """Number formats --weight-dtype, --act-dtype and --kv-dtype take: bits per element
    (block scales included), the matmul format, and the source of each figure."""
    from phasewise.report.output import to_json
    from phasewise.specs.precision import FORMATS

    check_format(fmt)
    rows = [{"name": f.name, "bits_per_element": f.bits_per_element,
             "expert_bits_per_element": f.expert_bits_per_element,
             "math_format": f.math_format or "the activations'", "source": f.source}
            for f in FORMATS.values()]
    if fmt == "json":
        echo(to_json(rows))
        return
    _print_table(f"{len(rows)} number formats (weight-only formats compute in the "
                 "activation format)", ("name", "bits", "matmul in", "source"),
                 ((r["name"], _bits_text(r), r["math_format"], r["source"]) for r in rows))


def _bits_text(row: dict) -> str:
    bits = f"{row['bits_per_element']:g}"
    if row["expert_bits_per_element"] is not None:
        bits += f" ({row['expert_bits_per_element']:g} routed experts)"
    return bits


def _print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A catalog listing as a table: the title, one column per name, one row per entry."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console().print(table)
