"""Hypothesis over the flags of the verbs: whatever a flag is given, the run ends with exit
code 2 and one line, or with a JSON document whose every figure is finite and no time,
count or rate is negative. (benchmarks/fuzz_cli.py runs the same promise over every verb in
child processes, with resource limits.)"""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_bad_input import run

# Values as a user could type them: numbers of every size and sign, their text forms, the
# special floats, suffixes, lists and plain garbage.
flag_values = st.one_of(
    st.integers(-10**25, 10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "0", "-0", "1e-320", "4k", "1_024", "",
                     " ", "1,2", "1,,2", "0x10", "1e23", "١٢", "none", "uniform:1:1e30",
                     "normal:1e30:1", "lognormal:1024:50", "fixed:0", "10ms", "-1s"]),
    st.text(max_size=8),
)

ESTIMATE_FLAGS = ["--isl", "--osl", "--batch-size", "--tp", "--pp", "--ep", "--kv-keep",
                  "--price"]
SIMULATE_FLAGS = ["--isl", "--osl", "-n", "--rate", "--seed", "--cv", "--prefix-hit-rate",
                  "--memory-budget", "--bucket-tokens", "--block-size", "--max-num-seqs",
                  "--max-num-batched-tokens", "--ttft", "--tpot", "--slo-percentile",
                  "--replicas"]
NON_NEGATIVE = ("_s", "_bytes", "_tokens", "_per_s", "requests")


def assert_sound(code, out, err):
    assert code in (0, 2), (code, err[-2000:])
    assert "Traceback" not in out + err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        return
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert not list(_bad_figures(doc))


def _bad_figures(doc, key=""):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _bad_figures(v, str(k))
    elif isinstance(doc, list):
        for v in doc:
            yield from _bad_figures(v, key)
    elif isinstance(doc, float) and not math.isfinite(doc):
        yield key, doc
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool) and doc < 0 \
            and key.endswith(NON_NEGATIVE):
        yield key, doc


fuzz = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz
@given(st.sampled_from(ESTIMATE_FLAGS), flag_values)
def test_estimate_flags_end_in_a_sound_document_or_one_line(capsys, flag, value):
    assert_sound(*run(["estimate", "--format", "json", flag, value], capsys))


@fuzz
@given(st.sampled_from(SIMULATE_FLAGS), flag_values)
def test_simulate_flags_end_in_a_sound_document_or_one_line(capsys, flag, value):
    args = ["simulate", "--format", "json", "--no-progress", "--rate", "2", "-n", "8", "--isl",
            "256", "--osl", "16"]
    assert_sound(*run([*args, flag, value], capsys))


@fuzz
@given(st.sampled_from(["--kv-keep", "--draft-head", "--spec-accept", "--link-bandwidth"]),
       flag_values)
def test_what_if_flags_end_in_a_sound_document_or_one_line(capsys, flag, value):
    base = {"--draft-head": ["--draft-head"], "--spec-accept": ["--draft-head", "0.1",
                                                                "--spec-accept"],
            "--link-bandwidth": ["--prefill-hardware", "h100-sxm", "--link-bandwidth"],
            "--kv-keep": ["--kv-keep"]}[flag]
    assert_sound(*run(["estimate", "--format", "json", *base, value], capsys))
