"""Reading data files with one-line errors; writing files whole or not at all.

Every file a user names is read through ``read_text`` (or ``read_json``/``read_toml`` on
top of it): a bounded read of a regular file, decoded as UTF-8, so a folder, ``/dev/zero``,
a sparse 3 GB file, a UTF-16 export or a binary file ends with one line saying what it is.
Every file phasewise writes goes through ``write_atomic``/``write_all``, after the verb
checked its output paths with ``check_output_file``/``check_output_dir`` before any work.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from phasewise.errors import InputError

# Larger than any config.json, sheet, profile or measurements file a user writes by hand or
# a tool exports (the bundled measurements total under 2 MB); a trace of a million
# requests at ~30 bytes a row fits too.
MAX_INPUT_BYTES = 64 * 2**20
# Deeper than any config.json or profile document (they nest 3-5 levels); a deeper one is
# not one of them, and json's recursive parser would fail on it without a clear message.
MAX_JSON_DEPTH = 64

_UTF16_32_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                  (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


# ---------------------------------------------------------------- reading

def read_bytes(path: str | Path, *, what: str = "file",
               limit_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit_bytes``, or an InputError naming the
    file and what is wrong with it. Nothing past the limit is read."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a {what}; give the file's path.")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}; check the path.") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror}).") from None
    if len(data) > limit_bytes:
        raise InputError(f"{path}: larger than {limit_bytes // 2**20} MiB, more than any {what} "
                         "holds; check that this is the right file.")
    return data


def decode_text(data: bytes, path: str | Path, *, what: str = "file") -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped), or an InputError that says the file
    is UTF-16/32 (and how to convert it) or binary."""
    for bom, name in _UTF16_32_BOMS:
        if data.startswith(bom):
            raise InputError(f"{path}: the {what} is {name} text; save it as UTF-8 (e.g. "
                             f"`iconv -f {name} -t UTF-8`).")
    if b"\x00" in data[:4096]:
        raise InputError(f"{path}: the {what} holds NUL bytes: binary data or UTF-16 without "
                         "a byte-order mark, not UTF-8 text; give a text file.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: the {what} is not UTF-8 text (byte 0x{data[err.start]:02x} "
                         f"at offset {err.start}); save it as UTF-8.") from None


def read_text(path: str | Path, *, what: str = "file",
              limit_bytes: int = MAX_INPUT_BYTES) -> str:
    """A text file, bounded and checked (``read_bytes``, then ``decode_text``)."""
    return decode_text(read_bytes(path, what=what, limit_bytes=limit_bytes), path, what=what)


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do
    not count); linear in the text, no recursion."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text: str, origin: str, *, what: str = "file",
               allow_non_finite: bool = False) -> Any:
    """A JSON document whose numbers are all finite (JSON has no NaN or Infinity; Python
    writes them anyway), nesting at most MAX_JSON_DEPTH levels. ``allow_non_finite`` reads
    them as floats, for files whose publishers wrote them (Nemotron-H's config.json has
    ``time_step_limit: [0.0, Infinity]``); the reader then checks each number it uses."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise InputError(f"{origin}: the {what} nests deeper than {MAX_JSON_DEPTH} levels; "
                         "it is not a document phasewise reads.")

    def not_finite(name: str) -> None:
        raise InputError(f"{origin}: the {what} holds {name}, which is not a number JSON "
                         "allows; write a finite number.")

    try:
        return json.loads(text, parse_constant=float if allow_non_finite else not_finite)
    except json.JSONDecodeError as err:
        raise InputError(f"{origin}: not valid JSON ({err.msg} at line {err.lineno}); fix the "
                         f"{what}.") from None
    except RecursionError:
        raise InputError(f"{origin}: the {what} nests too deeply to read.") from None


def read_json(path: str | Path, *, what: str = "file", allow_non_finite: bool = False) -> Any:
    """A JSON file: bounded, UTF-8, finite numbers (unless allowed), bounded depth."""
    return parse_json(read_text(path, what=what), str(path), what=what,
                      allow_non_finite=allow_non_finite)


def read_toml(path: str | Path, *, what: str = "file") -> dict[str, Any]:
    """A TOML document, or an InputError naming the file and what is wrong with it."""
    text = read_text(path, what=what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML ({err}); fix the {what}.") from None
    except RecursionError:
        raise InputError(f"{path}: the {what} nests too deeply to read.") from None


# ---------------------------------------------------------------- output paths

def _writable_folder(folder: Path, flag: str, target: Path) -> None:
    """Refuse a folder that is missing, is a file, or cannot take a new file (read-only,
    no permission: tried by creating and removing a file, which also works as root)."""
    if not folder.exists():
        raise InputError(f"{flag} {target}: the folder {folder} does not exist; create it or "
                         "choose another path.")
    if not folder.is_dir():
        raise InputError(f"{flag} {target}: {folder} is a file, not a folder; choose another "
                         "path.")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".phasewise-probe.", suffix=".tmp")
    except OSError as err:
        raise InputError(f"{flag} {target}: cannot write in {folder} ({err.strerror}); choose "
                         "another path.") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: str | Path, flag: str) -> Path:
    """A file path phasewise may write, checked before any work: not a folder, in a folder
    that exists and takes new files."""
    path = Path(path).expanduser()
    if not str(path).strip() or path.is_dir():
        raise InputError(f"{flag} {path}: is a folder; give a file name.")
    _writable_folder(path.parent if str(path.parent) else Path("."), flag, path)
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """A folder phasewise may write files into, checked before any work: an existing
    writable folder, or a new one whose parent is (it is created now)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: is a file; give a folder.")
    if not path.exists():
        _writable_folder(path.parent, flag, path)
        try:
            path.mkdir()
        except OSError as err:
            raise InputError(f"{flag} {path}: cannot create the folder ({err.strerror}).") \
                from None
    _writable_folder(path, flag, path)
    return path


def check_output_stem(stem: str | Path, flag: str) -> Path:
    """A figure stem (STEM.png and STEM.html are written): its folder must take files."""
    stem = Path(stem).expanduser()
    if stem.is_dir():
        raise InputError(f"{flag} {stem}: is a folder; give a file stem such as "
                         f"{stem / 'figure'} (STEM.png and STEM.html are written).")
    _writable_folder(stem.parent if str(stem.parent) else Path("."), flag, stem)
    return stem


# ---------------------------------------------------------------- writing

def _file_mode() -> int:
    """The mode a new file gets from the user's umask (0666 & ~umask), as open() gives."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _temporary(path: Path, data: str | bytes) -> str:
    """``data`` written whole to a temporary file beside ``path``; its name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, _file_mode())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_all(files: dict[str | Path, str | bytes]) -> list[Path]:
    """Write a set of files whole or not at all: every one to a temporary file first (a
    full disk or an interrupt removes them all), then each renamed into place. Files are
    created with the user's umask."""
    paths = [Path(p) for p in files]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    written: list[tuple[str, Path]] = []
    try:
        for path, data in zip(paths, files.values(), strict=False):
            written.append((_temporary(path, data), path))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException as err:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise InputError(f"{err.filename or paths[0]}: cannot write it ({err.strerror}); "
                             "nothing was written.") from None
        raise
    return paths


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write to a temporary file beside ``path``, then rename it into place: a reader sees
    the old file or the whole new one, never half."""
    return write_all({path: data})[0]
