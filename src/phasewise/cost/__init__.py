"""Turning a ledger into time on a device."""

from phasewise.cost.base import CostModel, StepTiming, Timing, link_for, math_format_for
from phasewise.cost.speed_of_light import SpeedOfLight

__all__ = ["CostModel", "SpeedOfLight", "StepTiming", "Timing", "link_for", "math_format_for"]
