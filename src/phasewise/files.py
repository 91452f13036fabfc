"""Reading data files with one-line errors; writing files whole or not at all."""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from phasewise.errors import InputError


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write to a temporary file beside ``path``, then rename it into place: a reader sees
    the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_toml(path: Path, *, what: str = "file") -> dict[str, Any]:
    """A TOML document, or an InputError naming the file and what is wrong with it."""
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML ({err}); fix the {what}.") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror}).") from None
