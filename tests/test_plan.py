"""`phasewise plan` against known results: which device wins which phase (from the sheets'
prices and peaks, computed here), DistServe's disaggregation claim, mixed pools with the
KV transfer inside TTFT, the chosen layout simulated on its own, and bad input."""

from __future__ import annotations

import dataclasses
import io
import json
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from phasewise.catalog import load_hardware
from phasewise.cli import main
from phasewise.plan import Load, Problem, RequestClass, SearchSpace, Study, Target, Traffic, plan

SHEETS = Path(__file__).resolve().parents[1] / "src" / "phasewise" / "catalog" / "hardware"
LINKS = SHEETS.parent / "links"
MODEL = "llama-3.1-8b"
# The test's own prices: the L40S made cheap enough that it wins price per FLOP/s while
# the A100 keeps the lower price per byte/s (checked from the sheets below).
PRICES = {"l40s": 1.5, "a100-80gb-sxm": 1.79}


def _sheet(name: str) -> dict:
    return tomllib.loads((SHEETS / f"{name}.toml").read_text())


def _price_per_flops(name: str) -> float:
    return PRICES[name] / (_sheet(name)["compute"]["bf16_tflops"] * 1e12)


def _price_per_byte(name: str) -> float:
    return PRICES[name] / (_sheet(name)["memory"]["bandwidth_gb_per_s"] * 1e9)


def _devices() -> tuple:
    return tuple(dataclasses.replace(load_hardware(n), price_usd_per_hour=p) for n, p in PRICES.items())


def _space(**kw) -> SearchSpace:
    base = dict(hardware=_devices(), tp=(1,), pp=(1,), weight_dtypes=("bf16",), kv_dtypes=("bf16",),
                max_seqs=(64, 256), chunk_tokens=(8192,), layouts=("aggregated",),
                speculation=(False,), extra_replicas=1)
    base.update(kw)
    return SearchSpace(**base)


def _plan(classes, rate, targets, space, *, verify=6, requests=300):  # noqa: ANN001
    isl, osl = (str(classes[0].isl), str(classes[0].osl)) if len(classes) == 1 else (None, None)
    traffic = Traffic(tuple(classes), max(c.isl + c.osl for c in classes), isl=isl, osl=osl,
                      mix=None if len(classes) == 1 else tuple(classes))
    return plan(Study(MODEL, Problem(traffic, Load("rate", rate), targets, space), verify=verify,
                      requests=requests))[0]


def test_the_sheets_give_opposite_winners_per_phase():
    assert min(PRICES, key=_price_per_flops) == "l40s"
    assert min(PRICES, key=_price_per_byte) == "a100-80gb-sxm"


def test_long_prompts_short_answers_pick_the_cheapest_flops():
    report = _plan([RequestClass(8192, 8, 1.0)], 12.0,
                   (Target("ttft", 10.0), Target("e2e", 20.0)), _space())
    assert report.chosen is not None and report.chosen.meets_slos
    assert report.chosen.pools[0].hardware == min(PRICES, key=_price_per_flops)


def test_chat_work_picks_the_cheapest_bandwidth():
    # Many replicas, so the whole-replica rounding does not hide the price per byte/s.
    report = _plan([RequestClass(512, 256, 1.0)], 60.0,
                   (Target("ttft", 5.0), Target("tpot", 0.2)), _space(), requests=1500)
    assert report.chosen is not None and report.chosen.meets_slos
    assert report.chosen.pools[0].hardware == min(PRICES, key=_price_per_byte)


def _distserve(tpot_s: float):  # noqa: ANN202
    space = dataclasses.replace(_space(), hardware=(load_hardware("h100-sxm"),),
                                max_seqs=(32, 128, 256), chunk_tokens=(2048, 8192),
                                layouts=("aggregated", "disaggregated"))
    return _plan([RequestClass(2048, 256, 1.0)], 20.0,
                 (Target("ttft", 2.0), Target("tpot", tpot_s)), space, verify=12, requests=600)


def test_disaggregation_wins_under_a_tight_tpot_slo():
    report = _distserve(0.012)
    assert report.chosen is not None and report.chosen.layout == "disaggregated"


def test_disaggregation_loses_under_a_loose_tpot_slo():
    report = _distserve(0.2)
    assert report.chosen is not None and report.chosen.layout == "aggregated"


def test_mixed_pools_split_the_phases_and_ttft_carries_the_kv_transfer():
    space = _space(layouts=("disaggregated",), max_seqs=(128,))
    report = _plan([RequestClass(4096, 256, 1.0)], 30.0,
                   (Target("ttft", 5.0), Target("tpot", 0.05)), space, requests=800)
    chosen = report.chosen
    assert chosen is not None
    roles = {p.role: p.hardware for p in chosen.pools}
    assert roles == {"prefill": "l40s", "decode": "a100-80gb-sxm"}
    # Llama-3.1-8B: 32 layers × 2 (K, V) × 8 KV heads × 128 dims × 2 bytes = 131,072 B a
    # token; 4,096 tokens over one NDR port (50 GB/s, 5 µs) from a one-device instance.
    link = tomllib.loads((LINKS / "infiniband-ndr-400.toml").read_text())
    link = link.get("link", link)
    move_s = link["latency_us"] * 1e-6 + 4096 * 131072 / (link["bandwidth_gb_per_s"] * 1e9)
    screen = next(t for t in chosen.targets if t.metric == "ttft")
    assert chosen.kv_transfer_s >= move_s * (1 - 1e-6)
    assert screen.predicted_s > move_s


def test_the_chosen_layout_simulated_on_its_own_meets_the_slos():
    report = _plan([RequestClass(1024, 128, 1.0)], 6.0,
                   (Target("ttft", 1.0), Target("tpot", 0.05)), _space())
    chosen = report.chosen
    assert chosen is not None and chosen.simulate_command
    argv = chosen.simulate_command.split()[1:] + ["--format", "json"]
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            main(argv)
    except SystemExit as done:
        assert done.code in (0, None)
    summary = json.loads(out.getvalue())
    assert summary["slo"]["met"]
    assert summary["ttft"]["p90_s"] <= 1.0 and summary["tpot"]["p90_s"] <= 0.05
    ttft = next(t for t in chosen.targets if t.metric == "ttft")
    assert summary["ttft"]["p90_s"] == pytest.approx(ttft.simulated_s)


def test_nothing_meeting_the_slos_says_so_and_names_the_closest():
    report = _plan([RequestClass(1024, 128, 1.0)], 2.0,
                   (Target("ttft", 0.001), Target("tpot", 0.05)), _space(), verify=2)
    assert report.chosen is None
    assert report.verdict.startswith("No layout searched meets")
    assert report.closest is not None


BAD = [
    ["plan", "--rate", "4"],  # no SLO
    ["plan", "--ttft", "1s"],  # no load
    ["plan", "--ttft", "1s", "--rate", "4", "--users", "8"],
    ["plan", "--ttft", "soon", "--rate", "4"],
    ["plan", "--ttft", "1s", "--rate", "-1"],
    ["plan", "--ttft", "1s", "--rate", "4", "--hardware", "h100-sxmm"],
    ["plan", "--ttft", "1s", "--rate", "4", "--mix", "8192:256"],
    ["plan", "--ttft", "1s", "--users", "8", "--mix", "8192:256:0.5,1024:1024:0.5"],
    ["plan", "--ttft", "1s", "--rate", "4", "--executor", "cluster"],
    ["plan", "--ttft", "1s", "--rate", "4", "--layouts", "split"],
    ["plan", "--ttft", "1s", "--rate", "4", "--speculation", "maybe"],
    ["plan", "--ttft", "1s", "--rate", "4", "--hardware", "gh200"],  # no price
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[1:]) for a in BAD])
def test_bad_input_exits_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--executor", "serial"] if "--executor" not in argv else argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_a_device_budget_bounds_every_layout_simulated():
    report = _plan([RequestClass(1024, 128, 1.0)], 10.0,
                   (Target("ttft", 2.0), Target("tpot", 0.1)), _space(max_devices=3), verify=4)
    assert report.verified and all(r.devices <= 3 for r in report.verified)
    over = [r for r in report.best_per_device if r.devices > 3]
    assert all(r.screen_status == "over budget" for r in over)


def test_an_unknown_price_basis_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--ttft", "1s", "--rate", "4", "--price-basis", "leased"])
    assert exit_info.value.code == 2 and "--price-basis" in capsys.readouterr().err
