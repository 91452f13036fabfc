"""The local web app: one page, a small JSON API over the views, the report download.

The web framework is the ``ui`` extra's (FastAPI on uvicorn); this module is imported only
by `phasewise ui` and the tests.

Safe by default: it reads no server path from a request (names go through the catalog and
the HF cache; uploads arrive as text in the request body, bounded, parsed in memory), every
user error comes back as the CLI's one line, and a bug as one line too (the traceback goes
to the server log, never to the page).
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from phasewise.errors import InputError
from phasewise.web.inputs import MAX_UPLOAD_BYTES, Form
from phasewise.web.jobs import Jobs
from phasewise.web.views import (
    LONG_VIEWS,
    QUICK_VIEWS,
    VIEWS,
    cli_command,
    plan_available,
    simulate_bounds,
)

LOG = logging.getLogger("phasewise.web")
# A form with two uploads, and the JSON around them.
MAX_FORM_BYTES = 2 * MAX_UPLOAD_BYTES + 64 * 1024
# A document sent back for its report (validate's, the largest, is under 1 MB).
MAX_DOCUMENT_BYTES = 32 << 20
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
MAX_SEARCH_RESULTS = 50


class BodyTooLarge(InputError):
    """A request body over its limit (answered 413)."""


def create_app(*, job_seconds: float = 120.0, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The app. ``allowed_hosts``: the Host names a request may carry (a page on another
    site that resolves its own name to 127.0.0.1 is refused); None accepts any."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    app = FastAPI(title="phasewise", docs_url=None, redoc_url=None, openapi_url=None)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    jobs = Jobs(job_seconds)
    app.router.on_shutdown.append(jobs.close)

    @app.exception_handler(InputError)
    async def _input_error(_: Request, err: InputError) -> JSONResponse:
        status = 413 if isinstance(err, BodyTooLarge) else 400
        return JSONResponse({"error": str(err)}, status_code=status)

    @app.exception_handler(Exception)
    async def _bug(_: Request, err: Exception) -> JSONResponse:
        LOG.exception("request failed", exc_info=err)
        return JSONResponse({"error": "phasewise failed on this request (a bug); the server "
                                      "log has the details."}, status_code=500)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return _static_text("index.html")

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name == "plotly.min.js":
            from phasewise.report.html_report import plotly_js

            return Response(plotly_js(), media_type="text/javascript")
        if name not in STATIC_FILES:
            return JSONResponse({"error": f"no file {name!r}."}, status_code=404)
        return Response(_static_text(name), media_type=STATIC_FILES[name])

    @app.get("/api/options")
    def options() -> dict[str, Any]:
        return _options()

    @app.get("/api/models")
    def models(q: str = "") -> dict[str, Any]:
        return search_models(q)

    @app.post("/api/view/{view}")
    async def view(view: str, request: Request) -> dict[str, Any]:
        if view not in QUICK_VIEWS:
            raise InputError(f"no quick view {view!r}; choose one of {', '.join(QUICK_VIEWS)} "
                             f"(run {', '.join(LONG_VIEWS)} as a job).")
        form = _form(await read_json(request, MAX_FORM_BYTES))
        doc = await run_in_threadpool(VIEWS[view], form)
        return rendered(doc, cli_command(view, form))

    @app.post("/api/jobs/{view}")
    async def start_job(view: str, request: Request) -> dict[str, Any]:
        if view not in LONG_VIEWS or (view == "plan" and not plan_available()):
            raise InputError(f"no job {view!r}; choose simulate"
                             f"{' or plan' if plan_available() else ''}.")
        form = _form(await read_json(request, MAX_FORM_BYTES))
        if view == "simulate":
            simulate_bounds(form)  # refused at once rather than in the job
        return {"job": jobs.start(view, form.model_dump()), "command": cli_command(view, form)}

    @app.get("/api/jobs/{job_id}")
    def poll_job(job_id: str) -> dict[str, Any]:
        job = jobs.poll(job_id)
        if job.state == "done":
            return {"state": "done", **rendered(job.document, "")}
        return {"state": job.state, "error": job.error}

    @app.delete("/api/jobs/{job_id}")
    def cancel_job(job_id: str) -> dict[str, Any]:
        job = jobs.cancel(job_id)
        return {"state": job.state, "error": job.error}

    @app.post("/api/report")
    async def report(request: Request) -> Response:
        from phasewise.report.html_report import html_report

        body = await read_json(request, MAX_DOCUMENT_BYTES)
        if not isinstance(body, dict) or "document" not in body:
            raise InputError("send {'document': ..., 'command': ...} to render a report.")
        page = html_report(body["document"], command=str(body.get("command") or "") or None)
        return Response(page, media_type="text/html", headers={
            "Content-Disposition": "attachment; filename=phasewise-report.html"})

    return app


def _static_text(name: str) -> str:
    return (resources.files("phasewise.web") / "static" / name).read_text("utf-8")


def _form(body: Any) -> Form:
    from pydantic import ValidationError

    if not isinstance(body, dict):
        raise InputError("the request holds no form; send the inputs as a JSON object.")
    try:
        return Form(**body)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "form"
        raise InputError(f"{field}: {first['msg']}.") from None


async def read_json(request: Any, limit: int) -> Any:
    """The request body as JSON, read in memory up to ``limit`` bytes (a larger body is
    refused before it is all read)."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        # A page on another site can send a plain form here without asking; JSON it cannot.
        raise InputError("send the request as application/json.")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the request is {int(declared):,} bytes; the limit is {limit:,}.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the request is over {limit:,} bytes, the limit; upload a "
                             "smaller file.")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError("the request is not JSON; the page sends its inputs as JSON.") from None


def rendered(doc: Any, command: str) -> dict[str, Any]:
    """The document with its sections as HTML and its plots, drawn as the report draws them."""
    from phasewise.report.html_report import render_sections
    from phasewise.report.sections import build_sections, document_kind

    html, plots = render_sections(build_sections(doc if isinstance(doc, dict) else {"value": doc}))
    return {"document": doc, "kind": document_kind(doc), "html": html, "plots": plots,
            "command": command}


def search_models(query: str) -> dict[str, Any]:
    """Catalog names and cached repo ids holding ``query`` (case-insensitive)."""
    from phasewise.catalog.models import model_names

    needle = query.strip().lower()
    catalog = [n for n in model_names() if needle in n.lower()]
    cache = [r for r in cached_repos() if needle in r.lower()]
    return {"catalog": catalog[:MAX_SEARCH_RESULTS], "cache": cache[:MAX_SEARCH_RESULTS]}


def cached_repos() -> list[str]:
    """Repo ids in the local Hugging Face cache that hold a config.json (folder names only:
    nothing is downloaded, nothing else is read)."""
    from phasewise.catalog.models import hf_cache_dirs

    found = set()
    for cache in hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo in cache.glob("models--*"):
            if any(repo.glob("snapshots/*/config.json")):
                found.add(repo.name.removeprefix("models--").replace("--", "/"))
    return sorted(found)


def _options() -> dict[str, Any]:
    from phasewise.catalog.hardware import HARDWARE_DIR, hardware_names
    from phasewise.cost.engines import engine_names
    from phasewise.estimate.compare import CRITERIA
    from phasewise.files import read_toml
    from phasewise.specs.precision import FORMATS

    devices = [{"name": n, "display_name": str(read_toml(HARDWARE_DIR / f"{n}.toml")
                                               .get("display_name", n))} for n in hardware_names()]
    return {"hardware": devices, "formats": sorted(FORMATS), "engines": sorted(engine_names()),
            "rank_by": list(CRITERIA), "schedulers": ["static", "continuous", "chunked"],
            "views": list(QUICK_VIEWS) + ["simulate"] + (["plan"] if plan_available() else []),
            "max_upload_bytes": MAX_UPLOAD_BYTES}
