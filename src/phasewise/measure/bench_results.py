"""Bench results as files: phasewise's own document, the measurement rows `phasewise
validate --measurements` reads, and the result files of other tools read into the same
summary.

Read from other tools (each a documented output format):
- ``vllm bench serve --save-result`` (vllm/benchmarks/serve.py): one JSON object a run
  (``--append-result`` writes one a line), latencies in milliseconds as
  ``mean_ttft_ms``, ``median_ttft_ms``, ``std_ttft_ms``, ``p99_ttft_ms``...; with
  ``--save-detailed`` also every request's ``ttfts``, ``itls``, ``latencies``,
  ``start_times``, ``input_lens`` and ``output_lens``, from which the metrics are
  recomputed here;
- ``llama-bench -o json`` (or ``-o jsonl``): one object a test, ``n_prompt``, ``n_gen``,
  ``n_depth``, ``avg_ts`` (tokens/s), ``model_type`` ("qwen2 7B Q4_K - Medium"),
  ``model_n_params`` (tools/llama-bench/README.md, "JSON");
- GuideLLM's report (``benchmarks.json``): ``benchmarks[].metrics`` of distribution
  summaries (``successful``: mean, median, std_dev, percentiles p50…p999). GuideLLM's
  ``inter_token_latency_ms`` is (last token − first token) / (tokens − 1) per request,
  vLLM's TPOT, and is read as TPOT; its ``time_per_output_token_ms`` includes the TTFT
  and is not read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from phasewise.errors import InputError
from phasewise.measure.bench_metrics import (
    BenchRun,
    BenchSummary,
    RequestRecord,
    Slos,
    Stats,
    percentile_key,
    summarize,
)

DOCUMENT_KIND = "phasewise-bench"
METRICS = ("ttft", "tpot", "itl", "e2el")
_VLLM_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_GUIDELLM_METRICS = {"ttft": ("time_to_first_token_ms", 1e-3),
                     "tpot": ("inter_token_latency_ms", 1e-3),
                     "e2el": ("request_latency", 1.0)}
_GUIDELLM_PERCENTILES = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99",
                         "p999": "p99.9"}
_LLAMA_BENCH_TYPE = re.compile(r"^(?P<model>\S+\s+\S+)\s+(?P<dtype>.+)$")


# ---------------------------------------------------------------- phasewise's own document


def record_row(record: RequestRecord) -> dict[str, Any]:
    """A request as one JSON object: its times and counts, nothing it said."""
    return {"index": record.index, "sent_s": record.sent_s,
            "target_input_tokens": record.target_input_tokens,
            "target_output_tokens": record.target_output_tokens,
            "token_s": list(record.token_s), "ended_s": record.ended_s,
            "usage_prompt_tokens": record.usage_prompt_tokens,
            "usage_completion_tokens": record.usage_completion_tokens,
            "finish_reason": record.finish_reason, "error": record.error,
            "timed_out": record.timed_out}


def record_from_row(row: dict[str, Any]) -> RequestRecord:
    token_s = tuple(float(t) for t in row.get("token_s") or ())
    return RequestRecord(index=int(row["index"]), sent_s=float(row["sent_s"]),
                         target_input_tokens=int(row["target_input_tokens"]),
                         target_output_tokens=int(row["target_output_tokens"]),
                         token_s=token_s, chunk_tokens=(1,) * len(token_s),
                         ended_s=row.get("ended_s"),
                         usage_prompt_tokens=row.get("usage_prompt_tokens"),
                         usage_completion_tokens=row.get("usage_completion_tokens"),
                         finish_reason=row.get("finish_reason"), error=row.get("error") or "",
                         timed_out=bool(row.get("timed_out")))


def document(runs: list[BenchRun], *, endpoint: dict[str, Any], plan: dict[str, Any],
             predictions: list[list[dict]] | None = None) -> dict[str, Any]:
    """One JSON document for a bench command: inputs, then each run's summary, requests,
    notes and (with --predict) its comparison rows."""
    from phasewise.version import __version__

    items = []
    for i, run in enumerate(runs):
        item = {"summary": run.summary.model_dump(mode="json"), "notes": list(run.notes),
                "requests": [record_row(r) for r in run.records]}
        if predictions:
            item["prediction"] = predictions[i]
        items.append(item)
    return {"schema_version": 1, "kind": DOCUMENT_KIND, "tool_version": __version__,
            "endpoint": endpoint, "plan": plan, "runs": items}


def runs_from_document(doc: dict[str, Any], path: str) -> list[BenchRun]:
    runs = []
    for item in doc.get("runs") or []:
        records = tuple(record_from_row(r) for r in item.get("requests") or [])
        try:
            summary = BenchSummary.model_validate(item["summary"])
        except Exception:  # noqa: BLE001 - any malformed summary is the same user error
            raise InputError(f"{path}: a run's summary is not a phasewise bench summary.") \
                from None
        runs.append(BenchRun(summary, records, tuple(item.get("notes") or ())))
    if not runs:
        raise InputError(f"{path}: the document holds no runs.")
    return runs


# ---------------------------------------------------------------- other tools' files


def read_results(path: str | Path) -> tuple[str, list[Any]]:
    """(kind, items) for a result file: 'phasewise' or 'vllm' runs (BenchRun), or
    'llama-bench' tests (dicts), or 'guidellm' runs (BenchRun without requests)."""
    from phasewise.files import read_text

    path = Path(path)
    text = read_text(path, what="result file")  # bounded, UTF-8, or one clear line
    docs = _json_documents(text, path)
    first = docs[0]
    if isinstance(first, dict) and first.get("kind") == DOCUMENT_KIND:
        return "phasewise", runs_from_document(first, str(path))
    if isinstance(first, list) and first and isinstance(first[0], dict) and "avg_ts" in first[0]:
        return "llama-bench", first
    if isinstance(first, dict) and "avg_ts" in first and "n_prompt" in first:
        return "llama-bench", docs
    if isinstance(first, dict) and isinstance(first.get("benchmarks"), list):
        return "guidellm", [guidellm_run(b, str(path)) for b in first["benchmarks"]]
    if isinstance(first, dict) and ("mean_ttft_ms" in first or "request_throughput" in first):
        return "vllm", [vllm_run(d, str(path)) for d in docs]
    raise InputError(f"{path}: not a result file phasewise reads (phasewise bench --save-result, "
                     "vllm bench serve --save-result, llama-bench -o json, GuideLLM's "
                     "benchmarks.json).")


def _json_documents(text: str, path: Path) -> list[Any]:
    """One JSON document, or one a line (vLLM's --append-result, llama-bench -o jsonl),
    nesting at most files.MAX_JSON_DEPTH levels."""
    from phasewise.files import MAX_JSON_DEPTH, json_depth

    if json_depth(text) > MAX_JSON_DEPTH:
        raise InputError(f"{path}: nests deeper than {MAX_JSON_DEPTH} levels; it is not a "
                         "result file phasewise reads.")
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    docs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise InputError(f"{path}, line {number}: not valid JSON ({err.msg}).") from None
    if not docs:
        raise InputError(f"{path}: the file is empty.")
    return docs


def vllm_run(doc: dict[str, Any], path: str) -> BenchRun:
    """A ``vllm bench serve`` result: recomputed from its requests when saved in detail,
    else read from its summary keys."""
    load = _vllm_load(doc)
    if doc.get("ttfts") and doc.get("itls") is not None and doc.get("start_times"):
        records = _vllm_records(doc)
        summary = summarize(records, load=load, duration_s=float(doc.get("duration", 0.0)),
                            slos=Slos(), percentiles=_vllm_percentiles(doc) or (50, 90, 99))
        return BenchRun(summary, tuple(records), (f"read from {path} (per request)",))
    completed = _need_number(doc, "completed", path)
    duration = _need_number(doc, "duration", path)
    summary = BenchSummary(
        load=load, sent=int(completed + doc.get("failed", 0)), completed=int(completed),
        failed=int(doc.get("failed", 0)), timed_out=0, not_sent=0, length_mismatches=0,
        counts_from="usage", duration_s=duration,
        total_input_tokens=int(doc.get("total_input_tokens", 0)),
        total_output_tokens=int(doc.get("total_output_tokens", 0)),
        request_throughput_rps=float(doc.get("request_throughput", completed / duration)),
        output_throughput_tps=float(doc.get("output_throughput", 0.0)),
        total_token_throughput_tps=float(doc.get("total_token_throughput", 0.0)),
        request_goodput_rps=doc.get("request_goodput"), slos=Slos(),
        max_concurrency_seen=int(doc.get("max_concurrent_requests") or 0),
        **{m: _vllm_stats(doc, m, int(completed)) for m in METRICS})
    return BenchRun(summary, (), (f"read from {path} (summary only)",))


def _vllm_load(doc: dict[str, Any]) -> dict[str, Any]:
    rate = doc.get("request_rate", "inf")
    concurrency = doc.get("max_concurrency")
    finite = rate not in ("inf", None) and math.isfinite(float(rate))
    if concurrency and not finite:
        return {"kind": "closed", "clients": int(concurrency)}
    return {"kind": "open", "rate_rps": float(rate) if finite else "inf",
            "arrival": "poisson" if float(doc.get("burstiness", 1.0)) == 1.0 else "gamma",
            "max_concurrency": concurrency}


def _vllm_percentiles(doc: dict[str, Any]) -> tuple[float, ...]:
    found = {float(m.group(1)) for key in doc if (m := _VLLM_PERCENTILE.match(key))}
    return tuple(sorted(found))


def _vllm_stats(doc: dict[str, Any], metric: str, count: int) -> Stats:
    ms = 1e-3
    mean = doc.get(f"mean_{metric}_ms")
    if mean is None:
        return Stats(count=0, mean_s=0.0, median_s=0.0, std_s=0.0, percentiles_s={})
    percentiles = {}
    for key, value in doc.items():
        match = _VLLM_PERCENTILE.match(key)
        if match and match.group(2) == metric:
            percentiles[percentile_key(float(match.group(1)))] = float(value) * ms
    return Stats(count=count, mean_s=float(mean) * ms,
                 median_s=float(doc.get(f"median_{metric}_ms", mean)) * ms,
                 std_s=float(doc.get(f"std_{metric}_ms", 0.0)) * ms, percentiles_s=percentiles)


def _vllm_records(doc: dict[str, Any]) -> list[RequestRecord]:
    """Requests from a detailed result: token times rebuilt as start + TTFT + the ITLs."""
    starts = np.asarray(doc["start_times"], dtype=float)
    origin = float(starts.min())
    records = []
    for i, start in enumerate(starts):
        error = (doc.get("errors") or [""] * len(starts))[i] or ""
        ttft = doc["ttfts"][i]
        itl = doc["itls"][i] or []
        token_s = () if error or not ttft else tuple(
            start - origin + ttft + np.concatenate(([0.0], np.cumsum(itl))))
        out = (doc.get("output_lens") or [None] * len(starts))[i]
        records.append(RequestRecord(
            index=i, sent_s=float(start - origin),
            target_input_tokens=int(doc["input_lens"][i]),
            target_output_tokens=int(out or len(token_s)), token_s=token_s,
            chunk_tokens=(1,) * len(token_s), usage_completion_tokens=out, error=error))
    return records


def guidellm_run(bench: dict[str, Any], path: str) -> BenchRun:
    """One GuideLLM benchmark (one strategy) from its report's ``metrics``."""
    metrics = bench.get("metrics")
    if not isinstance(metrics, dict):
        raise InputError(f"{path}: a GuideLLM benchmark has no 'metrics'; is this GuideLLM's "
                         "benchmarks.json?")
    totals = bench.get("request_totals") or {}
    completed = int(totals.get("successful") or _dist(metrics, "request_latency").get("count", 0))
    stats_of = {m: _guidellm_stats(metrics, key, factor, completed)
                for m, (key, factor) in _GUIDELLM_METRICS.items()}
    stats_of["itl"] = Stats(count=0, mean_s=0.0, median_s=0.0, std_s=0.0, percentiles_s={})
    start, end = bench.get("start_time"), bench.get("end_time")
    duration = float(end - start) if start is not None and end is not None and end > start \
        else completed / max(float(_dist(metrics, "requests_per_second").get("mean", 0)), 1e-12)
    inputs = _dist(metrics, "prompt_token_count").get("total_sum", 0)
    outputs = _dist(metrics, "output_token_count").get("total_sum", 0)
    summary = BenchSummary(
        load=_guidellm_load(bench), sent=completed + int(totals.get("errored", 0))
        + int(totals.get("incomplete", 0)), completed=completed,
        failed=int(totals.get("errored", 0)), timed_out=0,
        not_sent=int(totals.get("incomplete", 0)), length_mismatches=0, counts_from="usage",
        duration_s=duration, total_input_tokens=int(inputs), total_output_tokens=int(outputs),
        request_throughput_rps=completed / duration if duration else 0.0,
        output_throughput_tps=outputs / duration if duration else 0.0,
        total_token_throughput_tps=(inputs + outputs) / duration if duration else 0.0,
        request_goodput_rps=None, slos=Slos(), max_concurrency_seen=0, **stats_of)
    return BenchRun(summary, (), (f"read from {path} (GuideLLM summary)",))


def _dist(metrics: dict[str, Any], key: str) -> dict[str, Any]:
    return ((metrics.get(key) or {}).get("successful")) or {}


def _guidellm_stats(metrics: dict[str, Any], key: str, factor: float, count: int) -> Stats:
    d = _dist(metrics, key)
    if not d:
        return Stats(count=0, mean_s=0.0, median_s=0.0, std_s=0.0, percentiles_s={})
    pct = d.get("percentiles") or {}
    return Stats(count=int(d.get("count", count)), mean_s=float(d.get("mean", 0.0)) * factor,
                 median_s=float(d.get("median", pct.get("p50", 0.0))) * factor,
                 std_s=float(d.get("std_dev", 0.0)) * factor,
                 percentiles_s={ours: float(pct[theirs]) * factor
                                for theirs, ours in _GUIDELLM_PERCENTILES.items() if theirs in pct})


def _guidellm_load(bench: dict[str, Any]) -> dict[str, Any]:
    strategy = {}
    for holder in ("config", "args", "scheduler"):
        found = (bench.get(holder) or {}).get("strategy") if isinstance(bench.get(holder), dict) \
            else None
        if isinstance(found, dict):
            strategy = found
            break
    kind = str(strategy.get("type_") or strategy.get("type") or "")
    if kind == "synchronous":
        return {"kind": "closed", "clients": 1}
    if kind in ("concurrent", "throughput") and strategy.get("streams"):
        return {"kind": "closed", "clients": int(strategy["streams"])}
    if kind in ("constant", "poisson") and strategy.get("rate"):
        return {"kind": "open", "rate_rps": float(strategy["rate"]), "arrival": kind,
                "max_concurrency": None}
    return {"kind": kind or "unknown"}


def _need_number(doc: dict[str, Any], key: str, path: str) -> float:
    value = doc.get(key)
    if not isinstance(value, (int, float)) or value <= 0:
        raise InputError(f"{path}: '{key}' is missing or not positive; is this a vllm bench "
                         "serve result?")
    return float(value)


# ---------------------------------------------------------------- measurement rows


def measurement_rows(runs: Iterable[BenchRun], *, hardware: str, model: str, weight_dtype: str,
                     software: str, source: str, record_prefix: str,
                     source_url: str = "") -> list[dict[str, Any]]:
    """Rows in the layout of catalog/measurements (validate.measurements): mean TTFT, TPOT
    and E2EL in ms at the run's mean lengths. `phasewise validate` prices ``ttft``/``tpot``
    as one request served alone, so a run that kept more than one request in flight is
    written with an ``exclude`` reason: recorded, not scored."""
    rows = []
    for n, run in enumerate(runs, start=1):
        s = run.summary
        if not s.completed:
            continue
        isl = round(s.total_input_tokens / s.completed)
        osl = round(s.total_output_tokens / s.completed)
        concurrency = s.max_concurrency_seen or (s.load.get("clients") or 1)
        exclude = "" if concurrency <= 1 else (
            f"served {concurrency} requests at once; validate prices ttft/tpot as one request "
            "alone")
        for metric in ("ttft", "tpot", "e2el"):
            stat: Stats = getattr(s, metric)
            if not stat.count or stat.mean_s <= 0:
                continue
            rows.append({
                "record_id": f"{record_prefix}-{n:03d}-{metric}", "category": "serving_latency",
                "phase": {"ttft": "prefill", "tpot": "decode"}.get(metric, "end_to_end"),
                "source_name": source, "source_url": source_url,
                "source_locator": f"run {n}: {_load_label(s.load)}", "provenance": "measured",
                "hardware": hardware, "num_accelerators": 1, "model": model,
                "weight_dtype": weight_dtype, "software_stack": software,
                "parallelism": "single device", "batch_or_concurrency": concurrency,
                "input_len": isl, "output_len": osl, "kv_depth": 0, "metric": metric,
                "value": round(stat.mean_s * 1e3, 6), "unit": "ms",
                "notes": f"mean of {stat.count} ({s.completed} requests, {s.failed} failed, "
                         f"{s.timed_out} timed out; counts from {s.counts_from})",
                "exclude": exclude})
    return rows


def llama_bench_rows(tests: list[dict[str, Any]], *, hardware: str, source: str,
                     record_prefix: str) -> list[dict[str, Any]]:
    """llama-bench tests as ``ppN_throughput``/``tgN_throughput`` rows, as the bundled
    llama-bench rows are written (model label, parameter count, weight type as printed)."""
    rows = []
    for n, t in enumerate(tests, start=1):
        label = _LLAMA_BENCH_TYPE.match(str(t.get("model_type", "")).strip())
        if not label or not t.get("avg_ts"):
            raise InputError(f"llama-bench test {n}: no model_type or avg_ts; is this "
                             "llama-bench -o json output?")
        prompt, gen = int(t.get("n_prompt") or 0), int(t.get("n_gen") or 0)
        if prompt and gen:
            continue  # a -pg test times both together: not one phase
        metric = f"pp{prompt}_throughput" if prompt else f"tg{gen}_throughput"
        rows.append({
            "record_id": f"{record_prefix}-{n:03d}", "category": "llamacpp_bench",
            "phase": "prefill" if prompt else "decode", "source_name": source,
            "source_url": "", "source_locator": f"test {n}: {t.get('test_time', '')}",
            "provenance": "measured", "hardware": hardware, "num_accelerators": 1,
            "model": label["model"], "model_params_b": float(t.get("model_n_params", 0)) / 1e9,
            "weight_dtype": label["dtype"],
            # written as llama-bench's flags, which validate reads into the engine's
            # variants and micro-batch (catalog.software_text)
            "software_stack": f"llama.cpp llama-bench build {t.get('build_number', '')}, "
                              f"{t.get('backends', '')}" +
                              (", -fa 1" if t.get("flash_attn") else "") +
                              (f", -ub {t['n_ubatch']}" if t.get("n_ubatch") else ""),
            "parallelism": "single device", "batch_or_concurrency": 1,
            "input_len": prompt or "", "output_len": gen or "",
            "kv_depth": int(t.get("n_depth") or 0), "metric": metric,
            "value": float(t["avg_ts"]), "unit": "tokens/s",
            "notes": f"{t.get('n_threads', '')} threads, n_ubatch {t.get('n_ubatch', '')}; "
                     f"{t.get('cpu_info', '')} / {t.get('gpu_info', '')}", "exclude": ""})
    return rows


def _load_label(load: dict[str, Any]) -> str:
    if load.get("kind") == "closed":
        return f"{load.get('clients')} client(s)"
    if load.get("kind") == "open":
        cap = f", at most {load['max_concurrency']} in flight" if load.get("max_concurrency") \
            else ""
        return f"{load.get('rate_rps')} req/s {load.get('arrival', '')}{cap}"
    return str(load.get("kind", ""))
