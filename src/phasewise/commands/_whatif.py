"""Option parsing shared by `explain`, `compare` and the what-if flags of `estimate`."""

from __future__ import annotations

from phasewise.catalog.speculative import DEFAULT_TASK, check_task
from phasewise.commands._app import given, number, refuse_unused, split_list, whole
from phasewise.errors import InputError

# US$ per device-hour: free (0) up to far past any rented accelerator.
PRICE_RANGE = {"minimum": 0.0, "maximum": 1e5}


def one(values: list, flag: str):  # noqa: ANN001, ANN201 - any parsed value
    """The single value of a flag this command does not sweep."""
    if len(values) != 1:
        raise InputError(f"{flag} takes one value here, got {len(values)}; `phasewise "
                         "estimate` sweeps comma lists.")
    return values[0]


def fraction(text: str | None, flag: str, **bounds: float) -> float | None:
    """A finite number within ``bounds`` (_app.number's), by default a share in (0, 1]."""
    return number(text, flag, **(bounds or {"above": 0.0, "maximum": 1.0}))


def request_mix(text: str | None) -> list[tuple[int, int, float]] | None:
    """--mix 4096:256:0.7,512:1024:0.3 -> [(4096, 256, 0.7), (512, 1024, 0.3)]."""
    if text is None:
        return None
    classes = []
    for item in split_list(text, "--mix", str):
        parts = item.split(":")
        if len(parts) != 3:
            raise InputError(f"--mix '{item}': write ISL:OSL:SHARE per class, e.g. "
                             "4096:256:0.7,512:1024:0.3.")
        classes.append((whole(parts[0], "--mix ISL"), whole(parts[1], "--mix OSL"),
                        number(parts[2], "--mix SHARE", above=0.0, maximum=1.0)))
    return classes


def prices(text: str | None) -> tuple[float | None, dict[str, float]]:
    """--price 2.49 (every device) or --price h100-sxm=2.49,h200-sxm=3.5 (per device):
    returns (price for every device, per-device prices)."""
    if text is None:
        return None, {}
    if "=" not in text:
        value = fraction(text, "--price", **PRICE_RANGE)
        return value, {}
    per_device: dict[str, float] = {}
    for item in split_list(text, "--price", str):
        name, _, value = item.partition("=")
        if not name.strip() or not value.strip():
            raise InputError(f"--price '{item}': write DEVICE=USD_PER_HOUR, e.g. h100-sxm=2.49.")
        per_device[name.strip()] = fraction(value, f"--price {name}", **PRICE_RANGE)
    return None, per_device


def resolve_prices(text: str | None, names: list[str]) -> dict[str, float]:
    """Per-device price overrides keyed by catalog name (aliases resolved)."""
    from phasewise.catalog import load_hardware

    everywhere, per_device = prices(text)
    if everywhere is not None:
        return {load_hardware(n).name: everywhere for n in names}
    return {load_hardware(n).name: p for n, p in per_device.items()}


# Draft tokens per speculation round: engines propose a handful (EAGLE trees up to ~60).
MAX_SPEC_TOKENS = 64
# Devices in a disaggregated pool: beyond any cluster, and the pool sizes are arithmetic.
MAX_POOL_DEVICES = 1_000_000


class WhatIfFlags:
    """The what-if flags of `phasewise estimate`, gathered so the verb stays short."""

    def __init__(self, *, what_if: list[str] | None = None, draft: str | None = None,
                 draft_head: str | None = None, spec_tokens: int = 4, spec_accept: str | None = None,
                 task: str = DEFAULT_TASK,
                 prefill_hardware: str | None = None, decode_hardware: str | None = None,
                 prefill_pool: int | None = None, decode_pool: int | None = None,
                 prefill_tp: int | None = None, decode_tp: int | None = None,
                 link: str | None = None, link_bandwidth: str | None = None,
                 link_latency: str | None = None, mix: str | None = None) -> None:
        self.variants = list(what_if or [])
        self.draft, self.draft_head = draft, fraction(draft_head, "--draft-head")
        self.spec_tokens = whole(spec_tokens, "--spec-tokens", maximum=MAX_SPEC_TOKENS)
        self.spec_accept = fraction(spec_accept, "--spec-accept", minimum=0.0, below=1.0)
        self.task = check_task(task)
        self.prefill_hardware, self.decode_hardware = prefill_hardware, decode_hardware
        self.prefill_pool, self.decode_pool = prefill_pool, decode_pool
        self.prefill_tp, self.decode_tp = prefill_tp, decode_tp
        self.link = link
        self.link_bandwidth = fraction(link_bandwidth, "--link-bandwidth", above=0.0,
                                       maximum=1e6)
        self.link_latency = fraction(link_latency, "--link-latency", minimum=0.0, maximum=1e7)
        self.mix = request_mix(mix)
        for count, flag in ((prefill_pool, "--prefill-pool"), (decode_pool, "--decode-pool"),
                            (prefill_tp, "--prefill-tp"), (decode_tp, "--decode-tp")):
            whole(count, flag, maximum=MAX_POOL_DEVICES)
        self._refuse_unused()

    def _refuse_unused(self) -> None:
        if not self.speculative:
            refuse_unused(given("spec_tokens", "spec_accept", "task"), "--draft or --draft-head")
        if not self.disaggregated:
            refuse_unused(given("prefill_pool", "decode_pool", "prefill_tp", "decode_tp",
                                "link", "link_bandwidth", "link_latency", "mix"),
                          "--prefill-hardware or --decode-hardware (disaggregated pools)")
        if self.link_latency is not None and self.link_bandwidth is None:
            raise InputError("--link-latency sets the latency of a --link-bandwidth link (a "
                             "catalog --link has its own); give --link-bandwidth too.")
        if self.link is not None and self.link_bandwidth is not None:
            raise InputError("--link and --link-bandwidth each set the KV-transfer link; give "
                             "one of them.")

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
                                 spec_accept=self.spec_accept, task=self.task, cost=cost)
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
    else:  # the answer asked for first; the plain estimate it departs from after it
        console().print(*(v for *_, v in extras), estimate_table(base), cost_energy_table(base))
