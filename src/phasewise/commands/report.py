"""`phasewise report`: one self-contained HTML page from a phasewise JSON document, or from a
verb it runs."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from phasewise.commands._app import app
from phasewise.errors import InputError

RUNNABLE_VERBS = ("estimate", "explain", "compare", "simulate", "validate", "profile", "plan")
DEFAULT_OUTPUT = "phasewise-report.html"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def report(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="A JSON document a phasewise verb wrote (a path, or "
                                           "- for standard input), or a verb to run with its "
                                           "flags: estimate, explain, compare, simulate, "
                                           "validate, profile or plan."),
    output: str = typer.Option(DEFAULT_OUTPUT, "--output", "-o", help="The HTML file to write."),
) -> None:
    """Write one HTML page that opens offline: interactive plots, the tables, the inputs, the
    tool version and the command that reproduces it (`phasewise report estimate --model
    llama-3.1-8b -o report.html`, or `phasewise report result.json`)."""
    from phasewise.report.html_report import write_report

    if source in RUNNABLE_VERBS:
        args = _without_format(list(ctx.args))
        if source == "estimate" and "--detail" not in args:
            args.append("--detail")  # the per-operator rows feed the time-by-class plot
        doc = run_verb(source, args)
        command = shlex.join(["phasewise", "report", source, *args])
    else:
        if ctx.args:
            raise InputError(f"report {source}: extra arguments {' '.join(ctx.args)} only follow "
                             f"a verb ({', '.join(RUNNABLE_VERBS)}).")
        doc = read_document(source)
        command = None
    path = write_report(doc, output, command=command)
    sys.stderr.write(f"wrote {path}\n")


def _without_format(args: list[str]) -> list[str]:
    """The verb's flags less any --format: the report always asks for JSON."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--format", "-f"):
            skip = True
        elif not arg.startswith("--format="):
            out.append(arg)
    return out


def run_verb(verb: str, args: list[str]) -> Any:
    """Run ``phasewise VERB ARGS --format json`` in this process and return its document."""
    import click

    import phasewise.cli  # noqa: F401 - registers every verb on the app
    from phasewise.commands._app import app as root

    if verb not in {c.name or c.callback.__name__ for c in root.registered_commands}:
        raise InputError(f"report {verb}: this phasewise has no `{verb}` verb; run one of "
                         "estimate, explain, compare, simulate, validate or profile.")
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            root(args=[verb, *args, "--format", "json"], prog_name="phasewise",
                 standalone_mode=False)
    except click.ClickException as err:
        raise InputError(f"report {verb}: {err.format_message()}") from None
    return parse_document(buffer.getvalue(), f"`phasewise {verb}`")


def read_document(source: str) -> Any:
    if source == "-":
        return parse_document(sys.stdin.read(), "standard input")
    path = Path(source)
    if not path.is_file():
        raise InputError(f"report {source}: no such file, nor a verb to run; give a JSON "
                         f"document or one of {', '.join(RUNNABLE_VERBS)} with its flags.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"report {source}: cannot read it ({err}).") from None
    return parse_document(text, source)


def parse_document(text: str, origin: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{origin}: not a JSON document ({err.msg} at line {err.lineno}); "
                         "give the output of a phasewise verb run with --format json.") from None
