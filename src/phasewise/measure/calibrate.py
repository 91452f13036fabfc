"""Fitting a calibration profile for this machine from profile runs.

Every measured step becomes an ``cost.fit.Observation`` (its time and its ledger), the
measured ceilings become the device's microbenchmark rows, and ``cost.fit.fit_profile``
finds the constants of ``cost.Calibrated`` that explain them: the device constants
(``gemm_fraction``, ``bandwidth_fraction``) at level ``device:<name>`` and the engine
constants (efficiencies, per-call and per-step overheads) at ``global``, since a local
profile describes one engine, PyTorch eager on this machine. The result is written in the
TOML layout ``cost.calibration`` reads, beside a hardware sheet of the measured ceilings,
so ``phasewise estimate --hardware SHEET --cost calibrated --calibration PROFILE`` prices
any model on this machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger
from phasewise.local import LOCAL_DEVICE_NAME
from phasewise.measure.micro import hardware_from_ceilings, measured_name
from phasewise.measure.profile import precision_for
from phasewise.measure.types import Ceilings, Profile
from phasewise.specs import HardwareSpec, ModelSpec
from phasewise.specs import model as model_parts

FIT_METHOD = ("Levenberg-Marquardt on ln(predicted/measured time), ridge toward each "
              "constant's prior (cost/fit.py), over phasewise profile runs on this machine")


def spec_from_document(profile: Profile) -> ModelSpec:
    """The ModelSpec a profile ran, as stored in its document (lists back to tuples)."""
    if not profile.model_spec:
        raise InputError(f"the profile of {profile.model} does not record its model's shape; "
                         "profile it again with this version of phasewise.")
    known = _DOCUMENT_FIELDS
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in profile.model_spec.items()
              if k in known}
    if profile.model_spec.get("layer_specs"):
        fields["layer_specs"] = layers_from_document(profile.model_spec["layer_specs"])
    return ModelSpec(**fields)


# The fields a profile document records: the uniform description, and each layer's mixer
# and MLP for a model given layer by layer (MTP layers and checkpoint formats are not run).
_DOCUMENT_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec)
                         if f.init and f.name not in ("layer_specs", "mtp_layers", "checkpoint"))
_PART_KINDS = {kind.__name__: kind for kind in (
    model_parts.Attention, model_parts.LatentAttention, model_parts.LinearAttention,
    model_parts.Mamba2, model_parts.Mamba1, model_parts.ShortConv, model_parts.CrossAttention,
    model_parts.LinearMixer, model_parts.DenseMLP, model_parts.MoE, model_parts.LinearMLP)}


def layers_to_document(layers: Sequence[model_parts.Layer]) -> list[dict[str, Any]]:
    """Each layer as {"mixer": {"kind": …, fields…} | None, "mlp": … | None}."""
    def part(value: Any) -> dict[str, Any] | None:
        return None if value is None else {"kind": type(value).__name__,
                                           **dataclasses.asdict(value)}
    return [{"mixer": part(layer.mixer), "mlp": part(layer.mlp)} for layer in layers]


def layers_from_document(rows: Sequence[Any]) -> tuple[model_parts.Layer, ...]:
    """The layers ``layers_to_document`` wrote; a malformed entry is refused in one line."""
    def part(value: Any) -> Any:
        if value is None:
            return None
        fields = dict(value) if isinstance(value, dict) else {}
        kind = _PART_KINDS.get(str(fields.pop("kind", "")))
        if kind is None:
            raise InputError(f"profile document: unknown layer part {value!r}.")
        try:
            return kind(**fields)
        except TypeError as error:
            raise InputError(f"profile document: layer part {value!r}: {error}.") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError("profile document: layer_specs must be a list of layers.")
    return tuple(model_parts.Layer(part(r.get("mixer")), part(r.get("mlp"))) for r in rows)


def spec_to_document(spec: ModelSpec) -> dict[str, Any]:
    document = {name: getattr(spec, name) for name in _DOCUMENT_FIELDS}
    if spec.layer_specs:
        document["layer_specs"] = layers_to_document(spec.layer_specs)
    return document


def observations(profiles: Sequence[Profile], hardware: HardwareSpec) -> list[Any]:
    """One observation per measured point, plus the GEMM and copy ceilings of each run."""
    from phasewise.cost.fit import Observation

    rows = []
    for profile in profiles:
        spec, precision = spec_from_document(profile), precision_for(profile.dtype)
        source = f"phasewise profile {profile.model} ({profile.dtype}, {profile.device})"
        for point in profile.points:
            step = (Step.prefill(point.new_tokens, batch=point.batch_size)
                    if point.phase == "prefill" else
                    Step.decode(point.batch_size, point.context_tokens))
            ledger = build_ledger(spec, step, precision)
            rows.append(Observation(key=f"{profile.model}:{point.label}", source=source,
                                    hardware=hardware, engine=None, measured_s=point.time_s,
                                    passes=((1.0, ledger),)))
        ceilings = profile.ceilings
        micro = f"phasewise profile --micro ({ceilings.device_name})"
        for fmt, flops_per_s in ceilings.gemm_flops_per_s.items():
            if fmt in hardware.peak_flops_per_s:
                rows.append(Observation(key=f"gemm:{fmt}", source=micro, hardware=hardware,
                                        engine=None, measured_s=1.0 / flops_per_s,
                                        ceiling="gemm", math_format=fmt))
        rows.append(Observation(key="copy", source=micro, hardware=hardware, engine=None,
                                measured_s=1.0 / ceilings.copy_bytes_per_s, ceiling="memory_bw"))
    return rows


def fit_calibration(profiles: Sequence[Profile], *, ceilings: Ceilings | None = None,
                    name: str = LOCAL_DEVICE_NAME) -> tuple[Any, HardwareSpec]:
    """(fit result, device) for ``profiles``; the device is built from ``ceilings`` (the
    first profile's when None) and named ``name``."""
    from phasewise.cost.fit import fit_profile

    if not profiles or not any(p.points for p in profiles):
        raise InputError("calibration needs at least one profile with measured points; run "
                         "`phasewise profile --out FILE` first.")
    hardware = hardware_from_ceilings(ceilings or profiles[0].ceilings, name=name)
    rows = observations(profiles, hardware)
    result = fit_profile(rows, name=f"{name}-calibration")
    fit = {"name": f"{name}-calibration", "method": FIT_METHOD, "rows": len(rows),
           "models": sorted({p.model for p in profiles}),
           "sources": sorted({row.source for row in rows}),
           "rms_log_residual": round(float((result.log_residuals ** 2).mean() ** 0.5), 4),
           "iterations": result.iterations}
    profile = dataclasses.replace(result.profile, fit=fit)
    return dataclasses.replace(result, profile=profile), hardware


def calibrated_model(result: Any, hardware: HardwareSpec) -> Any:
    from phasewise.cost.calibrated import Calibrated

    return Calibrated.for_device(hardware, calibration=result.profile)


def calibration_toml(result: Any, hardware: HardwareSpec) -> str:
    from phasewise.cost.calibration import profile_to_toml

    header = (f"# Calibration of {hardware.display_name}, fitted by `phasewise calibrate` to\n"
              f"# {result.profile.fit.get('rows')} measurements of this machine "
              f"(rms log residual {result.profile.fit.get('rms_log_residual')}).\n")
    return header + profile_to_toml(result.profile)


def hardware_sheet_toml(ceilings: Ceilings, *, name: str = LOCAL_DEVICE_NAME) -> str:
    """A hardware sheet in the catalog's layout (human units, each figure with its source)
    holding the measured ceilings."""
    compute = "\n".join(f"{fmt}_tflops = {value / 1e12:.6g}"
                        for fmt, value in ceilings.gemm_flops_per_s.items())
    return (f'name = "{name}"\n'
            f'display_name = "{_escape(measured_name(ceilings))}"\n'
            f'device_class = "{ceilings.device_class}"\n'
            'notes = "Measured by phasewise profile --micro: torch '
            f'{ceilings.versions.get("torch", "")}, {ceilings.threads} threads, clock '
            f'{ceilings.clock}."\n\n'
            f"[compute]\n{compute}\n"
            f'source = "measured: median of {ceilings.repeats} square GEMMs of side '
            f'{ceilings.gemm_size} per format"\n\n'
            f"[memory]\ncapacity_gb = {ceilings.memory_bytes / 1e9:.6g}\n"
            f"bandwidth_gb_per_s = {ceilings.copy_bytes_per_s / 1e9:.6g}\n"
            f'source = "measured: median copy of {ceilings.buffer_bytes / 2**20:,.0f} MiB, '
            f'bytes read + written; read-only {ceilings.read_bytes_per_s / 1e9:.4g} GB/s"\n'
            + (f"\n[architecture]\nvector_bits = {ceilings.vector_bits}\n"
               'source = "torch.backends.cpu.get_cpu_capability(): the SIMD width torch\'s '
               'fp32 GEMM ran with"\n' if ceilings.vector_bits else ""))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
