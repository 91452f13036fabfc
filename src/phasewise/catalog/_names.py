"""Name matching shared by the catalogs: case, spaces, dashes and dots do not matter."""

from __future__ import annotations

import re


def normalise(name: str) -> str:
    return re.sub(r"[\s_\-./()]+", "", name.lower())
