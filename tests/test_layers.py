"""DESIGN.md's layers: data flows one way, and a layer imports only the layers above it."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "src" / "phasewise"
# Utilities any layer may use, then the layers in DESIGN.md's order (validate scores the
# estimates against measurements, so it sits below measure; commands are the CLI's verbs).
UTILITIES = {"errors", "version", "files", "local"}
LAYERS = ["specs", "catalog", "ledger", "lower", "cost", "estimate", "serving", "plan", "measure",
          "validate", "api", "report", "commands", "web", "cli", "__main__"]
# The front ends (DESIGN.md): the CLI and its verbs, and the web app that runs those verbs.
FRONT_ENDS = {"commands", "web", "cli"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "phasewise"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phasewise"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("phasewise")}
    return found


SOURCES = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "__init__.py"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_layer_imports_only_the_layers_above_it(path):
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    for module in _imports(path):
        target = _layer(module)
        if target in UTILITIES or target == own or {own, target} <= FRONT_ENDS:
            continue
        assert own not in UTILITIES, f"{path.name} is a utility but imports {module}"
        assert target in LAYERS, f"{path.name} imports the package root ({module})"
        assert LAYERS.index(target) < LAYERS.index(own), f"{own} imports {module}"


def test_estimate_never_loads_the_heavy_extras():
    code = ("import sys, phasewise; phasewise.estimate(); "
            "print(sorted(m for m in ('torch', 'matplotlib', 'gguf', 'transformers') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
