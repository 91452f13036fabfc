"""phasewise: where the time goes in the two phases of LLM inference."""

from phasewise.version import __version__

# Bound after the subpackage import, so `phasewise.estimate` is the function.
from phasewise.estimate.core import estimate  # noqa: E402

__all__ = ["__version__", "estimate"]
