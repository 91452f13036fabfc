"""The `phasewise` command: a thin front end over the layers (verbs live in ``commands/``)."""

from __future__ import annotations

import importlib
import signal
import sys

import typer

try:  # Typer 0.2x carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older Typer on the real click
    from click import exceptions as click_errors

from phasewise.commands import VERB_MODULES
from phasewise.commands._app import app
from phasewise.errors import InputError

# click's Abort (Ctrl-C at a prompt); some vendored copies do not export it.
_ABORT = getattr(click_errors, "Abort", KeyboardInterrupt)

for _module in VERB_MODULES:
    importlib.import_module(f"phasewise.commands.{_module}")


def _print_version(value: bool) -> None:
    if value:
        from phasewise.version import __version__

        sys.stdout.write(f"phasewise {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(debug: bool = False,
          version: bool = typer.Option(False, "--version", is_eager=True,
                                       callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """--debug: show the traceback of an error instead of one line."""


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like an interrupt, so a file being written is removed, not left."""
    raise SystemExit(128 + signum)


def _usage_line(err: click_errors.ClickException) -> str:
    """A click usage error (unknown flag, a flag's value of the wrong type) as one line,
    pointing at the verb's --help."""
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    where = f" See `{ctx.command_path} --help`." if ctx is not None else ""
    return f"{message if message.endswith(('.', '?')) else message + '.'}{where}"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: user errors end with one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code = app(args=args, prog_name="phasewise", standalone_mode=False)
    except InputError as err:
        if debug:
            raise
        sys.stderr.write(f"error: {' '.join(str(err).split())}\n")
        sys.exit(2)
    except click_errors.NoArgsIsHelpError as err:
        sys.stdout.write(err.format_message() + "\n")
        sys.exit(0)
    except click_errors.ClickException as err:
        if debug:
            raise
        sys.stderr.write(f"error: {_usage_line(err)}\n")
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)  # as click's standalone mode ends


if __name__ == "__main__":
    main()
