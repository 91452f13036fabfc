"""Phase-level answers: TTFT, TPOT, throughput, memory fit."""

from phasewise.estimate.core import estimate, memory_report
from phasewise.estimate.types import SCHEMA_VERSION, Estimate, MemoryReport, PhaseReport

__all__ = ["SCHEMA_VERSION", "Estimate", "MemoryReport", "PhaseReport", "estimate", "memory_report"]
