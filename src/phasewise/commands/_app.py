"""The Typer app every verb registers on, and the option parsing verbs share."""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

import typer

from phasewise.errors import InputError

app = typer.Typer(
    name="phasewise",
    help="Where the time goes in the two phases of LLM inference: prefill (compute-bound, "
         "sets TTFT) and decode (bandwidth-bound, sets TPOT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

FORMATS = ("table", "json", "csv", "md")
T = TypeVar("T")


def split_list(value: str | None, flag: str, parse: Callable[[str], T]) -> list[T]:
    """'1,8,64' -> [1, 8, 64]: a comma list sweeps a value."""
    if value is None:
        return []
    items = [part.strip() for part in str(value).split(",") if part.strip()]
    if not items:
        raise InputError(f"{flag} is empty; give a value or a comma list such as 1,8,64.")
    out = []
    for item in items:
        try:
            out.append(parse(item))
        except ValueError:
            raise InputError(f"{flag}: '{item}' is not a valid value; give a whole number or a "
                             "comma list such as 1,8,64.") from None
    return out


def ints(value: str | None, flag: str) -> list[int]:
    def parse(text: str) -> int:
        number = float(text.replace("_", "").lower().replace("k", "e3"))
        if number != int(number):
            raise ValueError(text)
        return int(number)

    return split_list(value, flag, parse)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: choose one of {', '.join(FORMATS)}.")
    return fmt


def echo(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def console() -> Any:
    from rich.console import Console

    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)


# Options several verbs share, declared once so their names, defaults and help agree.
def weight_dtype_option() -> Any:
    return typer.Option("bf16", "--weight-dtype",
                        help="Weight format: bf16, fp16, fp8, int8, int4, fp4 or a GGUF type "
                             "(Q4_K_M…, MXFP4_MOE); `phasewise catalog formats` lists them.")


def act_dtype_option() -> Any:
    return typer.Option("bf16", "--act-dtype", help="Activation format.")


def kv_dtype_option() -> Any:
    return typer.Option("bf16", "--kv-dtype", help="KV-cache format.")


def kv_keep_option() -> Any:
    return typer.Option(None, "--kv-keep", help="Fraction of cached tokens the KV cache keeps "
                                                "(eviction/compression), in (0, 1].")


def isl_option() -> Any:
    return typer.Option("2048", "--isl", help="Input (prompt) tokens per request.")


def osl_option() -> Any:
    return typer.Option("256", "--osl", help="Output tokens per request.")


def batch_size_option() -> Any:
    return typer.Option("1", "--batch-size", "-b", help="Requests in the batch.")


def pp_option() -> Any:
    return typer.Option(1, "--pp", help="Pipeline-parallel degree.")


def ep_option() -> Any:
    return typer.Option(1, "--ep", help="Expert-parallel degree (MoE).")


def engine_option() -> Any:
    from phasewise.lower import GENERIC_ENGINE, engine_names

    names = ", ".join(n for n in engine_names() if n != GENERIC_ENGINE)
    return typer.Option(None, "--engine", help="Inference engine whose lowering and fitted "
                                               f"constants the calibrated model uses: {names}, "
                                               f"or {GENERIC_ENGINE} (default); a variant after "
                                               "a '+' (llama.cpp+flash-attn): `phasewise "
                                               "catalog engines` lists them and which are "
                                               "fitted to measurements.")


def calibration_option() -> Any:
    return typer.Option(None, "--calibration", help="Calibration profile (TOML, as `phasewise "
                                                    "validate --write-calibration` or `phasewise "
                                                    "calibrate` writes) instead of the bundled one.")
