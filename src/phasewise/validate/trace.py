"""Why one row is predicted as it is: its scenario, the command that reproduces it, each
constant with the level of the profile it came from, and its time by cause.

``phasewise validate --why RECORD_ID`` prints this; the causes are the row's passes priced
exactly as ``estimate`` and the fit price them (``run.scenario_steps``), so they add up to
the predicted time.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from phasewise.cost.base import hardware_for_collective, math_format_for
from phasewise.cost.calibrated import Calibrated
from phasewise.cost.calibration import ConstantSource, Profile
from phasewise.errors import InputError
from phasewise.ledger import build_ledger
from phasewise.lower import Kernel
from phasewise.validate.run import (
    CEILING_KINDS,
    FLOOR_BEATEN,
    FLOOR_BEATEN_FP16_ACCUMULATE,
    Prediction,
    predict,
    scenario_steps,
    short_source,
)
from phasewise.validate.scenario import Scenario

# The causes a row's time splits into: each operator counts max(compute, memory) as
# whichever bounds it, then its serial kernels, collectives and fixed overheads.
CAUSES = ("compute", "memory", "serial", "network", "overhead")


@dataclass(frozen=True, slots=True)
class RowTrace:
    scenario: Scenario
    prediction: Prediction
    profile: str
    command: str
    constants: tuple[ConstantSource, ...]
    causes: dict[str, float]  # seconds of the predicted time (the measured unit's time)
    in_memory: bool = False  # a fit no file holds: the command shows the bundled profile
    kernels: tuple[Kernel, ...] = ()  # the first pass's kernels that differ from the ledger

    def document(self) -> dict:
        p = self.prediction
        return {"record_id": p.record_id, "source": p.source, "phase": p.phase,
                "hardware": p.hardware, "model": p.model, "engine": p.engine,
                "metric": p.metric, "unit": p.unit, "measured": p.measured,
                "predicted": p.predicted, "floor": p.floor, "error": p.error,
                "floor_error": p.floor_error, "faster_than_floor": p.beats_floor,
                "fp16_accumulate_speedup": p.fp16_accumulate_speedup,
                "profile": self.profile,
                "command": self.command, "command_uses_this_fit": not self.in_memory,
                "causes_s": dict(self.causes),
                "kernels": [kernel_document(k) for k in self.kernels],
                "constants": [asdict(c) for c in self.constants]}

    def lines(self) -> list[str]:
        s, p = self.scenario, self.prediction
        out = [f"{s.record_id} ({short_source(s.source)}): {s.metric} = {s.value:g} {s.unit}",
               f"  device {s.hardware.name} ({s.hardware.device_class}), "
               + (f"model {s.model.name}, " if s.model else "")
               + (f"engine {s.engine.name}, " if s.engine else "")
               + f"weights {s.precision.weights} / act {s.precision.activations} / "
                 f"KV {s.precision.kv_cache}, TP{s.parallelism.tp} PP{s.parallelism.pp} "
                 f"EP{s.parallelism.ep}",
               f"  measured {p.measured:.4g}, expected {p.predicted:.4g} ({p.error:+.1%} in "
               f"time), speed of light {p.floor:.4g} ({p.floor_error:+.1%}); profile "
               f"'{self.profile}'"]
        if p.beats_floor and p.fp16_accumulate_speedup > 1:
            out.append("  measured faster than the speed-of-light floor: "
                       + FLOOR_BEATEN_FP16_ACCUMULATE.format(factor=p.fp16_accumulate_speedup))
        elif p.beats_floor:
            out.append(f"  measured faster than the speed-of-light floor: {FLOOR_BEATEN}")
        if self.command and self.in_memory:
            out.append(f"  same scenario (bundled profile, not this fit): {self.command}")
        elif self.command:
            out.append(f"  reproduce: {self.command}")
        total = sum(self.causes.values())
        if total > 0:
            shares = ", ".join(f"{k} {v * 1e3:.3g} ms ({v / total:.0%})"
                               for k, v in self.causes.items() if v > 0)
            out.append(f"  expected time by cause: {shares}")
        if self.kernels:
            out.append("  kernels the engine runs otherwise than the ledger counts (first pass):")
            out += [f"    {kernel_line(k)}" for k in self.kernels]
        out.append("  constants (value, the profile level it came from, rows fitted):")
        for c in self.constants:
            fitted = f", {c.rows} rows" if c.rows else ""
            out.append(f"    {c.name:26s} {c.value:<12.4g} {c.level}{fitted}")
        return out


def find_scenarios(scenarios: Sequence[Scenario], ids: Sequence[str]) -> list[Scenario]:
    """The scenarios of ``ids`` (record ids, case-insensitive), in the order given."""
    by_id = {s.record_id.lower(): s for s in scenarios}
    missing = [i for i in ids if i.lower() not in by_id]
    if missing:
        raise InputError(f"--why: no scored row has record id {', '.join(missing)}; "
                         "`phasewise validate --rows` lists them (excluded and skipped rows "
                         "are not scored).")
    return [by_id[i.lower()] for i in ids]


def trace(scenario: Scenario, profile: Profile, *, calibration: str | None = None,
          in_memory: bool = False) -> RowTrace:
    """Explain ``scenario``'s prediction under ``profile``; ``calibration`` is the profile
    file the reproducing command should name (None: the bundled one); ``in_memory`` says
    the profile is a fit no file holds (a held-out fold, a refit)."""
    prediction = predict(scenario, profile)
    cost = Calibrated.for_device(scenario.hardware, engine=scenario.engine, calibration=profile)
    constants = cost.sources
    causes = dict.fromkeys(CAUSES, 0.0)
    command, kernels = "", []
    if scenario.kind not in CEILING_KINDS:
        ubatch = cost.traits.prefill_ubatch_tokens
        for i, (weight, step) in enumerate(scenario_steps(scenario, ubatch)):
            ledger = build_ledger(scenario.model, step, scenario.precision, scenario.parallelism)
            for key, seconds in _step_causes(cost, ledger, scenario.hardware).items():
                causes[key] += weight * seconds
            if i == 0:
                kernels = [k for k in (cost.kernel(op, scenario.hardware,
                                                   math_format_for(op, ledger.math_format))
                                       for op in ledger.ops) if k.changed]
        command = estimate_command(scenario, calibration)
    else:
        causes["compute" if scenario.kind == "gemm" else "memory"] = prediction.predicted_s
    return RowTrace(scenario, prediction, profile.name, command, constants, causes, in_memory,
                    tuple(kernels))


def kernel_line(k: Kernel) -> str:
    """One lowered kernel in a line: its unit and how it differs from the ledger's count."""
    parts = [k.unit]
    if abs(k.padding - 1.0) > 1e-9:
        parts.append(f"FLOPs x{k.padding:.3g}")
    if k.passes > 1:
        parts.append(f"{k.passes:g} passes over the weights")
    if k.extra_bytes:
        parts.append(f"+{k.extra_bytes / 1e9:.3g} GB in kernels of their own")
    if k.launches != k.op.calls:
        parts.append(f"{k.launches:g} launches")
    if k.peak_factor != 1.0:
        parts.append(f"matmul rate x{k.peak_factor:g}")
    return f"{k.op.name} ({k.op.layers}): {', '.join(parts)} [{', '.join(k.rules)}]"


def kernel_document(k: Kernel) -> dict:
    return {"op": k.op.name, "layers": k.op.layers, "unit": k.unit, "flops": k.flops,
            "op_flops": k.op.flops, "passes": k.passes, "memory_bytes": k.memory_bytes,
            "extra_bytes": k.extra_bytes, "launches": k.launches, "peak_factor": k.peak_factor,
            "rules": list(k.rules)}


def _step_causes(cost: Calibrated, ledger, hardware) -> dict[str, float]:  # noqa: ANN001
    """One pass's time by cause, from the same parts ``Calibrated.step_time`` sums."""
    causes = dict.fromkeys(CAUSES, 0.0)
    for op in ledger.ops:
        p = cost.op_parts(op, hardware_for_collective(hardware, op, ledger),
                          math_format_for(op, ledger.math_format))
        causes["compute" if p.compute_s > p.memory_s else "memory"] += max(p.compute_s,
                                                                           p.memory_s)
        causes["serial"] += p.serial_s
        causes["network"] += p.network_s
        causes["overhead"] += p.overhead_s
    causes["overhead"] += cost.step_fixed_s(ledger)
    return causes


def estimate_command(scenario: Scenario, calibration: str | None) -> str:
    """The ``phasewise estimate`` call whose headline figure is this row's prediction."""
    w, prec, par = scenario.workload, scenario.precision, scenario.parallelism
    args = ["phasewise", "estimate", "-m", scenario.model.name, "-H", scenario.hardware.name,
            "--isl", str(w.isl), "--osl", str(w.osl), "-b", str(w.batch_size),
            "--weight-dtype", prec.weights, "--act-dtype", prec.activations,
            "--kv-dtype", prec.kv_cache, "--tp", str(par.tp), "--pp", str(par.pp),
            "--ep", str(par.ep), "--cost", "calibrated"]
    if prec.kv_keep != 1.0:
        args += ["--kv-keep", f"{prec.kv_keep:g}"]
    if scenario.engine is not None:
        args += ["--engine", scenario.engine.name]
    if calibration:
        args += ["--calibration", calibration]
    return " ".join(shlex.quote(a) for a in args)
