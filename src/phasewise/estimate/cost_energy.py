"""Money and energy per token: hourly prices and TDPs spread over the tokens a phase makes.

Each phase is charged for the device time it uses: prompt tokens for the prefill step,
generated tokens for the decode steps. Energy uses the board power limit (TDP) for the
whole time, so it is an upper bound: real draw is lower, above all in bandwidth-bound decode.
"""

from __future__ import annotations

import dataclasses

from phasewise.errors import InputError
from phasewise.estimate.types import CostEnergy
from phasewise.specs import HardwareSpec, Price

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
ENERGY_BASIS = "upper bound: every device drawing its full TDP for the whole step"


def usd_per_million_tokens(usd_per_hour: float | None, devices: int, seconds: float,
                           tokens: float) -> float | None:
    """usd_per_hour · devices · seconds / 3600 / tokens · 10⁶; None without a price."""
    if usd_per_hour is None or tokens <= 0:
        return None
    return usd_per_hour * devices * seconds / SECONDS_PER_HOUR / tokens * TOKENS_PER_MILLION


def joules_per_token_upper_bound(tdp_w: float | None, devices: int, seconds: float,
                                 tokens: float) -> float | None:
    """TDP · devices · seconds / tokens: the most a token can cost at the board power limit."""
    if tdp_w is None or tokens <= 0:
        return None
    return tdp_w * devices * seconds / tokens


def cost_energy(device: HardwareSpec, devices: int, *, prefill_s: float, input_tokens: float,
                decode_step_s: float, tokens_per_decode_step: float) -> CostEnergy:
    """Per-token price and energy of each phase for ``devices`` copies of ``device``."""
    price, tdp = device.price_usd_per_hour, device.tdp_w
    return CostEnergy(
        usd_per_hour=price * devices if price is not None else None,
        usd_per_million_input_tokens=usd_per_million_tokens(price, devices, prefill_s,
                                                            input_tokens),
        usd_per_million_output_tokens=usd_per_million_tokens(price, devices, decode_step_s,
                                                             tokens_per_decode_step),
        joules_per_input_token_upper_bound=joules_per_token_upper_bound(tdp, devices, prefill_s,
                                                                        input_tokens),
        joules_per_output_token_upper_bound=joules_per_token_upper_bound(
            tdp, devices, decode_step_s, tokens_per_decode_step),
        energy_basis=ENERGY_BASIS,
    )


def with_price(device: HardwareSpec, usd_per_hour: float | None) -> HardwareSpec:
    """The device at another hourly price (a --price override); None keeps the catalog's."""
    if usd_per_hour is None:
        return device
    if usd_per_hour < 0:
        raise InputError(f"--price {usd_per_hour}: an hourly price cannot be negative; give "
                         "US dollars per device-hour, e.g. --price 2.49.")
    return dataclasses.replace(device, price_usd_per_hour=float(usd_per_hour),
                               price=Price(float(usd_per_hour), "override", "--price"))
