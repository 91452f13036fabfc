"""A load generator for OpenAI-compatible endpoints: streamed completions and chat
completions, sent open loop (Poisson or constant arrivals, or a trace's times) or closed
loop (a fixed number of clients), timed token by token on the client.

Safety: requests go only to the URL the caller names (no redirects followed); the API key
is read from an environment variable and sent only as the Authorization header, never
printed or written; every request has a deadline; nothing is retried, and every failure
and timeout is counted (``bench_metrics``).

Lengths: a prompt is a random sequence of common words, one token each; a probe of two
lengths measures what the server adds (a BOS token, a chat template) and checks the one
token per word, so a prompt of the asked length can be built. The answer's length is
held by ``max_tokens`` with ``min_tokens`` and ``ignore_eos`` (vLLM, SGLang and
llama-cpp-python accept them; a server that ignores both may stop early, which the run
counts as a length mismatch).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from phasewise.errors import InputError
from phasewise.measure.bench_metrics import (
    DEFAULT_PERCENTILES,
    BenchRun,
    RequestRecord,
    Slos,
    summarize,
)

APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# Common English words that BPE and SentencePiece vocabularies hold as one token each
# with their leading space (GPT-2, Llama, SmolLM2, Qwen, Mistral); the probe checks it.
WORDS = ("the of and to in is that for it as was with be by on not he this are or his "
         "from at which but have an they you were her she there one all we their been has "
         "when who will more no if out so said what up its about into than them can only "
         "other new some could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too "
         "little state good very make world still own see men work long get here between "
         "both life being under never day same another know while last might us great old "
         "year off come since against go came right used take three").split()
PROBE_WORDS = 32  # the probe sends prompts of this many words and twice as many
CONNECT_TIMEOUT_S = 10.0
# The model list and the probes are small, but a busy server may queue them behind others.
SETUP_TIMEOUT_S = 120.0
MAX_ERROR_CHARS = 200


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go and how they are shaped."""

    base_url: str  # scheme://host[:port], no path, no credentials
    api: str = "completions"  # or "chat"
    model: str | None = None  # the served model name (None: the first of /v1/models)
    api_key_env: str | None = "OPENAI_API_KEY"
    request_timeout_s: float = 300.0
    hold_length: bool = True  # send min_tokens and ignore_eos
    temperature: float = 0.0

    @property
    def url(self) -> str:
        return self.base_url + APIS[self.api]


@dataclass(frozen=True, slots=True)
class Load:
    """How requests are sent: ``rate_rps`` (inf: all at once) with optional
    ``max_concurrency``, or ``clients`` closed-loop users, or a trace's arrival times."""

    rate_rps: float | None = None
    arrival: str = "poisson"  # or "constant"
    clients: int | None = None
    max_concurrency: int | None = None
    trace: str | None = None

    def describe(self) -> dict[str, Any]:
        if self.trace:
            return {"kind": "trace", "trace": self.trace}
        if self.clients:
            return {"kind": "closed", "clients": self.clients}
        rate = self.rate_rps if self.rate_rps is not None else math.inf
        return {"kind": "open", "rate_rps": "inf" if math.isinf(rate) else rate,
                "arrival": self.arrival, "max_concurrency": self.max_concurrency}

    @property
    def concurrency(self) -> int | None:
        """The most requests the client keeps in flight (None: unbounded)."""
        return self.clients or self.max_concurrency


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run sends: how many requests of which lengths, after how many warm-ups,
    for at most how long."""

    num_requests: int = 100
    isl: str = "128"  # serving.parse_lengths: N, uniform:LO:HI, ...
    osl: str = "64"
    warmup: int = 1
    time_limit_s: float | None = None
    seed: int = 0
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    slos: Slos = field(default_factory=Slos)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the probe found: the tokens the server adds to every prompt."""

    prompt_overhead_tokens: int
    checked: bool  # one token per word was confirmed


@dataclass(frozen=True, slots=True)
class Request:
    index: int
    arrival_s: float  # open loop: when to send, from the start of the run
    input_tokens: int
    output_tokens: int


# ---------------------------------------------------------------- inputs


def parse_base_url(text: str) -> str:
    """'http://127.0.0.1:8000', '.../v1' or '.../v1/' -> 'http://127.0.0.1:8000'; refuses
    credentials in the URL (they would be printed and written with it)."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--url {text}: give the server's address, e.g. http://127.0.0.1:8000.")
    if parts.username or parts.password:
        raise InputError("--url: do not put credentials in the URL; set the API key in an "
                         "environment variable and name it with --api-key-env.")
    if parts.query or parts.fragment:
        raise InputError(f"--url {text}: give the address without a query or fragment.")
    path = re.sub(r"/v1/?$", "", parts.path.rstrip("/"))
    if path.endswith(tuple(p.removeprefix("/v1") for p in APIS.values())):
        raise InputError(f"--url {text}: give the server's address; choose the endpoint with "
                         "--endpoint completions or chat.")
    return f"{parts.scheme}://{parts.netloc}{path}"


def requests_for(load: Load, plan: Plan) -> list[Request]:
    """The requests of a run, their lengths and (open loop) send times drawn from one
    seeded generator through the simulator's own request streams, so ``--predict`` serves
    the same stream."""
    from phasewise.serving import load_trace, parse_lengths
    from phasewise.serving.requests import open_loop, synthetic

    rng = np.random.default_rng(plan.seed)
    if load.trace:
        stream = load_trace(load.trace)
        arrivals = stream.arrival_s - stream.arrival_s.min()
    else:
        isl, osl = parse_lengths(plan.isl, "--isl"), parse_lengths(plan.osl, "--osl")
        rate = load.rate_rps if load.rate_rps is not None else math.inf
        if load.clients or math.isinf(rate):
            stream = synthetic(plan.num_requests, isl, osl, rng)
            arrivals = np.zeros(plan.num_requests)
        else:
            stream = open_loop(plan.num_requests, isl, osl, rng, kind=load.arrival,
                               rate_per_s=rate)
            arrivals = stream.arrival_s - stream.arrival_s[0]
    return [Request(i, float(a), int(n_in), int(n_out)) for i, (a, n_in, n_out) in
            enumerate(zip(arrivals, stream.input_tokens, stream.output_tokens, strict=False))]


def prompt_text(words: int, rng: np.random.Generator) -> str:
    """A prompt of ``words`` random common words, each after a space so every word is the
    same token it is mid-sentence (a leading space a tokenizer treats apart is one token more
    on every prompt, which the probe counts); random from the first word on, so no two
    prompts share a prefix a server's prefix cache could reuse."""
    return "".join(" " + w for w in rng.choice(WORDS, size=words))


def payload(endpoint: Endpoint, model: str, prompt: str, output_tokens: int, *,
            stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": output_tokens,
                            "temperature": endpoint.temperature, "stream": stream}
    if endpoint.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    if endpoint.hold_length:
        body["min_tokens"] = output_tokens
        body["ignore_eos"] = True
    return body


def headers(endpoint: Endpoint) -> dict[str, str]:
    """The Authorization header from the named environment variable, if it is set."""
    key = os.environ.get(endpoint.api_key_env or "") if endpoint.api_key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


# ---------------------------------------------------------------- one streamed request


@dataclass
class _Stream:
    """What a streamed response has carried so far."""

    token_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


def read_event(line: str, api: str, now_s: float, into: _Stream) -> bool:
    """Take one server-sent-events line; True at the stream's end (``data: [DONE]``).
    A chunk whose choice carries text is a token chunk, timed at ``now_s``."""
    if not line.startswith("data:"):
        return False  # blank separators, comments (":"), other fields
    data = line[5:].strip()
    if data == "[DONE]":
        return True
    chunk = json.loads(data)
    for choice in chunk.get("choices") or []:
        text = choice.get("text") if api == "completions" else \
            (choice.get("delta") or {}).get("content")
        if text:
            into.token_s.append(now_s)
        if choice.get("finish_reason"):
            into.finish_reason = choice["finish_reason"]
    usage = chunk.get("usage")
    if usage:
        into.prompt_tokens = usage.get("prompt_tokens", into.prompt_tokens)
        into.completion_tokens = usage.get("completion_tokens", into.completion_tokens)
    return False


async def send_one(client: Any, endpoint: Endpoint, model: str, prompt: str, request: Request,
                   t0: float) -> RequestRecord:
    """Send one streamed request and time its tokens; errors and the deadline end it with
    a record saying so, never a retry."""
    sent = time.perf_counter() - t0
    got = _Stream()
    error, timed_out = "", False
    body = payload(endpoint, model, prompt, request.output_tokens)
    try:
        async with asyncio.timeout(endpoint.request_timeout_s):
            async with client.stream("POST", endpoint.url, json=body,
                                     headers=headers(endpoint)) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")
                    error = f"HTTP {response.status_code}: {_short(text)}"
                else:
                    async for line in response.aiter_lines():
                        if read_event(line, endpoint.api, time.perf_counter() - t0, got):
                            break
    except TimeoutError:
        timed_out, error = True, f"timed out after {endpoint.request_timeout_s:g} s"
    except json.JSONDecodeError as err:
        error = f"a streamed chunk is not JSON ({err.msg})"
    except Exception as err:  # noqa: BLE001 - any transport failure is counted, not raised
        error = f"{type(err).__name__}: {_short(str(err))}"
    if not error and not got.token_s:
        error = "the stream carried no token"
    return RequestRecord(index=request.index, sent_s=sent,
                         target_input_tokens=request.input_tokens,
                         target_output_tokens=request.output_tokens,
                         token_s=tuple(got.token_s), chunk_tokens=(1,) * len(got.token_s),
                         ended_s=time.perf_counter() - t0,
                         usage_prompt_tokens=got.prompt_tokens,
                         usage_completion_tokens=got.completion_tokens,
                         finish_reason=got.finish_reason, error=error, timed_out=timed_out)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


# ---------------------------------------------------------------- setup: model and probe


async def served_model(client: Any, endpoint: Endpoint) -> str:
    """The model to ask for: the one named, else the first the server lists."""
    if endpoint.model:
        return endpoint.model
    doc = await _get_json(client, endpoint, "/v1/models")
    models = [m.get("id") for m in doc.get("data", []) if m.get("id")]
    if not models:
        raise InputError(f"{endpoint.base_url}/v1/models lists no model; name it with "
                         "--served-model.")
    return models[0]


async def probe(client: Any, endpoint: Endpoint, model: str, rng: np.random.Generator) -> Shape:
    """Prompts of PROBE_WORDS and twice as many words, one token answers, not streamed:
    the server's prompt counts give what it adds to a prompt and check one token a word."""
    counts = []
    for words in (PROBE_WORDS, 2 * PROBE_WORDS):
        body = payload(endpoint, model, prompt_text(words, rng), 1, stream=False)
        doc = await _post_json(client, endpoint, body)
        counts.append((doc.get("usage") or {}).get("prompt_tokens"))
    if None in counts:
        return Shape(0, False)
    per_word = (counts[1] - counts[0]) / PROBE_WORDS
    if per_word != 1:
        raise InputError(f"the server counts {per_word:g} tokens per prompt word, not 1: its "
                         "tokenizer splits the word list, so prompt lengths cannot be held "
                         "exactly.")
    return Shape(counts[0] - PROBE_WORDS, True)


async def _get_json(client: Any, endpoint: Endpoint, path: str) -> dict:
    return await _checked(client.get(endpoint.base_url + path, headers=headers(endpoint)),
                          endpoint, path)


async def _post_json(client: Any, endpoint: Endpoint, body: dict) -> dict:
    return await _checked(client.post(endpoint.url, json=body, headers=headers(endpoint)),
                          endpoint, APIS[endpoint.api])


async def _checked(call: Any, endpoint: Endpoint, path: str) -> dict:
    import httpx

    try:
        async with asyncio.timeout(max(endpoint.request_timeout_s, SETUP_TIMEOUT_S)):
            response = await call
    except (httpx.HTTPError, OSError, TimeoutError) as err:
        raise InputError(f"cannot reach {endpoint.base_url}{path} ({type(err).__name__}); "
                         "check --url and that the server is running.") from None
    if response.status_code in (401, 403):
        raise InputError(f"{endpoint.base_url}{path} refused the request (HTTP "
                         f"{response.status_code}); set the API key in ${endpoint.api_key_env}.")
    if response.status_code != 200:
        raise InputError(f"{endpoint.base_url}{path} answered HTTP {response.status_code}: "
                         f"{_short(response.text)}")
    try:
        return response.json()
    except ValueError:
        raise InputError(f"{endpoint.base_url}{path} did not answer JSON; is it an "
                         "OpenAI-compatible server?") from None


# ---------------------------------------------------------------- a run


def prompt_words(request: Request, shape: Shape) -> int:
    words = request.input_tokens - shape.prompt_overhead_tokens
    if words < 1:
        raise InputError(f"a prompt of {request.input_tokens} tokens is not longer than the "
                         f"{shape.prompt_overhead_tokens} tokens the server adds to every "
                         "prompt; raise --isl.")
    return words


async def run_load(endpoint: Endpoint, load: Load, plan: Plan, *,
                   on_done: Callable[[int, int], None] | None = None) -> BenchRun:
    """Probe, warm up, then send the run's requests; returns every request's record and
    the summary."""
    import httpx

    requests = requests_for(load, plan)
    rng = np.random.default_rng(plan.seed + 1)
    limits = httpx.Limits(max_connections=load.concurrency or None,
                          max_keepalive_connections=load.concurrency or None)
    # per-request deadlines are asyncio timeouts (send_one); httpx only bounds each read
    timeout = httpx.Timeout(max(endpoint.request_timeout_s, SETUP_TIMEOUT_S),
                            connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False,
                                 trust_env=False) as client:
        model = await served_model(client, endpoint)
        shape = await probe(client, endpoint, model, rng)
        prompts = [prompt_text(prompt_words(r, shape), rng) for r in requests]
        for i in range(plan.warmup):
            warm = replace(requests[i % len(requests)], index=-1)
            record = await send_one(client, endpoint, model,
                                    prompt_text(prompt_words(warm, shape), rng), warm,
                                    time.perf_counter())
            if record.error:
                raise InputError(f"the warm-up request failed: {record.error}")
        t0 = time.perf_counter()
        records = await _send_all(client, endpoint, model, load, plan, requests, prompts, t0,
                                  on_done)
        duration = time.perf_counter() - t0
    summary = summarize(records, load=load.describe(), duration_s=duration,
                        not_sent=len(requests) - len(records), slos=plan.slos,
                        percentiles=plan.percentiles)
    return BenchRun(summary, tuple(records), _notes(endpoint, shape, summary, model))


async def _send_all(client: Any, endpoint: Endpoint, model: str, load: Load, plan: Plan,
                    requests: list[Request], prompts: list[str], t0: float,
                    on_done: Callable[[int, int], None] | None) -> list[RequestRecord]:
    """Open loop: each request at its time (through a semaphore under max_concurrency);
    closed loop: each client sends its next request when its last one ends. No request
    starts after the time limit."""
    deadline = t0 + plan.time_limit_s if plan.time_limit_s else math.inf
    records: list[RequestRecord] = []
    total = len(requests)

    async def one(request: Request) -> None:
        record = await send_one(client, endpoint, model, prompts[request.index], request, t0)
        records.append(record)
        if on_done:
            on_done(len(records), total)

    if load.clients:
        queue = iter(requests)

        async def client_loop() -> None:
            for request in queue:
                if time.perf_counter() >= deadline:
                    return
                await one(request)

        await asyncio.gather(*(client_loop() for _ in range(load.clients)))
    else:
        gate = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None

        async def gated(request: Request) -> None:
            if gate is None:
                return await one(request)
            async with gate:
                if time.perf_counter() < deadline:
                    await one(request)

        tasks = []
        for request in requests:
            wait = t0 + request.arrival_s - time.perf_counter()
            if t0 + request.arrival_s >= deadline:
                break
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(gated(request)))
        await asyncio.gather(*tasks)
    return sorted(records, key=lambda r: r.index)


def _notes(endpoint: Endpoint, shape: Shape, summary: Any, model: str) -> tuple[str, ...]:
    notes = [f"model served as '{model}'"]
    if shape.checked:
        notes.append(f"prompts: the server adds {shape.prompt_overhead_tokens} token(s) to each "
                     "(BOS, chat template); one token per word checked by a probe")
    else:
        notes.append("prompt lengths not checked: the server returned no usage counts")
    if summary.counts_from != "usage":
        notes.append("the server streams no usage counts: output tokens are the token chunks "
                     "counted (one token each)")
    if not endpoint.hold_length:
        notes.append("min_tokens and ignore_eos not sent: answers may end early")
    if summary.length_mismatches:
        notes.append(f"{summary.length_mismatches} request(s) got other lengths than asked "
                     "(the server may ignore min_tokens/ignore_eos)")
    return tuple(notes)


def run(endpoint: Endpoint, load: Load, plan: Plan, *,
        on_done: Callable[[int, int], None] | None = None) -> BenchRun:
    """``run_load`` from synchronous code."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise InputError("phasewise bench needs an HTTP client: pip install "
                         "'phasewise[bench]'.") from None
    return asyncio.run(run_load(endpoint, load, plan, on_done=on_done))
