"""Tests run offline, on one thread, like CI."""

import os
import subprocess
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def phasewise_cli():
    """Run ``python -m phasewise ARGS`` as a user would; by default a non-zero exit fails."""

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                                text=True, timeout=300)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    return run


@pytest.fixture(autouse=True)
def _piped_output_width(monkeypatch):
    """CLI subprocesses print at the piped width phasewise uses without a terminal, not at
    an 80-column COLUMNS a test runner may leave in the environment."""
    monkeypatch.setenv("COLUMNS", "200")
