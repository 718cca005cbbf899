"""The defaults of --suite, --replay-root and sweep's --out-root (cuda_agent/example_data.py):
the environment's, else the checkout the package runs from, never the working directory; with
neither (a pip-installed package), a one-line error that says how to name them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer

from cuda_agent import cli, example_data
from cuda_agent.agents.train import TrainSettings
from cuda_agent.bench import BenchSettings
from cuda_agent.errors import SettingsError
from cuda_agent.problem import load_problem
from cuda_agent.runner.replay import find_sweep

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """Run from a folder that is not the checkout, with neither variable set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(example_data.SUITE_ENV, raising=False)
    monkeypatch.delenv(example_data.SWEEPS_ENV, raising=False)
    return tmp_path


def test_the_defaults_are_the_checkouts_from_any_working_directory(elsewhere):
    assert Path(BenchSettings().suite) == ROOT / "benchmarks" / "problems"
    assert Path(TrainSettings().suite) == ROOT / "benchmarks" / "problems"
    problem = load_problem(ROOT / "benchmarks" / "problems" / "softmax_short_rows.py")
    assert find_sweep(problem).is_relative_to(ROOT / "benchmarks" / "data")


def test_the_environment_names_them(elsewhere, monkeypatch):
    monkeypatch.setenv(example_data.SUITE_ENV, str(elsewhere / "mine"))
    monkeypatch.setenv(example_data.SWEEPS_ENV, str(elsewhere / "sweeps"))
    assert BenchSettings().suite == str(elsewhere / "mine")
    assert example_data.recorded_sweeps() == elsewhere / "sweeps"


def test_without_a_checkout_each_says_how_to_name_it(elsewhere, monkeypatch, capsys):
    monkeypatch.setattr(example_data, "CHECKOUT", elsewhere)
    with pytest.raises(SettingsError) as err:
        BenchSettings()
    assert "--suite" in str(err.value) and example_data.SUITE_ENV in str(err.value)
    problem = load_problem(ROOT / "benchmarks" / "problems" / "softmax_short_rows.py")
    with pytest.raises(SettingsError) as err:
        find_sweep(problem)
    assert "--replay-root" in str(err.value) and example_data.SWEEPS_ENV in str(err.value)
    for args in (["bench"], ["train", "--device", "sim"]):
        monkeypatch.setattr(sys, "argv", ["cuda-agent", *args])
        with pytest.raises(typer.Exit) as done:  # main() ends the process with it
            cli.main()
        assert done.value.exit_code == 2
        err_text = capsys.readouterr().err.strip()
        assert len(err_text.splitlines()) == 1 and example_data.SUITE_ENV in err_text
