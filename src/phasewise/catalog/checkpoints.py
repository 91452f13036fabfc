"""Quantized checkpoints of catalog networks (``models/checkpoints.toml``): a repo id such as
``nvidia/DeepSeek-R1-FP4`` and the catalog model that holds its shapes."""

from __future__ import annotations

import tomllib
from functools import lru_cache

from phasewise.catalog._names import normalise
from phasewise.catalog.models import MODELS_DIR, model_index

CHECKPOINTS_FILE = MODELS_DIR / "checkpoints.toml"


@lru_cache(maxsize=1)
def checkpoint_table() -> dict[str, dict[str, str]]:
    """repo id → {network, source}, as the file writes them."""
    table = tomllib.loads(CHECKPOINTS_FILE.read_text())
    index = model_index()
    for repo, row in table.items():
        if row.get("network") not in index:
            raise ValueError(f"{CHECKPOINTS_FILE.name}: {repo} names network "
                             f"{row.get('network')!r}, which is not a catalog model")
    return table


@lru_cache(maxsize=1)
def _by_key() -> dict[str, str]:
    return {normalise(repo): row["network"] for repo, row in checkpoint_table().items()}


def network_of(repo_id: str) -> str | None:
    """The catalog model whose config has the shapes of quantized checkpoint ``repo_id``."""
    return _by_key().get(normalise(repo_id))
