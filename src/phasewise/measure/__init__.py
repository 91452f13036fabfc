"""Real runs on the local machine: microbenchmarks, a reference transformer in PyTorch,
profiles set beside the ledger, and calibration fits (DESIGN.md, measure/).

torch is imported only by the functions that run something.
"""

from phasewise.measure.micro import hardware_from_ceilings, measure_ceilings
from phasewise.measure.profile import ProfilePlan, check_fits, prepare_model, profile_points
from phasewise.measure.types import Ceilings, Profile, ProfilePoint

__all__ = ["Ceilings", "Profile", "ProfilePlan", "ProfilePoint", "check_fits",
           "hardware_from_ceilings", "measure_ceilings", "prepare_model", "profile_points"]
