"""`phasewise ui`: the local web app over the same Python API as the CLI."""

from __future__ import annotations

import sys

import typer

from phasewise.commands._app import app
from phasewise.errors import InputError

LOCAL_HOST = "127.0.0.1"


@app.command()
def ui(
    host: str = typer.Option(LOCAL_HOST, "--host", help="Address to listen on. The default "
                                                        "answers this machine only; another "
                                                        "address lets other machines in."),
    port: int = typer.Option(8765, "--port", help="Port to listen on."),
    job_seconds: float = typer.Option(120.0, "--job-seconds",
                                      help="Longest a simulation may run before it is stopped."),
) -> None:
    """Open the local web app: pick a model, devices, workload, formats and layout, and see
    the estimate, explain, compare and simulate views with their plots."""
    try:
        import uvicorn
    except ImportError:
        raise InputError("the web app needs its extra: pip install 'phasewise[ui]'.") from None
    from phasewise.web.app import create_app

    if not 0 < port < 65536:
        raise InputError(f"--port {port}: give a port between 1 and 65535.")
    if not job_seconds > 0:
        raise InputError(f"--job-seconds {job_seconds}: give a positive number of seconds.")
    _check_free(host, port)
    if host != LOCAL_HOST:
        sys.stderr.write(f"warning: listening on {host}: other machines can reach the app.\n")
    sys.stderr.write(f"phasewise ui on http://{host}:{port}/ (Ctrl-C stops it)\n")
    hosts = ["127.0.0.1", "localhost"] if host == LOCAL_HOST else None
    uvicorn.run(create_app(job_seconds=job_seconds, allowed_hosts=hosts), host=host, port=port,
                log_level="warning")


def _check_free(host: str, port: int) -> None:
    """A clear line when the address cannot be listened on (taken, or not this machine's)."""
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as err:
        raise InputError(f"cannot listen on {host}:{port} ({err.strerror}); give another "
                         "--port, or a --host of this machine.") from None
