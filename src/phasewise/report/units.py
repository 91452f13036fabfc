"""SI values to short human strings; only renderers call these."""

from __future__ import annotations

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str, *, digits: int = 3) -> str:
    """1.23e12, 'FLOP' -> '1.23 TFLOP'."""
    if value is None:
        return "—"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def gigabytes(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e9:,.2f} GB"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def rate(value: float | None, unit: str = "tok/s") -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def usd(value: float | None) -> str:
    return "—" if value is None else f"${value:,.3f}"
