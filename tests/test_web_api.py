"""The web app's API: the CLI's documents and errors, no server paths, bounded uploads and jobs."""

import json
import time

import pytest

pytest.importorskip("fastapi", reason="the web app needs its extra (pip install 'phasewise[ui]')")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")

from fastapi.testclient import TestClient  # noqa: E402

from phasewise.catalog.hardware import HARDWARE_DIR  # noqa: E402
from phasewise.catalog.models import MODELS_DIR  # noqa: E402
from phasewise.web import views  # noqa: E402
from phasewise.web.app import MAX_FORM_BYTES, create_app  # noqa: E402
from phasewise.web.inputs import Form  # noqa: E402

FORM = {"model": "qwen2.5-7b", "hardware": "a100-80gb-sxm", "isl": "1024", "osl": "128",
        "batch_size": "4", "kv_dtype": "fp8", "tp": "1"}
CLI_FLAGS = ["--model", "qwen2.5-7b", "--hardware", "a100-80gb-sxm", "--isl", "1024",
             "--osl", "128", "--batch-size", "4", "--kv-dtype", "fp8", "--tp", "1"]


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(job_seconds=60), raise_server_exceptions=False) as c:
        yield c


def cli_json(phasewise_cli, *args):
    return json.loads(phasewise_cli(*args, "--format", "json").stdout)


def test_the_estimate_view_is_the_clis_document(client, phasewise_cli):
    answer = client.post("/api/view/estimate", json=FORM).json()
    assert answer["document"] == cli_json(phasewise_cli, "estimate", *CLI_FLAGS, "--detail")
    assert answer["kind"] == "estimate"
    assert answer["command"].startswith("phasewise estimate --model qwen2.5-7b")
    assert set(answer["plots"]) >= {"plot-1", "plot-2"}


def test_the_explain_view_with_its_sweep_is_the_clis_document(client, phasewise_cli):
    answer = client.post("/api/view/explain", json=FORM | {"batch_sweep": True}).json()
    assert answer["document"] == cli_json(phasewise_cli, "explain", *CLI_FLAGS, "--batch-sweep")


def test_the_compare_view_is_the_clis_document(client, phasewise_cli):
    form = FORM | {"hardware": "h100-sxm,l40s,rtx-4090", "rank_by": "tpot"}
    answer = client.post("/api/view/compare", json=form).json()
    flags = CLI_FLAGS[:2] + ["--hardware", "h100-sxm,l40s,rtx-4090"] + CLI_FLAGS[4:]
    assert answer["document"] == cli_json(phasewise_cli, "compare", *flags, "--rank-by", "tpot")


def test_the_simulate_view_is_the_clis_document(phasewise_cli):
    form = Form(model="llama-3.2-1b", hardware="l40s", isl="256", osl="32", rate="3,9",
                num_requests="60", seed="7")
    cli = cli_json(phasewise_cli, "simulate", "--model", "llama-3.2-1b", "--hardware", "l40s",
                   "--isl", "256", "--osl", "32", "--rate", "3,9", "--num-requests", "60",
                   "--seed", "7")
    assert views.simulate_view(form) == cli


def test_an_uploaded_config_prices_as_the_catalog_model(client):
    text = (MODELS_DIR / "qwen2.5-7b.json").read_text()
    uploaded = client.post("/api/view/estimate", json=FORM | {
        "model": "", "model_upload": text, "model_upload_name": "config.json"}).json()
    catalog = client.post("/api/view/estimate", json=FORM).json()
    assert uploaded["document"]["inputs"]["model"] == "uploaded-config"
    assert uploaded["document"]["ttft_s"] == catalog["document"]["ttft_s"]
    assert uploaded["document"]["tpot_s"] == catalog["document"]["tpot_s"]


def test_an_uploaded_sheet_prices_as_the_catalog_device(client):
    text = (HARDWARE_DIR / "a100-80gb-sxm.toml").read_text()
    uploaded = client.post("/api/view/estimate", json=FORM | {
        "hardware": "", "hardware_upload": text}).json()
    catalog = client.post("/api/view/estimate", json=FORM).json()
    assert uploaded["document"]["tpot_s"] == catalog["document"]["tpot_s"]


@pytest.mark.parametrize("change, message", [
    ({"model": "no-such-model"}, "unknown model 'no-such-model'."),
    ({"isl": "abc"}, "--isl 'abc': not a number; give one such as 1."),
    ({"hardware": "no-such-gpu"}, "unknown hardware 'no-such-gpu'."),
    ({"kv_keep": "half"}, "--kv-keep 'half': not a number; give one such as 0.5."),
    ({"model_upload": "{not json"}, "uploaded config.json: not valid JSON"),
    ({"model_upload": "[1, 2]"}, "uploaded config.json: the file holds no JSON object"),
    ({"hardware_upload": "name = "}, "uploaded hardware sheet: not valid TOML"),
    ({"unexpected": "1"}, "unexpected: Extra inputs are not permitted."),
])
def test_a_bad_input_is_the_clis_one_line_error(client, change, message):
    response = client.post("/api/view/estimate", json=FORM | change)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error
    assert "\n" not in error and "Traceback" not in error


def test_no_server_path_is_read_from_the_form(client, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text((MODELS_DIR / "qwen2.5-7b.json").read_text())
    for ref in (str(folder), str(folder / "config.json"), "../../etc", "/etc/passwd"):
        response = client.post("/api/view/estimate", json=FORM | {"model": ref})
        assert response.status_code == 400, ref
        assert "unknown model" in response.json()["error"]
    sheet = str(HARDWARE_DIR / "h100-sxm.toml")
    response = client.post("/api/view/estimate", json=FORM | {"hardware": sheet})
    assert response.status_code == 400
    assert "unknown hardware" in response.json()["error"]


def test_a_body_over_the_limit_is_refused(client):
    response = client.post("/api/view/estimate", content=b" " * (MAX_FORM_BYTES + 1),
                           headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "limit" in response.json()["error"]


def test_a_bug_is_one_line_without_a_traceback(client, monkeypatch):
    def broken(form):
        raise RuntimeError("secret internals")

    monkeypatch.setitem(views.VIEWS, "estimate", broken)
    response = client.post("/api/view/estimate", json=FORM)
    assert response.status_code == 500
    assert "secret internals" not in response.text and "Traceback" not in response.text


def test_static_files_are_a_fixed_list(client):
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/..%2F__init__.py").status_code == 404
    assert client.get("/static/index.html").status_code == 404


def test_the_model_search_finds_catalog_names(client):
    found = client.get("/api/models", params={"q": "QWEN2.5-7"}).json()
    assert "qwen2.5-7b" in found["catalog"]
    assert all("qwen2.5-7" in name for name in found["catalog"])


def test_the_report_download_is_the_report_of_the_document(client):
    from phasewise.report.html_report import html_report

    doc = client.post("/api/view/estimate", json=FORM).json()["document"]
    response = client.post("/api/report", json={"document": doc, "command": "phasewise x"})
    assert response.status_code == 200
    assert response.text == html_report(doc, command="phasewise x")
    assert "attachment" in response.headers["content-disposition"]


def _wait(client, job, limit_s=120):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        state = client.get(f"/api/jobs/{job}").json()
        if state["state"] != "running":
            return state
        time.sleep(0.2)
    raise AssertionError("the job never finished")


def test_a_simulate_job_finishes_with_its_plots(client):
    job = client.post("/api/jobs/simulate", json={"model": "llama-3.2-1b", "hardware": "l40s",
                                                   "isl": "128", "osl": "16", "rate": "2,4",
                                                   "num_requests": "30"}).json()["job"]
    state = _wait(client, job)
    assert state["state"] == "done", state
    assert state["kind"] == "simulate" and len(state["document"]["runs"]) == 2
    assert len(state["plots"]) >= 3


def test_a_job_can_be_cancelled(client):
    job = client.post("/api/jobs/simulate", json={"num_requests": "5000", "rate": "50"}).json()
    state = client.delete(f"/api/jobs/{job['job']}").json()
    assert state == {"state": "cancelled", "error": "cancelled."}
    assert client.get(f"/api/jobs/{job['job']}").json()["state"] == "cancelled"


def test_a_job_past_its_time_limit_is_stopped():
    # A job still running when polled past its limit is stopped: poll just past a 10 ms
    # limit, sooner than a job's process can start, run 5,000 requests and answer (an answer
    # that does arrive is judged by its own finish time, tests/test_web_jobs.py).
    with TestClient(create_app(job_seconds=0.01), raise_server_exceptions=False) as c:
        job = c.post("/api/jobs/simulate", json={"num_requests": "5000", "rate": "50"}).json()
        time.sleep(0.02)
        state = c.get(f"/api/jobs/{job['job']}").json()
    assert state["state"] == "error"
    assert "stopped after 0.01 s" in state["error"]


def test_a_simulation_is_bounded_before_it_starts(client):
    response = client.post("/api/jobs/simulate", json={"num_requests": "100000"})
    assert response.status_code == 400
    assert "--num-requests 100000: the web app takes 1 to 5,000" in response.json()["error"]
    response = client.post("/api/jobs/simulate", json={"rate": "1,2,3,4,5,6,7,8,9"})
    assert response.status_code == 400
    assert "give 1 to 8 positive request rates" in response.json()["error"]


@pytest.mark.skipif(not views.plan_available(), reason="this phasewise has no plan verb")
def test_the_plan_job_is_the_clis_document(client, phasewise_cli):
    form = {"model": "llama-3.2-1b", "hardware": "l40s", "isl": "256", "osl": "32",
            "rate": "2", "num_requests": "60", "ttft_slo": "1s", "tpot_slo": "50ms"}
    started = client.post("/api/jobs/plan", json=form).json()
    state = _wait(client, started["job"], limit_s=300)
    assert state["state"] == "done", state
    words = started["command"].split()[1:]
    assert state["document"] == json.loads(phasewise_cli(*words, "--workers", "1").stdout)


def test_ui_on_a_taken_port_is_one_line_and_exit_2(phasewise_cli):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = phasewise_cli("ui", "--port", str(port), check=False)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_model_in_the_local_hf_cache_is_found_and_priced(client, tmp_path, monkeypatch):
    snapshot = tmp_path / "models--acme--tiny-qwen" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((MODELS_DIR / "qwen2.5-7b.json").read_text())
    (tmp_path / "models--acme--tiny-qwen" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-qwen" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert client.get("/api/models", params={"q": "acme"}).json()["cache"] == ["acme/tiny-qwen"]
    cached = client.post("/api/view/estimate", json=FORM | {"model": "acme/tiny-qwen"}).json()
    catalog = client.post("/api/view/estimate", json=FORM).json()
    assert cached["document"]["inputs"]["model"] == "acme/tiny-qwen"
    assert cached["document"]["tpot_s"] == catalog["document"]["tpot_s"]


def test_an_upload_over_its_limit_is_refused():
    from phasewise.web.inputs import MAX_UPLOAD_BYTES

    with TestClient(create_app(), raise_server_exceptions=False) as c:
        response = c.post("/api/view/estimate",
                          json=FORM | {"model_upload": "{" + " " * MAX_UPLOAD_BYTES + "}"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("model_upload: String should have at most")


def test_a_request_from_another_sites_name_or_without_json_is_refused(client):
    guarded = TestClient(create_app(allowed_hosts=["127.0.0.1", "localhost"]),
                         base_url="http://evil.example", raise_server_exceptions=False)
    assert guarded.get("/api/options").status_code == 400
    local = TestClient(create_app(allowed_hosts=["127.0.0.1", "localhost"]),
                       base_url="http://127.0.0.1:8765")
    assert local.get("/api/options").status_code == 200
    response = client.post("/api/view/estimate", content=json.dumps(FORM),
                           headers={"content-type": "text/plain"})
    assert response.status_code == 400
    assert "application/json" in response.json()["error"]
