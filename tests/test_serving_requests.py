"""Request streams: arrival processes, length distributions and trace files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from phasewise.errors import InputError
from phasewise.serving import load_trace, parse_lengths
from phasewise.serving.requests import (
    arrivals,
    constant_arrivals,
    gamma_arrivals,
    open_loop,
    poisson_arrivals,
)

EXAMPLE_TRACE = Path(__file__).resolve().parents[1] / "examples" / "trace.csv"


def gaps(times: np.ndarray) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], times]))


def test_poisson_gaps_have_mean_one_over_rate_and_unit_cv() -> None:
    g = gaps(poisson_arrivals(4.0, 50_000, np.random.default_rng(0)))
    assert g.mean() == pytest.approx(0.25, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_gaps_keep_the_rate_and_take_the_asked_cv(cv: float) -> None:
    g = gaps(gamma_arrivals(4.0, cv, 200_000, np.random.default_rng(1)))
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.05)


def test_constant_arrivals_are_evenly_spaced() -> None:
    assert constant_arrivals(2.0, 4).tolist() == [0.5, 1.0, 1.5, 2.0]


def test_the_same_seed_gives_the_same_stream_and_rates_scale_the_same_gaps() -> None:
    isl, osl = parse_lengths("normal:1000:200", "--isl"), parse_lengths("uniform:10:100", "--osl")
    a = open_loop(500, isl, osl, np.random.default_rng(5), rate_per_s=2.0)
    b = open_loop(500, isl, osl, np.random.default_rng(5), rate_per_s=2.0)
    c = open_loop(500, isl, osl, np.random.default_rng(5), rate_per_s=8.0)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_tokens, b.input_tokens)
    assert np.allclose(c.arrival_s * 4, a.arrival_s)
    assert np.array_equal(a.output_tokens, c.output_tokens)


def test_unknown_arrival_process_and_bad_rates_are_input_errors() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="poison.*Did you mean poisson"):
        arrivals("poison", 1.0, 3, rng)
    with pytest.raises(InputError, match="--rate"):
        poisson_arrivals(0.0, 3, rng)
    with pytest.raises(InputError, match="--cv"):
        gamma_arrivals(1.0, 0.0, 3, rng)


@pytest.mark.parametrize("spec, mean", [("512", 512), ("fixed:512", 512),
                                        ("uniform:100:300", 200), ("normal:1000:100", 1000),
                                        ("lognormal:800:0.6", 800)])
def test_length_distributions_have_the_asked_mean(spec: str, mean: float) -> None:
    lengths = parse_lengths(spec, "--isl")
    draws = lengths.sample(100_000, np.random.default_rng(2))
    assert draws.min() >= 1 and draws.dtype.kind == "i"
    assert draws.mean() == pytest.approx(mean, rel=0.01)
    assert lengths.mean == mean


def test_uniform_lengths_stay_inside_their_bounds() -> None:
    draws = parse_lengths("uniform:100:300", "--isl").sample(10_000, np.random.default_rng(3))
    assert draws.min() == 100 and draws.max() == 300


def test_lengths_from_a_file_are_sampled_from_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("10\n20\n\n30\n")
    draws = parse_lengths(f"file:{path}", "--osl").sample(3000, np.random.default_rng(4))
    assert set(draws.tolist()) == {10, 20, 30}


@pytest.mark.parametrize("spec", ["gauss:1:2", "uniform:300:100", "normal:1000", "uniform:a:b",
                                  "0", "file:/nonexistent/lengths.txt"])
def test_bad_length_specs_are_input_errors(spec: str) -> None:
    with pytest.raises(InputError, match="--isl"):
        parse_lengths(spec, "--isl")


def test_the_example_trace_loads_with_its_shared_prefixes() -> None:
    requests = load_trace(EXAMPLE_TRACE)
    assert len(requests) == 12
    assert requests.arrival_s[0] == 0.0 and requests.input_tokens[0] == 1024
    assert requests.prefix_id.tolist().count(1) == 3
    assert requests.prefix_tokens[2] == 1536


def test_a_jsonl_trace_reads_like_a_csv_one(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    rows = [{"arrival_s": 0.0, "input_tokens": 100, "output_tokens": 10},
            {"arrival_s": 0.5, "input_tokens": 200, "output_tokens": 20}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    requests = load_trace(path)
    assert requests.arrival_s.tolist() == [0.0, 0.5]
    assert requests.output_tokens.tolist() == [10, 20]
    assert requests.prefix_id is None


@pytest.mark.parametrize("body, where, what", [
    ("arrival_s,input_tokens\n0,10\n", "line 1", "lacks output_tokens"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n-1,10,5\n", "line 3", "negative"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n1,0,5\n", "line 3", "at least 1"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n1,10,-2\n", "line 3", "at least 1"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n2,10,5\n1,10,5\n", "line 4", "sort the trace"),
    ("arrival_s,input_tokens,output_tokens\n0,ten,5\n", "line 2", "not a number"),
    ("arrival_s,input_tokens,output_tokens\n0,10.5,5\n", "line 2", "whole number"),
    ("arrival_s,input_tokens,output_tokens\n0,10\n", "line 2", "fields"),
])
def test_a_bad_csv_trace_names_its_first_bad_line(tmp_path: Path, body: str, where: str,
                                                  what: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(body)
    with pytest.raises(InputError, match=f"{where}: .*{what}"):
        load_trace(path)


@pytest.mark.parametrize("lines, where, what", [
    (['{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}', '{"arrival_s": 1}'],
     "line 2", "missing input_tokens, output_tokens"),
    (['{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}', "{oops"], "line 2", "JSON"),
    (['[1, 2, 3]'], "line 1", "JSON object"),
])
def test_a_bad_jsonl_trace_names_its_first_bad_line(tmp_path: Path, lines: list, where: str,
                                                    what: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=f"{where}: .*{what}"):
        load_trace(path)


def test_a_missing_or_empty_trace_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "absent.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_s,input_tokens,output_tokens\n")
    with pytest.raises(InputError, match="no requests"):
        load_trace(empty)
