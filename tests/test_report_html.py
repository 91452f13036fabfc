"""`phasewise report`: one self-contained, deterministic HTML page per document."""

import json
import re
import shlex
from html.parser import HTMLParser

import pytest

pytest.importorskip("plotly", reason="the HTML report needs plotly (pip install 'phasewise[report]')")

from phasewise.report.html_report import html_report, script_json  # noqa: E402
from phasewise.report.reproduce import command_for  # noqa: E402
from phasewise.report.sections import build_sections, document_kind  # noqa: E402


class _Page(HTMLParser):
    """What a browser would fetch (script and link sources) and each table's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches: list[str] = []
        self.tables: dict[str, list[list[tuple[str, str | None]]]] = {}
        self._table: str | None = None
        self._cell: dict | None = None
        self.plot_ids: list[str] = []
        self.scripts: dict[str, str] = {}
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("#"):
                self.fetches.append(a[key])
        if tag == "link":
            self.fetches.append(a.get("href", "link"))
        if tag == "table":
            self._table = a["data-title"]
            self.tables[self._table] = []
        if tag == "tr" and self._table:
            self.tables[self._table].append([])
        if tag == "td" and self._table:
            self._cell = {"text": "", "value": a.get("data-value")}
        if tag == "div" and "plot" in (a.get("class") or "").split():
            self.plot_ids.append(a["id"])
        if tag == "script" and a.get("id"):
            self._script = a["id"]
            self.scripts[self._script] = ""

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.tables[self._table][-1].append((self._cell["text"], self._cell["value"]))
            self._cell = None
        if tag == "tr" and self._table and not self.tables[self._table][-1]:
            self.tables[self._table].pop()  # the header row
        if tag == "table":
            self._table = None
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data
        if self._script:
            self.scripts[self._script] += data


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def _value(page: _Page, table: str, label: str):
    row = next(r for r in page.tables[table] if r and r[0][0] == label)
    return json.loads(row[1][1])


# A hand-made estimate document: round numbers whose rendering is known by hand.
PEAK, BANDWIDTH = 1.0e15, 2.0e12  # ridge = 1e15 / 2e12 = 500 FLOP/B
ESTIMATE = {
    "schema_version": 1, "tool_version": "9.9.9",
    "inputs": {"model": "toy-7b", "hardware": "toy-gpu", "isl": 1000, "osl": 101,
               "batch_size": 1, "weight_dtype": "bf16", "act_dtype": "bf16", "kv_dtype": "bf16",
               "tp": 1, "pp": 1, "ep": 1, "cost_model": "calibrated", "kv_keep": 1.0,
               "engine": "generic", "calibration": None},
    "model": {"name": "toy-7b", "params_total": 7e9, "params_active": 7e9,
              "kv_bytes_per_token": 131072.0, "layers": 32, "max_context": 4096},
    "hardware": {"name": "toy-gpu", "display_name": "Toy GPU", "device_class": "datacenter_gpu",
                 "math_format": "bf16", "peak_flops_per_s": PEAK,
                 "memory_bandwidth_bytes_per_s": BANDWIDTH, "memory_bytes": 8e10,
                 "ridge_point": 500.0, "devices": 1, "price_usd_per_hour": 2.0},
    "prefill": {"phase": "prefill", "label": "pp1000", "tokens_per_step": 1000, "flops": 1.4e13,
                "bytes": {"weights": 1.4e10, "kv_read": 0.0, "kv_write": 1e8, "activations": 1e9,
                          "network": 0.0},
                "memory_bytes": 1.51e10, "arithmetic_intensity": 900.0, "ridge_point": 500.0,
                "bound": "compute", "time_s": 0.05, "sol_time_s": 0.014, "compute_s": 0.014,
                "memory_s": 0.00755, "network_s": 0.0, "tokens_per_s": 20000.0, "mfu": 0.25,
                "mbu": 0.15, "attention_share": 0.05},
    "decode": {"phase": "decode", "label": "tg101", "tokens_per_step": 1, "flops": 1.4e10,
               "bytes": {"weights": 1.4e10, "kv_read": 1.3e8, "kv_write": 1.3e5,
                         "activations": 1e7, "network": 0.0},
               "memory_bytes": 1.414e10, "arithmetic_intensity": 1.0, "ridge_point": 500.0,
               "bound": "memory", "time_s": 0.01, "sol_time_s": 0.00707, "compute_s": 1.4e-5,
               "memory_s": 0.00707, "network_s": 0.0, "tokens_per_s": 100.0, "mfu": 0.0014,
               "mbu": 0.7, "attention_share": 0.04},
    "ttft_s": 0.05, "tpot_s": 0.01, "e2el_s": 1.05, "tokens_per_s": 96.19,
    "prefill_tokens_per_s": 20000.0, "decode_tokens_per_s": 100.0,
    "tokens_per_s_per_user": 100.0, "tokens_per_s_per_gpu": 96.19,
    "usd_per_million_output_tokens": 5.78,
    "memory": {"weights_bytes": 1.4e10, "kv_cache_bytes": 1.45e8, "activations_bytes": 1e8,
               "reserve_bytes": 8e9, "total_bytes": 2.2245e10, "capacity_bytes": 8e10,
               "fits": True, "shortfall_bytes": 0.0, "max_batch_size": 100},
    "cost_energy": {"usd_per_hour": 2.0}, "warnings": [], "ops": None, "constants": None,
}


def test_each_verbs_document_is_recognised_by_its_keys():
    assert document_kind(ESTIMATE) == "estimate"
    assert document_kind({"estimates": [ESTIMATE]}) == "estimate-sweep"
    assert document_kind({"prefill": {}, "decode": {}, "summary": []}) == "explain"
    assert document_kind({"results": [], "winners": {}}) == "compare"
    assert document_kind({"points": [], "best_tp_for_tpot": 1}) == "tp-scaling"
    assert document_kind({"runs": []}) == "simulate"
    assert document_kind({"ttft": {}, "tpot": {}, "e2el": {}}) == "simulate"
    assert document_kind({"scores": [], "predictions": []}) == "validate"
    assert document_kind({"ceilings": {}, "points": []}) == "profile"
    assert document_kind({"fronts": [], "candidates_screened": 3, "chosen": None}) == "plan"
    assert document_kind({"plans": []}) == "plan"
    assert document_kind({"kind": "plan", "candidates": []}) == "plan-like"
    assert document_kind({"something": 1}) == "document"
    assert document_kind([1, 2]) == "document"


def test_the_page_shows_the_documents_numbers_formatted_by_hand():
    page = parse(html_report(ESTIMATE))
    headline = {row[0][0]: row[1][0] for row in page.tables["Headline"]}
    assert headline["TTFT"] == "50 ms"
    assert headline["TPOT"] == "10 ms"
    assert headline["end-to-end latency"] == "1.05 s"
    assert headline["largest batch that fits"] == "100"
    assert _value(page, "Headline", "TTFT") == 0.05
    phases = {row[0][0]: [c[0] for c in row[1:]] for row in page.tables["The two phases"]}
    assert phases["bound"] == ["compute", "memory"]
    assert phases["MFU"] == ["25.0%", "0.1%"]
    assert phases["FLOPs"] == ["14 TFLOP", "14 GFLOP"]


def test_the_roofline_meets_at_the_ridge_and_places_each_phase_at_its_intensity():
    figure = build_sections(ESTIMATE)[0].figures[0]
    roof, ridge, prefill, decode = figure.data
    assert roof["y"][1] == PEAK and roof["x"][1] == 500.0
    # The bandwidth slope at intensity I is I x 2e12 FLOP/s.
    assert roof["y"][0] == pytest.approx(roof["x"][0] * BANDWIDTH)
    assert ridge["x"] == [500.0, 500.0]
    assert (prefill["x"], prefill["y"]) == ([900.0], [0.25 * PEAK])
    assert (decode["x"], decode["y"]) == ([1.0], [0.0014 * PEAK])
    assert figure.layout["xaxis"]["type"] == figure.layout["yaxis"]["type"] == "log"


def test_the_page_needs_no_network_and_carries_every_plot():
    text = html_report(ESTIMATE)
    page = parse(text)
    assert page.fetches == []
    assert "@import" not in text
    plots = json.loads(page.scripts["plot-data"])
    assert page.plot_ids == sorted(plots, key=lambda k: int(k.split("-")[1]))
    assert page.plot_ids[:2] == ["plot-1", "plot-2"]
    assert "Plotly.newPlot" in text and "window.Plotly" in text  # the bundle is inline
    assert json.loads(page.scripts["document-data"]) == ESTIMATE


def test_the_same_document_gives_the_same_bytes():
    first = html_report(ESTIMATE)
    shuffled = json.loads(json.dumps(ESTIMATE))
    shuffled = dict(reversed(list(shuffled.items())))
    assert html_report(ESTIMATE) == first
    assert parse(html_report(shuffled)).scripts["plot-data"] == parse(first).scripts["plot-data"]
    assert not re.search(r"20\d\d-\d\d-\d\d", first.split("<script>")[0])


def test_script_json_cannot_close_its_script_element():
    assert "</script>" not in script_json({"text": "</script><script>alert(1)"})
    assert json.loads(script_json({"text": "</b>"})) == {"text": "</b>"}


def test_an_unknown_document_draws_its_records_and_their_pareto_front():
    doc = {"kind": "plan", "candidates": [
        {"name": "a", "tokens_per_s_per_gpu": 100.0, "tokens_per_s_per_user": 50.0},
        {"name": "b", "tokens_per_s_per_gpu": 300.0, "tokens_per_s_per_user": 20.0}]}
    section = build_sections(doc)[0]
    assert section.figures[0].data[0]["x"] == [100.0, 300.0]
    assert section.figures[0].data[0]["y"] == [50.0, 20.0]
    assert section.figures[0].data[0]["text"] == ["a", "b"]
    page = parse(html_report(doc))
    assert [row[0][0] for row in page.tables["candidates"]] == ["a", "b"]


def test_a_plan_draws_each_front_over_its_candidates():
    def candidate(index, gpu, user):
        return {"index": index, "label": f"c{index}", "tokens_per_s_per_gpu": gpu,
                "tokens_per_s_per_user": user, "pools": [], "targets": []}

    doc = {"model": "m", "verdict": "c2 meets the SLOs", "shapes_priced": 10,
           "shapes_unfit": 0, "candidates_screened": 3, "candidates_verified": 1,
           "chosen": candidate(2, 300.0, 40.0), "closest": None, "notes": [],
           "best_per_device": [candidate(1, 100.0, 50.0), candidate(2, 300.0, 40.0)],
           "verified": [candidate(3, 200.0, 20.0)],
           "fronts": [{"name": "throughput", "x": "tokens_per_s_per_gpu",
                       "y": "tokens_per_s_per_user", "x_larger_better": True,
                       "y_larger_better": True, "source": "analytic", "indices": [1, 2],
                       "points": [[100.0, 50.0], [300.0, 40.0]]}]}
    section = build_sections(doc)[0]
    everyone, front = section.figures[0].data
    assert everyone["x"] == [100.0, 300.0, 200.0] and everyone["y"] == [50.0, 40.0, 20.0]
    assert front["x"] == [100.0, 300.0] and front["text"] == ["c1", "c2"]
    assert "c2 meets the SLOs" in section.notes


def test_validate_plots_predicted_against_measured_with_the_diagonal():
    doc = {"mode": "test", "error_definition": "predicted / measured - 1", "scores": [],
           "predictions": [
               {"record_id": "R1", "phase": "decode", "hardware": "h", "model": "m",
                "unit": "tokens/s", "measured": 40.0, "predicted": 50.0},
               {"record_id": "R2", "phase": "prefill", "hardware": "h", "model": "m",
                "unit": "tokens/s", "measured": 1000.0, "predicted": 800.0}]}
    data = build_sections(doc)[0].figures[0].data
    assert [(t["name"], t["x"], t["y"]) for t in data[:2]] == [("decode", [40.0], [50.0]),
                                                               ("prefill", [1000.0], [800.0])]
    assert data[2]["x"] == data[2]["y"] == [40.0, 1000.0]


def test_a_compare_page_ranks_each_phase_and_each_dollar():
    doc = {"model": "m", "rank_by": "cost", "winners": {"prefill: lowest TTFT": "b"},
           "skipped": {}, "results": [
               {"hardware": "a", "tp": 1, "ttft_s": 0.2, "tpot_s": 0.01, "fits": True,
                "usd_per_million_input_tokens": 0.1, "usd_per_million_output_tokens": 3.0},
               {"hardware": "b", "tp": 2, "ttft_s": 0.1, "tpot_s": 0.02, "fits": True,
                "usd_per_million_input_tokens": 0.2, "usd_per_million_output_tokens": 1.0}]}
    figures = build_sections(doc)[0].figures
    ttft, tpot, output_cost = figures[0], figures[1], figures[2]
    assert ttft.data[0]["y"] == ["a", "b TP2"] and ttft.data[0]["x"] == [0.2, 0.1]
    assert tpot.data[0]["x"] == [0.01, 0.02]
    assert output_cost.data[0]["x"] == [3.0, 1.0]
    assert ttft.layout["yaxis"]["categoryorder"] == "total ascending"


def test_report_of_a_file_writes_the_page(phasewise_cli, tmp_path):
    source = tmp_path / "estimate.json"
    source.write_text(json.dumps(ESTIMATE))
    out = tmp_path / "report.html"
    result = phasewise_cli("report", str(source), "-o", str(out))
    assert f"wrote {out}" in result.stderr
    assert out.read_text() == html_report(ESTIMATE)


def test_report_runs_a_verb_and_is_byte_identical_across_runs(phasewise_cli, tmp_path):
    args = ["report", "estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
            "--isl", "512", "--osl", "64", "--format", "table"]
    phasewise_cli(*args, "-o", str(tmp_path / "a.html"))
    phasewise_cli(*args, "-o", str(tmp_path / "b.html"))
    first = (tmp_path / "a.html").read_bytes()
    assert first == (tmp_path / "b.html").read_bytes()
    page = parse(first.decode())
    doc = json.loads(page.scripts["document-data"])
    cli = json.loads(phasewise_cli("estimate", "--model", "llama-3.1-8b", "--hardware",
                                   "h100-sxm", "--isl", "512", "--osl", "64", "--detail",
                                   "--format", "json").stdout)
    assert doc == cli
    assert _value(page, "Headline", "TTFT") == cli["ttft_s"]
    assert ("phasewise report estimate --model llama-3.1-8b --hardware h100-sxm --isl 512 "
            "--osl 64 --detail") in first.decode()


def test_the_rebuilt_command_writes_the_same_document(phasewise_cli):
    doc = json.loads(phasewise_cli("explain", "--model", "qwen2.5-7b", "--hardware", "l40s",
                                   "--isl", "300", "--kv-dtype", "fp8", "--batches", "1,4",
                                   "--format", "json").stdout)
    command = shlex.split(command_for(doc))
    assert command[:2] == ["phasewise", "explain"]
    assert json.loads(phasewise_cli(*command[1:]).stdout) == doc


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "no such file, nor a verb to run"),
    (["estimate", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["estimate", "--isl", "abc"], "--isl 'abc': not a number"),
])
def test_bad_report_input_ends_with_one_line_and_exit_2(phasewise_cli, tmp_path, args, message):
    result = phasewise_cli("report", *args, "-o", str(tmp_path / "r.html"), check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_a_verbs_unknown_flag_reads_as_the_verbs_own_usage_error(phasewise_cli, tmp_path):
    ours = phasewise_cli("report", "estimate", "--no-such-flag", "-o", str(tmp_path / "r.html"),
                         check=False)
    theirs = phasewise_cli("estimate", "--no-such-flag", check=False)
    assert ours.returncode == theirs.returncode == 2
    assert ours.stderr == theirs.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_file_that_is_not_json_is_one_line_and_exit_2(phasewise_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = phasewise_cli("report", str(bad), check=False)
    assert result.returncode == 2
    assert "not a JSON document" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("verb_args", [
    ["compare", "--hardware", "h100-sxm,l40s,rtx-4090", "--isl", "256", "--osl", "32"],
    ["simulate", "--num-requests", "40", "--rate", "2,6", "--isl", "256", "--osl", "32"],
    ["explain", "--batch-sweep", "--isl", "256", "--osl", "32"],
])
def test_each_verbs_page_draws_its_plots(phasewise_cli, tmp_path, verb_args):
    out = tmp_path / "r.html"
    phasewise_cli("report", *verb_args, "-o", str(out))
    page = parse(out.read_text())
    plots = json.loads(page.scripts["plot-data"])
    assert len(plots) >= 3
    assert all(spec["data"] for spec in plots.values())


def test_the_matplotlib_pages_carry_no_date_and_repeat_byte_for_byte(tmp_path):
    pytest.importorskip("matplotlib")
    from phasewise.report.plots import pyplot, save_figure

    def draw(stem):
        fig, ax = pyplot().subplots()
        ax.plot([1, 2, 3], [2, 4, 8], label="decode")
        ax.legend()
        return save_figure(fig, tmp_path / stem, title="t", table=[{"a": 1.5}])

    (png_a, html_a), (png_b, html_b) = draw("a"), draw("b")
    assert html_a.read_bytes() == html_b.read_bytes()
    assert png_a.read_bytes() == png_b.read_bytes()
    assert "<dc:date>" not in html_a.read_text()


def test_a_profile_sets_each_measured_point_under_the_measured_ceilings():
    doc = {"model": "tiny", "dtype": "fp32", "device": "cpu", "weights": "random",
           "ceilings": {"device_name": "test CPU", "gemm_flops_per_s": {"fp32": 1e11},
                        "read_bytes_per_s": 2.5e10, "notes": []},
           "points": [{"phase": "prefill", "label": "pp16", "batch_size": 1, "context_tokens": 0,
                       "time_s": 0.002, "sol_time_s": 0.0002, "expected_time_s": None,
                       "arithmetic_intensity": 5.0, "achieved_flops_per_s": 8e9,
                       "mfu": 0.08, "bytes": {}}]}
    bars_figure, roof = build_sections(doc)[0].figures
    assert bars_figure.data[0]["y"] == [0.002] and bars_figure.data[1]["y"] == [0.0002]
    assert roof.data[0]["y"][1] == 1e11 and roof.data[0]["x"][1] == 4.0  # 1e11 / 2.5e10
    assert (roof.data[2]["x"], roof.data[2]["y"]) == ([5.0], [8e9])
