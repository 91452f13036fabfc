"""The `phasewise` command: a thin front end over the layers (verbs live in ``commands/``)."""

from __future__ import annotations

import importlib
import sys

from phasewise.commands import VERB_MODULES
from phasewise.commands._app import app
from phasewise.errors import InputError

for _module in VERB_MODULES:
    importlib.import_module(f"phasewise.commands.{_module}")


@app.callback()
def _root(debug: bool = False) -> None:
    """--debug: show the traceback of an error instead of one line."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: user errors end with one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="phasewise")
    except InputError as err:
        if debug:
            raise
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
