"""Fitting a calibration profile to measured times: least squares in log time (numpy only).

Each constant is a chain of levels (DESIGN.md, cost models): for a device constant
g(value) = g(prior) + δ_global + δ_class + δ_device; for an engine constant
g(value) = g(prior) + δ_global + δ_engine + δ_engine×class, where g is ln, or
logit(value / upper) for a constant with a physical ceiling. The fit minimises

    Σ_rows huber((ln predicted − ln measured) / σ_row)  +  Σ_levels (δ / spread)²

with Levenberg–Marquardt (the Huber loss by iteratively reweighted least squares): a row
the model misses by more than HUBER_THRESHOLD σ pulls in proportion to its error, not its
square, so a few rows of a setting the model does not describe (an untuned backend, a
build with another code path) cannot drag a constant far from what the other rows and
its prior say. The second sum is a ridge toward the parent level, so a level
without measurements keeps its parent's value (a device no row mentions gets its class's,
an engine with no rows the pooled one) and a level with few rows moves only as far as
they pull it. Where the objective has more than one minimum (``RESTARTS``), the descent
is started again and the lowest objective kept. Each operator is lowered to the kernel its
row's engine runs (``lower``) and priced with ``calibrated.priced_parts``, the same lines
the estimate uses, on numpy columns of every kernel of every row.

The descent is written out rather than left to ``scipy.optimize.least_squares``: on the
bundled rows scipy's trust-region solver (the same objective, Huber on the rows) settles in
other minima of this objective, and their held-out figures are worse
(``docs/calibration.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from phasewise.cost.base import hardware_for_collective, math_format_for
from phasewise.cost.calibrated import OpFeatures, kernel_features, priced_parts
from phasewise.cost.calibration import (
    GENERIC_ENGINE,
    Engine,
    Profile,
    level_keys,
    parameter_defs,
    traits_for,
)
from phasewise.ledger import Ledger
from phasewise.lower import lower
from phasewise.specs import HardwareSpec

# Typical size of a measurement's disagreement with any simple model (ln units, ~10%):
# the scale that weighs a row's residual against a level's prior spread.
ROW_SIGMA = 0.10
# A device microbenchmark measures its ceiling directly; repeated runs of a best-matmul
# or STREAM benchmark agree within a few percent, so its row weighs as one of that scatter
# and the engines' phase rows on the device cannot drag the ceiling far from it.
CEILING_SIGMA = 0.03
# Rows beyond this many ROW_SIGMA from the model count with linear, not quadratic, loss
# (Huber): 3σ, the conventional outlier boundary, about 35% off.
HUBER_THRESHOLD = 3.0
# How far the global value may move from the prior (ln units): loose, the data decide.
GLOBAL_SPREAD = 1.5
# A device's offset and its architecture's split the device's prior variance about its
# class in two, so that grouping devices by architecture does not loosen their prior.
ARCH_SPLIT = 1.0 / math.sqrt(2.0)
FINITE_STEP = 1e-5
MAX_ITERATIONS = 100
# Stop when an iteration lowers the objective by less than this share of it.
RELATIVE_TOLERANCE = 1e-6
# Constants whose objective has more than one minimum, and the factor on their global level
# the descent restarts from once it has converged: from its minimum and from the prior, the
# lowest objective kept. A matrix-vector kernel is priced as max(its bytes, its vector-ALU
# work), so rows on the memory side give the operation count no gradient: started at its
# prior, the fit stops where the few ALU-bound rows hold it (the bundled rows: objective
# 1633.4 from the prior, 1602.6 restarted from its minimum at 3x).
RESTARTS = (("matvec_alu_ops", 3.0),)


@dataclass(frozen=True)
class Observation:
    """A measured time and the forward passes whose priced times sum to it.

    ``passes`` holds (weight, ledger) pairs; a device microbenchmark has none and names
    its ``ceiling`` instead: "gemm" (seconds per FLOP at the best matmul rate in
    ``math_format``) or "memory_bw" (seconds per byte at the best streaming bandwidth).
    """

    key: str
    source: str
    hardware: HardwareSpec
    engine: Engine | None
    measured_s: float
    passes: tuple[tuple[float, Ledger], ...] = ()
    ceiling: str = ""
    math_format: str = ""


@dataclass(frozen=True)
class FitResult:
    profile: Profile
    predicted_s: np.ndarray
    log_residuals: np.ndarray
    iterations: int
    cost: float
    observations: tuple[Observation, ...] = field(default=())


class _Problem:
    """Observations flattened to numpy columns, and the map from δ to constants."""

    def __init__(self, observations: Sequence[Observation]) -> None:
        self.observations = tuple(observations)
        self.defs = parameter_defs()
        self.params = list(self.defs)
        contexts: dict[tuple[str, str], int] = {}
        self.context_specs: list[tuple[HardwareSpec, Engine | None]] = []
        columns: dict[str, list[float]] = {f: [] for f in OpFeatures.__slots__}
        op_ctx, op_obs, op_weight = [], [], []
        step_ctx, step_obs, step_weight, step_parallel = [], [], [], []
        ceiling_obs, ceiling_ctx, ceiling_param, ceiling_scale = [], [], [], []
        touched: dict[int, set[str]] = {}
        for i, obs in enumerate(self.observations):
            key = (obs.hardware.name, obs.engine.name if obs.engine else GENERIC_ENGINE)
            if key not in contexts:
                contexts[key] = len(contexts)
                self.context_specs.append((obs.hardware, obs.engine))
            ctx = contexts[key]
            if obs.ceiling:
                param = "gemm_fraction" if obs.ceiling == "gemm" else "bandwidth_fraction"
                scale = (obs.hardware.peak_flops(obs.math_format) if obs.ceiling == "gemm"
                         else obs.hardware.memory_bandwidth_bytes_per_s)
                ceiling_obs.append(i)
                ceiling_ctx.append(ctx)
                ceiling_param.append(self.params.index(param))
                ceiling_scale.append(scale)
                touched.setdefault(ctx, set()).add(param)
                continue
            touched.setdefault(ctx, set()).update(self.params)
            traits = traits_for(obs.engine or _GENERIC, obs.hardware)
            for weight, ledger in obs.passes:
                step_ctx.append(ctx)
                step_obs.append(i)
                step_weight.append(weight)
                step_parallel.append(1.0 if ledger.devices > 1 else 0.0)
                for op in ledger.ops:
                    math_format = math_format_for(op, ledger.math_format)
                    device = hardware_for_collective(obs.hardware, op, ledger)
                    kernel = lower(op, device, math_format, traits)
                    features = kernel_features(kernel, device, math_format)
                    for name in OpFeatures.__slots__:
                        columns[name].append(getattr(features, name))
                    op_ctx.append(ctx)
                    op_obs.append(i)
                    op_weight.append(weight)
        self.features = OpFeatures(**{k: np.asarray(v, dtype=float) for k, v in columns.items()})
        self.op_ctx, self.op_obs = np.asarray(op_ctx, int), np.asarray(op_obs, int)
        self.op_weight = np.asarray(op_weight, float)
        self.step_ctx, self.step_obs = np.asarray(step_ctx, int), np.asarray(step_obs, int)
        self.step_weight = np.asarray(step_weight, float)
        self.step_parallel = np.asarray(step_parallel, float)
        self.ceiling_obs = np.asarray(ceiling_obs, int)
        self.ceiling_ctx = np.asarray(ceiling_ctx, int)
        self.ceiling_param = np.asarray(ceiling_param, int)
        self.ceiling_scale = np.asarray(ceiling_scale, float)
        self.measured = np.asarray([o.measured_s for o in self.observations], float)
        self.sigma = np.where([bool(o.ceiling) for o in self.observations], CEILING_SIGMA,
                              ROW_SIGMA)
        self._subsets: dict[int, tuple[np.ndarray, OpFeatures, np.ndarray]] = {}
        self._build_slots(touched)

    def _build_slots(self, touched: dict[int, set[str]]) -> None:
        """One δ per (constant, level) some observation reaches; the chain matrix maps δ
        to ln constants per context."""
        slots: dict[tuple[str, str], int] = {}
        chains: dict[tuple[int, int], list[int]] = {}
        split: dict[int, float] = {}  # slots whose spread is shared with a sibling level
        self.slot_chain: dict[int, list[int]] = {}  # a level and the levels above it
        for ctx, (hardware, engine) in enumerate(self.context_specs):
            for p, name in enumerate(self.params):
                keys = level_keys(hardware, engine or _GENERIC, self.defs[name])[::-1]
                if name not in touched.get(ctx, set()):
                    keys = ["global"]
                chain = [slots.setdefault((name, key), len(slots)) for key in keys]
                if any(key.startswith("arch:") for key in keys):
                    # a device and its architecture share the device's prior variance
                    # about its class: each offset gets spread / sqrt(2)
                    for key, j in zip(keys, chain, strict=True):
                        if key.startswith(("arch:", "device:")):
                            split[j] = ARCH_SPLIT
                chains[(ctx, p)] = chain
                for depth, j in enumerate(chain):
                    self.slot_chain.setdefault(j, chain[:depth + 1])
        self.slots = list(slots)
        n_ctx, n_param = len(self.context_specs), len(self.params)
        self.chain = np.zeros((n_ctx * n_param, len(slots)))
        for (ctx, p), chain in chains.items():
            self.chain[ctx * n_param + p, chain] = 1.0
        self.upper = np.tile([self.defs[n].upper for n in self.params], n_ctx)
        self.log_prior = np.tile([_link(self.defs[n].prior, self.defs[n].upper)
                                  for n in self.params], n_ctx)
        self.spread = np.array([GLOBAL_SPREAD if key == "global" else
                                self.defs[name].spread * split.get(j, 1.0)
                                for j, (name, key) in enumerate(self.slots)])
        # rows each δ reaches, so a finite difference re-prices only those
        slot_ctx = [np.nonzero(self.chain[:, j].reshape(n_ctx, n_param).any(axis=1))[0]
                    for j in range(len(slots))]
        self.slot_ops = [np.nonzero(np.isin(self.op_ctx, c))[0] for c in slot_ctx]
        self.slot_steps = [np.nonzero(np.isin(self.step_ctx, c))[0] for c in slot_ctx]
        self.slot_ceilings = [np.nonzero(np.isin(self.ceiling_ctx, c))[0] for c in slot_ctx]

    def constants(self, delta: np.ndarray) -> np.ndarray:
        """(contexts × constants) values for the level offsets ``delta``."""
        z = self.log_prior + self.chain @ delta
        bounded = self.upper > 0
        values = np.where(bounded, self.upper / (1.0 + np.exp(-np.where(bounded, z, 0.0))),
                          np.exp(np.where(bounded, 0.0, z)))
        return values.reshape(len(self.context_specs), -1)

    def op_seconds(self, values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        f, ctx = self._op_rows(rows)
        per_op = values[ctx]  # (operators × constants), one gather
        consts = SimpleNamespace(**{name: per_op[:, p] for p, name in enumerate(self.params)})
        parts = priced_parts(f, consts, equals=lambda a, b: (a == b).astype(float))
        return parts.time(np.maximum)

    def _op_rows(self, rows: np.ndarray | None) -> tuple[OpFeatures, np.ndarray]:
        """The features and contexts of some operators (all when ``rows`` is None or spans
        them), kept for the next call with the same rows: the Jacobian re-prices the same
        operators for each level at every iteration."""
        if rows is None or len(rows) == len(self.op_ctx):
            return self.features, self.op_ctx
        key = id(rows)
        held = self._subsets.get(key)
        if held is None or held[0] is not rows:
            held = (rows, OpFeatures(**{k: getattr(self.features, k)[rows]
                                        for k in OpFeatures.__slots__}), self.op_ctx[rows])
            self._subsets[key] = held
        return held[1], held[2]

    def step_seconds(self, values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Fixed time of each forward pass: the step overhead, and the parallel step
        overhead for a pass on more than one device."""
        ctx = self.step_ctx if rows is None else self.step_ctx[rows]
        parallel = self.step_parallel if rows is None else self.step_parallel[rows]
        return (values[ctx, self.params.index("step_overhead_s")]
                + parallel * values[ctx, self.params.index("parallel_step_overhead_s")])

    def predict(self, delta: np.ndarray) -> np.ndarray:
        values = self.constants(delta)
        n = len(self.observations)
        step_overhead = self.step_seconds(values)
        times = (np.bincount(self.op_obs, self.op_weight * self.op_seconds(values), n)
                 + np.bincount(self.step_obs, self.step_weight * step_overhead, n))
        rate = values[self.ceiling_ctx, self.ceiling_param] * self.ceiling_scale
        times[self.ceiling_obs] = 1.0 / rate
        return times

    def residuals(self, delta: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        rows = (np.log(predicted) - np.log(self.measured)) / self.sigma
        return np.concatenate([rows, delta / self.spread])

    def jacobian(self, delta: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """d residual / d δ by forward differences, re-pricing only the rows a δ reaches."""
        base_values = self.constants(delta)
        base_ops = self.op_seconds(base_values)
        n, n_slots = len(self.observations), len(self.slots)
        jac = np.zeros((n + n_slots, n_slots))
        for j in range(n_slots):
            bumped = delta.copy()
            bumped[j] += FINITE_STEP
            values = self.constants(bumped)
            times = predicted.copy()
            ops = self.slot_ops[j]
            if len(ops):
                change = self.op_weight[ops] * (self.op_seconds(values, ops) - base_ops[ops])
                times += np.bincount(self.op_obs[ops], change, n)
            steps = self.slot_steps[j]
            if len(steps):
                change = self.step_weight[steps] * (self.step_seconds(values, steps)
                                                    - self.step_seconds(base_values, steps))
                times += np.bincount(self.step_obs[steps], change, n)
            ceil = self.slot_ceilings[j]
            if len(ceil):
                rate = values[self.ceiling_ctx[ceil], self.ceiling_param[ceil]] * \
                    self.ceiling_scale[ceil]
                times[self.ceiling_obs[ceil]] = 1.0 / rate
            jac[:n, j] = (np.log(times) - np.log(predicted)) / FINITE_STEP / self.sigma
            jac[n + j, j] = 1.0 / self.spread[j]
        return jac


_GENERIC = Engine(GENERIC_ENGINE, GENERIC_ENGINE, (), "")


def _link(value: float, upper: float) -> float:
    """The scale the fit works on: ln(value), or logit(value / upper) under a ceiling."""
    if upper > 0:
        share = min(max(value / upper, 1e-9), 1 - 1e-9)
        return math.log(share / (1 - share))
    return math.log(value)


def _unlink(z: float, upper: float) -> float:
    return upper / (1 + math.exp(-z)) if upper > 0 else math.exp(z)


def fit_profile(observations: Sequence[Observation], *, name: str = "fitted",
                max_iterations: int = MAX_ITERATIONS) -> FitResult:
    """The profile that best explains ``observations`` (maximum a posteriori with the level
    priors of parameters.toml, the rows' log-time residuals under a Huber loss)."""
    problem = _Problem(observations)
    n = len(problem.observations)
    delta, predicted, r, cost, iterations = _descend(problem, np.zeros(len(problem.slots)),
                                                     max_iterations)
    for constant, factor in RESTARTS:
        if (constant, "global") not in problem.slots:
            continue
        # one constant's global level moved by ``factor``, from the converged offsets and
        # from the prior (where no other constant has yet absorbed what it would explain)
        slot = problem.slots.index((constant, "global"))
        for base in (delta, np.zeros(len(problem.slots))):
            start = base.copy()
            start[slot] += math.log(factor)
            tried = _descend(problem, start, max_iterations)
            iterations += tried[4]
            if tried[3] < cost:
                delta, predicted, r, cost = tried[:4]
    jac = problem.jacobian(delta, predicted) * _root_weights(r, n)[:, None]
    profile = _profile(problem, delta, predicted, jac, name)
    log_res = np.log(predicted) - np.log(problem.measured)
    return FitResult(profile, predicted, log_res, iterations, cost, problem.observations)


def _descend(problem: _Problem, delta: np.ndarray, max_iterations: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int]:
    """Levenberg–Marquardt from ``delta`` until an iteration gains less than
    RELATIVE_TOLERANCE: the offsets, predicted times, residuals, objective and iterations."""
    n = len(problem.observations)
    predicted = problem.predict(delta)
    r = problem.residuals(delta, predicted)
    cost, damping, iterations = _robust_cost(r, n), 1e-3, 0
    while iterations < max_iterations:
        iterations += 1
        root_w = _root_weights(r, n)
        jac = problem.jacobian(delta, predicted) * root_w[:, None]
        normal = jac.T @ jac
        gradient = jac.T @ (root_w * r)
        improved = False
        for _ in range(12):
            lhs = normal + damping * np.diag(np.diag(normal) + 1e-12)
            step = np.linalg.solve(lhs, -gradient)
            trial = delta + step
            trial_predicted = problem.predict(trial)
            trial_r = problem.residuals(trial, trial_predicted)
            trial_cost = _robust_cost(trial_r, n)
            if np.isfinite(trial_cost) and trial_cost < cost:
                improved = True
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        if not improved:
            break
        gain = cost - trial_cost
        delta, predicted, r, cost = trial, trial_predicted, trial_r, trial_cost
        if gain < RELATIVE_TOLERANCE * max(cost, 1.0):
            break
    return delta, predicted, r, cost, iterations


def _root_weights(r: np.ndarray, rows: int) -> np.ndarray:
    """√ of the Huber weights: 1 within HUBER_THRESHOLD, threshold / |r| beyond it, for the
    first ``rows`` residuals (the measurements); the prior terms keep weight 1."""
    weights = np.ones_like(r)
    size = np.abs(r[:rows])
    weights[:rows] = np.where(size <= HUBER_THRESHOLD, 1.0,
                              HUBER_THRESHOLD / np.maximum(size, 1e-300))
    return np.sqrt(weights)


def _robust_cost(r: np.ndarray, rows: int) -> float:
    size = np.abs(r[:rows])
    huber = np.where(size <= HUBER_THRESHOLD, size ** 2,
                     2 * HUBER_THRESHOLD * size - HUBER_THRESHOLD ** 2)
    return float(huber.sum() + r[rows:] @ r[rows:])


def _profile(problem: _Problem, delta: np.ndarray, predicted: np.ndarray, jac: np.ndarray,
             name: str) -> Profile:
    """Full values per level (the chain summed down to it), each with the rows that
    inform it, their sources, their RMS log residual and the value's log standard error."""
    n = len(problem.observations)
    log_res = np.log(predicted) - np.log(problem.measured)
    try:
        covariance = np.linalg.inv(jac.T @ jac)
        log_sd = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    except np.linalg.LinAlgError:
        log_sd = np.full(len(delta), float("nan"))
    values: dict[str, dict[str, float]] = {}
    records: dict[str, dict[str, dict]] = {}
    for j, (param, key) in enumerate(problem.slots):
        chain = problem.slot_chain[j]
        parameter = problem.defs[param]
        value = _unlink(_link(parameter.prior, parameter.upper) + float(delta[chain].sum()),
                        parameter.upper)
        informed = np.nonzero(np.abs(jac[:n, j]) > 1e-6 / problem.sigma)[0]
        sources = sorted({problem.observations[i].source for i in informed})
        rms = float(np.sqrt(np.mean(log_res[informed] ** 2))) if len(informed) else 0.0
        values.setdefault(key, {})[param] = value
        records.setdefault(key, {})[param] = {
            "rows": int(len(informed)), "sources": sources,
            "rms_log_residual": round(rms, 4),
            "offset_sd": round(float(log_sd[j]), 4) if math.isfinite(log_sd[j]) else -1.0,
        }
    return Profile(name=name, values=values, records=records)
