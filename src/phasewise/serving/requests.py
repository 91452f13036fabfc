"""Request streams: when requests arrive and how long their prompts and answers are.

Open loop: arrival times drawn up front (Poisson, gamma, constant) or read from a trace.
Closed loop: N clients, each sending its next request when its last one finishes, the way
``vllm bench serve --max-concurrency`` and GenAI-Perf's concurrency mode drive a server.
All randomness comes from a ``numpy.random.Generator`` the caller seeds and passes in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phasewise.errors import InputError, nearest_hint
from phasewise.files import parse_json, read_text
from phasewise.specs.workload import ABSURD_TOKENS

# Token lengths a request may have (the longest published context windows are 10M
# tokens); a lognormal's SIGMA past this spreads lengths over e^10 ≈ 22,000 times.
MAX_LENGTH_TOKENS = ABSURD_TOKENS
MAX_LOG_SIGMA = 10.0
# Requests one trace replay holds (each costs about a kilobyte of simulator state).
MAX_TRACE_REQUESTS = 1_000_000


@dataclass(frozen=True, slots=True)
class Requests:
    """``n`` requests as columns: prompt and answer lengths, the prompt tokens a prefix
    cache already holds (or that share ``prefix_id`` with earlier requests, -1 for none),
    and, for an open loop, arrival times in seconds (sorted)."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    prefix_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_tokens)


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """``clients`` users, each sending a request, waiting for the whole answer, pausing
    ``think_time_s`` and sending the next, until ``requests`` have been sent in all. All
    clients start at 0, as ``vllm bench serve --max-concurrency`` and SGLang's
    bench_serving start them (every request is a task at once, a semaphore of
    ``clients`` lets them through), unless ``ramp_up_s`` spreads the first requests."""

    clients: int
    think_time_s: float = 0.0
    ramp_up_s: float = 0.0  # client c sends its first request at c · ramp_up_s / clients

    def start_s(self, client: int) -> float:
        return client * self.ramp_up_s / self.clients


# ---------------------------------------------------------------- arrival processes

def poisson_arrivals(rate_per_s: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson process: exponential gaps of mean 1/rate, first request at the first gap."""
    return np.cumsum(rng.exponential(1.0 / _positive_rate(rate_per_s), size=n))


def gamma_arrivals(rate_per_s: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Bursty arrivals: gamma-distributed gaps with mean 1/rate and coefficient of variation
    ``cv`` (shape 1/cv², scale cv²/rate); cv = 1 is Poisson, cv > 1 is burstier."""
    if not cv > 0:
        raise InputError(f"--cv {cv}: the coefficient of variation must be positive (1 is Poisson).")
    shape = 1.0 / cv**2
    return np.cumsum(rng.gamma(shape, 1.0 / (_positive_rate(rate_per_s) * shape), size=n))


def constant_arrivals(rate_per_s: float, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """One request every 1/rate seconds, the first at 1/rate."""
    return np.arange(1, n + 1, dtype=float) / _positive_rate(rate_per_s)


ARRIVALS = {
    "poisson": lambda rate, n, rng, cv: poisson_arrivals(rate, n, rng),
    "gamma": lambda rate, n, rng, cv: gamma_arrivals(rate, cv, n, rng),
    "constant": lambda rate, n, rng, cv: constant_arrivals(rate, n),
}


def arrivals(kind: str, rate_per_s: float, n: int, rng: np.random.Generator, *,
             cv: float = 1.0) -> np.ndarray:
    if kind not in ARRIVALS:
        raise InputError(f"unknown arrival process '{kind}'.{nearest_hint(kind, list(ARRIVALS))} "
                         f"Known: {', '.join(ARRIVALS)}.")
    return ARRIVALS[kind](rate_per_s, n, rng, cv)


def _positive_rate(rate_per_s: float) -> float:
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise InputError(f"--rate {rate_per_s}: give a positive number of requests per second.")
    return rate_per_s


# ---------------------------------------------------------------- length distributions

@dataclass(frozen=True, slots=True)
class Lengths:
    """A token-length distribution: ``fixed:N`` (or just N), ``uniform:LO:HI``,
    ``normal:MEAN:STD``, ``lognormal:MEAN:SIGMA`` (SIGMA in log space, mean kept at MEAN)
    or ``file:PATH`` (one length per line, sampled with replacement). Draws are rounded
    and at least 1."""

    kind: str
    params: tuple[float, ...] = ()
    values: tuple[int, ...] = ()  # the lengths read from a file

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k, p = self.kind, self.params
        if k == "fixed":
            draws = np.full(n, p[0])
        elif k == "uniform":
            draws = rng.integers(int(p[0]), int(p[1]) + 1, size=n)
        elif k == "normal":
            draws = rng.normal(p[0], p[1], size=n)
        elif k == "lognormal":
            draws = rng.lognormal(math.log(p[0]) - p[1] ** 2 / 2, p[1], size=n)
        else:
            draws = rng.choice(np.asarray(self.values), size=n)
        # A wide normal or lognormal draws past any context now and then: clip, do not wrap.
        return np.clip(np.rint(draws), 1, MAX_LENGTH_TOKENS).astype(np.int64)

    @property
    def mean(self) -> float:
        k, p = self.kind, self.params
        if k == "uniform":
            return (p[0] + p[1]) / 2
        if k == "file":
            return float(np.mean(self.values))
        return p[0]


_LENGTH_ARITY = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}


def range_lengths(lengths: Lengths, ratio: float) -> Lengths:
    """A fixed length L drawn as vLLM's benchmark_serving ``--random-range-ratio r`` draws
    it: uniform on the integers [⌊r·L⌋, L] (benchmarks/benchmark_serving.py
    sample_random_requests, ``np.random.randint(int(input_len * range_ratio),
    input_len + 1)``); other distributions and r = 1 are left as they are."""
    if ratio >= 1 or lengths.kind != "fixed":
        return lengths
    length = lengths.params[0]
    return Lengths("uniform", (max(1, int(length * ratio)), length))


def parse_lengths(text: str, flag: str) -> Lengths:
    """'1024', 'uniform:512:1536', 'normal:1024:200', 'lognormal:1024:0.5', 'file:lens.txt'."""
    text = str(text).strip()
    kind, _, rest = text.partition(":") if not text[:1].isdigit() else ("fixed", "", text)
    if kind == "file":
        return Lengths("file", (), _read_lengths(Path(rest), flag))
    if kind not in _LENGTH_ARITY:
        raise InputError(f"{flag} {text}: unknown distribution '{kind}'; use N, uniform:LO:HI, "
                         "normal:MEAN:STD, lognormal:MEAN:SIGMA or file:PATH.")
    try:
        params = tuple(float(part) for part in rest.split(":"))
    except ValueError:
        raise InputError(f"{flag} {text}: the parameters must be numbers, e.g. "
                         f"{kind}:{':'.join(['1024', '200'][:_LENGTH_ARITY[kind]])}.") from None
    if len(params) != _LENGTH_ARITY[kind] or not all(map(math.isfinite, params)) or \
            params[0] < 1 or min(params) < 0 or (kind == "uniform" and params[1] < params[0]):
        raise InputError(f"{flag} {text}: {kind} takes {_LENGTH_ARITY[kind]} finite non-negative "
                         "number(s), the first at least 1 (uniform: LO ≤ HI).")
    lengths = params if kind == "uniform" else params[:1]  # normal/lognormal: the mean
    spread_limit = MAX_LOG_SIGMA if kind == "lognormal" else MAX_LENGTH_TOKENS
    if max(lengths) > MAX_LENGTH_TOKENS or \
            (kind in ("normal", "lognormal") and params[1] > spread_limit):
        raise InputError(f"{flag} {text}: lengths past {MAX_LENGTH_TOKENS:,} tokens (or a "
                         f"lognormal SIGMA past {MAX_LOG_SIGMA:g}) describe no workload; check "
                         "the numbers.")
    return Lengths(kind, params)


def _read_lengths(path: Path, flag: str) -> tuple[int, ...]:
    if not str(path).strip() or not path.exists():
        raise InputError(f"{flag} file:{path}: no such file; give a text file with one length "
                         "per line.")
    values = []
    for number, line in enumerate(read_text(path, what="lengths file").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = int(line.strip())
        except ValueError:
            raise InputError(f"{path}, line {number}: '{line.strip()}' is not a whole number of "
                             "tokens.") from None
        if not 1 <= value <= MAX_LENGTH_TOKENS:
            raise InputError(f"{path}, line {number}: a length must be 1 to "
                             f"{MAX_LENGTH_TOKENS:,} tokens, got {value:,}.")
        values.append(value)
    if not values:
        raise InputError(f"{path}: no lengths found; give one whole number per line.")
    return tuple(values)


def synthetic(n: int, input_lengths: Lengths, output_lengths: Lengths,
              rng: np.random.Generator, *, arrival_s: np.ndarray | None = None,
              prefix_hit_rate: float = 0.0) -> Requests:
    """``n`` requests with drawn lengths; a prefix hit rate h marks ⌊h·ISL⌋ prompt tokens
    of each request as already cached (a token-level hit rate, as vLLM reports it)."""
    if not 0.0 <= prefix_hit_rate < 1.0:
        raise InputError(f"--prefix-hit-rate {prefix_hit_rate}: give a fraction in [0, 1).")
    isl = input_lengths.sample(n, rng)
    osl = output_lengths.sample(n, rng)
    prefix = np.minimum(np.floor(prefix_hit_rate * isl).astype(np.int64), isl - 1)
    return Requests(isl, osl, arrival_s, prefix if prefix_hit_rate else None)


def open_loop(n: int, input_lengths: Lengths, output_lengths: Lengths, rng: np.random.Generator,
              *, kind: str = "poisson", rate_per_s: float, cv: float = 1.0,
              prefix_hit_rate: float = 0.0) -> Requests:
    """Lengths first, then arrival gaps, from one generator: runs that differ only in the
    rate draw the same lengths and the same gaps, scaled (common random numbers)."""
    drawn = synthetic(n, input_lengths, output_lengths, rng, prefix_hit_rate=prefix_hit_rate)
    times = arrivals(kind, rate_per_s, n, rng, cv=cv)
    return Requests(drawn.input_tokens, drawn.output_tokens, times, drawn.prefix_tokens)


# ---------------------------------------------------------------- trace replay

TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
TRACE_OPTIONAL = ("prefix_id", "prefix_tokens")


def load_trace(path: str | Path) -> Requests:
    """Read a trace: CSV with a header row, or JSON Lines (``.jsonl``), one request per
    row with ``arrival_s``, ``input_tokens``, ``output_tokens`` and optionally
    ``prefix_id`` and ``prefix_tokens`` (requests sharing a prefix id share their first
    prefix_tokens prompt tokens). Errors name the first bad line."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--trace {path}: no such file; give a CSV or JSONL trace "
                         "(see examples/trace.csv).")
    text = read_text(path, what="trace")
    if text.count("\n") > MAX_TRACE_REQUESTS:
        raise InputError(f"{path}: more than {MAX_TRACE_REQUESTS:,} requests, past what one "
                         "simulation holds in memory; replay a part of the trace.")
    rows = _jsonl_rows(path, text) if path.suffix in (".jsonl", ".json", ".ndjson") \
        else _csv_rows(path, text)
    if not rows:
        raise InputError(f"{path}: the trace holds no requests.")
    return _validated(path, rows)


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict[str, str]]]:
    import csv

    lines = text.splitlines()
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}, line 1: the header lacks {', '.join(missing)}; a trace needs "
                         f"the columns {', '.join(TRACE_COLUMNS)}.")
    rows = []
    for number, fields in enumerate(_csv_records(reader, path), start=2):
        if not fields or not "".join(fields).strip():
            continue
        if len(fields) < len(header):
            raise InputError(f"{path}, line {number}: {len(fields)} fields, the header names "
                             f"{len(header)}.")
        rows.append((number, dict(zip(header, (f.strip() for f in fields), strict=False))))
    return rows


def _csv_records(reader, path: Path):  # noqa: ANN001, ANN202 - a csv reader, its rows
    """The reader's rows; a row the csv module cannot read (a field past its size limit)
    is an InputError naming its line, not a csv.Error."""
    import csv

    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise InputError(f"{path}, line {reader.line_num}: not readable as CSV ({err}).") \
                from None


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, f"{path}, line {number}", what="trace line")
        except InputError as err:
            raise InputError(str(err)) from None
        if not isinstance(row, dict):
            raise InputError(f"{path}, line {number}: each line must be a JSON object.")
        missing = [c for c in TRACE_COLUMNS if c not in row]
        if missing:
            raise InputError(f"{path}, line {number}: missing {', '.join(missing)}; each "
                             f"request needs {', '.join(TRACE_COLUMNS)}.")
        rows.append((number, row))
    return rows


def _validated(path: Path, rows: list[tuple[int, dict]]) -> Requests:
    arrival, isl, osl, prefix_id, prefix_tokens = [], [], [], [], []
    previous = 0.0
    for number, row in rows:
        where = f"{path}, line {number}"
        t = _number(row, "arrival_s", where, float)
        i, o = _number(row, "input_tokens", where, int), _number(row, "output_tokens", where, int)
        if t < 0:
            raise InputError(f"{where}: arrival_s {t} is negative; times start at 0.")
        if i < 1 or o < 1:
            raise InputError(f"{where}: input_tokens and output_tokens must be at least 1, got "
                             f"{i} and {o}.")
        if t < previous:
            raise InputError(f"{where}: arrival_s {t} comes before the previous request's "
                             f"{previous}; sort the trace by arrival time.")
        pid = _number(row, "prefix_id", where, int, default=-1)
        ptok = _number(row, "prefix_tokens", where, int, default=0)
        if ptok < 0 or (ptok and pid < 0):
            raise InputError(f"{where}: prefix_tokens needs a prefix_id and must be ≥ 0.")
        previous = t
        arrival.append(t)
        isl.append(i)
        osl.append(o)
        prefix_id.append(pid)
        prefix_tokens.append(min(ptok, i - 1))
    has_prefix = any(p >= 0 for p in prefix_id)
    return Requests(np.asarray(isl, dtype=np.int64), np.asarray(osl, dtype=np.int64),
                    np.asarray(arrival, dtype=float),
                    np.asarray(prefix_tokens, dtype=np.int64) if has_prefix else None,
                    np.asarray(prefix_id, dtype=np.int64) if has_prefix else None)


def _number(row: dict, key: str, where: str, kind: type, default: float | None = None):  # noqa: ANN202
    value = row.get(key, "")
    if value in ("", None):
        if default is not None:
            return default
        raise InputError(f"{where}: {key} is empty; every request needs {', '.join(TRACE_COLUMNS)}.")
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}: {key} '{value}' is not a number.") from None
    if not math.isfinite(number):
        raise InputError(f"{where}: {key} is {value}; give a finite number.")
    if kind is int:
        if number != int(number):
            raise InputError(f"{where}: {key} {value} must be a whole number of tokens.")
        if abs(number) > MAX_LENGTH_TOKENS:
            raise InputError(f"{where}: {key} {value} is past {MAX_LENGTH_TOKENS:,}; no "
                             "request is that long.")
        return int(number)
    return number
