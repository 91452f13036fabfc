"""The search: enumerate shapes, price them, screen every candidate, simulate the best.

    report = plan(Study("llama-3.1-70b", problem))[0]

Several studies (models, traces) share one executor: their shapes are priced in one
batch of tasks and their verifications in another, so a Ray cluster sees the whole
sweep at once. Every step is deterministic and ordered by the enumeration, so the local
pool, Ray and a serial run give the same report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from phasewise.catalog import load_link, load_model
from phasewise.errors import InputError
from phasewise.ledger import kv_cache_bytes_per_device
from phasewise.plan.checkpoint import default_speculation
from phasewise.plan.executors import Serial
from phasewise.plan.profile import Profile, price_shape
from phasewise.plan.report_rows import build_report
from phasewise.plan.screen import (
    Candidate,
    Problem,
    rank_key,
    screen_colocated,
    screen_disaggregated,
)
from phasewise.plan.space import PoolShape, Speculation, kv_formats, parallelisms, weight_formats
from phasewise.plan.types import PlanReport
from phasewise.plan.verify import verify_group
from phasewise.serving.kv_cache import kv_capacity
from phasewise.specs import ModelSpec, Parallelism, Precision

DEFAULT_VERIFY = 50
DEFAULT_REQUESTS = 600
# The disaggregated scheduler prefills whole prompts in a step of at least this many
# tokens (the simulator's default budget, serving.schedulers).
DISAGG_MIN_BUDGET = 8192


@dataclass(frozen=True, slots=True)
class Study:
    """One model under one problem; ``model`` is what the user typed (it appears in the
    reproducing commands)."""

    model: str
    problem: Problem
    verify: int = DEFAULT_VERIFY
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    trace_out: str | None = None


@dataclass
class _Prepared:
    study: Study
    spec: ModelSpec
    speculation: Speculation | None
    shapes: list[PoolShape]
    unfit: int
    chunks: tuple[int, ...]
    notes: list[str] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)


def plan(*studies: Study, executor=None,  # noqa: ANN001
         progress: Callable[[str, int], Callable[[], None]] | None = None) -> list[PlanReport]:
    """Plan each study; ``progress(stage, total)`` returns a callback ticked per task."""
    run = executor or Serial()
    prepared = [_prepare(s) for s in studies]
    tasks = [(price_shape, (p.spec, shape, p.study.problem.traffic, p.chunks,
                            p.study.problem.space.max_seqs, p.speculation,
                            p.study.problem.space.cost))
             for p in prepared for shape in p.shapes]
    profiles = run.map(tasks, progress("pricing shapes", len(tasks)) if progress else None)
    screened, offset = [], 0
    for p in prepared:
        mine = profiles[offset:offset + len(p.shapes)]
        offset += len(p.shapes)
        p.profiles = mine
        screened.append(_screen(p, mine))
    picks = [_pick(cands, p.study.verify) for p, (cands, _) in zip(prepared, screened, strict=False)]
    size = max(1, -(-sum(len(c) for c in picks) // getattr(run, "parallelism", 1)))
    groups = [(p, group) for p, chosen in zip(prepared, picks, strict=False)
              for group in _groups(chosen, size)]
    vtasks = [(_call, (verify_group, (p.spec, [c.layout for c in group], p.speculation,
                                      p.study.problem.traffic, p.study.problem.load,
                                      p.study.problem.targets),
                       dict(requests=p.study.requests, seed=p.study.seed,
                            cost=p.study.problem.space.cost, link=p.study.problem.space.link)))
              for p, group in groups]
    grouped = run.map(vtasks, progress("simulating", len(vtasks)) if progress else None)
    found = {(id(p), c.index): v for (p, group), out in zip(groups, grouped, strict=False)
             for c, v in zip(group, out, strict=False)}
    results = [found[(id(p), c.index)] for p, chosen in zip(prepared, picks, strict=False) for c in chosen]
    reports, offset = [], 0
    for p, (cands, evaluated), chosen in zip(prepared, screened, picks, strict=False):
        mine = results[offset:offset + len(chosen)]
        offset += len(chosen)
        verified = dict(zip((c.index for c in chosen), mine, strict=False))
        reports.append(build_report(p, cands, evaluated, verified))
    return reports


def _groups(chosen: list[Candidate], size: int) -> list[list[Candidate]]:
    """Candidates on the same pool shapes, in runs of at most ``size`` (the simulations
    over the executor's parallelism, so every worker gets a share): one task simulates a
    run, and its simulations share their step prices."""
    by_shape: dict[tuple, list[Candidate]] = {}
    for c in chosen:
        by_shape.setdefault((c.layout.prefill, c.layout.decode), []).append(c)
    return [group[i:i + size] for group in by_shape.values()
            for i in range(0, len(group), size)]


def _call(fn, args: tuple, kwargs: dict):  # noqa: ANN001, ANN202
    return fn(*args, **kwargs)


def _prepare(study: Study) -> _Prepared:
    problem = study.problem
    spec = load_model(study.model)
    space = problem.space
    if problem.load.kind == "users" and problem.traffic.mix is not None:
        raise InputError("--users with --mix: a closed loop cannot be replayed from a trace; "
                         "give --rate or --token-rate with a mix.")
    speculation = None
    if True in space.speculation:
        speculation = default_speculation(study.model, spec, tokens=space.spec_tokens,
                                          accept=space.spec_accept, draft=space.draft,
                                          task=space.task)
    longest = problem.traffic.longest_tokens
    disagg_chunk = max(DISAGG_MIN_BUDGET, longest)
    chunks = tuple(sorted(set(space.chunk_tokens) | (
        {disagg_chunk} if "disaggregated" in space.layouts else set())))
    shapes, unfit = enumerate_shapes(spec, study.model, space, chunks)
    if not shapes:
        raise InputError(f"{spec.name} fits no candidate device at any TP/PP/EP searched; "
                         "add devices with --hardware, allow more --tp or --pp, or a narrower "
                         "--weight-dtype.")
    notes = []
    if speculation is not None:
        notes.append(f"speculative decoding: γ={speculation.tokens}, α={speculation.accept:g} "
                     f"({speculation.source}).")
    return _Prepared(study, spec, speculation, shapes, unfit, chunks, notes)


def enumerate_shapes(model: ModelSpec, model_ref: str, space, chunks: tuple[int, ...]  # noqa: ANN001
                     ) -> tuple[list[PoolShape], int]:
    """Every replica shape whose weights and a KV cache fit; PP above 1 only for a device
    and format where no single-stage split fits (pipelining buys memory, not speed, in a
    server that does not overlap micro-batches)."""
    checkpoint = Precision().for_model(model)  # the checkpoint's formats per module class
    shapes, unfit = [], 0
    for device in space.hardware:
        for fmt in weight_formats(device, checkpoint, space.weight_dtypes):
            for kv in kv_formats(device, space.kv_dtypes, fmt.activations):
                precision = dataclasses.replace(fmt, kv_cache=kv)
                fitting = [par for par in parallelisms(model, device, space)
                           if _fits(model, device, precision, par, chunks, space.max_seqs)]
                single = [par for par in fitting if par.pp == 1]
                keep = single or [par for par in fitting
                                  if par.pp == min(p.pp for p in fitting)]
                unfit += len(parallelisms(model, device, space)) - len(keep)
                for par in keep:
                    for engine in space.engines:
                        shapes.append(PoolShape(device, par, precision, engine))
    return shapes, unfit


def _fits(model: ModelSpec, device, precision, par: Parallelism, chunks, max_seqs) -> bool:  # noqa: ANN001
    try:
        kv_capacity(model, device, precision, par, max_batched_tokens=min(chunks),
                    max_seqs=min(max_seqs))
    except InputError:
        return False
    return True


def _screen(p: _Prepared, profiles: list[Profile]) -> tuple[list[Candidate], int]:
    problem = p.study.problem
    colocated = screen_colocated(profiles, problem, 0)
    link = load_link(problem.space.link)
    kv_bytes = {s.precision: kv_cache_bytes_per_device(p.spec, s.precision, Parallelism(),
                                                       sequences=1, context_tokens=1)
                for s in p.shapes}
    disagg_chunk = max(DISAGG_MIN_BUDGET, problem.traffic.longest_tokens)
    pairs, evaluated = screen_disaggregated(profiles, problem, len(colocated), link, kv_bytes,
                                            disagg_chunk)
    return colocated + pairs, len(colocated) + evaluated


def _pick(candidates: list[Candidate], budget: int) -> list[Candidate]:
    """The candidates to simulate: the best of each device type (and device pair) first,
    so every type gets a verified answer, then the cheapest of the rest; only those the
    screen found stable at the load."""
    worth = sorted((c for c in candidates if c.prediction.status in ("meets", "misses at load")),
                   key=rank_key)
    worth = _distinct(worth)
    chosen: dict[int, Candidate] = {}
    seen: set[tuple[str, str]] = set()
    for c in worth:
        key = (c.layout.kind, c.layout.device_types)
        if key not in seen and len(chosen) < budget // 2:
            seen.add(key)
            chosen[c.index] = c
    for c in worth:
        if len(chosen) >= budget:
            break
        chosen.setdefault(c.index, c)
    return sorted(chosen.values(), key=rank_key)


def _distinct(ranked: list[Candidate]) -> list[Candidate]:
    """Drop candidates that differ from a better-ranked one only in a batch limit that
    does not bind (the same pools, replicas, chunk and speculation, the same prediction)."""
    seen, out = set(), []
    for c in ranked:
        lay, pred = c.layout, c.prediction
        key = (lay.kind, lay.prefill, lay.replicas, lay.decode, lay.decode_replicas,
               lay.chunk_tokens, lay.speculating, round(pred.tpot_s, 9), pred.ttft_s)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
