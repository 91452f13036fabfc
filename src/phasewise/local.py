"""Where this machine's own measurements live: `phasewise calibrate` writes a hardware sheet
of the measured ceilings and a calibration profile there, and `--hardware local` reads them."""

from __future__ import annotations

import os
from pathlib import Path

LOCAL_DEVICE_NAME = "local"
HARDWARE_FILE = "hardware.toml"
CALIBRATION_FILE = "calibration.toml"


def local_dir() -> Path:
    """$PHASEWISE_HOME, else $XDG_CONFIG_HOME/phasewise, else ~/.config/phasewise."""
    if os.environ.get("PHASEWISE_HOME"):
        return Path(os.environ["PHASEWISE_HOME"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "phasewise"


def local_hardware_path() -> Path:
    return local_dir() / HARDWARE_FILE


def local_calibration_path() -> Path | None:
    """The profile `phasewise calibrate` fitted on this machine, if it has run."""
    path = local_dir() / CALIBRATION_FILE
    return path if path.is_file() else None
