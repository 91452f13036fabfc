"""The web app and the HTML report in a real browser (Playwright driving Debian's Chromium).

Screenshots are kept under out/browser/ (ignored by git) for a person to look at. A real
browser is slow to start and drive, so these run in `make test-all` (CI), not `make test`.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("browser tests need Debian's Chromium at /usr/bin/chromium "
                "(apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need playwright "
                               "(pip install 'phasewise[browser]')")
pytest.importorskip("fastapi", reason="the web app needs its extra (pip install 'phasewise[ui]')")

from phasewise.catalog.models import MODELS_DIR  # noqa: E402

ARTEFACTS = Path(__file__).resolve().parents[1] / "out" / "browser"
CLI_FLAGS = ["--model", "qwen2.5-7b", "--hardware", "a100-80gb-sxm", "--isl", "1024",
             "--osl", "128", "--batch-size", "4", "--kv-dtype", "fp8"]
ALL_PLOTS_DRAWN = ("(root) => { const plots = document.querySelectorAll(root + ' div.plot');"
                   " return plots.length > 0 && [...plots].every("
                   "p => p.getAttribute('data-rendered') === 'true'); }")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=300)


def cli_json(*args: str) -> dict:
    result = cli(*args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`phasewise ui` as a user starts it, on a free port of 127.0.0.1."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "phasewise", "ui", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "api/options", timeout=5)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"phasewise ui did not start: {process.stdout.read()}") from None
            time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM),
                                     args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    yield page
    context.close()


def open_app(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=120_000)
    page.wait_for_function(ALL_PLOTS_DRAWN, arg="#result", timeout=120_000)


def headline(page, label: str) -> float:
    cell = page.locator("table[data-title='Headline'] tr", has_text=label).first.locator("td").nth(1)
    return json.loads(cell.get_attribute("data-value"))


def choose(page) -> None:
    """What a user picks: a model, a device, a workload and a KV format."""
    for field, value in (("#model", "qwen2.5-7b"), ("#hardware", "a100-80gb-sxm"),
                         ("#isl", "1024"), ("#osl", "128"), ("#batch_size", "4"),
                         ("#kv_dtype", "fp8")):
        page.fill(field, value)
    wait_for_command(page, "--model qwen2.5-7b --hardware a100-80gb-sxm --isl 1024 --osl 128 "
                           "--weight-dtype auto --act-dtype bf16 --kv-dtype fp8")


def wait_for_command(page, text: str) -> None:
    page.wait_for_function("(text) => document.getElementById('command').textContent"
                           ".includes(text) && !document.getElementById('status').textContent",
                           arg=text, timeout=120_000)
    page.wait_for_function(ALL_PLOTS_DRAWN, arg="#result", timeout=120_000)


def test_the_page_loads_with_its_views_and_plots(page, server):
    open_app(page, server)
    tabs = page.locator("#views button").all_inner_texts()
    assert tabs[:4] == ["estimate", "explain", "compare", "simulate"]
    assert page.locator("#result div.plot .main-svg").count() >= 2
    assert page.errors == []
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / "ui-estimate.png"))


def test_a_users_choices_give_the_clis_numbers(page, server):
    open_app(page, server)
    choose(page)
    expected = cli_json("estimate", *CLI_FLAGS, "--detail")
    assert headline(page, "TTFT") == expected["ttft_s"]
    assert headline(page, "TPOT") == expected["tpot_s"]
    with page.expect_download() as download:
        page.click("#download-json")
    assert json.loads(Path(download.value.path()).read_text()) == expected
    with page.expect_download() as download:
        page.click("#download-report")
    report = Path(download.value.path()).read_text()
    assert report.startswith("<!doctype html>")
    assert f'"ttft_s":{json.dumps(expected["ttft_s"])}' in report


def test_an_invalid_input_shows_the_clis_error(page, server):
    open_app(page, server)
    page.fill("#isl", "12x")
    page.wait_for_selector("#error:not([hidden])", timeout=60_000)
    shown = page.inner_text("#error")
    stderr = cli("estimate", "--isl", "12x").stderr.strip()
    assert stderr == f"error: {shown}"
    assert "Traceback" not in page.content()
    assert "stale" in page.get_attribute("#result", "class")  # the old answer is greyed out
    assert page.is_disabled("#download-json")
    page.screenshot(path=str(ARTEFACTS / "ui-error.png"))
    page.fill("#isl", "1024")
    page.wait_for_selector("#error", state="hidden", timeout=60_000)
    wait_for_command(page, "--isl 1024")


def test_the_share_link_restores_the_same_inputs(page, server, browser):
    open_app(page, server)
    choose(page)
    link = page.get_attribute("#share", "href")
    ttft = headline(page, "TTFT")
    other = browser.new_page()
    open_app(other, link)
    assert other.input_value("#model") == "qwen2.5-7b"
    assert other.input_value("#kv_dtype") == "fp8"
    assert headline(other, "TTFT") == ttft
    other.close()


def test_an_uploaded_config_gives_the_catalog_models_numbers(page, server, tmp_path):
    upload = tmp_path / "my-qwen.json"
    upload.write_text((MODELS_DIR / "qwen2.5-7b.json").read_text())
    open_app(page, server)
    page.fill("#hardware", "a100-80gb-sxm")
    page.set_input_files("#model-file", str(upload))
    wait_for_command(page, "--model CONFIG.json --hardware a100-80gb-sxm")
    expected = cli_json("estimate", "--model", str(upload), "--hardware", "a100-80gb-sxm")
    assert headline(page, "TTFT") == expected["ttft_s"]
    assert "my-qwen" in page.inner_text("#result h2")


def test_the_simulate_view_draws_latency_against_load(page, server):
    open_app(page, server)
    page.click("#views button[data-view=simulate]")
    for field, value in (("#model", "llama-3.2-1b"), ("#hardware", "l40s"), ("#isl", "128"),
                         ("#osl", "16"), ("#rate", "2,8"), ("#num_requests", "40")):
        page.fill(field, value)
    wait_for_command(page, "phasewise simulate --model llama-3.2-1b --hardware l40s --isl 128 "
                           "--osl 16")
    assert page.get_attribute("#result", "data-kind") == "simulate"
    titles = page.eval_on_selector_all("#result div.plot .gtitle",
                                       "titles => titles.map(t => t.textContent)")
    assert "TTFT against load" in titles and "TPOT against load" in titles
    page.screenshot(path=str(ARTEFACTS / "ui-simulate.png"))


@pytest.mark.parametrize("verb_args", [
    ["estimate", "--model", "qwen2.5-7b", "--hardware", "a100-80gb-sxm"],
    ["compare", "--hardware", "h100-sxm,l40s,rtx-4090,mi300x", "--isl", "512"],
])
def test_a_report_opens_offline_and_draws_its_plots(browser, tmp_path, verb_args):
    out = tmp_path / "report.html"
    result = cli("report", *verb_args, "-o", str(out))
    assert result.returncode == 0, result.stderr
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
    asked: list[str] = []

    def block(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            asked.append(route.request.url)
            route.abort()

    context.route("**/*", block)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(out.as_uri())
    page.wait_for_function(ALL_PLOTS_DRAWN, arg="main", timeout=120_000)
    assert asked == [] and errors == []
    plots = page.locator("main div.plot")
    assert plots.count() >= 4
    for i in range(plots.count()):
        assert plots.nth(i).locator(".main-svg").count() >= 1
        assert plots.nth(i).locator(".trace").count() >= 1
    if verb_args[0] == "estimate":
        assert page.locator("#plot-1 .scatterlayer .trace").count() == 4  # roof, ridge, 2 phases
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / f"report-{verb_args[0]}.png"))
    context.close()
