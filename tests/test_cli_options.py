"""The options the verbs share agree: one --isl and --osl default (the Python API's
Workload), one --tp default where a verb runs one layout, one --engine listing every engine
of the engine data. Read from the Typer commands themselves, and each verb's --help runs."""

import importlib
import tomllib
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from phasewise.commands import VERB_MODULES
from phasewise.commands._app import app

SHARING = ("estimate", "explain", "compare", "simulate", "plan", "bench")
ENGINES_TOML = (Path(__file__).resolve().parents[1] / "src" / "phasewise" / "catalog"
                / "calibration" / "engines.toml")


@pytest.fixture(scope="module")
def commands():
    for name in VERB_MODULES:
        importlib.import_module(f"phasewise.commands.{name}")
    return typer.main.get_command(app).commands


def _option(command, flag):
    (param,) = [p for p in command.params if flag in p.opts]
    return param


@pytest.mark.parametrize("verb", SHARING)
def test_every_verb_takes_the_api_default_lengths(commands, verb):
    # phasewise.specs.Workload: isl 2048, osl 256 (the estimate the README's first command prints)
    assert _option(commands[verb], "--isl").default == "2048"
    assert _option(commands[verb], "--osl").default == "256"


def test_verbs_that_run_one_layout_default_to_one_device(commands):
    for verb in ("estimate", "explain", "compare", "simulate"):
        assert _option(commands[verb], "--tp").default == "1", verb
    assert _option(commands["plan"], "--tp").default == "1,2,4,8"  # a search space


def test_the_tp_reader_takes_one_degree_or_a_comma_list():
    from phasewise.commands.options import one_tp, tp_degrees
    from phasewise.errors import InputError

    assert tp_degrees("4") == [4] and tp_degrees("1,2,8") == [1, 2, 8]
    assert one_tp("8") == 8
    with pytest.raises(InputError, match="--tp"):
        one_tp("1,2")
    with pytest.raises(InputError, match="--tp"):
        tp_degrees("0")


@pytest.mark.parametrize("verb", SHARING)
def test_engine_help_lists_every_engine_of_the_engine_data(commands, verb):
    names = [n for n in tomllib.loads(ENGINES_TOML.read_text()) if n not in ("generic",
                                                                           "unrecorded")]
    assert len(names) > 5
    text = " ".join(_option(commands[verb], "--engine").help.split())
    for name in names:
        assert name in text, (verb, name)


@pytest.mark.parametrize("verb", SHARING)
def test_each_verb_prints_its_help(verb):
    result = CliRunner().invoke(app, [verb, "--help"])
    assert result.exit_code == 0, result.output
    assert "--isl" in result.output and "--engine" in result.output
