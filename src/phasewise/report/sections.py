"""Any phasewise JSON document as a list of sections: tables and plot specifications.

The HTML report and the local web app both draw these sections, so a page in the app and
a report file show the same tables and plots. Everything shown is read from the document:
the only computing done here is plot geometry (a roofline's two ceilings drawn from the
document's peak and bandwidth, an axis's span), never a new figure about the model.
Plots are Plotly figure specifications (plain dicts: ``data`` and ``layout``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from phasewise.report import units
from phasewise.report.figures import (
    CLASS_COLOURS,
    PHASE_COLOURS,
    Figure,
    bars,
    lines,
    pareto,
    plot_layout,
    roofline,
)
from phasewise.report.tables import Cell, Table, key_value_table, number, rows_table, scalars

BYTE_CLASSES = ("weights", "kv_read", "kv_write", "activations", "network")


@dataclass(frozen=True)
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- what a document is


def document_kind(doc: Any) -> str:
    """The verb that wrote ``doc``, read from the keys each verb's document carries;
    'document' for anything else (drawn generically, as is a 'plan-like' one)."""
    if not isinstance(doc, dict):
        return "document"
    keys = set(doc)
    if "estimates" in keys:
        return "estimate-sweep"
    if {"prefill", "decode", "memory"} <= keys:
        return "estimate"
    if {"prefill", "decode", "summary"} <= keys:
        return "explain"
    if {"points", "compute_bound_batch"} <= keys:
        return "batch-sweep"
    if {"results", "winners"} <= keys:
        return "compare"
    if {"points", "best_tp_for_tpot"} <= keys:
        return "tp-scaling"
    if "runs" in keys or {"ttft", "tpot", "e2el"} <= keys:
        return "simulate"
    if {"scores", "predictions"} <= keys:
        return "validate"
    if {"ceilings", "points"} <= keys:
        return "profile"
    if {"fronts", "candidates_screened"} <= keys or "plans" in keys:
        return "plan"
    if "plan" in str(doc.get("kind", "")) or "candidates" in keys:
        return "plan-like"
    return "document"


def build_sections(doc: dict[str, Any]) -> list[Section]:
    """The sections for ``doc``, by its kind; every document ends with its inputs."""
    kind = document_kind(doc)
    sections = BUILDERS.get(kind, _generic)(doc)
    return sections + [_inputs_section(doc)]


# ---------------------------------------------------------------- per kind


def _estimate(doc: dict[str, Any]) -> list[Section]:
    phases = [doc["prefill"], doc["decode"]]
    headline = key_value_table("Headline", [
        ("TTFT", number(doc["ttft_s"], units.seconds)),
        ("TPOT", number(doc["tpot_s"], units.seconds)),
        ("end-to-end latency", number(doc["e2el_s"], units.seconds)),
        ("tokens/s", number(doc["tokens_per_s"], units.rate)),
        ("tokens/s per user", number(doc["tokens_per_s_per_user"], units.rate)),
        ("tokens/s per GPU", number(doc["tokens_per_s_per_gpu"], units.rate)),
        ("US$ per million output tokens", number(doc.get("usd_per_million_output_tokens"),
                                                 units.usd)),
        ("fits in memory", number(doc["memory"]["fits"])),
        ("largest batch that fits", number(doc["memory"]["max_batch_size"])),
    ])
    phase_table = Table("The two phases", ["", *[p["label"] for p in phases]], [
        [Cell(name), *[number(p.get(key), how) for p in phases]] for name, key, how in (
            ("bound", "bound", None), ("expected time", "time_s", units.seconds),
            ("speed-of-light time", "sol_time_s", units.seconds),
            ("FLOPs", "flops", lambda v: units.si(v, "FLOP")),
            ("bytes moved", "memory_bytes", lambda v: units.si(v, "B")),
            ("arithmetic intensity (FLOP/B)", "arithmetic_intensity", None),
            ("device ridge (FLOP/B)", "ridge_point", None), ("MFU", "mfu", units.percent),
            ("MBU", "mbu", units.percent), ("attention share", "attention_share", units.percent),
            ("tokens/s", "tokens_per_s", units.rate))])
    figures = [roofline(f"Roofline: {doc['hardware']['display_name']}", doc["hardware"], phases),
               _time_by_class(doc), _bytes_by_class(phases), _memory_bars(doc["memory"])]
    sections = [Section(f"Estimate: {doc['inputs']['model']} on {doc['hardware']['display_name']}",
                        [headline, phase_table], figures[:2], list(doc.get("warnings") or []))]
    sections.append(Section("Bytes and memory", [
        key_value_table("Memory per device", [(k.replace("_", " "), number(
            v, units.gigabytes if k.endswith("bytes") else None)) for k, v in doc["memory"].items()]),
        key_value_table("Cost and energy", [(k.replace("_", " "), number(v)) for k, v in
                                             (doc.get("cost_energy") or {}).items()])],
        figures[2:]))
    if doc.get("ops"):
        sections.append(Section("Operators", [rows_table("Per-operator ledger", [
            {**{k: v for k, v in op.items() if k != "bytes"}, **{f"{c}_bytes": op["bytes"].get(c)
                                                                for c in BYTE_CLASSES}}
            for op in doc["ops"]])]))
    if doc.get("constants"):
        sections.append(Section("Calibrated constants", [rows_table("Constants", doc["constants"])]))
    return sections


def _time_by_class(doc: dict[str, Any]) -> Figure:
    """Per phase, each operator's expected time stacked by its kind when the document lists
    operators (--detail); otherwise the phase's compute, memory and network floors."""
    labels = {p["phase"]: p["label"] for p in (doc["prefill"], doc["decode"])}
    ops = doc.get("ops") or []
    if ops:
        kinds = list(dict.fromkeys(op["kind"] for op in ops))
        data = [{"type": "bar", "name": kind, "marker": {"color": CLASS_COLOURS.get(kind)},
                 "x": [labels.get(op["phase"], op["phase"]) for op in ops if op["kind"] == kind],
                 "y": [op["time_s"] for op in ops if op["kind"] == kind],
                 "hovertext": [op["name"] for op in ops if op["kind"] == kind],
                 "hovertemplate": "%{hovertext}: %{y:.3s}s<extra>%{fullData.name}</extra>"}
                for kind in kinds]
        title = "Expected time by operator class, per phase (share of the step)"
        return Figure(title, data, plot_layout(title, "phase", "% of the step's expected time",
                                           barmode="stack", barnorm="percent"))
    phases = [doc["prefill"], doc["decode"]]
    return bars("Time per step by bound, per phase (floors and expected)",
                [p["label"] for p in phases],
                {"compute floor": [p["compute_s"] for p in phases],
                 "memory floor": [p["memory_s"] for p in phases],
                 "network": [p["network_s"] for p in phases],
                 "speed of light": [p["sol_time_s"] for p in phases],
                 "expected": [p["time_s"] for p in phases]}, "phase", "seconds per step")


def _bytes_by_class(phases: list[dict[str, Any]]) -> Figure:
    return bars("Bytes moved per step by class", [p["label"] for p in phases],
                {c: [p["bytes"].get(c, 0.0) for p in phases] for c in BYTE_CLASSES},
                "phase", "bytes", stack=True)


def _memory_bars(memory: dict[str, Any]) -> Figure:
    parts = ("weights_bytes", "kv_cache_bytes", "activations_bytes", "reserve_bytes")
    figure = bars("Memory per device", ["needed"], {p.removesuffix("_bytes"): [memory[p]]
                                                    for p in parts if p in memory},
                  "", "bytes", stack=True)
    figure.layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1,
                                "y0": memory["capacity_bytes"], "y1": memory["capacity_bytes"],
                                "line": {"color": "#000", "dash": "dash"}}]
    figure.layout["annotations"] = [{"xref": "paper", "x": 1, "y": memory["capacity_bytes"],
                                     "text": "capacity", "showarrow": False, "yanchor": "bottom"}]
    return figure


def _estimate_sweep(doc: dict[str, Any]) -> list[Section]:
    docs = doc["estimates"]
    labels = [_estimate_label(d) for d in docs]
    rows = [{"configuration": label, "ttft_s": d["ttft_s"], "tpot_s": d["tpot_s"],
             "tokens_per_s": d["tokens_per_s"], "tokens_per_s_per_user": d["tokens_per_s_per_user"],
             "tokens_per_s_per_gpu": d["tokens_per_s_per_gpu"], "prefill_bound":
             d["prefill"]["bound"], "decode_bound": d["decode"]["bound"],
             "fits": d["memory"]["fits"]} for label, d in zip(labels, docs, strict=False)]
    figures = [bars("TTFT and TPOT per configuration", labels,
                    {"TTFT (s)": [d["ttft_s"] for d in docs], "TPOT (s)": [d["tpot_s"] for d in docs]},
                    "configuration", "seconds", log_value=True),
               pareto("Per-user speed against per-GPU throughput", rows, "tokens_per_s_per_gpu",
                      "tokens_per_s_per_user", "configuration")]
    first = docs[0]
    figures.append(roofline(f"Roofline: {first['hardware']['display_name']}", first["hardware"],
                            [dict(p, label=f"{label} {p['phase']}")
                             for label, d in zip(labels, docs, strict=False)
                             for p in (d["prefill"], d["decode"])
                             if d["hardware"]["name"] == first["hardware"]["name"]]))
    return [Section("Estimate sweep", [rows_table("Configurations", rows)], figures)]


def _estimate_label(d: dict[str, Any]) -> str:
    i = d["inputs"]
    return (f"{i['model']} · {i['hardware']} · isl {i['isl']} · osl {i['osl']} · "
            f"b{i['batch_size']} · tp{i['tp']}")


def _explain(doc: dict[str, Any]) -> list[Section]:
    phases = [doc["prefill"], doc["decode"]]
    words = Table("What each phase does", ["", "prefill", "decode"], [
        [Cell(key.replace("_", " ")), *[number(p.get(key)) for p in phases]]
        for key in ("operation", "bound", "hardware_figure", "sets", "latency_s", "grows_with_prompt",
                    "grows_with_output", "grows_with_batch", "arithmetic_intensity", "ridge_point",
                    "sol_time_s", "attention_share", "kv_bytes_share")])
    turning = key_value_table("Turning points", [
        (k.replace("_", " "), number(doc.get(k))) for k in (
            "decode_context_tokens", "decode_compute_bound_batch", "decode_intensity_limit",
            "decode_compute_bound_batch_short_context", "max_batch_size",
            "attention_overtakes_gemms_at")])
    ridge = phases[0]["ridge_point"]
    title = "Arithmetic intensity of each phase against the ridge"
    figure = Figure(title, [
        {"type": "bar", "name": "arithmetic intensity", "x": ["prefill", "decode"],
         "y": [p["arithmetic_intensity"] for p in phases],
         "marker": {"color": [PHASE_COLOURS["prefill"], PHASE_COLOURS["decode"]]}},
        {"type": "scatter", "mode": "lines", "name": f"device ridge {ridge:,.0f} FLOP/B",
         "x": ["prefill", "decode"], "y": [ridge, ridge], "line": {"dash": "dash", "color": "#000"}}],
        plot_layout(title, "phase", "FLOP/byte", log_y=True))
    sections = [Section(f"Explain: {doc['inputs']['model']} on {doc['hardware_display_name']}",
                        [words, turning], [figure], list(doc.get("summary") or []))]
    if doc.get("batch_sweep"):
        sections.extend(_batch_sweep(doc["batch_sweep"]))
    return sections


def _batch_sweep(doc: dict[str, Any]) -> list[Section]:
    points = doc["points"]
    batches = [p["batch_size"] for p in points]
    ridge = points[0]["ridge_point"] if points else None
    figures = [lines("Decode climbs the roofline with batch: intensity against the ridge", batches,
                     {"decode intensity (FLOP/B)": [p["decode_intensity"] for p in points],
                      "device ridge (FLOP/B)": [p["ridge_point"] for p in points]},
                     "batch size", "FLOP/byte", log_x=True, log_y=True),
               lines("Throughput per device and per user against batch", batches,
                     {"tokens/s per device": [p["tokens_per_s_per_device"] for p in points],
                      "tokens/s per user": [p["tokens_per_s_per_user"] for p in points]},
                     "batch size", "tokens/s", log_x=True, log_y=True),
               pareto("Pareto: tokens/s per user against tokens/s per device", points,
                      "tokens_per_s_per_device", "tokens_per_s_per_user", "batch_size")]
    notes = [f"device ridge {ridge:,.1f} FLOP/B; largest batch that fits "
             f"{doc.get('max_batch_size')}"] if ridge else []
    if doc.get("compute_bound_batch") is not None:
        notes.append(f"decode turns compute-bound at batch {doc['compute_bound_batch']}")
    return [Section("Batch sweep", [rows_table("Batch sweep", points)], figures, notes)]


def _compare(doc: dict[str, Any]) -> list[Section]:
    results = doc["results"]
    names = [_device_label(r) for r in results]
    figures = [bars("Prefill: devices ranked by TTFT", names,
                    {"TTFT (s)": [r["ttft_s"] for r in results]}, "device", "seconds",
                    horizontal=True, log_value=True, ranked=True),
               bars("Decode: devices ranked by TPOT", names,
                    {"TPOT (s)": [r["tpot_s"] for r in results]}, "device", "seconds",
                    horizontal=True, log_value=True, ranked=True),
               bars("Per dollar: devices ranked by US$ per million output tokens", names,
                    {"output tokens": [r.get("usd_per_million_output_tokens") for r in results]},
                    "device", "US$ per million tokens", horizontal=True, log_value=True,
                    ranked=True),
               bars("Per dollar: devices ranked by US$ per million input tokens", names,
                    {"input tokens": [r.get("usd_per_million_input_tokens") for r in results]},
                    "device", "US$ per million tokens", horizontal=True, log_value=True,
                    ranked=True),
               pareto("TTFT against TPOT (lower-left is better)",
                      [dict(r, device=n) for r, n in zip(results, names, strict=False)], "ttft_s", "tpot_s",
                      "device")]
    figures[-1].data[0]["mode"] = "markers"
    winners = key_value_table("Winners", [(k, Cell(str(v), v)) for k, v in doc["winners"].items()])
    skipped = rows_table("Left out", [{"device": k, "why": v} for k, v in doc["skipped"].items()])
    title = f"Compare: {doc['model']}, ranked by {doc['rank_by']}"
    return [Section(title, [winners, rows_table("Ranking", results)], figures),
            Section("Devices left out", [skipped] if doc["skipped"] else [])]


def _device_label(r: dict[str, Any]) -> str:
    return r["hardware"] if r.get("tp", 1) == 1 else f"{r['hardware']} TP{r['tp']}"


def _tp_scaling(doc: dict[str, Any]) -> list[Section]:
    points = doc["points"]
    tps = [p["tp"] for p in points]
    figures = [lines("TTFT and TPOT against the tensor-parallel degree", tps,
                     {"TTFT (s)": [p["ttft_s"] for p in points],
                      "TPOT (s)": [p["tpot_s"] for p in points]}, "TP", "seconds", log_y=True),
               lines("Share of each phase spent on the network", tps,
                     {"prefill": [p["prefill_network_share"] for p in points],
                      "decode": [p["decode_network_share"] for p in points]}, "TP", "share")]
    summary = key_value_table("Scaling", [(k.replace("_", " "), number(doc.get(k))) for k in (
        "link", "best_tp_for_tpot", "best_tp_for_ttft", "tp_stops_paying_at")])
    return [Section(f"TP scaling: {doc['model']} on {doc['hardware']}",
                    [summary, rows_table("Degrees", points)], figures)]


def _simulate(doc: dict[str, Any]) -> list[Section]:
    runs = doc.get("runs") or [doc]
    sections = [_latency_section(run) for run in runs[:1]] if len(runs) == 1 else []
    if len(runs) > 1:
        sections.append(_load_sweep(runs, doc.get("verdict")))
    return sections


def _latency_section(run: dict[str, Any]) -> Section:
    metrics = ("ttft", "tpot", "itl", "e2el")
    stats = ("mean_s", "p50_s", "p90_s", "p99_s", "max_s")
    table = Table("Latency", ["metric", *[s.removesuffix("_s") for s in stats]],
                  [[Cell(m.upper()), *[number(run[m].get(s), units.seconds) for s in stats]]
                   for m in metrics if run.get(m)])
    figure = bars("Latency percentiles", [s.removesuffix("_s") for s in stats],
                  {m.upper(): [run[m].get(s) for s in stats] for m in metrics if run.get(m)},
                  "statistic", "seconds", log_value=True)
    scalars = key_value_table("Run", [(k.replace("_", " "), number(v)) for k, v in run.items()
                                       if not isinstance(v, (dict, list)) and k not in
                                       ("schema_version", "tool_version")])
    pools = rows_table("Pools", run["inputs"].get("pools", []))
    return Section(f"Simulate: {run['inputs']['model']}, {run['inputs']['scheduler']}",
                   [table, scalars, pools], [figure], list(run.get("notes") or []))


def _load_label(run: dict[str, Any]) -> Any:
    w = run["inputs"].get("workload", {})
    return w.get("rate_rps") if w.get("rate_rps") is not None else w.get("clients")


def _load_sweep(runs: list[dict[str, Any]], verdict: str | None) -> Section:
    closed = runs[0]["inputs"].get("workload", {}).get("clients") is not None
    schedulers = list(dict.fromkeys(r["inputs"]["scheduler"] for r in runs))
    x_title = "concurrent clients" if closed else "offered load (requests/s)"
    figures = []
    for metric in ("ttft", "tpot"):
        series: dict[str, list[Any]] = {}
        x: list[Any] = []
        for name in schedulers:
            chosen = [r for r in runs if r["inputs"]["scheduler"] == name]
            x = [_load_label(r) for r in chosen]
            for stat in ("p50_s", "p90_s", "p99_s"):
                series[f"{name} {stat.removesuffix('_s')}"] = [r[metric][stat] for r in chosen]
        figure = lines(f"{metric.upper()} against load", x, series, x_title, "seconds", log_y=True)
        if len(schedulers) > 1:
            for trace, name in zip(figure.data, [n for n in schedulers for _ in range(3)], strict=False):
                trace["x"] = [_load_label(r) for r in runs if r["inputs"]["scheduler"] == name]
        figures.append(figure)
    throughput = lines("Throughput against load", [_load_label(r) for r in runs],
                       {"output tokens/s": [r["output_tokens_per_s"] for r in runs],
                        "requests/s served": [r["requests_per_s"] for r in runs]},
                       x_title, "output tokens/s")
    throughput.data[1]["yaxis"] = "y2"
    throughput.layout["yaxis2"] = {"title": {"text": "requests/s served"}, "overlaying": "y",
                                   "side": "right"}
    throughput.layout["margin"]["r"] = 70
    figures.append(throughput)
    points = [dict(r, configuration=f"{r['inputs']['scheduler']} @ {_load_label(r)}") for r in runs]
    figures.append(pareto("Pareto: tokens/s per user against tokens/s per GPU", points,
                          "tokens_per_s_per_gpu", "tokens_per_s_per_user", "configuration"))
    rows = [{"scheduler": r["inputs"]["scheduler"], "load": _load_label(r),
             "ttft_p50_s": r["ttft"]["p50_s"], "ttft_p99_s": r["ttft"]["p99_s"],
             "tpot_p50_s": r["tpot"]["p50_s"], "tpot_p99_s": r["tpot"]["p99_s"],
             "requests_per_s": r["requests_per_s"], "output_tokens_per_s": r["output_tokens_per_s"],
             "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
             "tokens_per_s_per_user": r["tokens_per_s_per_user"], "preemptions": r["preemptions"]}
            for r in runs]
    return Section(f"Simulate: {runs[0]['inputs']['model']} under load",
                   [rows_table("Runs", rows)], figures, [verdict] if verdict else [])


def _validate(doc: dict[str, Any]) -> list[Section]:
    predictions = [p for p in doc["predictions"] if p.get("measured") and p.get("predicted")]
    values = [v for p in predictions for v in (p["measured"], p["predicted"]) if v > 0]
    data = []
    for phase in dict.fromkeys(p["phase"] for p in predictions):
        chosen = [p for p in predictions if p["phase"] == phase]
        data.append({"type": "scatter", "mode": "markers", "name": phase,
                     "x": [p["measured"] for p in chosen], "y": [p["predicted"] for p in chosen],
                     "text": [f"{p['record_id']} {p['hardware']} {p['model']} ({p['unit']})"
                              for p in chosen],
                     "hovertemplate": "%{text}<br>measured %{x:.4g}, predicted %{y:.4g}"})
    floors = [p for p in predictions if p.get("sol")]
    if floors:
        data.append({"type": "scatter", "mode": "markers", "name": "speed-of-light floor",
                     "visible": "legendonly", "marker": {"symbol": "circle-open"},
                     "x": [p["measured"] for p in floors], "y": [p["sol"] for p in floors],
                     "text": [p["record_id"] for p in floors]})
    if values:
        data.append({"type": "scatter", "mode": "lines", "name": "predicted = measured",
                     "x": [min(values), max(values)], "y": [min(values), max(values)],
                     "line": {"color": "#888", "dash": "dash"}})
    figure = Figure("Predicted against measured", data,
                    plot_layout("Predicted against measured (each row in its own unit)",
                            "measured", "predicted", log_x=True, log_y=True, height=560))
    return [Section("Validate: " + str(doc.get("mode", "")), [rows_table("Scores", doc["scores"])],
                    [figure], [str(doc.get("error_definition", ""))]),
            Section("Rows", [rows_table("Predictions", doc["predictions"]),
                             rows_table("Faster than the speed-of-light floor",
                                        doc.get("faster_than_floor") or []),
                             rows_table("Excluded", doc.get("excluded") or [])])]


def _profile(doc: dict[str, Any]) -> list[Section]:
    points = doc["points"]
    labels = [p["label"] if p["phase"] == "prefill" else
              f"{p['label']} b{p['batch_size']} c{p['context_tokens']}" for p in points]
    series = {"measured": [p["time_s"] for p in points],
              "speed of light": [p["sol_time_s"] for p in points]}
    if any(p.get("expected_time_s") is not None for p in points):
        series["calibrated"] = [p.get("expected_time_s") for p in points]
    figure = bars("Measured against the ledger's floor, per point", labels, series, "point",
                  "seconds per step", log_value=True)
    ceilings = doc["ceilings"]
    table = rows_table("Points", [{k: v for k, v in p.items() if k != "bytes"} for p in points])
    figures = [figure]
    peak = (ceilings.get("gemm_flops_per_s") or {}).get(doc.get("dtype"))
    bandwidth = ceilings.get("read_bytes_per_s")
    if peak and bandwidth:
        measured = {"peak_flops_per_s": peak, "memory_bandwidth_bytes_per_s": bandwidth,
                    "ridge_point": peak / bandwidth}
        figures.append(roofline(f"Measured roofline ({doc.get('dtype')} GEMM ceiling, read "
                                "bandwidth)", measured,
                                [dict(p, label=label) for p, label in zip(points, labels, strict=False)]))
    return [Section(f"Profile: {doc['model']} on {ceilings.get('device_name', doc.get('device'))}",
                    [key_value_table("Ceilings", [(k, number(v)) for k, v in scalars(ceilings)]),
                     table], figures, list(ceilings.get("notes") or []))]


def _plan(doc: dict[str, Any]) -> list[Section]:
    """The chosen layout, each Pareto front over the candidates it was drawn from, and the
    candidates as tables."""
    if "plans" in doc:
        return [section for plan in doc["plans"] for section in _plan(plan)]
    candidates = {c["index"]: c for c in [*doc.get("best_per_device", []),
                                          *doc.get("verified", [])]}
    figures = [_front(front, candidates) for front in doc.get("fronts", [])]
    tables = []
    chosen = doc.get("chosen") or doc.get("closest")
    if chosen:
        tables.append(key_value_table("Chosen" if doc.get("chosen") else "Closest", [
            (k.replace("_", " "), number(v)) for k, v in chosen.items()
            if not isinstance(v, (dict, list))]))
        tables.append(rows_table("Its pools", chosen.get("pools", [])))
        tables.append(rows_table("Its targets", chosen.get("targets", [])))
    summary = key_value_table("Search", [(k.replace("_", " "), number(doc.get(k))) for k in (
        "shapes_priced", "shapes_unfit", "candidates_screened", "candidates_verified")])
    rows = [{k: v for k, v in c.items() if k not in ("pools", "targets")}
            for c in doc.get("best_per_device", [])]
    verified = [{k: v for k, v in c.items() if k not in ("pools", "targets")}
                for c in doc.get("verified", [])]
    return [Section(f"Plan: {doc.get('model', '')}", [summary, *tables], figures,
                    [doc.get("verdict", ""), *doc.get("notes", [])]),
            Section("Candidates", [rows_table("Best per device", rows),
                                   rows_table("Verified by simulation", verified)])]


def _front(front: dict[str, Any], candidates: dict[int, dict[str, Any]]) -> Figure:
    x_key, y_key = front["x"], front["y"]
    others = [c for c in candidates.values() if c.get(x_key) is not None and
              c.get(y_key) is not None]
    data = [{"type": "scatter", "mode": "markers", "name": "candidates",
             "x": [c[x_key] for c in others], "y": [c[y_key] for c in others],
             "text": [c.get("label", "") for c in others], "marker": {"color": "#bbb"},
             "hovertemplate": "%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"},
            {"type": "scatter", "mode": "lines+markers", "name": f"front ({front['source']})",
             "x": [p[0] for p in front["points"]], "y": [p[1] for p in front["points"]],
             "text": [candidates.get(i, {}).get("label", str(i)) for i in front["indices"]],
             "marker": {"color": "#d62728", "size": 9},
             "hovertemplate": "%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"}]
    title = f"Pareto front: {front['name']} ({front['source']})"
    return Figure(title, data, plot_layout(title, x_key.replace("_", " "), y_key.replace("_", " ")))


def _generic(doc: dict[str, Any]) -> list[Section]:
    """A document of a kind this module does not know: its scalars as one table, each list
    of records as a table, and a Pareto view of any list whose records carry per-user and
    per-device throughput."""
    if not isinstance(doc, dict):
        return [Section("Document", [rows_table("Values", [{"value": doc}])])]
    tables = [key_value_table("Values", [(k, number(v)) for k, v in scalars(doc)])]
    figures = []
    for key, value in _record_lists(doc):
        tables.append(rows_table(key, value))
        sample = value[0]
        for x_key, y_key in (("tokens_per_s_per_gpu", "tokens_per_s_per_user"),
                             ("tokens_per_s_per_device", "tokens_per_s_per_user"),
                             ("usd_per_million_output_tokens", "tpot_s")):
            if x_key in sample and y_key in sample:
                label = next((k for k in ("name", "label", "hardware", "configuration")
                              if k in sample), x_key)
                figures.append(pareto(f"{key}: {y_key} against {x_key}", value, x_key, y_key,
                                      label))
                break
    title = str(doc.get("kind", "Document")).capitalize()
    return [Section(title, tables, figures)]


def _record_lists(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, list[dict]]]:
    found = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            found.append((prefix + key, [_flat(v) for v in value]))
        elif isinstance(value, dict):
            found.extend(_record_lists(value, f"{prefix}{key}."))
    return found


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    return dict(scalars(record)) | {k: v for k, v in record.items() if isinstance(v, list)}


def _inputs_section(doc: Any) -> Section:
    if not isinstance(doc, dict):
        return Section("Inputs")
    inputs = doc.get("inputs")
    if isinstance(inputs, dict):
        pairs = scalars(inputs)
    else:
        pairs = [(k, v) for k, v in doc.items() if not isinstance(v, (dict, list))]
    return Section("Inputs", [key_value_table("Inputs", [(k, number(v)) for k, v in pairs])])


BUILDERS: dict[str, Callable[[dict[str, Any]], list[Section]]] = {
    "estimate": _estimate, "estimate-sweep": _estimate_sweep, "explain": _explain,
    "batch-sweep": _batch_sweep, "compare": _compare, "tp-scaling": _tp_scaling,
    "simulate": _simulate, "validate": _validate, "profile": _profile, "plan": _plan,
}
