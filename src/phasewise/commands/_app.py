"""The Typer app every verb registers on, and the option parsing verbs share."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from phasewise.errors import InputError
from phasewise.specs.workload import ABSURD_TOKENS

app = typer.Typer(
    name="phasewise",
    help="Where the time goes in the two phases of LLM inference: prefill (compute-bound, "
         "sets TTFT) and decode (bandwidth-bound, sets TPOT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

FORMATS = ("table", "json", "csv", "md")
T = TypeVar("T")

# Counts a flag may take: past this no prompt, batch or request count is real (the
# longest published context windows are 10M tokens); a bigger number is a typo.
MAX_COUNT = ABSURD_TOKENS
_SUFFIXES = {"k": 1e3, "m": 1e6}


def split_list(value: str | None, flag: str, parse: Callable[[str], T]) -> list[T]:
    """'1,8,64' -> [1, 8, 64]: a comma list sweeps a value."""
    if value is None:
        return []
    items = [part.strip() for part in str(value).split(",") if part.strip()]
    if not items:
        raise InputError(f"{flag} is empty; give a value (a comma list gives several).")
    out = []
    for item in items:
        try:
            out.append(parse(item))
        except (ValueError, OverflowError) as err:
            if isinstance(err, InputError):
                raise
            raise InputError(f"{flag}: '{item}' is not a valid value; give a value or a comma "
                             "list such as 1,8,64.") from None
    return out


def _float(text: str) -> float:
    """'2.5', '1e3', '4k', '1_000' -> a float; ValueError otherwise."""
    cleaned = str(text).strip().replace("_", "").lower()
    scale = _SUFFIXES.get(cleaned[-1:], 1.0) if cleaned[:-1] else 1.0
    return float(cleaned[:-1] if scale != 1.0 else cleaned) * scale


def number(text: str | float | None, flag: str, *, minimum: float | None = None,
           maximum: float | None = None, above: float | None = None,
           below: float | None = None, example: str = "0.5") -> float | None:
    """One finite number within its range: ``minimum``/``maximum`` inclusive,
    ``above``/``below`` exclusive. None stays None (the flag was not given)."""
    if text is None:
        return None
    try:
        value = _float(text) if isinstance(text, str) else float(text)
    except (ValueError, OverflowError):
        raise InputError(f"{flag} '{text}': not a number; give one such as {example}.") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"{flag} {text}: give a finite number such as {example}.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum) \
            or (above is not None and value <= above) or (below is not None and value >= below):
        bounds = _range_text(minimum, maximum, above, below)
        raise InputError(f"{flag} {text}: give a number {bounds}.")
    return value


def _range_text(minimum: float | None, maximum: float | None, above: float | None,
                below: float | None) -> str:
    """'in [0, 1)', 'at least 0', 'above 0' ... for a range's bounds."""
    low, high = (minimum, above)[minimum is None], (maximum, below)[maximum is None]
    if low is not None and high is not None:
        return (f"in {'[' if minimum is not None else '('}{low:g}, {high:g}"
                f"{']' if maximum is not None else ')'}")
    if low is not None:
        return f"{'at least' if minimum is not None else 'above'} {low:g}"
    return f"{'at most' if maximum is not None else 'below'} {high:g}"


def whole(text: str | int | None, flag: str, *, minimum: int = 1,
          maximum: int = MAX_COUNT) -> int | None:
    """One whole number in [minimum, maximum] ('1e3', '4k' and '1_000' are whole too)."""
    if text is None:
        return None
    if isinstance(text, int) or str(text).strip().isdigit():
        value: float = int(text)  # exact, however long
    else:
        value = number(text, flag, example=str(max(minimum, 1)))
        if value != int(value):
            raise InputError(f"{flag} {text}: give a whole number such as {max(minimum, 1)}.")
    if value < minimum:
        raise InputError(f"{flag} {text}: give a whole number of at least {minimum:,}.")
    if value > maximum:
        raise InputError(f"{flag} {text} is beyond any real workload (limit {maximum:,}); "
                         "check the number.")
    return int(value)


def ints(value: str | None, flag: str, *, minimum: int = 1,
         maximum: int = MAX_COUNT) -> list[int]:
    """A whole number or a comma list of them, each in [minimum, maximum]."""
    return split_list(value, flag, lambda item: whole(item, flag, minimum=minimum,
                                                      maximum=maximum))


def numbers(value: str | None, flag: str, **bounds: Any) -> list[float]:
    """A number or a comma list of them, each finite and in range (``number``'s bounds)."""
    return split_list(value, flag, lambda item: number(item, flag, **bounds))


def checked(flag: str, *, kind: type = float, **bounds: Any) -> Callable[[Any], Any]:
    """A Typer option callback: the option's value, finite and in range, else an InputError
    naming the flag (click's own int/float types let NaN, inf and 1e300 through)."""
    def check(value: Any) -> Any:
        if value is None:
            return None
        if kind is int:
            return whole(value, flag, **bounds)
        return number(value, flag, **bounds)

    return check


def given(*names: str) -> list[str]:
    """The flags among ``names`` (parameter names) the user typed, not left at their
    defaults: for refusing a flag that would do nothing in the run asked for."""
    ctx = _current_context()
    if ctx is None:
        return []
    typed = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            option = next(p for p in ctx.command.params if p.name == name)
            typed.append(option.opts[0] if len(option.opts[0]) > 2 else option.opts[-1])
    return typed


def _current_context() -> Any:
    try:  # Typer 0.2x carries its own copy of click
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older Typer on the real click
        from click import get_current_context
    return get_current_context(silent=True)


def refuse_unused(flags: list[str], needs: str) -> None:
    """An InputError when a flag that only ``needs`` would use was given without it."""
    if flags:
        verb = "does" if len(flags) == 1 else "do"
        raise InputError(f"{', '.join(flags)} {verb} nothing without {needs}; add it or drop "
                         f"{'the flag' if len(flags) == 1 else 'them'}.")


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: choose one of {', '.join(FORMATS)}.")
    return fmt


def echo(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# Piped output with no terminal to fit (a file, CI): the width tables are laid out in.
PIPED_WIDTH = 200


def console() -> Any:
    """A rich console for stdout at the terminal's width, or when piped at ``_piped_width``.
    A table whose narrowest layout is wider than that is printed at that layout's width
    (the terminal wraps its lines) instead of having its numbers cut to "…"."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    class Unclipped(Console):
        def print(self, *objects: Any, **options: Any) -> None:
            for item in objects:
                needed = Measurement.get(self, self.options, item).minimum \
                    if isinstance(item, Table) else 0
                super().print(item, **options, **({"width": needed}
                                                  if needed > self.width else {}))

    return Unclipped(soft_wrap=False, width=None if sys.stdout.isatty() else _piped_width())


def _piped_width() -> int:
    """The terminal stderr still shows (`phasewise ... | less`), else PIPED_WIDTH. ($COLUMNS
    is not taken: test runners and shells set it for their own terminal.)"""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return PIPED_WIDTH


# Options several verbs share, declared once so their names, defaults and help agree.
def task_option() -> Any:
    from phasewise.catalog.speculative import DEFAULT_TASK, TASKS

    return typer.Option(DEFAULT_TASK, "--task",
                        help=f"Task kind of the traffic ({', '.join(TASKS)}): speculative "
                             "decoding takes the published acceptance of its draft kind on "
                             "this task (catalog/speculative.toml); --spec-accept overrides.")


def weight_dtype_option() -> Any:
    return typer.Option("auto", "--weight-dtype",
                        help="Weight format: auto (the checkpoint's own quantization_config, per "
                             "module class; bf16 when it declares none), bf16, fp16, fp8, int8, "
                             "int4, fp4, nvfp4 or a GGUF type (Q4_K_M…, MXFP4_MOE); "
                             "`phasewise catalog formats` lists them.")


def act_dtype_option() -> Any:
    return typer.Option("bf16", "--act-dtype", help="Activation format.")


def kv_dtype_option() -> Any:
    return typer.Option("auto", "--kv-dtype", help="KV-cache format: auto (the checkpoint's "
                                                    "declared KV format, else bf16), bf16, fp8…")


def kv_keep_option() -> Any:
    return typer.Option(None, "--kv-keep", help="Fraction of cached tokens the KV cache keeps "
                                                "(eviction/compression), in (0, 1].")


def batch_size_option() -> Any:
    return typer.Option("1", "--batch-size", "-b", help="Requests in the batch.")


# More devices than any one model instance spans (the largest scale-up domains hold 576).
MAX_DEVICES = 100_000


def pp_option() -> Any:
    return typer.Option(1, "--pp", help="Pipeline-parallel degree.",
                        callback=checked("--pp", kind=int, maximum=MAX_DEVICES))


def ep_option() -> Any:
    return typer.Option(1, "--ep", help="Expert-parallel degree (MoE).",
                        callback=checked("--ep", kind=int, maximum=MAX_DEVICES))


def calibration_file(value: str | None) -> str | None:
    """--calibration: a calibration profile, checked where it enters (a hardware sheet or
    another TOML given by mistake, an unknown section, a file that is not UTF-8 TOML)."""
    if value is None:
        return None
    from pathlib import Path

    from phasewise.catalog.schema import check_calibration
    from phasewise.files import read_toml

    path = Path(value).expanduser()
    if not path.exists():
        raise InputError(f"calibration file {value} does not exist; check the path (a "
                         "profile `phasewise calibrate` wrote).")
    check_calibration(read_toml(path, what="calibration profile"), str(path))
    return value


def calibration_option() -> Any:
    return typer.Option(None, "--calibration", callback=calibration_file,
                        help="Calibration profile (TOML, as `phasewise validate "
                             "--write-calibration` or `phasewise calibrate` writes) instead "
                             "of the bundled one.")
