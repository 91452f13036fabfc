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


def request_mix(text: str | None) -> list[tuple[int, int, float]] | None:
    """--mix 4096:256:0.7,512:1024:0.3 -> [(4096, 256, 0.7), (512, 1024, 0.3)]."""
    if text is None:
        return None
    classes = []
    for item in split_list(text, "--mix", str):
        parts = item.split(":")
        try:
            isl, osl, share = int(parts[0]), int(parts[1]), float(parts[2])
        except (ValueError, IndexError):
            raise InputError(f"--mix '{item}': write ISL:OSL:SHARE per class, e.g. "
                             "4096:256:0.7,512:1024:0.3.") from None
        classes.append((isl, osl, share))
    return classes


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


class WhatIfFlags:
    """The what-if flags of `phasewise estimate`, gathered so the verb stays short."""

    def __init__(self, *, what_if: list[str] | None = None, draft: str | None = None,
                 draft_head: str | None = None, spec_tokens: int = 4, spec_accept: str = "0.7",
                 prefill_hardware: str | None = None, decode_hardware: str | None = None,
                 prefill_pool: int | None = None, decode_pool: int | None = None,
                 prefill_tp: int | None = None, decode_tp: int | None = None,
                 link: str | None = None, link_bandwidth: str | None = None,
                 link_latency: str | None = None, mix: str | None = None) -> None:
        self.variants = list(what_if or [])
        self.draft, self.draft_head = draft, fraction(draft_head, "--draft-head")
        self.spec_tokens, self.spec_accept = spec_tokens, fraction(spec_accept, "--spec-accept")
        self.prefill_hardware, self.decode_hardware = prefill_hardware, decode_hardware
        self.prefill_pool, self.decode_pool = prefill_pool, decode_pool
        self.prefill_tp, self.decode_tp = prefill_tp, decode_tp
        self.link = link
        self.link_bandwidth = fraction(link_bandwidth, "--link-bandwidth")
        self.link_latency = fraction(link_latency, "--link-latency")
        self.mix = request_mix(mix)

    @property
    def speculative(self) -> bool:
        return self.draft is not None or self.draft_head is not None

    @property
    def disaggregated(self) -> bool:
        return self.prefill_hardware is not None or self.decode_hardware is not None

    @property
    def any(self) -> bool:
        return bool(self.variants) or self.speculative or self.disaggregated

    def run(self, model: str, device, workload, precision, par, cost) -> list[tuple]:  # noqa: ANN001
        """[(JSON key, result, rows, view)] for each what-if asked for."""
        from phasewise.estimate.disagg import DEFAULT_LINK, custom_link, disaggregate
        from phasewise.estimate.speculative import speculative
        from phasewise.estimate.whatif import parse_variant, what_if
        from phasewise.report import whatif_view as view

        out: list[tuple] = []
        if self.variants:
            result = what_if(model, device, workload, precision, par,
                             [parse_variant(v) for v in self.variants], cost=cost)
            out.append(("what_if", result, view.whatif_rows(result), view.whatif_table(result)))
        if self.speculative:
            result = speculative(model, device, workload, precision, par, draft=self.draft,
                                 draft_head_fraction=self.draft_head, spec_tokens=self.spec_tokens,
                                 spec_accept=self.spec_accept, cost=cost)
            out.append(("speculative", result, view.speculative_rows(result),
                        view.speculative_table(result)))
        if self.disaggregated:
            if self.link_bandwidth is not None:
                link = custom_link(self.link_bandwidth, self.link_latency or 0.0)
            else:
                link = self.link or DEFAULT_LINK
            prefill_tp, decode_tp = self.prefill_tp or par.tp, self.decode_tp or par.tp
            result = disaggregate(
                model, workload, precision, prefill_hardware=self.prefill_hardware or device,
                decode_hardware=self.decode_hardware or device,
                prefill_pool=prefill_tp if self.prefill_pool is None else self.prefill_pool,
                decode_pool=decode_tp if self.decode_pool is None else self.decode_pool,
                prefill_tp=prefill_tp, decode_tp=decode_tp, link=link, mix=self.mix, cost=cost)
            out.append(("disaggregation", result, view.disagg_rows(result),
                        view.disagg_table(result)))
        return out


def priced_device(hardware: str, price_text: str | None):  # noqa: ANN201 - a HardwareSpec
    """The device at its --price override, or its catalog name when there is none."""
    if price_text is None:
        return hardware
    from phasewise.catalog import load_hardware
    from phasewise.estimate.cost_energy import with_price

    device = load_hardware(hardware)
    return with_price(device, resolve_prices(price_text, [hardware]).get(device.name))


def render_whatifs(flags: WhatIfFlags, results: list, model: str, hardware: str,  # noqa: ANN001
                   price: str | None, precision, cost, fmt: str) -> None:
    """The baseline estimate followed by each what-if, as one document or one screen."""
    from phasewise.commands._app import console, echo
    from phasewise.report.estimate_view import estimate_table
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.whatif_view import cost_energy_table
    from phasewise.specs import Parallelism, Workload

    if len(results) != 1:
        raise InputError("--what-if, --draft/--draft-head and --prefill/--decode-hardware work "
                         "on one baseline; drop the comma lists.")
    base = results[0]
    i = base.inputs
    extras = flags.run(model, priced_device(hardware, price), Workload(i.isl, i.osl, i.batch_size),
                       precision, Parallelism(i.tp, i.pp, i.ep), cost)
    if fmt == "json":
        doc = base.model_dump(mode="json")
        doc.update({key: result.model_dump(mode="json") for key, result, _, _ in extras})
        echo(to_json(doc))
    elif fmt in ("csv", "md"):
        render = rows_to_csv if fmt == "csv" else rows_to_markdown
        for _, _, rows, _ in extras:
            echo(render(rows))
    else:
        console().print(estimate_table(base), cost_energy_table(base), *(v for *_, v in extras))
