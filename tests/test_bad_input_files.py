"""Each file format at the edge where it enters: bounded UTF-8 reads, finite JSON of bounded
depth, typed TOML schemas, measurements read row by row, request lengths and traces; and
files written whole, with the user's umask, or not at all."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewise.catalog import hardware_names
from phasewise.catalog.hardware import HARDWARE_DIR, hardware_from_sheet
from phasewise.catalog.schema import check_calibration, check_hardware_sheet
from phasewise.errors import InputError
from phasewise.files import (
    MAX_JSON_DEPTH,
    check_output_dir,
    check_output_file,
    json_depth,
    parse_json,
    read_json,
    read_text,
    read_toml,
    write_all,
    write_atomic,
)

CATALOG = Path(__file__).resolve().parent.parent / "src" / "phasewise" / "catalog"


# ---------------------------------------------------------------- reading

def test_utf16_and_utf32_files_are_named_as_such(tmp_path):
    for encoding, name in (("utf-16", "UTF-16"), ("utf-32", "UTF-32")):
        path = tmp_path / f"{encoding}.json"
        path.write_bytes('{"a": 1}'.encode(encoding))
        with pytest.raises(InputError, match=f"{name} text; save it as UTF-8"):
            read_text(path)


def test_binary_and_latin1_files_are_refused_with_the_offset(tmp_path):
    (tmp_path / "nul.bin").write_bytes(b"abc\x00def")
    with pytest.raises(InputError, match="NUL bytes"):
        read_text(tmp_path / "nul.bin")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InputError, match=r"byte 0xe9 at offset 3"):
        read_text(tmp_path / "latin1.txt")


def test_a_utf8_byte_order_mark_is_dropped(tmp_path):
    (tmp_path / "bom.json").write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(tmp_path / "bom.json") == {"a": 1}


def test_reads_are_bounded_whatever_the_file(tmp_path):
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(2**40)  # a terabyte to a reader, no disk
    with pytest.raises(InputError, match="larger than 1 MiB"):
        read_text(tmp_path / "sparse", limit_bytes=2**20)
    with pytest.raises(InputError, match="larger than"):
        read_text("/dev/zero", limit_bytes=4096)
    with pytest.raises(InputError, match="is a folder"):
        read_text(tmp_path)
    with pytest.raises(InputError, match="no such"):
        read_text(tmp_path / "missing")


def test_json_depth_counts_brackets_outside_strings():
    assert json_depth('{"a": [1, {"b": "[[[["}]}') == 3
    assert json_depth("[]") == 1 and json_depth('"x"') == 0


def test_deep_json_and_nan_are_refused():
    with pytest.raises(InputError, match="nests deeper"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x")
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(InputError, match=constant):
            parse_json(f'{{"hidden_size": {constant}}}', "config.json")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_read_as_json_or_toml_end_in_a_value_or_an_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "f"
    path.write_bytes(data)
    for reader in (read_json, read_toml):
        try:
            reader(path)
        except InputError as err:
            assert "\n" not in str(err).strip()


# ---------------------------------------------------------------- TOML schemas

def test_every_bundled_sheet_passes_its_schema():
    import tomllib

    for name in hardware_names():
        doc = tomllib.loads((HARDWARE_DIR / f"{name}.toml").read_text())
        check_hardware_sheet(doc, name)


def _sheet():
    import tomllib

    return tomllib.loads((HARDWARE_DIR / "h100-sxm.toml").read_text())


@pytest.mark.parametrize("section, key, value, words", [
    ("memory", "bandwidth_gb_per_s", float("nan"), "finite"),
    ("memory", "bandwidth_gb_per_s", float("inf"), "finite"),
    ("memory", "capacity_gb", 1e300, "out of range"),
    ("memory", "capacity_gb", "80", "must be a number"),
    ("memory", "capacity_gb", True, "must be a number"),
    ("compute", "bf16_tflops", -1.0, "out of range"),
    ("interconnect", "latency_us", -3.0, "out of range"),
    ("interconnect", "max_devices", 8.5, "whole number"),
    ("power", "tdp_w", -700, "out of range"),
    ("price", "usd_per_hour", -2.99, "out of range"),
    ("memory", "capacty_gb", 80, "unknown key 'capacty_gb'. Did you mean capacity_gb"),
    (None, "aliasez", ["H100"], "unknown key 'aliasez'. Did you mean aliases"),
    (None, "memroy", {"kind": "HBM3"}, "unknown key 'memroy'. Did you mean memory"),
    (None, "name", 5, "must be text"),
])
def test_a_sheet_value_of_the_wrong_kind_or_range_is_named(section, key, value, words):
    sheet = _sheet()
    (sheet[section] if section else sheet)[key] = value
    with pytest.raises(InputError, match=words):
        check_hardware_sheet(sheet, "my.toml")


def test_a_sheet_given_as_calibration_and_back_is_named():
    import tomllib

    with pytest.raises(InputError, match="hardware sheet, not a calibration profile"):
        check_calibration(_sheet(), "h100.toml")
    profile = tomllib.loads((CATALOG / "calibration" / "default.toml").read_text())
    check_calibration(profile, "default.toml")
    with pytest.raises(InputError, match="calibration profile, not a hardware sheet"):
        check_hardware_sheet(profile, "default.toml")
    with pytest.raises(InputError, match="unknown key 'globel'"):
        check_calibration({"globel": {"gemm_fraction": 0.5}}, "c.toml")
    with pytest.raises(InputError, match="no constants"):
        check_calibration({"fit": {"name": "x"}}, "c.toml")


sheet_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                         st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([("memory", "capacity_gb"), ("memory", "bandwidth_gb_per_s"),
                        ("compute", "bf16_tflops"), ("interconnect", "latency_us"),
                        ("interconnect", "bandwidth_gb_per_s"), ("power", "tdp_w"),
                        ("price", "usd_per_hour")]), sheet_values)
def test_a_sheet_that_passes_its_schema_gives_finite_non_negative_figures(where, value):
    sheet = _sheet()
    sheet[where[0]][where[1]] = value
    try:
        spec = hardware_from_sheet(check_hardware_sheet(sheet, "fuzz"), "fuzz")
    except InputError:
        return
    figures = [spec.memory_bytes, spec.memory_bandwidth_bytes_per_s, spec.tdp_w or 0,
               spec.price_usd_per_hour or 0, spec.interconnect.latency_s,
               spec.interconnect.bandwidth_bytes_per_s, *spec.peak_flops_per_s.values()]
    assert all(0 <= f < float("inf") for f in figures)


# ---------------------------------------------------------------- measurements, lengths, traces

def _measurement_lines():
    lines = (CATALOG / "measurements" / "github_llama_bench_posts.csv").read_text().splitlines()
    return lines[0], lines[1:3]


def _with(row: str, header: str, column: str, value: str) -> str:
    import csv
    import io

    fields = next(csv.reader([row]))
    fields[header.split(",").index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


@pytest.mark.parametrize("column, value, reason", [
    ("phase", "warmup", "unknown phase 'warmup'"),
    ("num_accelerators", "0", "num_accelerators 0 is below 1"),
    ("value", "nan", "not a positive number"),
    ("batch_or_concurrency", "1e12", "beyond any real measurement"),
    ("model", "m" * 20_000, "model is longer than"),
    ("notes", "x" * 200_000, "not readable as CSV"),
])
def test_a_bad_measurement_row_is_skipped_with_its_line(tmp_path, column, value, reason):
    from phasewise.validate.measurements import load_measurements

    header, (first, second) = _measurement_lines()
    path = tmp_path / "m.csv"
    path.write_text("\n".join([header, _with(first, header, column, value), second]) + "\n")
    loaded = load_measurements(path)
    assert [p.line for p in loaded.problems] == [2] and reason in loaded.problems[0].reason
    assert [r.line for r in loaded.rows] == [3]


def test_duplicate_ids_and_header_only_files(tmp_path):
    from phasewise.validate.measurements import load_measurements

    header, (first, _) = _measurement_lines()
    (tmp_path / "dup.csv").write_text("\n".join([header, first, first]) + "\n")
    loaded = load_measurements(tmp_path / "dup.csv")
    assert len(loaded.rows) == 1
    assert str(loaded.problems[0]).startswith("line 3") and "first at line 2" in str(
        loaded.problems[0])
    (tmp_path / "head.csv").write_text(header + "\n")
    with pytest.raises(InputError, match="a header and no rows"):
        load_measurements(tmp_path / "head.csv")


def test_an_unpriceable_row_is_skipped_not_fatal(tmp_path):
    from phasewise.validate.measurements import load_measurements
    from phasewise.validate.run import dataset

    header, (first, second) = _measurement_lines()
    # GHLB-0001 is an Apple M2 Ultra row: its sheet has fp32 and fp16 math, no fp4.
    path = tmp_path / "m.csv"
    path.write_text("\n".join([header, _with(first, header, "weight_dtype", "fp4"), second]))
    data = dataset([load_measurements(path)])
    assert len(data.scenarios) == 1
    assert data.skipped[0].line == 2 and "no fp4 math" in data.skipped[0].reason


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["fixed", "uniform", "normal", "lognormal", "weibull", ""]),
       st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-10, 10**12)), max_size=3))
def test_a_length_distribution_draws_in_range_or_is_refused(kind, params):
    import numpy as np

    from phasewise.serving.requests import MAX_LENGTH_TOKENS, parse_lengths

    text = ":".join([kind, *map(str, params)]) if kind else ":".join(map(str, params))
    try:
        lengths = parse_lengths(text, "--isl")
    except InputError:
        return
    draws = lengths.sample(200, np.random.default_rng(0))
    assert draws.min() >= 1 and draws.max() <= MAX_LENGTH_TOKENS


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(allow_nan=True), st.integers(-5, 10**9),
                                    st.text(max_size=3)),
                          st.one_of(st.integers(-5, 10**12), st.floats(allow_nan=True),
                                    st.text(max_size=3))), min_size=1, max_size=4))
def test_a_trace_replays_positive_lengths_or_is_refused(tmp_path_factory, rows):
    from phasewise.serving.requests import load_trace

    path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n"
                    + "".join(f"{t},{i},16\n" for t, i in rows))
    try:
        requests = load_trace(path)
    except InputError:
        return
    assert (requests.input_tokens >= 1).all() and (requests.arrival_s >= 0).all()


# ---------------------------------------------------------------- writing

@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_take_the_users_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        path = write_atomic(tmp_path / "out.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


def test_a_file_set_is_written_whole_or_not_at_all(tmp_path):
    with pytest.raises(TypeError):
        write_all({tmp_path / "a.png": b"png", tmp_path / "b.html": 12345})
    assert list(tmp_path.iterdir()) == []
    write_all({tmp_path / "a.png": b"png", tmp_path / "b.html": "<html>"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.html"]


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    # The child installs the CLI's SIGTERM handler, then is sent SIGTERM between writing
    # its temporary file and renaming it into place: the handler unwinds, the file goes.
    script = textwrap.dedent(f"""
        import os, signal
        from phasewise import cli, files
        signal.signal(signal.SIGTERM, cli._terminate)
        real_replace = os.replace
        def replace_after_sigterm(src, dst):
            os.kill(os.getpid(), signal.SIGTERM)
            real_replace(src, dst)
        files.os.replace = replace_after_sigterm
        files.write_atomic({str(tmp_path / 'out.json')!r}, "x" * 1000)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_output_paths_are_checked_before_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="does not exist"):
        check_output_file(tmp_path / "missing" / "out.json", "--out")
    with pytest.raises(InputError, match="is a file, not a folder"):
        check_output_file(tmp_path / "file" / "out.json", "--out")
    with pytest.raises(InputError, match="is a folder"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(InputError, match="cannot write"):
        check_output_file("/proc/self/out.json", "--out")
    with pytest.raises(InputError, match="is a file"):
        check_output_dir(tmp_path / "file", "--plot")
    assert check_output_dir(tmp_path / "new", "--plot").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "new"]
