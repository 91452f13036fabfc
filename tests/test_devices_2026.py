"""The 2026 device catalog: new sheets against their cited figures, native formats, prices,
and collectives priced by the scale-up domain a layout fits in.

Every expected number is written from the datasheet figure the sheet cites (the arithmetic
is spelled out), never read back from the code.
"""

import dataclasses

import pytest

from phasewise.catalog import hardware_names, load_hardware, load_model
from phasewise.catalog.hardware import hardware_from_sheet, load_link_sheet
from phasewise.cost import SpeedOfLight
from phasewise.errors import InputError
from phasewise.estimate import estimate
from phasewise.estimate.compare import compare
from phasewise.estimate.cost_energy import with_price
from phasewise.ledger import Step, build_ledger
from phasewise.specs import Parallelism, Precision, Workload
from phasewise.specs.compute import precision_on

TERA, GIGA = 1e12, 1e9

# (sheet, math format, cited dense peak in TFLOP/s, cited bandwidth in GB/s), from the
# figure each sheet's source names; sparse figures are halved.
CITED_PEAKS = [
    ("gb300", "fp4", 1080e3 / 72, 576e3 / 72),          # NVL72: 1,080 PF dense FP4, 576 TB/s, 72 GPUs
    ("gb300", "bf16", 2500, 8000),                       # Verda per-GPU: 2.5 PF
    ("rtx-5060", "fp4", 614 / 2, 128 / 8 * 28),          # 614 AI TOPS sparse; 128-bit x 28 Gbps
    ("rtx-5050", "fp4", 421 / 2, 128 / 8 * 20),          # 421 AI TOPS sparse; 128-bit x 20 Gbps
    ("rtx-pro-6000-max-q", "fp4", 3511 / 2, 1792),       # 3,511 AI TOPS sparse
    ("rtx-pro-6000-server", "fp4", 4000 / 2, 1792),      # the Workstation Edition's 4,000 AI TOPS
    ("jetson-agx-thor", "fp4", 2070 / 2, 273),           # 2,070 FP4 TFLOPS sparse, 273 GB/s
    ("mi350x", "fp4", 9200, 8000),                       # AMD: MXFP4 9.2 PF, 8 TB/s
    ("mi350x", "bf16", 2300, 8000),                      # AMD: FP16/BF16 2.3 PF
    ("mi355x", "fp6", 10100, 8000),                      # AMD: MXFP6 at the MXFP4 rate, 10.1 PF
    ("b300", "fp6", 72e3 / 8 / 2, 7700),                 # HGX B300: FP8/FP6 72 PF sparse / 8 GPUs
    ("tpu-v7", "fp8", 4614, 7370),                       # Google: 4,614 TFLOPs FP8, 7.37 TB/s
    ("tpu-v7", "bf16", 2307, 7370),
    ("trainium2", "fp8", 1299, 2900),                    # Neuron docs: 1,299 FP8 TFLOPS, 2.9 TB/s
    ("trainium3", "fp4", 2517, 4900),                    # Neuron docs: 2,517 MXFP8/MXFP4, 4.9 TB/s
    ("inferentia2", "bf16", 190, 820 * 2**30 / 1e9),     # 190 TFLOPS, 820 GiB/s
    ("radeon-ai-pro-r9700", "fp16", 64 * 1024 * 2.92e9 / TERA, 256 / 8 * 20),  # 64 CUs x 1024 x 2.92 GHz
    ("rx-9070", "fp16", 56 * 1024 * 2.52e9 / TERA, 640),
    ("rx-9060-xt", "fp8", 32 * 2048 * 3.13e9 / TERA, 128 / 8 * 20),
    ("arc-pro-b60", "int8", 197, 192 / 8 * 19),          # 197 TOPS INT8; 192-bit x 19 Gbps
    ("ascend-910c", "bf16", 780, 3200),                  # 780 TFLOPS BF16, 3.2 TB/s (reported)
    ("h20", "fp8", 296, 4000),
    ("mi300a", "fp8", 1961.2, 5300),
    ("blackhole-p150a", "fp8", 774, 3.5e3 / 8),          # 774 TFLOPS FP8; 3.5 Tb/s
    ("m5-max", "fp16", 4 * 16.16, 614),                  # 'over 4x' M4 Max's 16.16; 614 GB/s
    ("m5", "fp16", 4 * 4.04, 153),                       # 'over 4x' M4's 4.04; 153 GB/s
    ("cloud-ai-100-ultra", "int8", 870, 548),                  # Qualcomm SDK docs: 870 TOPs, 548 GB/s
]


def test_the_catalog_holds_at_least_130_devices():
    assert len(hardware_names()) >= 130


@pytest.mark.parametrize("name,fmt,tflops,gb_per_s", CITED_PEAKS)
def test_new_sheet_peak_and_ridge_point_match_the_cited_figures(name, fmt, tflops, gb_per_s):
    device = load_hardware(name)
    assert device.peak_flops(fmt) == pytest.approx(tflops * TERA, rel=0.005)
    # ridge point = peak FLOP/s / bandwidth (DESIGN.md), from the cited figures alone
    assert device.ridge_point(fmt) == pytest.approx(tflops * TERA / (gb_per_s * GIGA), rel=0.01)


def test_every_low_precision_peak_a_sheet_lists_is_one_of_its_native_formats_or_said_otherwise():
    # B300/GB300 list an INT8 figure (~0.15 POPS) but their matrix units' fast paths skip it.
    for name in hardware_names():
        device = load_hardware(name)
        if not device.native_formats:
            continue
        slow = set(device.peak_flops_per_s) - set(device.native_formats) - {"fp32"}
        assert slow <= {"int8"}, (name, slow)
        assert set(device.native_formats) - {"nvfp4"} <= set(device.peak_flops_per_s), name


def test_nvfp4_weights_compute_in_fp4_on_blackwell_and_weight_only_on_hopper():
    nvfp4 = Precision(weights="nvfp4")
    on_b200 = precision_on(nvfp4, load_hardware("b200"))
    assert on_b200.math_format == "fp4" and "natively" in on_b200.reason
    assert load_hardware("b200").peak_flops(on_b200.math_format) == 9000 * TERA  # HGX B200 FP4 dense
    on_h100 = precision_on(nvfp4, load_hardware("h100-sxm"))
    assert on_h100.math_format == "bf16" and "no FP4 matrix math" in on_h100.reason
    # the weights stay 4.5-bit (16 e2m1 values and one fp8 scale) whatever the math
    assert on_h100.precision.weight_bytes == 4.5 / 8


def test_fp4_activations_on_a_device_without_fp4_fall_back_to_bf16_instead_of_failing():
    choice = precision_on(Precision(weights="nvfp4", activations="nvfp4"), load_hardware("h100-sxm"))
    assert choice.math_format == "bf16" and choice.precision.activations == "bf16"


def test_mxfp4_weights_keep_16_bit_activations_unless_asked():
    choice = precision_on(Precision(weights="mxfp4"), load_hardware("b200"))
    assert choice.math_format == "bf16" and "--act-dtype fp4" in choice.reason
    both = precision_on(Precision(weights="mxfp4", activations="mxfp4"), load_hardware("b200"))
    assert both.math_format == "fp4" and both.reason == ""


def test_the_estimate_names_the_math_format_its_reason_and_the_price_it_used():
    est = estimate("llama-3.1-8b", "rtx-5090", Workload(512, 64, 1), Precision(weights="nvfp4"),
                   cost="sol")
    hw = est.hardware
    assert hw.math_format == "fp4" and hw.peak_flops_per_s == 3352 / 2 * TERA  # 3,352 AI TOPS sparse
    assert "FP4" in hw.math_format_reason
    # $1,999 over 3 years of 8,760 h = $0.0761 per hour
    assert hw.price_usd_per_hour == pytest.approx(1999 / (3 * 8760))
    assert hw.price_basis == "purchase" and hw.price_date == "2025-01"
    assert "$1,999 purchase over 3 years" in hw.price_label


def test_a_price_override_is_labelled_as_such():
    device = with_price(load_hardware("h100-sxm"), 1.25)
    assert device.price_usd_per_hour == 1.25 and device.price.basis == "override"


def test_a_sheet_purchase_price_amortises_over_its_own_years():
    sheet = {"name": "box", "compute": {"bf16_tflops": 100}, "device_class": "workstation_gpu",
             "memory": {"capacity_gb": 48, "bandwidth_gb_per_s": 960},
             "price": {"purchase_usd": 8760, "amortisation_years": 2, "date": "2026-01"}}
    device = hardware_from_sheet(sheet, "box.toml")
    assert device.price_usd_per_hour == pytest.approx(8760 / (2 * 8760))  # $0.50/h
    with pytest.raises(InputError, match="usd_per_hour .* or purchase_usd"):
        hardware_from_sheet({**sheet, "price": {"date": "2026"}}, "box.toml")


def test_unpriced_devices_rank_after_every_priced_one_and_are_marked():
    # GB300 is the fastest of the three and has no public on-demand price: it must not win on
    # cost by having no cost, and must come last, marked unpriced.
    ranked = compare("llama-3.1-8b", Workload(1024, 128, 8), hardware=["gb300", "h100-sxm", "l40s"],
                     cost="sol").results
    assert [r.hardware for r in ranked][-1] == "gb300"
    assert ranked[-1].unpriced and ranked[-1].usd_per_thousand_requests is None
    assert not any(r.unpriced for r in ranked[:-1])
    assert ranked[-1].ttft_s < min(r.ttft_s for r in ranked[:-1])


def _collective_times(model, par, hardware):
    ledger = build_ledger(load_model(model), Step.decode(8, 1024), Precision(), par)
    timing = SpeedOfLight().step_time(ledger, load_hardware(hardware))
    return [(op, t) for op, t in timing.ops if op.kind == "communication"]


def test_a_layout_wider_than_the_scale_up_domain_pays_scale_out_bandwidth():
    # HGX H100: 8 GPUs on NVLink 4 (450 GB/s per direction, 3 us); TP16 leaves the board and
    # runs over its InfiniBand NDR port (50 GB/s per direction, 5 us).
    for op, t in _collective_times("llama-3.1-70b", Parallelism(tp=16), "h100-sxm"):
        assert t.time_s == pytest.approx(op.network / 50e9 + op.hops * 5e-6)
    for op, t in _collective_times("llama-3.1-70b", Parallelism(tp=8), "h100-sxm"):
        assert t.time_s == pytest.approx(op.network / 450e9 + op.hops * 3e-6)


def test_pipeline_stages_on_two_boards_send_over_the_nic_and_reduce_over_nvlink():
    times = {op.name: (op, t) for op, t in _collective_times("llama-3.1-70b", Parallelism(tp=8, pp=2),
                                                              "h100-sxm")}
    op, t = times["pp.send"]
    assert t.time_s == pytest.approx(op.network / 50e9 + op.hops * 5e-6)
    op, t = times["tp.allreduce"]
    assert t.time_s == pytest.approx(op.network / 450e9 + op.hops * 3e-6)


def test_an_nvl72_rack_keeps_64_way_tensor_parallelism_on_nvlink():
    # 64 <= 72 GPUs in one NVLink 5 domain: 900 GB/s per direction, 3 us
    for op, t in _collective_times("llama-3.1-70b", Parallelism(tp=64), "gb300"):
        assert t.time_s == pytest.approx(op.network / 900e9 + op.hops * 3e-6)


def test_a_device_without_a_scale_out_link_keeps_its_interconnect():
    device = dataclasses.replace(load_hardware("h100-sxm"), scale_out=None)
    ledger = build_ledger(load_model("llama-3.1-70b"), Step.decode(8, 1024), Precision(),
                          Parallelism(tp=16))
    for op, t in SpeedOfLight().step_time(ledger, device).ops:
        if op.kind == "communication":
            assert t.time_s == pytest.approx(op.network / 450e9 + op.hops * 3e-6)


@pytest.mark.parametrize("name,devices,per_direction_gb_per_s", [
    ("nvlink5-nvl72", 72, 1800 / 2), ("nvlink5-nvl8", 8, 1800 / 2), ("amd-xgmi-8", 8, 7 * 128 / 2),
    ("tpu-ici-v7", 9216, 1200 / 2), ("neuronlink-v4", 144, 2560 / 2), ("infiniband-xdr-800", 1, 800 / 8),
    ("ethernet-800g", 1, 800 / 8), ("infiniband-ndr-400", 1, 400 / 8)])
def test_link_sheets_state_their_domain_and_topology(name, devices, per_direction_gb_per_s):
    link = load_link_sheet(name)
    assert link.max_devices == devices and link.topology
    assert link.bandwidth_bytes_per_s == pytest.approx(per_direction_gb_per_s * GIGA)


def test_nvfp4_blocks_are_weight_only_on_a_part_whose_fp4_units_take_mxfp4_only():
    # CDNA 4 multiplies OCP MXFP4 (32 values per e8m0 scale) natively, not NVFP4's 16-value blocks
    mi355x = load_hardware("mi355x")
    assert mi355x.computes_natively("fp4") and not mi355x.computes_natively("nvfp4")
    choice = precision_on(Precision(weights="nvfp4"), mi355x)
    assert choice.math_format == "bf16" and "MXFP4 blocks, not NVFP4" in choice.reason
    both = precision_on(Precision(weights="mxfp4", activations="mxfp4"), mi355x)
    assert both.math_format == "fp4"


def test_fp6_runs_at_its_own_peak_where_the_sheet_gives_one():
    est = estimate("llama-3.1-8b", "mi355x", Workload(512, 64, 1),
                   Precision(weights="fp6", activations="fp6"), cost="sol")
    assert est.hardware.math_format == "fp6"
    assert est.hardware.peak_flops_per_s == pytest.approx(10.1e15, rel=0.005)  # AMD: MXFP6 10.1 PF
