"""Option parsing shared by `explain`, `compare` and the what-if flags of `estimate`."""

from __future__ import annotations

from phasewise.commands._app import split_list
from phasewise.errors import InputError


def one(values: list, flag: str):  # noqa: ANN001, ANN201 - any parsed value
    """The single value of a flag this command does not sweep."""
    if len(values) != 1:
        raise InputError(f"{flag} takes one value here, got {len(values)}; comma lists sweep "
                         "only in `phasewise estimate`.")
    return values[0]


def fraction(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{flag} {text}: give a number such as 0.5.") from None


def prices(text: str | None) -> tuple[float | None, dict[str, float]]:
    """--price 2.49 (every device) or --price h100-sxm=2.49,h200-sxm=3.5 (per device):
    returns (price for every device, per-device prices)."""
    if text is None:
        return None, {}
    if "=" not in text:
        value = fraction(text, "--price")
        return value, {}
    per_device: dict[str, float] = {}
    for item in split_list(text, "--price", str):
        name, _, value = item.partition("=")
        number = fraction(value, f"--price {name}")
        if not name or number is None:
            raise InputError(f"--price '{item}': write DEVICE=USD_PER_HOUR, e.g. h100-sxm=2.49.")
        per_device[name.strip()] = number
    return None, per_device


def resolve_prices(text: str | None, names: list[str]) -> dict[str, float]:
    """Per-device price overrides keyed by catalog name (aliases resolved)."""
    from phasewise.catalog import load_hardware

    everywhere, per_device = prices(text)
    if everywhere is not None:
        return {load_hardware(n).name: everywhere for n in names}
    return {load_hardware(n).name: p for n, p in per_device.items()}
