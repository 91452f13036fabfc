"""Serving metrics of a load test, from the time each streamed token reached the client.

Names and definitions follow ``vllm bench serve`` (vllm/benchmarks/serve.py,
``calculate_metrics``; the streaming clients in vllm/benchmarks/lib/endpoint_request_func.py):

- TTFT: from sending the request to the first streamed chunk that carries a token;
- ITL: every gap between two consecutive token chunks of a request (a chunk may carry
  more than one token; ITLs are pooled over all requests);
- E2EL: from sending the request to its last token chunk;
- TPOT: (E2EL − TTFT) / (output tokens − 1), for requests of more than one token;
- duration: from the first request sent to the last response ended; throughputs divide
  completed requests and their tokens by it;
- goodput: completed requests meeting every SLO given (TTFT, TPOT, E2EL; a one-token answer
  counts TPOT 0) per second of the duration (DistServe, Zhong et al., OSDI 2024);
- percentiles: numpy's linear interpolation; std: the population standard deviation.

Where phasewise differs (docs/bench.md): a chunk without text (a chat stream's opening
role chunk) is not a token, so it starts neither TTFT nor an ITL; failed and timed-out
requests are counted apart and never enter the latencies; output tokens are the server's
``usage`` count when it streams one, else the token chunks counted (vLLM retokenizes the
text with a local tokenizer instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. Times are seconds on the client's monotonic clock,
    relative to the start of the run; ``token_s`` holds the arrival of each token chunk
    and ``chunk_tokens`` the tokens it carried (1 unless the server says otherwise)."""

    index: int
    sent_s: float
    target_input_tokens: int
    target_output_tokens: int
    token_s: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    ended_s: float | None = None  # the response stream closed
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.error and not self.timed_out and len(self.token_s) > 0

    @property
    def output_tokens(self) -> int:
        """The server's count when it gave one, else the tokens the chunks carried."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        return int(sum(self.chunk_tokens)) if self.chunk_tokens else len(self.token_s)

    @property
    def input_tokens(self) -> int:
        return self.usage_prompt_tokens if self.usage_prompt_tokens is not None \
            else self.target_input_tokens

    @property
    def ttft_s(self) -> float:
        return self.token_s[0] - self.sent_s

    @property
    def e2el_s(self) -> float:
        return self.token_s[-1] - self.sent_s

    @property
    def itl_s(self) -> np.ndarray:
        return np.diff(np.asarray(self.token_s, dtype=float))

    @property
    def tpot_s(self) -> float | None:
        """(E2EL − TTFT) / (OSL − 1): the mean time per output token after the first."""
        n = self.output_tokens
        return (self.e2el_s - self.ttft_s) / (n - 1) if n > 1 else None


class Stats(BaseModel):
    """Seconds over the requests (ITL: over every gap), as ``vllm bench serve`` reports them."""

    model_config = ConfigDict(frozen=True)

    count: int
    mean_s: float
    median_s: float
    std_s: float
    percentiles_s: dict[str, float]  # "p99" -> seconds


class Slos(BaseModel):
    """Service-level objectives for goodput, in seconds; None leaves a metric free."""

    model_config = ConfigDict(frozen=True)

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2el_s))


class BenchSummary(BaseModel):
    """The metrics of one run (one rate, one concurrency or one trace)."""

    model_config = ConfigDict(frozen=True)

    load: dict[str, float | int | str | None]  # how requests were sent
    sent: int
    completed: int
    failed: int
    timed_out: int
    not_sent: int  # left when the time limit ended the run
    length_mismatches: int  # completed requests whose token counts missed the target
    counts_from: str  # "usage" (the server's counts), "chunks" or "mixed"
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput_rps: float
    output_throughput_tps: float
    total_token_throughput_tps: float
    request_goodput_rps: float | None
    slos: Slos
    max_concurrency_seen: int
    ttft: Stats
    tpot: Stats
    itl: Stats
    e2el: Stats
    errors: list[str] = []  # the distinct error messages, at most a few


def stats(values: Sequence[float] | np.ndarray,
          percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> Stats:
    """Mean, median, population std and percentiles (numpy's linear interpolation), as
    vLLM's ``calculate_metrics`` takes them; all zero over no values, as vLLM's ``or 0``."""
    data = np.asarray(values, dtype=float)
    if not len(data):
        return Stats(count=0, mean_s=0.0, median_s=0.0, std_s=0.0,
                     percentiles_s={percentile_key(p): 0.0 for p in percentiles})
    return Stats(count=len(data), mean_s=float(data.mean()), median_s=float(np.median(data)),
                 std_s=float(data.std()),
                 percentiles_s={percentile_key(p): float(np.percentile(data, p))
                                for p in percentiles})


def percentile_key(p: float) -> str:
    """99 -> 'p99', 99.9 -> 'p99.9' (vLLM's result keys: p99_ttft_ms)."""
    return f"p{int(p)}" if float(p) == int(p) else f"p{p:g}"


def is_good(record: RequestRecord, slos: Slos) -> bool:
    """Every SLO given is met; a one-token answer counts TPOT 0 (vLLM's goodput)."""
    tpot = record.tpot_s or 0.0
    return all(limit is None or value <= limit for value, limit in (
        (record.ttft_s, slos.ttft_s), (tpot, slos.tpot_s), (record.e2el_s, slos.e2el_s)))


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at once: a sweep over [sent, last token) intervals, an end
    before a start at the same instant."""
    events = sorted([(r.sent_s, 1) for r in records] + [(r.token_s[-1], -1) for r in records])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def length_matches(record: RequestRecord) -> bool:
    """The request got the prompt and answer lengths asked for (where the server says)."""
    prompt_ok = record.usage_prompt_tokens is None or \
        record.usage_prompt_tokens == record.target_input_tokens
    return prompt_ok and record.output_tokens == record.target_output_tokens


def summarize(records: Sequence[RequestRecord], *, load: dict, duration_s: float,
              not_sent: int = 0, slos: Slos | None = None,
              percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> BenchSummary:
    """The metrics of a run over its completed requests, failures counted apart."""
    slos = slos or Slos()
    done = [r for r in records if r.ok]
    duration = max(duration_s, 1e-12)
    inputs = sum(r.input_tokens for r in done)
    outputs = sum(r.output_tokens for r in done)
    tpots = [t for t in (r.tpot_s for r in done) if t is not None]
    itls = np.concatenate([r.itl_s for r in done]) if done else np.empty(0)
    from_usage = [r.usage_completion_tokens is not None for r in done]
    errors = list(dict.fromkeys(r.error for r in records if r.error))[:5]
    return BenchSummary(
        load=load, sent=len(records), completed=len(done),
        failed=sum(1 for r in records if r.error and not r.timed_out),
        timed_out=sum(1 for r in records if r.timed_out), not_sent=not_sent,
        length_mismatches=sum(1 for r in done if not length_matches(r)),
        counts_from="usage" if from_usage and all(from_usage) else
        "chunks" if not any(from_usage) else "mixed",
        duration_s=duration_s, total_input_tokens=inputs, total_output_tokens=outputs,
        request_throughput_rps=len(done) / duration, output_throughput_tps=outputs / duration,
        total_token_throughput_tps=(inputs + outputs) / duration,
        request_goodput_rps=sum(is_good(r, slos) for r in done) / duration if slos.any()
        else None,
        slos=slos, max_concurrency_seen=peak_concurrency(done) if done else 0,
        ttft=stats([r.ttft_s for r in done], percentiles), tpot=stats(tpots, percentiles),
        itl=stats(itls, percentiles), e2el=stats([r.e2el_s for r in done], percentiles),
        errors=errors)


@dataclass(frozen=True)
class BenchRun:
    """A finished run: its summary and every request."""

    summary: BenchSummary
    records: tuple[RequestRecord, ...]
    notes: tuple[str, ...] = field(default=())
