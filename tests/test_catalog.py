"""The catalogs: what they hold, how names resolve, how bad sheets fail."""

import json
import tomllib
from pathlib import Path

import pytest

from phasewise.catalog import (
    hardware_names,
    link_names,
    load_hardware,
    load_link,
    load_model,
    model_names,
)
from phasewise.catalog.hardware import HARDWARE_DIR
from phasewise.errors import InputError

REQUIRED_MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
                   "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "mistral-7b",
                   "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-0.5b", "qwen2.5-72b", "qwen3-8b",
                   "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-20b",
                   "gpt-oss-120b", "gemma-2-9b", "gemma-3-27b", "phi-3-mini", "phi-4",
                   "smollm2-135m"]
REQUIRED_DEVICES = ["a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm", "h100-pcie", "h100-nvl",
                    "h200-sxm", "gh200", "b200", "b300", "gb200", "l4", "l40s", "a10g", "a40",
                    "rtx-a6000", "rtx-6000-ada", "rtx-pro-6000", "rtx-3090", "rtx-4090",
                    "rtx-5090", "dgx-spark", "mi250x", "mi300x", "mi325x", "mi355x",
                    "rx-7900-xtx", "tpu-v5e", "tpu-v5p", "tpu-v6e", "gaudi2", "gaudi3", "m1",
                    "m1-max", "m2-ultra", "m3-max", "m4-max"]


def test_catalog_holds_the_required_models():
    assert len(model_names()) >= 30
    assert set(REQUIRED_MODELS) <= set(model_names())


def test_catalog_holds_the_required_devices():
    assert len(hardware_names()) >= 40
    assert set(REQUIRED_DEVICES) <= set(hardware_names())
    assert sum(load_hardware(n).device_class == "cpu" for n in hardware_names()) >= 2


@pytest.mark.parametrize("name", sorted(p.stem for p in HARDWARE_DIR.glob("*.toml")))
def test_every_device_sheet_loads_and_cites_its_numbers(name):
    sheet = tomllib.loads((HARDWARE_DIR / f"{name}.toml").read_text())
    assert sheet["name"] == name
    for section, table in sheet.items():
        if isinstance(table, dict) and any(isinstance(v, (int, float)) for v in table.values()):
            if section not in ("apple", "cpu"):
                assert table.get("source"), f"{name} [{section}] has no source"
    device = load_hardware(name)
    assert device.memory_bytes > 0 and device.memory_bandwidth_bytes_per_s > 0


def test_datasheet_figures_of_the_h100_sxm():
    # NVIDIA H100 datasheet, SXM column: 989 TFLOPS dense bf16, 3.35 TB/s, 80 GB.
    h100 = load_hardware("h100-sxm")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12, rel=0.01)
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12, rel=0.01)
    assert h100.memory_bytes == pytest.approx(80e9)


def test_device_aliases_resolve():
    assert load_hardware("H100 SXM").name == "h100-sxm"
    assert load_hardware("NVIDIA H100 SXM5 80GB").name == "h100-sxm"


def test_unknown_device_suggests_the_nearest_names():
    with pytest.raises(InputError, match="h100"):
        load_hardware("h100-sxn")


def test_a_users_own_sheet(tmp_path):
    sheet = tmp_path / "mine.toml"
    sheet.write_text('name = "mine"\ndevice_class = "accelerator"\n[compute]\nbf16_tflops = 100\n'
                     '[memory]\ncapacity_gb = 32\nbandwidth_gb_per_s = 1000\n')
    device = load_hardware(str(sheet))
    assert device.peak_flops("bf16") == 100e12 and device.ridge_point("bf16") == 100


def test_a_sheet_missing_bandwidth_says_which_field(tmp_path):
    sheet = tmp_path / "bad.toml"
    sheet.write_text('name = "bad"\n[compute]\nbf16_tflops = 100\n[memory]\ncapacity_gb = 32\n')
    with pytest.raises(InputError, match="bandwidth_gb_per_s"):
        load_hardware(str(sheet))


def test_links_load():
    assert "infiniband-ndr-400" in link_names()
    assert load_link("infiniband-ndr-400").bandwidth_bytes_per_s == pytest.approx(50e9)


def test_model_by_alias_path_and_folder(tmp_path):
    assert load_model("Llama 3.1 8B").name == "llama-3.1-8b"
    folder = tmp_path / "my-model"
    folder.mkdir()
    source = Path(__file__).parents[1] / "src/phasewise/catalog/models/qwen2.5-0.5b.json"
    (folder / "config.json").write_text(source.read_text())
    assert load_model(str(folder)).hidden_size == 896
    assert load_model(str(folder / "config.json")).hidden_size == 896


def test_model_from_the_local_hf_cache(tmp_path, monkeypatch):
    snapshot = tmp_path / "models--acme--tiny-lm" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--acme--tiny-lm" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-lm" / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps(
        {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "vocab_size": 500, "intermediate_size": 256}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert load_model("acme/tiny-lm").hidden_size == 128


def test_a_repo_id_not_in_the_cache_is_never_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(InputError, match="never downloads"):
        load_model("acme/not-here")


def test_unknown_model_suggests_the_nearest_names():
    with pytest.raises(InputError, match="llama-3.1-8b"):
        load_model("llama-3.1-8bb")


def test_the_readme_counts_are_the_catalogs():
    """The README's model and device counts are what `phasewise catalog` lists."""
    import re
    from pathlib import Path

    from phasewise.catalog import hardware_names
    from phasewise.catalog.models import model_names

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    models = re.search(r"`phasewise catalog models`: (\d+)", readme)
    sheets = re.search(r"A device is a catalog name \((\d+) sheets", readme)
    assert models and int(models.group(1)) == len(model_names())
    assert sheets and int(sheets.group(1)) == len(hardware_names())
